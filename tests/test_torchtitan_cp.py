"""Context parallelism under torchtitan 9dec370 (`--profile torchtitan-2412 --cp N`), derived from torch's
`context_parallel` (it runs on CUDA only, so nothing here is measured): each rank keeps what one device keeps of its
s/CP rows, FSDP2 shards over DP x CP, the ring attention's transients are torch's, the RoPE table is held twice.
Each expected figure below is written from the model's sizes by hand, not read from symmem."""

from __future__ import annotations

import pytest

from symmem.accounting.analysis import memory, stage_buffers
from symmem.accounting.states import recipe, zero_stage
from symmem.cli.main import main
from symmem.config import load_model
from symmem.parallel.sizes import Parallel
from symmem.scenario import model_scenario

MIB = 2**20


def _scn(dp: int, cp: int, s: int, recompute: str = "full", compiled: bool = False, b: int = 1):
    return model_scenario(load_model("llama-3-8b")).replace(
        profile_name="torchtitan-2412", zero=zero_stage(3), precision=recipe("fp32"), parallel=Parallel(dp=dp, cp=cp),
        b=b, s=s, recompute_name=recompute, compiled=compiled)


@pytest.mark.parametrize("recompute", ["none", "selective-op", "full"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_rank_keeps_one_device_rows_and_fsdp_shards_over_dp_cp(recompute, compiled):
    # CP 2 at 16,384 tokens: each rank's 8,192 rows, what one device keeps at 8,192; FSDP2 over dp_shard_cp (DP 4 x
    # CP 2): the states of FSDP 8
    (cp,), (one,) = memory(_scn(4, 2, 16384, recompute, compiled, b=2)), memory(_scn(8, 1, 8192, recompute, compiled,
                                                                                   b=2))
    assert cp.activation_per_microbatch == one.activation_per_microbatch > 0
    assert cp.states == one.states


def _attention_events(scn) -> dict:
    from symmem.accounting import timeline as T
    from symmem.accounting.analysis import _activation_key, _tokens_per_expert, values
    from symmem.accounting.evaluate import evaluate
    from symmem.model import stage_parts

    axes, vals = scn.parallel.axis_sizes(), values(scn)
    part = next(p for p in stage_parts(scn.model, scn.stages[0], scn.convention, scn.flow_impl) if p.is_layers)
    tl = T.part_timeline(part.flow, scn.rules, scn.policy, axes, scn.act_bytes,
                         _tokens_per_expert(_activation_key(scn), axes))
    return {ev.phase: sum(int(evaluate(a.nbytes, vals)) for a in ev.alive if ".cp_" in str(a.what))
            for ev in tl.events if ev.op == "sdpa"}


def test_the_ring_attention_transients_by_hand():
    # Llama 3 8B at 65,536 tokens over CP 2: 9dec370 repeats k and v to the 32 query heads before SDPA (repeat_kv), so
    # a rank's k and v are each [1, 32, 32,768, 128] BF16 = 256 MiB, its output the same in FP32 = 512 MiB
    kv, out32, q32, cp = 256 * MIB, 512 * MIB, 512 * MIB, 2
    copies = 2 * kv + 2 * kv + 2 * cp * kv  # contiguous k, v; their concatenation; every rank's k and v gathered
    forward = copies + 3 * out32  # the merged output, a block's, one temporary, in FP32
    backward = q32 + 2 * (2 * kv) + copies + 4 * (2 * kv)  # FP32 dq, dk, dv; the copies; FP32 dk, dv sent, received
    assert _attention_events(_scn(4, 2, 65536, "none")) == {"forward": forward, "backward": backward}
    assert (forward, backward) == (3584 * MIB, 5632 * MIB)
    assert _attention_events(_scn(8, 1, 32768, "none")) == {"forward": 0, "backward": 0}  # none without CP


def test_9dec370_keeps_k_and_v_at_the_query_heads():
    # its repeat_kv copies k and v to n_h heads before a plain SDPA, which keeps them (0.3.0 passes enable_gqa and
    # keeps them at the 8 KV heads): without AC each layer keeps 2 x (32 - 8) heads x 128 x 2 bytes a token more
    from symmem.accounting.analysis import stage_terms, values
    from symmem.accounting.evaluate import ceil_int, evaluate

    def layers(profile):
        scn = _scn(8, 1, 8192, "none", b=2).replace(profile_name=profile)
        vals = values(scn)
        return sum(ceil_int(evaluate(t.nbytes, vals)) for t in stage_terms(scn, scn.stages[0])
                   if t.part == "dense layers" and ("key" in t.tensor or "value" in t.tensor or ".v" in t.tensor))

    assert layers("torchtitan-2412") - layers("torchtitan") == 2 * 8192 * 2 * (32 - 8) * 128 * 2  # (a layer's)


def test_the_rope_table_is_held_twice_under_cp():
    # 9dec370's table: 2 x s rows of head_dim / 2 = 64 complex64 (8 bytes); under CP context_parallel also keeps a
    # copy to restore it after the step
    table = 2 * 65536 * 64 * 8
    rope = [b.nbytes for b in stage_buffers(_scn(4, 2, 65536), _scn(4, 2, 65536).stages[0]) if "RoPE" in b.name]
    assert rope == [table, table]
    assert [b.nbytes for b in stage_buffers(_scn(8, 1, 65536), _scn(8, 1, 65536).stages[0])
            if "RoPE" in b.name] == [table]


@pytest.mark.parametrize("fsdp, cp, measured", [(4, 2, 84.2), (2, 4, 84.0), (1, 8, 84.5)])
def test_the_published_cp_runs_replay(fsdp, cp, measured):
    # torchtitan's Table 2 (benchmarks/llama3_h100_202412_torchtitan.md): Llama 3.1 8B, 32,768 tokens a rank
    # (FSDP x CP = 8), full AC, compiled, Float8: the GiB measured
    from symmem.accounting.fsdp2_reserved import replay

    scn = _scn(fsdp, cp, 32768 * cp, "full", compiled=True).replace(precision=recipe("torchao-float8-tensorwise"),
                                                                       gpu_memory=96 * 10**9)
    r = replay(scn)
    assert abs(r.peak_reserved / 2**30 / measured - 1) <= 0.05
    assert "loss" in r.reserved_at


@pytest.mark.parametrize("flags, words", [
    (["-s", "65538"], "torch's context_parallel splits the sequence into 2 x CP = 4 chunks"),
    (["-s", "65536", "--cp-comm-type", "a2a"], "--cp-comm-type a2a: Megatron's all-to-all CP is not what "
                                               "torchtitan 9dec370 runs"),
])
def test_what_cp_does_not_run_is_refused(capsys, flags, words):
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan-2412", "--dp", "4", "--cp", "2",
                 *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_torchtitan_030_keeps_refusing_cp(capsys):
    # 0.3.0's CP (FlexAttention's all-gathered k and v, kept for backward) is another saved set, not modelled
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "4", "--cp", "2",
                 "-s", "8192"]) == 2
    assert "no context-parallel rule" in capsys.readouterr().err


def test_the_sweep_takes_cp_given_and_its_rows_are_memory_s(capsys):
    # 9dec370's sweep keeps CP at 1 unless given; given, each configuration is what symmem memory answers for it
    import json

    argv = ["--model", "llama-3-8b", "--profile", "torchtitan-2412", "-s", "16384", "--gpu-memory", "96GB"]
    assert main(["sweep", *argv, "--gpus", "8", "--cp", "1,2", "--top", "0", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ranked"]
    assert {r["cp"] for r in rows} == {1, 2}
    for r in (r for r in rows if r["cp"] == 2):
        assert main(["memory", *argv, "--dp", str(r["dp"]), "--cp", "2", "-b", str(r["b"]), "--recompute",
                     r["recompute"], "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["stages"][0]["peak_allocated"] == r["peak_allocated"], r
