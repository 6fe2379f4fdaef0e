"""Where symmem's default differs from the framework's own and the user did not set the value, `symmem memory`
says so and names the flag that gives the framework's (symmem/cli/_default_notes.py)."""

from __future__ import annotations

import json

import pytest

from symmem.cli.main import main

MIXTRAL = ("--model", "mixtral-8x7b", "--profile", "megatron-te", "--tp", "8")


def _memory(capsys, *flags) -> dict:
    assert main(["memory", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_etp_defaults_to_one_and_says_megatron_would_split_the_experts(capsys):
    out = _memory(capsys, *MIXTRAL)
    assert out["default_notes"] == [
        "note: ETP 1 (symmem's default): each routed expert is whole on every one of the TP 8 ranks; Megatron's "
        "own default for --expert-tensor-parallel-size is the TP size (megatron/training/arguments.py), which "
        "--etp 8 gives"]
    assert main(["memory", *MIXTRAL]) == 0
    assert "which --etp 8 gives" in capsys.readouterr().out
    # the flag it names gives a different answer: the experts' weights split over the 8 TP ranks
    split = _memory(capsys, *MIXTRAL, "--etp", "8")
    assert split["default_notes"] == []
    assert split["stages"][0]["weights"] < out["stages"][0]["weights"]


@pytest.mark.parametrize("flags", [
    (*MIXTRAL, "--etp", "1"),  # set by the user: no default to speak of
    ("--model", "mixtral-8x7b", "--profile", "paper", "--tp", "8"),  # the paper's convention is ETP 1
    ("--model", "llama-3-8b", "--profile", "megatron-te", "--tp", "8"),  # no routed experts
    ("--model", "mixtral-8x7b", "--profile", "megatron-te"),  # TP 1: nothing to split over
    # a scenario file's ETP is the file's (this one says etp = 1), not a default
    ("--scenario", "deepseekv2_tp1_ep4_pp2_dp4_l4_mbc4_cef", "--tp", "2", "--dp", "2"),
])
def test_no_note_where_the_default_is_not_in_question(capsys, flags):
    assert _memory(capsys, *flags)["default_notes"] == []
