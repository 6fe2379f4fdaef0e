"""The FSDP2 step replayed through the caching allocator with expandable segments (issue 28): the allocator's rules
worked by hand, the loss's FP32 transients, and the replay against torchtitan's published H100 measurements
(pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Tables 1 and 3: "Memory(GiB)", torchtitan's
`max_reserved`, for FSDP in eager BF16 with per-op selective checkpointing, local batch 2, sequence 8,192)."""

from __future__ import annotations

import pytest

from symmem.accounting.allocator import ExpandableAllocator
from symmem.errors import SymmemError

MiB, GiB = 1 << 20, 1 << 30


def _scenario(dp: int, profile: str = "torchtitan-2412", **changes):
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario

    base = dict(profile_name=profile, precision=recipe("fp32"), zero=zero_stage(3), parallel=Parallel(dp=dp), b=2,
                s=8192, recompute_name="selective-op", gpu_memory=96 * 10**9)
    return model_scenario(load_model("llama-3-8b")).replace(**{**base, **changes})


def test_expandable_segments_by_hand():
    a = ExpandableAllocator()
    a.malloc("a", 30 * MiB)  # a new large segment: two 20 MiB pages mapped
    assert (a.reserved, a.allocated) == (40 * MiB, 30 * MiB)
    a.malloc("b", 5 * MiB)  # served by the 10 MiB left at the end, split
    assert a.reserved == 40 * MiB
    a.free("a")  # stays mapped
    assert (a.reserved, a.allocated) == (40 * MiB, 5 * MiB)
    # 31 MiB fits no free block (30 at the start, 5 at the end): the segment grows by the pages its free tail
    # lacks, 31 - 5 = 26 MiB -> two more pages, not a new 40 MiB
    a.malloc("c", 31 * MiB)
    assert a.reserved == 80 * MiB
    a.free("b")
    a.free("c")  # everything free and merged: 80 MiB in one block serves 45 MiB without growing
    a.malloc("d", 45 * MiB)
    assert a.reserved == 80 * MiB and a.peak_reserved == 80 * MiB
    # another stream has its own segment; the small pool maps 2 MiB pages; 100 bytes round to 512
    a.malloc("e", 100, stream="other")
    assert a.reserved == 82 * MiB and a.allocated == 45 * MiB + 512
    assert a.mapped("other") == 2 * MiB


def test_the_free_block_at_the_mapped_end_is_taken_last():
    # get_free_block ranks the free block at the mapped end by what it can grow to: a request that a hole inside
    # the segment also fits goes there, even where the tail is the smaller fit
    a = ExpandableAllocator()
    a.malloc("hole", 16 * MiB)
    a.malloc("keep", 10 * MiB)  # 26 of 40 MiB mapped in use: a 14 MiB free tail
    a.free("hole")  # a 16 MiB hole at the start
    a.malloc("x", 12 * MiB)  # the tail (14 MiB) is the smaller fit, but the hole is taken
    a.malloc("y", 14 * MiB)  # the tail serves 14 MiB whole
    a.malloc("z", 3 * MiB)  # and the hole's 4 MiB left serves 3: nothing grows
    assert a.reserved == 40 * MiB and a.peak_allocated == 39 * MiB
    # the plain best fit puts x in the tail (2 MiB left), y in the hole (2 left), and must grow for z: 60 MiB


def test_memory_freed_on_one_stream_does_not_serve_another():
    a = ExpandableAllocator()
    a.malloc("x", 40 * MiB, stream="s1")
    a.free("x")
    a.malloc("y", 40 * MiB, stream="s2")
    assert a.reserved == 80 * MiB and a.peak_allocated == 40 * MiB


def test_expandable_allocator_refuses_bad_calls():
    a = ExpandableAllocator()
    with pytest.raises(SymmemError, match="freed but not allocated"):
        a.free("nothing")
    a.malloc("k", 1)
    with pytest.raises(SymmemError, match="allocated twice"):
        a.malloc("k", 1)
    with pytest.raises(SymmemError, match="non-negative integer"):
        a.malloc("m", -1)


def test_the_loss_holds_three_fp32_logits_at_its_backward():
    # torchtitan's loss: cross_entropy(pred.float()): at _log_softmax_backward_data the saved FP32 log-probabilities,
    # nll_loss's FP32 gradient of them and the FP32 gradient of the logits; by hand, b s V 4 bytes each
    from symmem.accounting.analysis import memory, values
    from symmem.accounting.timeline import _component_sums

    scn = _scenario(8)
    (m,) = memory(scn)
    ev = next(e for e, _ in m.peak.events if e.part == "head" and e.op == "loss" and e.phase == "backward")
    parts = _component_sums(ev.amounts, values(scn))
    logits_fp32 = 2 * 8192 * 128256 * 4
    assert parts["op workspaces"] == 2 * logits_fp32
    # only the loss's own FP32 gradient, a scalar: the logits' BF16 gradient comes after, at the .float()'s backward
    assert parts["activation gradients"] == 4
    fwd = next(e for e, _ in m.peak.events if e.part == "head" and e.op == "loss" and e.phase == "forward")
    assert _component_sums(fwd.amounts, values(scn))["op workspaces"] == logits_fp32  # the .float() copy


@pytest.mark.parametrize(("dp", "measured_gib"), [(8, 82.4), (128, 67.0)])
def test_replay_within_5_percent_of_torchtitans_published_reserved(dp, measured_gib):
    from symmem.accounting.fsdp2_reserved import replay

    r = replay(_scenario(dp))
    error = r.peak_reserved / GiB / measured_gib - 1
    assert abs(error) <= 0.05, f"FSDP {dp}: replayed {r.peak_reserved / GiB:.2f} GiB against {measured_gib} GiB"
    # its parts: the reduce-scatter stream holds the sharded FP32 gradients (4 bytes x the padded shard), rounded
    # up to its 20 MiB pages
    from symmem.accounting.analysis import memory

    (m,) = memory(_scenario(dp))
    grads = m.states.gradients
    assert grads <= r.by_stream["reduce-scatter"] < grads + 20 * MiB * 34  # one page at most per group (33 groups)


def test_replay_refusals_name_the_fix():
    from symmem.accounting.fsdp2_reserved import refusal, replay

    said = refusal(_scenario(8, profile="torchtitan-cpu"))
    assert "use --profile torchtitan-2412, torchtitan-2506 or torchtitan" in said
    with pytest.raises(SymmemError, match="M = 2 micro-batches"):
        replay(_scenario(8, microbatches=2))


def test_a_third_step_changes_nothing(monkeypatch):
    # the replay stops after the first steady step (ITERATIONS = 2): the allocator's state then repeats
    import symmem.accounting.fsdp2_reserved as F

    scn = _scenario(8, recompute_name="selective-layer:3")
    two = F.replay(scn)
    monkeypatch.setattr(F, "ITERATIONS", 3)
    assert F.replay(scn) == two


def test_flash_attentions_backward_accumulates_dq_in_fp32():
    # FlashAttention-2's mha_bwd: dq_accum FP32 [b, s, heads, head_dim] and softmax_d FP32 [b, heads, s], by hand
    from symmem.accounting.analysis import memory, values
    from symmem.accounting.timeline import _component_sums

    scn = _scenario(8, recompute_name="none")
    (m,) = memory(scn)
    ev = next(e for e, _ in m.peak.events if e.op == "sdpa" and e.phase == "backward")
    assert _component_sums(ev.amounts, values(scn))["op workspaces"] == 2 * 8192 * 4096 * 4 + 2 * 32 * 8192 * 4


def test_torchtitan_030_replay_keeps_the_gradients_and_its_own_units():
    # 0.3.0: zero_grad(set_to_none=False) keeps the first step's reduce-scatter outputs as the gradients; later
    # outputs are added into them and freed, so the reduce-scatter stream holds the gradients and, at most, one
    # group's transient output besides (its largest: the [norm, lm_head] unit, (128,256 x 4,096 + 4,096) x 4 / 8
    # bytes; the embedding's is as large but for the norm)
    from symmem.accounting.analysis import memory
    from symmem.accounting.fsdp2_reserved import replay

    scn = _scenario(8, profile="torchtitan")
    r = replay(scn)
    (m,) = memory(scn)
    grads = m.states.gradients
    head = (128256 * 4096 + 4096) * 4 // 8
    assert grads + head <= r.by_stream["reduce-scatter"] <= grads + head + 20 * MiB * 35
    # every block resharded after forward, the root holding nothing: the copy-in stream never holds the 9dec370
    # root's 2 GiB all-gather output
    assert r.by_stream["all-gather copy-in"] < replay(_scenario(8)).by_stream["all-gather copy-in"]


def test_deepseek_v3_replay_gathers_each_block_as_its_kind():
    # torchtitan 0.3.0's DeepSeek-V3 (no MTP) under FSDP 256: the replay's blocks are the stage's layers in order, 3
    # dense then 58 MoE, each gathering its own parameters, counted here by hand from the config (hidden 7,168, 128
    # heads, q/k head 192, v head 128, q rank 1,536, KV rank 512, rope 64, dense FFN 18,432, 256 experts of 2,048
    # and one shared); FSDP pads each dim 0 to a multiple of the 256 ranks. The replayed step runs, and its copy-in
    # stream holds at least two MoE blocks' BF16 all-gathers (the block computed and the one prefetched)
    from symmem.accounting.analysis import values
    from symmem.accounting.fsdp import shard_degree
    from symmem.accounting.fsdp2_reserved import _groups, replay
    from symmem.config import load_model
    from symmem.model import stage_parts

    scn = _scenario(256, profile="torchtitan", recompute_name="full", b=1, s=4096, mtp=False)
    scn = scn.replace(model=load_model("deepseek-v3"))
    (stage,) = scn.stages
    n = shard_degree(scn)
    _root, blocks, _ = _groups(scn, stage_parts(scn.model, stage, scn.convention, scn.flow_impl), values(scn), n)
    h = 7168
    pad = lambda rows: -(-rows // n) * n  # noqa: E731
    attention = (pad(1536) * h + pad(1536) + pad(128 * 192) * 1536 + pad(576) * h + pad(512) + pad(128 * 256) * 512
                 + pad(h) * 128 * 128 + 2 * pad(h))
    dense = attention + 2 * pad(18432) * h + pad(h) * 18432
    moe = attention + 3 * pad(256) * 2048 * h + pad(256) * h + 2 * pad(2048) * h + pad(h) * 2048
    assert [b.padded(n) for b in blocks] == [dense] * 3 + [moe] * 58
    assert replay(scn).by_stream["all-gather copy-in"] >= 2 * 2 * moe
