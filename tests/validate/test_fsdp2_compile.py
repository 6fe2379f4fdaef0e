"""torchtitan's torch.compile under FSDP2 on the CPU (inductor's C++ backend): what each compiled block and the
compiled loss keep for backward, measured per rank (`symmem measure --framework fsdp2 --compile`), against the
`--compile` model (symmem/accounting/compiled.py: the partitioner's minimum cut over the dataflow). Marked `fsdp2`;
skips without torchtitan."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("torch.distributed.fsdp", reason="torch.distributed.fsdp missing: pip install -e '.[torchtitan]'")
pytest.importorskip("torchtitan.models.llama3", reason="torchtitan missing: pip install -e '.[torchtitan]'")

from symmem.validate.fsdp2.runner import Settings, run  # noqa: E402

pytestmark = pytest.mark.fsdp2

TINY = Settings(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=255, ffn_hidden=256, world=2, b=1, s=32,
                compile=True)
# FSDP 4 with uneven shards (h 48: 3 heads of 16, 1 KV head; FFN 160; vocab 250), 3 blocks, every 2nd checkpointed
UNEVEN = dataclasses.replace(TINY, dim=48, n_layers=3, n_heads=3, n_kv_heads=1, vocab=250, ffn_hidden=160,
                             max_seq_len=64, world=4, b=2, s=12, ac="selective-layer:2")

# By hand, one block of TINY (b 1, s 32, h 64, 4 heads of 16, 2 KV heads, FFN 256, BF16; the partitioner's rules in
# symmem/accounting/compiled.py's docstring):
#   no AC: the block's input x [1, 32, 64] 4,096; each norm's FP32 rstd [1, 32, 1] 128 x 2; each norm's output (a
#   matrix product's input) 4,096 x 2; q after RoPE 4,096, k and v at the KV heads 2,048 x 2 (SDPA's inputs); SDPA's
#   output 4,096 and FP32 logsumexp [1, 4, 32] 512; wo's output (the residual recomputed from it) 4,096; w1's and w3's
#   outputs and w2's input [1, 32, 256] 16,384 x 3
#   per-op AC: x 4,096; wqkv's output [32, 128] 8,192; w1's output 16,384 (w2's, on the save list, is not read by the
#   backward); the CPU generator's state 5,056
BY_HAND = {"none": 4096 + 2 * 128 + 2 * 4096 + 4096 + 2 * 2048 + 4096 + 512 + 4096 + 3 * 16384,
           "selective-op": 4096 + 8192 + 16384 + 5056}


@pytest.mark.parametrize("ac", ["none", "selective-op"])
def test_compiled_blocks_keep_what_the_cut_says_on_every_rank(ac):
    from symmem.validate.fsdp2.predict import predicted

    st = dataclasses.replace(TINY, ac=ac)
    measured, pred = run(st), predicted(st)
    assert len(measured) == len(pred) == st.world
    for m, p in zip(measured, pred, strict=True):
        assert m["states"] == p["states"], (ac, m["rank"])
        assert m["saved"] == p["saved"], (ac, m["rank"], m["saved"], p["saved"])
        assert m["saved"]["layer 0"] == m["saved"]["layer 1"] == BY_HAND[ac], m["saved_detail"]["layer 0"]


# TP 2 with sequence parallelism (FSDP 1 x TP 2), b 2, s 32, no AC. By hand, one block on one rank: the block's input
# x on its 16 rows [2, 16, 64] 4,096; each norm's FP32 rstd [2, 16, 1] 128 x 2; each norm's output all-gathered
# for the column-parallel products ([64, 64]: all 32 rows) 8,192 x 2, kept for the products' backward where the
# rows' shard is not; q after RoPE at its 2 heads [2, 2, 32, 16] 4,096, k and v at the 1 KV head 2,048 x 2, SDPA's
# output 4,096 and FP32 logsumexp [2, 2, 32] 512; wo's reduce-scattered output [2, 16, 64] 4,096; w1's and w3's
# outputs and w2's input at the 128 local FFN columns [64, 128] 16,384 x 3
TP2 = dataclasses.replace(TINY, vocab=256, b=2, tp=2)
TP2_BLOCK = 4096 + 2 * 128 + 2 * 8192 + 4096 + 2 * 2048 + 4096 + 512 + 4096 + 3 * 16384


def test_compiled_blocks_under_tp_keep_what_the_cut_says_on_every_rank():
    # (the loss too: loss-parallel compiled keeps the factor of its backward, one FP32 tensor of the local logits'
    # shape, and the labels' mask, symmem/accounting/compiled.py `_cross_entropy_parallel`)
    from symmem.validate.fsdp2.predict import predicted

    measured, pred = run(TP2), predicted(TP2)
    assert len(measured) == len(pred) == TP2.world
    for m, p in zip(measured, pred, strict=True):
        assert (m["states"], m["saved"]) == (p["states"], p["saved"]), m["rank"]
        assert m["saved"]["layer 0"] == m["saved"]["layer 1"] == TP2_BLOCK, m["saved_detail"]["layer 0"]
        loss = [(tuple(x[0]), x[1], x[2]) for x in m["saved_detail"]["outside layers"]
                if x[1] in ("float32", "bool") and len(x[0]) == 2]
        assert sorted(loss) == [((64, 1), "bool", 64), ((64, 128), "float32", 64 * 128 * 4)], loss


def test_compiled_uneven_shards_and_per_layer_checkpointing():
    from symmem.validate.fsdp2.predict import predicted

    measured, pred = run(UNEVEN), predicted(UNEVEN)
    for m, p in zip(measured, pred, strict=True):
        assert (m["states"], m["saved"]) == (p["states"], p["saved"]), m["rank"]
        # block 1 checkpointed: its input [2, 12, 48] BF16 and the CPU generator's state; blocks 0 and 2 not
        assert m["saved"]["layer 1"] == 2 * 12 * 48 * 2 + 5056
        assert m["saved"]["layer 0"] == m["saved"]["layer 2"] > m["saved"]["layer 1"]
    assert len({m["states"] for m in measured}) == 2  # the last rank's moments are smaller (uneven dim 0)


def test_measure_cli_compile(tmp_path, capsys):
    from symmem.cli.main import main
    from symmem.validate.fsdp2.predict import hf_config

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(hf_config(dataclasses.replace(TINY, vocab=256))))
    assert main(["measure", "--framework", "fsdp2", "--config", str(cfg), "--compile", "--ac", "full", "-b", "1",
                 "-s", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["compile"] and out["match"] and len(out["ranks"]) == 2
    for extra, words in ((["--tp", "2", "--ac", "full"], "--compile with --tp 2 and --ac full: torch 2.13's "
                                                        "checkpoint fails"),
                         (["--recipe", "rowwise"], "--compile with --recipe"),
                         (["--framework", "transformers"], "--compile: only with --framework fsdp2")):
        argv = ["measure", "--framework", "fsdp2", "--config", str(cfg), "--compile", *extra]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


# torchtitan's DeepSeek-V3 at the runner's tiny sizes (runner.MoESettings: one dense block, then MoE blocks of 4
# routed experts, top 2, one shared expert; MLA without query compression; heads of 16 + 8 and values of 16, so
# SDPA runs its math path, two batched products in FP32)
DEEPSEEK = Settings(family="deepseek_v3", dim=64, n_layers=2, n_heads=4, vocab=256, world=2, b=1, s=32, compile=True)


def test_compiled_deepseek_v3_under_tp_keeps_what_the_cut_says_on_every_rank():
    # TP 2, no AC (with AC torch 2.13 fails under TP and compile): the MoE block's routed experts split over their
    # hidden dim, the shared experts column- and row-parallel, the dense block's products as Llama's (the gathered
    # inputs kept), the loss-parallel compiled
    from symmem.validate.fsdp2.predict import predicted

    st = dataclasses.replace(DEEPSEEK, b=2, tp=2)
    measured, pred = run(st), predicted(st)
    for m, p in zip(measured, pred, strict=True):
        assert (m["states"], m["saved"]) == (p["states"], p["saved"]), m["rank"]
    assert measured[0]["saved"]["layer 1"] > measured[0]["saved"]["layer 0"]  # (the MoE block keeps more)


@pytest.mark.parametrize("ac", ["none", "selective-op", "full"])
def test_compiled_deepseek_v3_keeps_what_the_cut_says_on_every_rank(ac):
    """Beyond Llama's: the math attention's FP32 inputs of both batched products and its probabilities; the router's
    logits, top-k ids, the sorted slots and their tokens (int64), the gathered tokens, the offsets, the experts'
    outputs; the combine's sorted scores (the gather after top-k is used far apart, banned); the combine's zeros (the
    index backward's zeros merged with them by CSE); no generator state (no flash SDPA to replay)."""
    from symmem.validate.fsdp2.predict import predicted

    st = dataclasses.replace(DEEPSEEK, ac=ac)
    measured, pred = run(st), predicted(st)
    for m, p in zip(measured, pred, strict=True):
        assert (m["states"], m["saved"]) == (p["states"], p["saved"]), (ac, m["rank"], m["saved"], p["saved"])
    if ac == "full":  # each block: its input [1, 32, 64] BF16, nothing else
        assert measured[0]["saved"]["layer 0"] == measured[0]["saved"]["layer 1"] == 4096


# By hand, one block of TINY under torchao's tensorwise Float8 linears, compiled (torch._scaled_mm, the GPU's path,
# runs on this CPU): the products' inputs are recomputed (the backward recasts them through pointwise ops), so beside
# BF16's set the norm outputs and w2's input go; each of the 5 Float8 modules (wqkv, wo, w1, w3, w2) keeps its
# weight's amax (BF16, 2 B) and the reciprocal of its scale (FP32, 4 B).
#   per-op AC: x; wqkv's and w1's outputs (the policy counts the Float8 tensors' aten.mm every other); every weight's
#   amax (aten.max is on the save list); the amax of wo's and of w1/w3's inputs (wo and w3 run again); the
#   reciprocal scales the odd products compute and the backward or the recomputation reads (wqkv's, w1's, w2's
#   weights', w1/w3's input's); the CPU generator's state
FLOAT8_BY_HAND = {"none": BY_HAND["none"] - 2 * 4096 - 16384 + 5 * (2 + 4),
                  "selective-op": 4096 + 8192 + 16384 + 7 * 2 + 4 * 4 + 5056,
                  "full": 4096 + 5056}


@pytest.mark.parametrize("ac", ["none", "selective-op", "full"])
def test_compiled_float8_blocks_on_every_rank(ac):
    from symmem.validate.fsdp2.predict import predicted

    st = dataclasses.replace(TINY, vocab=256, ac=ac, float8="tensorwise")
    measured, pred = run(st), predicted(st)
    for m, p in zip(measured, pred, strict=True):
        assert (m["states"], m["saved"]) == (p["states"], p["saved"]), (ac, m["rank"], m["saved"], p["saved"])
        assert m["saved"]["layer 0"] == FLOAT8_BY_HAND[ac], m["saved_detail"]["layer 0"]


# FSDP2's float8 all-gather under compile (torchtitan e7c0cae's Trainy runs: per-op AC), by hand: the region reads the
# gathered float8 weight (a parameter) and its FP32 scale, so no weight is cast in it: the 5 weights' BF16 amaxes go
# from the per-op set above, the rest stays (the inputs' two amaxes, the 4 reciprocal scales). Full AC: the block's
# input and the generator state, as without it.
FLOAT8_GATHERED_BY_HAND = {"selective-op": 4096 + 8192 + 16384 + 2 * 2 + 4 * 4 + 5056, "full": 4096 + 5056}


@pytest.mark.parametrize("ac", ["selective-op", "full"])
def test_compiled_float8_all_gather_blocks_on_every_rank(ac):
    from symmem.validate.fsdp2.predict import predicted

    st = dataclasses.replace(TINY, vocab=256, ac=ac, float8="tensorwise", float8_all_gather=True)
    measured, pred = run(st), predicted(st)
    for m, p in zip(measured, pred, strict=True):
        assert (m["states"], m["saved"]) == (p["states"], p["saved"]), (ac, m["rank"], m["saved"], p["saved"])
        assert m["saved"]["layer 0"] == m["saved"]["layer 1"] == FLOAT8_GATHERED_BY_HAND[ac], \
            m["saved_detail"]["layer 0"]
