"""Screenshots of `symmem html`'s page for docs/: the paper's case (DeepSeek-V3 on 1,024 GPUs, the paper profile)
and one Llama case (Llama-3-70B under megatron-te at TP 8, PP 2, DP 4, selective recomputation, global batch 64),
each opened in headless Chromium as a reader would open it, through its URL.

Run: `python -m derivations.html_screenshots` (needs the `browser` extra and a Chromium: `apt-get install
chromium`). Writes docs/figures/page_paper.png and docs/figures/page_llama.png; the pages themselves are made
in a temporary folder (`symmem html` with the flags below makes them again)."""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import tempfile
from pathlib import Path

from symmem.cli.main import main as cli

PAGES = {
    "paper": (("--scenario", "paper", "--pp-choices", "4,8,16", "--tp-choices", "1,2,4", "--ep-choices",
               "8,16,32", "--cp-choices", "1"), ""),
    "llama": (("--model", "llama-3-70b", "--profile", "megatron-te", "--tp", "8", "--pp", "2", "--dp", "4",
               "--gpu", "H100", "--pp-choices", "1,2,4,8", "--tp-choices", "1,2,4,8", "--cp-choices", "1,2"),
              "?recompute=selective&global-batch-size=64&s=8192"),
}


def find_chromium() -> str | None:
    """A Chromium executable on the PATH (Debian's `chromium`, or another build), or None."""
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def chromium() -> str:
    path = find_chromium()
    if path is None:
        raise SystemExit("no Chromium on PATH (apt-get install chromium)")
    return path


def run(out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    tmp = Path(tempfile.mkdtemp(prefix="symmem-pages-"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        for name, (flags, query) in PAGES.items():
            html = tmp / f"page_{name}.html"
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = cli(["html", *flags, "-o", str(html)])
            if code:
                raise SystemExit(err.getvalue())
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(html.resolve().as_uri() + query)
            page.wait_for_function("document.body.dataset.state === 'ok'")
            png = out / f"page_{name}.png"
            page.screenshot(path=str(png), full_page=True)
            page.close()
            written.append(png)
        browser.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return written


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/figures")
    for path in run(Path(ap.parse_args().out)):
        print(f"wrote {path}")
