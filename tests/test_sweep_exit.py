"""Issue 45, defect 5: a sweep whose every configuration the user's own flags rule out is an input error (exit 2, one
line naming the most common reason), as symmem memory says it; "no configuration fits" (exit 0) is for valid layouts
that do not fit in memory."""

from __future__ import annotations

import pytest

from symmem.cli.main import main

SWEEP = ["sweep", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "H100", "-s", "4096"]


@pytest.mark.parametrize("flags, words", [
    (["--profile", "megatron-te", "--schedule", "zbv"], "run under a torchtitan profile (--profile torchtitan)"),
    (["--profile", "megatron-te", "--global-batch-size", "100000000"], "must be a positive integer up to"),
])
def test_flags_that_rule_out_every_layout_exit_2(capsys, flags, words):
    code = main([*SWEEP, *flags])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "no valid configuration" in err and words in err, err
    assert out == ""


def test_rejected_lists_the_reasons_and_still_exits_2(capsys):
    code = main([*SWEEP, "--profile", "megatron-te", "--schedule", "zbv", "--rejected"])
    out, err = capsys.readouterr()
    assert code == 2 and "rejected:" in out and "no valid configuration" in err


def test_valid_layouts_that_do_not_fit_are_an_answer(capsys):
    code = main([*SWEEP, "--model", "llama-3-70b", "--gpus", "1", "--profile", "megatron-te"])
    out, err = capsys.readouterr()
    assert code == 0 and "no configuration fits" in out, err
