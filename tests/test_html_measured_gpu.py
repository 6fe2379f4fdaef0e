"""`symmem html --gpu FILE`: the page carries a measured profile (`symmem calibrate`) and times the step with it as
`symmem memory --gpu FILE` does (its own constants, its measured link and latency per ring step), read back from a
real headless Chromium; a step over a link the profile did not measure shows a note, not a time."""

from __future__ import annotations

import pytest

from tests.test_calibrate import calibrate_two_processes
from tests.test_html_page import _assert_equal, _open, browser, browser_only, memory_json, run_cli  # noqa: F401

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def registries():
    """`--gpu FILE` registers the profile for the process; undone after this module (the other page tests list
    every registered GPU)."""
    from symmem import hardware, units
    from symmem.steptime import kernels, measured, model

    registries = (hardware.GPUS, units.GPUS, model.DEVICE_CONSTANTS, kernels.REGISTERED, measured.KERNEL_CONSTANTS)
    saved = tuple(dict(r) for r in registries)
    yield
    for registry, old in zip(registries, saved, strict=True):
        registry.clear()
        registry.update(old)


@pytest.fixture(scope="module")
def measured(tmp_path_factory, registries):
    folder = tmp_path_factory.mktemp("measured")
    profile = folder / "two.json"
    calibrate_two_processes(profile)
    flags = ("--model", "llama-3-8b", "--profile", "megatron-te", "-s", "512", "--tp", "2", "--dp", "1",
             "--gpu", str(profile))  # (groups of 2 at most: the processes measured)
    page = folder / "page.html"
    code, _, err = run_cli("html", *flags, "--pp-choices", "1,2", "--recompute-choices", "none,full", "-o",
                           str(page))
    assert code == 0, err
    return profile, flags, page


@pytest.fixture(scope="module")
def one_device(tmp_path_factory, registries):
    """A profile without collectives (one device) and its page at one GPU."""
    folder = tmp_path_factory.mktemp("one")
    profile = folder / "one.json"
    code, _, err = run_cli("calibrate", "-o", str(profile), "--quick", "--repeat", "3")
    assert code == 0, err
    flags = ("--model", "llama-3-8b", "--profile", "megatron-te", "-s", "512", "--gpu", str(profile))
    page = folder / "page.html"
    code, _, err = run_cli("html", *flags, "--tp-choices", "1,2", "--pp-choices", "1", "-o", str(page))
    assert code == 0, err
    return flags, page


def _note(browser, path, query: str) -> str:  # noqa: F811
    """The page's step note at `query` (no script error)."""
    page, errors = _open(browser, path, query)
    try:
        assert not errors
        return page.inner_text("[data-field=step_note]")
    finally:
        page.close()


@browser_only
def test_the_page_times_the_step_with_the_measured_profile(browser, measured):  # noqa: F811
    profile, flags, path = measured
    want = memory_json(*flags)
    assert want["step"] is not None and want["step"]["seconds_by_part"]["comm_tp"] > 0
    for query, extra in (("", ()), ("?pp=2&recompute=full", ("--pp", "2", "--recompute", "full"))):
        page, errors = _open(browser, path, query)
        try:
            _assert_equal(page, memory_json(*flags, *extra))
            assert not errors
        finally:
            page.close()


@browser_only
def test_the_page_does_not_time_an_unmeasured_link(browser, measured):  # noqa: F811
    _profile, _flags, path = measured
    # 32 GPUs: groups across machines of 8
    assert "measured the link within one machine only" in _note(browser, path, "?dp=16&tp=2")


@browser_only
def test_one_device_times_one_gpu_and_notes_the_rest(browser, one_device):  # noqa: F811
    """No collectives measured: one GPU is timed as `symmem memory` times it (no NaN from a null link), two show the
    note."""
    flags, path = one_device
    page, errors = _open(browser, path, "")
    try:
        _assert_equal(page, memory_json(*flags))
        assert not errors
    finally:
        page.close()
    assert "measured no collectives (one device)" in _note(browser, path, "?tp=2")


@browser_only
def test_the_page_does_not_time_a_group_beyond_the_processes_measured(browser, measured):  # noqa: F811
    _profile, _flags, path = measured
    # TP 4: two processes measured
    assert "measured collectives among 2 processes" in _note(browser, path, "?tp=4&dp=2")
