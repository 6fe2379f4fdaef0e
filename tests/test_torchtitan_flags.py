"""The torchtitan profiles' fixed settings hold in the sweep as in `symmem memory` (a hostile review found the sweep
listing ZeRO 0-2 rows with FSDP2's ZeRO-3 numbers, a schedule where nothing is pipelined, and TP values typed as
the default dropped), torchtitan's own recomputation modes only, and what the step time leaves out said where the
time is shown."""

from __future__ import annotations

import json

import pytest

from symmem.cli.main import main

SWEEP = ("sweep", "--model", "llama-3-8b", "--gpus", "8", "-b", "1")


@pytest.mark.parametrize("flags, words", [
    (("--profile", "torchtitan", "--zero", "0,1,2,3"), "--zero = 0,1,2,3: profile torchtitan shards"),
    (("--profile", "torchtitan-2412", "--schedule", "interleaved:2"), "models no pipelining"),
    (("--profile", "torchtitan", "--recompute", "none,selective"), "selective with --profile torchtitan"),
    (("--profile", "torchtitan-2506", "--recompute", "deepseek"), "torchtitan's activation checkpointing modes"),
    (("--profile", "torchtitan", "--hsdp-replicate", "2"), "does not sweep HSDP"),
    # the default's own text typed is the user's: refused where TP is not modelled, as --tp 1,2 is
    (("--profile", "torchtitan-2506", "--tp", "1,2,4,8"), "--tp = '1,2,4,8': profile torchtitan-2506"),
])
def test_the_sweep_refuses_what_the_torchtitan_profiles_fix(capsys, flags, words):
    assert main([*SWEEP, *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_the_torchtitan_sweep_lays_out_zero_3_only(capsys):
    assert main([*SWEEP, "--profile", "torchtitan-2506", "--recompute", "none", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["axes"]["zero"] == [3] and {r["zero"] for r in out["ranked"]} == {3}


@pytest.mark.parametrize("mode", ["selective", "deepseek"])
def test_memory_refuses_a_recomputation_torchtitan_does_not_run(capsys, mode):
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "8", "--recompute", mode]) == 2
    err = capsys.readouterr().err
    assert "torchtitan's activation checkpointing modes are none, full, selective-op" in err and \
        err.count("\n") == 1, err


def test_what_the_step_time_leaves_out_is_said(capsys):
    base = ["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "8", "--gpu", "H100", "--json"]
    assert main(base) == 0
    eager = json.loads(capsys.readouterr().out)
    assert not any("step time" in n for n in eager["profile_notes"])
    assert main([*base, "--compile", "--hsdp-replicate", "2"]) == 0
    both = json.loads(capsys.readouterr().out)
    notes = " ".join(both["profile_notes"])
    assert "--compile: the step time is the eager step's" in notes and "--hsdp-replicate 2: the step time" in notes
    assert main([*SWEEP, "--profile", "torchtitan", "--tp", "1", "--pp", "1", "--recompute", "selective-op",
                 "--compile", "--gpu", "H100"]) == 0
    assert "the eager step's: torch.compile's fused kernels are not modelled in time" in capsys.readouterr().out


def test_torchtitans_experts_are_laid_out_as_torchtitan_lays_them(capsys):
    """torchtitan 0.3.0 shards the routed experts over TP at EP 1 (expert_param_placement_dense) and over EP
    otherwise: ETP = TP at EP 1, which the profile's FSDP2 states already were; the parameters a GPU holds now say
    so too (they said ETP 1: twice the experts the states hold), and --etp or --convention typed is refused."""
    base = ["memory", "--model", "deepseek-v3", "--profile", "torchtitan", "--dp", "64", "--json"]
    assert main([*base, "--tp", "2"]) == 0
    tp2 = json.loads(capsys.readouterr().out)
    assert "ETP 2" in tp2["parallel"]
    assert main([*base, "--tp", "1"]) == 0
    tp1 = json.loads(capsys.readouterr().out)
    # the experts (most of the parameters) halve with TP 2: the whole model's parameters a GPU holds, nearly so
    ratio = tp2["stages"][0]["params_per_gpu"] / tp1["stages"][0]["params_per_gpu"]
    assert 0.5 <= ratio < 0.51, ratio
    for flags, words in ((("--tp", "2", "--etp", "1"), "--etp 1: profile torchtitan shards the routed experts"),
                         (("--tp", "2", "--convention", "paper"), "--convention paper: profile torchtitan runs")):
        assert main([*base, *flags]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, words", [
    (["memory", "--model", "llama-3-8b", "--profile", "megatron-te", "--recompute", "selective-op"],
     "selective-op with --profile megatron-te: that is torchtitan's activation checkpointing"),
    (["memory", "--model", "llama-3-8b", "--profile", "megatron-local", "--recompute", "selective-layer:2"],
     "selective-layer:2 with --profile megatron-local"),
    (["sweep", "--model", "llama-3-8b", "--gpus", "8", "--profile", "megatron-te", "--recompute", "none,selective-op"],
     "selective-op with --profile megatron-te"),
    # refusals in the flags' words, not the scenario's fields
    (["memory", "--model", "llama-3-8b", "--precision", "bogus"], "--precision bogus: unknown recipe"),
    (["memory", "--model", "llama-3-8b", "--cp", "2", "--cp-comm-type", "A2A"], "--cp-comm-type A2A: must be one"),
    (["memory", "--model", "llama-3-8b", "--recompute", "FULL"], "--recompute FULL: unknown policy"),
    (["memory", "--model", "llama-3-8b", "--zero", "5"], "--zero 5: ZeRO stage must be"),
])
def test_megatrons_recomputation_and_the_flags_words(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_a_layer_frequency_beyond_the_layers_is_noted(capsys):
    """selective-layer:N with N above the layers checkpoints no block (torchtitan's every N-th): the same answer
    as none, and said so."""
    base = ["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "8", "--json"]
    assert main([*base, "--recompute", "selective-layer:40"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("no block is checkpointed" in n for n in out["flag_notes"]), out["flag_notes"]
    assert main([*base, "--recompute", "none"]) == 0
    assert json.loads(capsys.readouterr().out)["stages"] == out["stages"]
