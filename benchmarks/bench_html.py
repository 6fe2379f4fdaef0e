"""`symmem html`: how fast the page opens and answers a control move, in headless Chromium (issue: well under 50 ms).

Two pages: the paper's case with every default choice (DeepSeek-V3, 560 arrangements, 16 stages of 164 candidate
peak events each: the largest page symmem makes by default) and Llama-3-70B under megatron-te. For each, in one
run: the time from navigation to the first answer drawn (`data-open-ms`), and for 60 moves (a button clicked, in
a cycle through PP, recompute, ZeRO, TP and EP) the time from the click to the layout of the redrawn page (a forced
reflow inside the same task), measured in the page with performance.now(). Beside them, as the reference of the
same run, a click on a page that only toggles one attribute: what any page costs for a click on this machine.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import statistics
import tempfile
from pathlib import Path

PAGES = {
    "DeepSeek-V3, paper case, default choices": ("--scenario", "paper"),
    "Llama-3-70B, megatron-te, TP 8 DP 8": ("--model", "llama-3-70b", "--profile", "megatron-te", "--tp", "8",
                                            "--dp", "8"),
}
MOVES = [("pp", "8"), ("recompute", "full"), ("zero", "1"), ("pp", "16"), ("recompute", "selective"),
         ("zero", "3"), ("tp", "1"), ("recompute", "none"), ("zero", "0"), ("tp", "2"), ("pp", "4"), ("zero", "2")]
MEASURE = """async (moves) => {
  const out = [];
  for (const [k, v] of moves) {
    const b = document.querySelector(`button[data-key="${k}"][data-value="${v}"]`);
    if (!b) continue;
    const t0 = performance.now();
    b.click();
    void document.body.offsetHeight;  // style and layout of the redrawn page, in this task
    out.push(performance.now() - t0);
    await new Promise(r => setTimeout(r, 0));
  }
  return out;
}"""
BLANK = "<button id=b>x</button><script>b.onclick=()=>{document.body.dataset.x=Math.random()}</script>"


def run(quick: bool = False) -> None:
    from playwright.sync_api import sync_playwright

    from derivations.html_screenshots import find_chromium
    from symmem.cli.main import main as cli

    exe = find_chromium()
    if exe is None:
        print("symmem html page: skipped (no Chromium on PATH)")
        return
    tmp = Path(tempfile.mkdtemp(prefix="symmem-bench-"))
    rounds = 2 if quick else 5
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        ref = browser.new_page()
        ref.set_content(BLANK)
        base = ref.evaluate("""async () => { const o = []; for (let i = 0; i < 60; i++) { const t0 = performance.now();
            document.getElementById('b').click(); void document.body.offsetHeight; o.push(performance.now() - t0);
            await new Promise(r => setTimeout(r, 0)); } return o; }""")
        ref.close()
        print(f"symmem html page (headless Chromium): reference click on a bare page, median "
              f"{statistics.median(base):.3f} ms")
        for label, flags in PAGES.items():
            path = tmp / "page.html"
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli(["html", *flags, "-o", str(path)]) == 0
            opens, moves = [], []
            for _ in range(rounds):
                page = browser.new_page()
                page.goto(path.as_uri())
                page.wait_for_function("document.body.dataset.openMs !== undefined")
                opens.append(float(page.evaluate("document.body.dataset.openMs")))
                moves += page.evaluate(MEASURE, [list(m) for m in MOVES])
                page.close()
            moves.sort()
            p95 = moves[int(0.95 * (len(moves) - 1))]
            verdict = "met" if p95 < 50 else "MISSED"
            print(f"  {label} ({path.stat().st_size:,} bytes): open {statistics.median(opens):.0f} ms (median of "
                  f"{rounds}); a move {statistics.median(moves):.1f} ms median, {p95:.1f} ms 95th percentile, "
                  f"{moves[-1]:.1f} ms worst of {len(moves)} "
                  f"({statistics.median(moves) / statistics.median(base):.0f}x "
                  f"the reference click); target well under 50 ms: {verdict}")
        browser.close()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    run()
