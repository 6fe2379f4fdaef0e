"""The page and the measured-kernels step-time model (symmem/steptime/measured.py): where `symmem memory --gpu B200`
times a step by the GPU's measured kernels, the page, which does not evaluate them, says so instead of showing the
fitted model's time; where they do not apply (a group spanning nodes), it times the step as `symmem memory` does.
Read back from a real headless Chromium."""

from __future__ import annotations

from tests.test_html_page import _assert_equal, _open, browser, browser_only, memory_json, run_cli  # noqa: F401

FLAGS = ("--model", "llama-3-8b", "--profile", "megatron-te", "-s", "4096", "--tp", "2", "--dp", "4", "--gpu",
         "B200")


@browser_only
def test_the_page_leaves_a_measured_kernels_step_to_memory(browser, tmp_path):  # noqa: F811
    path = tmp_path / "page.html"
    code, _, err = run_cli("html", *FLAGS, "--pp-choices", "1,2", "-o", str(path))
    assert code == 0, err
    assert memory_json(*FLAGS)["step"]["model"] == "measured kernels"
    page, errors = _open(browser, path)
    try:
        assert not errors
        note = page.inner_text("[data-field=step_note]")
        assert "symmem memory --gpu B200" in note and "measured kernels" in note, note
    finally:
        page.close()
    # where memory uses the fitted model the page shows its time: DP 8 x TP 2 (16 GPUs, the data-parallel groups
    # span two nodes), CP 2 over the P2P ring, and the same step on an H100 (no kernel profile)
    for query, flags in (("?dp=8", ("--tp", "2", "--dp", "8", "--gpu", "B200")),
                         ("?cp=2&dp=2", ("--tp", "2", "--cp", "2", "--dp", "2", "--gpu", "B200")),
                         ("?gpu=H100", ("--tp", "2", "--dp", "4", "--gpu", "H100"))):
        want = memory_json(*FLAGS[:-6], *flags)
        assert want["step"]["model"] == "fitted", query
        page, errors = _open(browser, path, query)
        try:
            _assert_equal(page, want)
            assert not errors
        finally:
            page.close()
