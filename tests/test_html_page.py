"""`symmem html`: the page's numbers equal `symmem memory --json`, read back from a real headless Chromium.

The browser tests need Playwright (the `browser` extra) and a Chromium executable (Debian's `chromium`, or
Playwright's own); without them they are skipped with the reason, except under CI=true, where `.ci/run` installs
both and a missing one is a failure.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from derivations.html_screenshots import find_chromium as _chromium
from symmem.cli.main import main


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def memory_json(*flags: str) -> dict:
    code, out, err = run_cli("memory", "--json", *flags)
    assert code == 0, err
    return json.loads(out)


# ------------------------------------------------------------------------------------ without a browser
def test_refusals_are_one_line(tmp_path):
    cases = [
        (("--model", "llama-3-8b", "--profile", "torchtitan"), "profile = 'torchtitan'"),
        (("--model", "llama-3-8b", "--tp-choices", "0,2"), "--tp-choices entry"),
        (("--model", "llama-3-8b", "--gpu-choices", "H100,XYZ"), "no known GPU"),
        # (issue 45: the message names the flag that set the page's starting value)
        (("--model", "llama-3-8b", "--tp", "2", "--tp-choices", "1,4"),
         "must include the page's starting tp: --tp = 2"),
        (("--model", "llama-3-8b", "--microbatches", "4"), "--global-batch-size instead"),
        (("--model", "llama-3-8b", "--schedule", "dualpipe", "--pp", "2", "--dp", "1"), "offers 1F1B and GPipe"),
        (("--model", "deepseek-v3.2"), "step functions of s"),
    ]
    for flags, words in cases:
        out = tmp_path / "page.html"
        code, _, err = run_cli("html", *flags, "-o", str(out))
        assert code == 2, (flags, err)
        assert words in err and err.count("\n") == 1 and "Traceback" not in err, err
        assert not out.exists(), flags  # nothing half-written


def test_page_is_self_contained(tmp_path):
    out = tmp_path / "page.html"
    code, msg, err = run_cli("html", "--model", "gpt2", "--pp-choices", "1,2", "-o", str(out))
    assert code == 0, err
    html = out.read_text()
    lowered = html.lower()
    # no resource from the network or the disk: scripts and styles are inline
    assert "<script src" not in lowered and "<link" not in lowered and "@import" not in lowered
    assert "http://" not in lowered and "https://" not in lowered
    assert html.count("<script") == 2  # the data and the program
    # the compiled closed forms are JavaScript over BigInt, printed from the polynomials
    assert "v=>[" in html and "n*v.b*v.s" in html


def test_js_printer_is_exact():
    """The printed function is the polynomial's integer form (checked here without a browser: the same source
    text, with JavaScript's BigInt suffix and powers replaced, evaluated by Python on integers)."""
    import re
    from fractions import Fraction

    from symmem.render.page_js import js_function
    from symmem.sweep.compile import Poly

    poly = Poly(((Fraction(3, 2), (("b", 1), ("t", -1))), (Fraction(-5, 7), (("s", 2),)), (Fraction(11), ())))
    src = js_function(poly)
    assert src.startswith("v=>[") and "**2n" in src
    body = re.sub(r"(\d+)n", r"\1", src[3:]).replace("v.", "")  # "[num,den]" over the names
    for b, s, t in ((1, 1, 1), (3, 4096, 8), (2**20, 2**31, 64)):
        num, den = _eval_plain(body, {"b": b, "s": s, "t": t})
        assert Fraction(num, den) == Fraction(3, 2) * b / t - Fraction(5, 7) * s * s + 11


def _eval_plain(expr: str, env: dict) -> tuple[int, int]:
    """Evaluate the printer's arithmetic (integers, names, + - * ** and parentheses) without eval."""
    import ast

    tree = ast.parse(expr, mode="eval").body
    assert isinstance(tree, ast.List)

    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            return env[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(n.op), a ** b if isinstance(
                n.op, ast.Pow) else None)
        raise AssertionError(f"unexpected node {ast.dump(n)}")

    num, den = (ev(x) for x in tree.elts)
    return num, den


# ------------------------------------------------------------------------------------ in a real browser
def _browser_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[browser]')"
    if _chromium() is None:
        return "no Chromium executable on PATH (apt-get install chromium)"
    return None


REASON = _browser_reason()
if REASON and os.environ.get("CI") == "true":
    raise RuntimeError(f"CI=true: the browser tests cannot run: {REASON}")
browser_only = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        yield b
        b.close()


PAGES = {  # name -> flags of `symmem html` (choices narrowed to keep the test quick)
    "deepseek-v3-paper": ("--scenario", "paper", "--pp-choices", "8,16", "--tp-choices", "1,2", "--ep-choices",
                          "8,16", "--cp-choices", "1", "--recompute-choices", "none,full"),
    "llama-8b-megatron-te": ("--model", "llama-3-8b", "--profile", "megatron-te", "--tp", "2", "--dp", "4",
                             "--pp-choices", "1,2", "--recompute-choices", "none,selective,full"),
    "gpt2-paper": ("--model", "gpt2", "--pp-choices", "1,2,4", "--tp-choices", "1"),
    "deepseek-v2-lite-megatron-te": ("--model", "deepseek-v2-lite", "--profile", "megatron-te", "--pp-choices",
                                     "1,2", "--tp-choices", "1,2", "--ep-choices", "1,4", "--cp-choices", "1"),
}


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    if REASON is not None:
        pytest.skip(REASON)
    folder = tmp_path_factory.mktemp("pages")
    out = {}
    for name, flags in PAGES.items():
        path = folder / f"{name}.html"
        code, _, err = run_cli("html", *flags, "-o", str(path))
        assert code == 0, err
        out[name] = path
    return out


def _open(browser, path: Path, query: str = ""):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri() + query)
    page.wait_for_function("document.body.dataset.state !== undefined")
    return page, errors


def _read(page) -> tuple[list, list, str]:
    cells = page.eval_on_selector_all(
        "td[data-component][data-bytes]", "els => els.map(e => [+e.dataset.stage, e.dataset.component, "
        "e.dataset.bytes])")
    events = page.eval_on_selector_all("td[data-component=peak_event]", "els => els.map(e => e.textContent)")
    return cells, events, page.evaluate("document.body.dataset.state")


def _assert_equal(page, memory: dict) -> None:
    cells, events, state = _read(page)
    assert state == "ok", page.inner_text("#message")
    stages = memory["stages"]
    assert len(events) == len(stages) and len(cells) == 12 * len(stages)
    for stage, component, value in cells:
        row = stages[stage]
        want = sum(row[component].values()) if component == "framework_buffers" else row[component]
        assert int(value) == want, (stage, component, value, want)
    for row, event in zip(stages, events, strict=True):
        ev = row["peak_event"]
        assert event == " ".join(x for x in (ev["phase"], ev["part"], ev["op"]) if x)
    assert int(page.inner_text("[data-field=peak_stage]")) == memory["peak_stage"]
    assert int(page.inner_text("[data-field=microbatches]")) == memory["microbatches"]
    # the bars carry the same bytes as the table
    for seg in ("weights", "gradients", "optimizer"):
        bars = page.eval_on_selector_all(f".seg[data-component={seg}]", "els => els.map(e => e.dataset.bytes)")
        assert [int(x) for x in bars] == [r[seg] for r in stages]
    text = page.inner_text("body")
    assert "NaN" not in text and "undefined" not in text
    step = memory["step"]
    if step is not None:  # the step time, tokens/s per GPU and MFU: floats, the same arithmetic in another order
        for field in ("time_s", "tokens_per_s_per_gpu", "mfu"):
            shown = float(page.get_attribute(f"[data-field={field}]", "data-value"))
            assert shown == pytest.approx(step[field], rel=1e-9), field
    else:  # the flags named no GPU with speeds: memory gave no step time, or said why
        assert page.inner_text("[data-field=step_note]") == memory["step_unavailable"]


URL_CASES = [
    ("deepseek-v3-paper", "", ("--scenario", "paper", "--gpu", "H800")),
    ("deepseek-v3-paper", "?pp=8&dp=64&tp=1&ep=16&zero=2&recompute=full&b=2",
     ("--scenario", "paper", "--pp", "8", "--dp", "64", "--tp", "1", "--ep", "16", "--zero", "2",
      "--recompute", "full", "-b", "2", "--gpu", "H800")),
    ("llama-8b-megatron-te", "?tp=8&cp=2&dp=2&zero=1&s=16384&precision=paper&gpu=H100",
     ("--model", "llama-3-8b", "--profile", "megatron-te", "--tp", "8", "--cp", "2", "--dp", "2", "--zero", "1",
      "-s", "16384", "--precision", "paper", "--gpu", "H100")),
    ("gpt2-paper", "?tp=1&pp=2&dp=4&micro-batch-size=4&seq-length=1024&zero=1&gpu=A100",
     ("--model", "gpt2", "--tp", "1", "--pp", "2", "--dp", "4", "-b", "4", "-s", "1024", "--zero", "1",
      "--gpu", "A100")),
    ("deepseek-v2-lite-megatron-te", "?tp=2&pp=2&ep=4&dp=4&zero=1&recompute=selective&global-batch-size=32",
     ("--model", "deepseek-v2-lite", "--profile", "megatron-te", "--tp", "2", "--pp", "2", "--ep", "4", "--dp",
      "4", "--zero", "1", "--recompute", "selective", "--global-batch-size", "32", "--gpu", "H800")),
    # a GPU with a capacity but no speed figures: memory, and the same sentence memory prints for the step
    ("llama-8b-megatron-te", "?gpu=H20&zero=3",
     ("--model", "llama-3-8b", "--profile", "megatron-te", "--tp", "2", "--dp", "4", "--gpu", "H20", "--zero",
      "3")),
]


@browser_only
@pytest.mark.parametrize("name,query,flags", URL_CASES, ids=[f"{n}{q[:30]}" for n, q, _ in URL_CASES])
def test_url_settings_equal_memory_json(browser, pages, name, query, flags):
    page, errors = _open(browser, pages[name], query)
    try:
        _assert_equal(page, memory_json(*flags))
        assert not errors
    finally:
        page.close()


def _click(page, key: str, value: str) -> None:
    page.click(f'button[data-key="{key}"][data-value="{value}"]')


def _type(page, key: str, value: str) -> None:
    page.fill(f'input[data-key="{key}"]', value)
    page.press(f'input[data-key="{key}"]', "Enter")
    page.dispatch_event(f'input[data-key="{key}"]', "change")


@browser_only
def test_clicked_settings_equal_memory_json_and_live_in_the_url(browser, pages):
    page, errors = _open(browser, pages["llama-8b-megatron-te"])
    try:
        _click(page, "tp", "1")
        _click(page, "pp", "2")
        _type(page, "dp", "8")
        _click(page, "zero", "3")
        _type(page, "global-batch-size", "64")
        page.click('button[data-key="b"][data-step="double"]')  # b: 1 -> 2
        _click(page, "recompute", "full")
        _click(page, "gpu", "H100")
        flags = ("--model", "llama-3-8b", "--profile", "megatron-te", "--tp", "1", "--pp", "2", "--dp", "8",
                 "--zero", "3", "--global-batch-size", "64", "-b", "2", "--recompute", "full", "--gpu", "H100")
        want = memory_json(*flags)
        _assert_equal(page, want)
        url = page.url
        assert "tp=1" in url and "pp=2" in url and "zero=3" in url and "global-batch-size=64" in url
        assert "b=2" in url and "recompute=full" in url
        again, _ = _open(browser, pages["llama-8b-megatron-te"], "?" + url.split("?", 1)[1])
        _assert_equal(again, want)  # a shared link opens as it was
        again.close()
        assert not errors
    finally:
        page.close()


@browser_only
def test_clicks_on_the_paper_case(browser, pages):
    page, errors = _open(browser, pages["deepseek-v3-paper"])
    try:
        _click(page, "pp", "8")
        _type(page, "dp", "64")
        _click(page, "recompute", "full")
        _click(page, "zero", "1")
        flags = ("--scenario", "paper", "--pp", "8", "--dp", "64", "--recompute", "full", "--zero", "1", "--gpu",
                 "H800")
        _assert_equal(page, memory_json(*flags))
        assert not errors
    finally:
        page.close()


BAD_URLS = [
    ("?tp=3", 'tp = "3": not one of this page\'s choices'),
    ("?dp=abc", 'dp = "abc": must be an integer'),
    ("?dp=0", 'dp = "0": must be an integer from 1'),
    ("?colour=red", 'unknown setting "colour"'),
    ("?global-batch-size=7&dp=2", "not a multiple of micro-batch"),
    # the global batch named, not an M the user never set (issue 45, defect 7)
    ("?global-batch-size=4000000&dp=1&b=1", "global-batch-size = 4,000,000: gives M = 4,000,000 micro-batches"),
    ("?ep=4&dp=1&tp=1", "must divide DP·TP·CP"),
    ("?s=1000&cp=1&tp=1&ep=1&dp=1", None),  # valid: a check that the page answers
]


@browser_only
@pytest.mark.parametrize("query,words", BAD_URLS)
def test_bad_url_values_show_a_message(browser, pages, query, words):
    page, errors = _open(browser, pages["deepseek-v2-lite-megatron-te"], query)
    try:
        state = page.evaluate("document.body.dataset.state")
        text = page.inner_text("body")
        assert "NaN" not in text and "undefined" not in text
        if words is None:
            assert state == "ok"
            return
        assert state == "error"
        message = page.inner_text("#message")
        assert words in message, message
        assert page.get_attribute("#message", "data-error") == message
        assert page.inner_html("#bars") == "" and page.inner_html("#table") == ""
        assert not errors
    finally:
        page.close()


@browser_only
def test_invalid_arrangement_shows_the_engines_reason(browser, pages):
    """GPT-2's vocabulary (50,257) is no multiple of 2: the page says what symmem memory says."""
    folder = pages["gpt2-paper"].parent
    path = folder / "gpt2-tp.html"
    code, _, err = run_cli("html", "--model", "gpt2", "--pp-choices", "1", "--tp-choices", "1,2", "-o", str(path))
    assert code == 0, err
    page, _ = _open(browser, path, "?tp=2&dp=2")
    try:
        code, _, err = run_cli("memory", "--model", "gpt2", "--tp", "2", "--dp", "2")
        assert code == 2
        # the page names its control (tp = 2), the command line the flag as typed (--tp 2)
        assert page.inner_text("#message").replace("tp = 2", "--tp 2") in err
    finally:
        page.close()
