"""The torchtitan profile without torchtitan installed (issue 28): its states, buffers and rules worked by hand,
its refusals, and the sweep agreeing with `symmem memory` under it. The real code's measurements are in
tests/validate/test_fsdp2.py."""

import json

import pytest

from symmem.cli.main import main


def _memory(capsys, *flags) -> dict:
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_states_are_fsdp2s_padded_shards(capsys):
    # Llama-3-8B (h 4096, 32 layers, 32 heads of 128, 8 KV heads, FFN 14336, vocab 128256) over 8 GPUs: every
    # first dimension divides by 8 (wqkv 6144, wo 4096, w1/w3 14336, w2 4096, norms 4096, the vocabulary), so
    # rank 0 holds exactly 1/8 of the 8,030,261,248 parameters: FP32 parameters and gradients and two FP32 moments,
    # plus a device step scalar per parameter tensor (fused AdamW), each the allocator's 512-byte block:
    # 32 x 7 + 3 = 227 tensors (a layer's two norms, wqkv, wo, w1, w2, w3: q, k, v fused)
    d = _memory(capsys, "--dp", "8")
    st = d["stages"][0]
    shard = 8_030_261_248 // 8
    assert st["weights"] == 4 * shard and st["gradients"] == 4 * shard
    assert st["optimizer"] == 8 * shard + 512 * (32 * 7 + 3)


def test_rope_cache_and_padding_by_hand():
    from symmem.accounting.fsdp import FsdpParam, rank_states
    from symmem.config import load_model
    from symmem.profiles import _rope_cache
    from symmem.scenario import model_scenario

    scn = model_scenario(load_model("llama-3-8b"))
    (buf,) = _rope_cache(scn, scn.stages[0], (), {})
    assert buf.nbytes == 32 * 8192 * 64 * 8  # 32 layers x max_position_embeddings x head_dim/2 x complex64
    # a 5-row parameter over 4 ranks: chunks of 2 rows, rank 3 holds none; padded parameters, unpadded moments
    p = [FsdpParam("x", 5, 3)]
    assert [rank_states(p, 4, r, False).params for r in range(4)] == [24] * 4
    assert [rank_states(p, 4, r, False).exp_avg for r in range(4)] == [24, 24, 12, 0]


def test_rules_differ_only_in_rmsnorm():
    from symmem.rules import rule_set

    gpu, cpu, eager = rule_set("torchtitan"), rule_set("torchtitan-cpu"), rule_set("torch-eager")
    assert {k for k in gpu.rules if gpu.rules[k] is not cpu.rules[k]} == {"rmsnorm"}
    assert {k for k in gpu.rules if gpu.rules[k] is not eager.rules.get(k)} == {"rmsnorm", "rotary_emb",
                                                                                  "cross_entropy"}


@pytest.mark.parametrize("flag", ["--tp", "--pp", "--cp"])
def test_what_is_not_modelled_is_refused(capsys, flag):
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "4", flag, "2"]) == 2
    err = capsys.readouterr().err
    words = "cp = 2: the 'torchtitan' rule set has no context-parallel rule" if flag == "--cp" else \
        "only FSDP (and HSDP)"
    assert words in err and err.count("\n") == 1


def test_sweep_rows_equal_memory(capsys):
    assert main(["sweep", "--model", "llama-3-8b", "--gpus", "8", "--profile", "torchtitan", "--tp", "1", "--pp",
                 "1", "-b", "1,2", "-s", "4096", "--recompute", "none,full", "--rank-by", "headroom", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ranked"]
    assert rows
    for r in rows:
        d = _memory(capsys, "--dp", "8", "-b", str(r["b"]), "-s", "4096", "--recompute", r["recompute"])
        assert d["stages"][0]["peak_allocated"] == r["peak_allocated"]


def test_hsdp_shards_over_dp_over_replicas(capsys):
    # HSDP 2 x 4 on 8 GPUs: the states shard over 4, twice FSDP 8's; other profiles refuse it in one line
    assert _memory(capsys, "--dp", "8", "--hsdp-replicate", "2")["stages"][0]["weights"] == 4 * 8_030_261_248 // 4
    assert main(["memory", "--model", "llama-3-8b", "--dp", "8", "--hsdp-replicate", "2"]) == 2
    err = capsys.readouterr().err
    assert "HSDP is FSDP2's" in err and err.count("\n") == 1
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "8", "--hsdp-replicate",
                 "3"]) == 2
    assert "must divide DP = 8" in capsys.readouterr().err
