"""The FP8/FP4 recipes (symmem/precision/recipes.py) on a tiny Llama, worked by hand: the quantized weight copies
with their scale tensors, the scaling state, and what a linear op keeps for backward, including shapes that do
not divide the block size. The tiny Llama: h = 64, FFN 96, 4 heads of 16, 2 KV groups, 2 layers; symmem's paper
dataflow runs QKV as one GEMM (N = 64 + 2 x 32 = 128, K = 64), gate and up as one (N = 192, K = 64), then o
(64 x 64) and down (N = 64, K = 96). The MoE router and the output head are not quantized (none here; lm_head
stays BF16)."""

from __future__ import annotations

import json

import pytest

from symmem.cli.main import main
from symmem.precision.encoding import Encoding
from symmem.precision.formats import E2M1, E4M3, E5M6
from symmem.precision.scales import TE_SCALES, Blocks

LLAMA = {"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
         "tie_word_embeddings": False, "rms_norm_eps": 1e-6}
GEMMS = [(128, 64), (64, 64), (192, 64), (64, 96)]  # (N, K) per layer: qkv, o, gate+up, down
LINEAR_PARAMS = sum(n * k for n, k in GEMMS)  # 30720 per layer


def _stage(tmp_path, capsys, precision: str, s: int = 256) -> dict:
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(LLAMA))
    assert main(["memory", "--model", str(path), "--precision", precision, "-b", "1", "-s", str(s), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["stages"][0]


def test_te_blockwise_weight_copies(tmp_path, capsys):
    # Row- and column-wise FP8 copies: 2 x 30720 bytes a layer. 128x128 FP32 scales: rowwise (ceil(N/128),
    # round_up(ceil(K/128), 4)), columnwise (ceil(K/128), round_up(ceil(N/128), 4)). N = 128 or 64: 1 x 4 each way,
    # 16 + 16 bytes. gate+up N = 192 does not divide 128: rowwise 2 x 4 = 32 bytes, columnwise 1 x round_up(2, 4)
    # = 4: 16 bytes. A layer: 32 + 32 + 48 + 32 = 144.
    assert _stage(tmp_path, capsys, "te-blockwise")["quantized_weights"] == 2 * (2 * LINEAR_PARAMS + 144)


def test_te_nvfp4_weight_copies(tmp_path, capsys):
    # FP4 data, both copies: N*K bytes a GEMM. E4M3 scales: rowwise (round_up(N, 128), round_up(ceil(K/16), 4)),
    # columnwise (round_up(ceil(N/16), 4), round_up(K, 128)), one FP32 amax each copy:
    # qkv 128*4 + 8*128 + 8 = 1544; o 128*4 + 4*128 + 8 = 1032; gate+up 256*4 + 12*128 + 8 = 2568;
    # down (K = 96: ceil(96/16) = 6 -> 8) 128*8 + 4*128 + 8 = 1544. A layer: 6688.
    assert _stage(tmp_path, capsys, "te-nvfp4")["quantized_weights"] == 2 * (LINEAR_PARAMS + 6688)


def test_te_delayed_weight_copies_and_scaling_state(tmp_path, capsys):
    # FP8 data and its transpose: 2 x 30720 a layer; one FP32 scale_inv a weight (4 GEMMs); delayed scaling's state
    # per GEMM: 5 FP32 scales and 5 amax histories of 1024: 4 * 5 * 1025 = 20500.
    assert _stage(tmp_path, capsys, "te-delayed")["quantized_weights"] == 2 * (2 * LINEAR_PARAMS + 4 * 4 + 4 * 20500)


@pytest.mark.parametrize("precision, s, saved_per_layer", [
    # What each linear keeps for backward, BF16 (2MK, M = b*s tokens) minus what the recipe keeps instead: only
    # the column-wise copy of its FP8/FP4 input. K = 64 for qkv, o, gate+up; 96 for down.
    # te-delayed: MK + 4 (one scale_inv): M = 256: 3 x (32768 - 16388) + (49152 - 24580) = 73712
    ("te-delayed", 256, 3 * (32768 - 16388) + (49152 - 24580)),
    # te-blockwise, 1x128 of the transpose: scales (ceil(M/128), round_up(K, 4)) FP32. M = 256: 2 x 64 x 4 = 512
    ("te-blockwise", 256, 3 * (32768 - 16384 - 512) + (49152 - 24576 - 768)),
    # M = 200 does not divide 128: still 2 row blocks; data 200 K
    ("te-blockwise", 200, 3 * (25600 - 12800 - 512) + (38400 - 19200 - 768)),
    # te-mxfp8 column-wise: E8M0 scales (round_up(M/32, 4), round_up(K, 128)): 8 x 128 = 1024 for K = 64 and 96
    ("te-mxfp8", 256, 3 * (32768 - 16384 - 1024) + (49152 - 24576 - 1024)),
    # te-nvfp4 column-wise: FP4 data K x M/2; scales (round_up(ceil(M/16), 4), round_up(K, 128)) = 16 x 128; amax
    ("te-nvfp4", 256, 3 * (32768 - 8192 - 2048 - 4) + (49152 - 12288 - 2048 - 4)),
])
def test_saved_inputs_of_the_linears(tmp_path, capsys, precision, s, saved_per_layer):
    bf16 = _stage(tmp_path, capsys, "megatron", s)["activations_per_microbatch"]
    low = _stage(tmp_path, capsys, precision, s)["activations_per_microbatch"]
    assert bf16 - low == 2 * saved_per_layer


def test_deepseek_encodings_on_shapes_that_do_not_divide():
    # DeepSeek-V3's weights, 128x128 blocks with FP32 scales, unpadded: 300 x 1000 -> 3 x 8 blocks
    assert Encoding("w", E4M3, Blocks(128, 128, 4)).nbytes(300, 1000) == 300 * 1000 + 3 * 8 * 4
    # its activations, 1x128 tiles: 5 rows of K = 200 -> 5 x 2 tiles; E5M6 packs 12 bits: a row of 200 is 300 bytes
    assert Encoding("a", E4M3, Blocks(1, 128, 4)).nbytes(5, 200) == 5 * 200 + 5 * 2 * 4
    assert Encoding("a", E5M6, Blocks(1, 128, 4)).nbytes(5, 200) == 5 * 300 + 5 * 2 * 4
    # NVFP4 rowwise on K = 33 (not a multiple of 16): rows of ceil(33/2) = 17 bytes, scales 128 x round_up(3, 4)
    assert Encoding("n", E2M1, TE_SCALES["nvfp4", False], per_tensor=4).nbytes(100, 33) == 100 * 17 + 128 * 4 + 4


def test_recipe_names_are_listed_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["memory", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("te-delayed", "te-current", "te-blockwise", "te-mxfp8", "te-nvfp4", "deepseek-v3-fp8",
                 "torchao-float8-tensorwise", "torchao-float8-rowwise"):
        assert name in text.replace("- ", "-")


PARAMS = 6_250_364_928  # parameters on one GPU of stages 1-14 of the paper's case (its Table 6)


def _paper_stage1(capsys, precision: str) -> dict:
    assert main(["memory", "--model", "deepseek-v3", "--scenario", "paper", "--precision", precision, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["stages"][1]


@pytest.mark.parametrize("precision", ["torchao-float8-tensorwise", "torchao-float8-rowwise"])
def test_torchao_recipes_on_the_paper_case(capsys, precision):
    # FP32 parameters (the master), FP32 gradients, two FP32 moments: 16 B per parameter, no quantized copies
    st = _paper_stage1(capsys, precision)
    assert (st["weights"], st["quantized_weights"], st["gradients"], st["optimizer"]) == (
        4 * PARAMS, 0, 4 * PARAMS, 8 * PARAMS)


def test_delayed_scaling_state_on_the_paper_case(capsys):
    # Delayed and current scaling keep the same copies; delayed adds 20,500 bytes per GEMM (5 FP32 scales and 5
    # amax histories of 1024). A GPU of stages 1-14 runs 4 MoE layers, each with 5 MLA GEMMs (q down, q up, kv down,
    # kv up, output), the shared expert's 2 (gate+up, down) and 2 for each of its 256 / EP 8 = 32 routed experts.
    delayed = _paper_stage1(capsys, "te-delayed")["quantized_weights"]
    current = _paper_stage1(capsys, "te-current")["quantized_weights"]
    assert delayed - current == 4 * (5 + 2 + 2 * 32) * 20_500


@pytest.mark.parametrize("precision", ["deepseek-v3-fp8", "te-mxfp8"])
def test_sweep_takes_the_recipes_one_by_one(capsys, precision):
    """The planner under a recipe with quantized copies evaluates each configuration as symmem memory does: its
    first row is symmem memory's figure for that configuration, to the byte."""
    flags = ["--model", "llama-3-8b", "--precision", precision, "-b", "1"]
    assert main(["sweep", *flags, "--gpus", "8", "--zero", "1", "--top", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["ranked"][0]
    assert main(["memory", *flags, "--tp", str(row["tp"]), "--pp", str(row["pp"]), "--dp", str(row["dp"]),
                 "--zero", "1", "--recompute", row["recompute"], "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    top = max(stages, key=lambda st: (st["peak_allocated"], -st["stage"]))
    assert (row["peak_allocated"], row["low"], row["high"]) == (
        top["peak_allocated"], top["reserved_low"], top["reserved_high"])


def test_sweep_bounds_the_one_by_one_path(capsys):
    assert main(["sweep", "--model", "llama-3-8b", "--gpus", "64", "--precision", "te-mxfp8", "-b", "1-64",
                 "-s", "1024-65536:x2"]) == 2
    err = capsys.readouterr().err
    assert "one by one" in err and len(err.strip().splitlines()) == 1


def test_a_recipe_keeps_every_field_of_the_rule_set_it_wraps():
    # with_precision once rebuilt the rule set field by field and dropped per-op AC's save list, the GEMM groups and
    # TP's cache rule (torchtitan's wqkv counted as three products, the reduce-scatter outputs not cached)
    import dataclasses

    from symmem.precision.apply import with_precision
    from symmem.precision.recipes import RECIPES
    from symmem.rules.torchtitan import RULES, under_tp

    base = under_tp(RULES)
    wrapped = with_precision(base, RECIPES["te-current"])
    assert wrapped.name == "torchtitan+tp+te-current" and wrapped.rules is not base.rules
    for f in dataclasses.fields(base):
        if f.name not in ("name", "description", "rules"):
            assert getattr(wrapped, f.name) == getattr(base, f.name), f.name
    # (under TP the save list's reduce-scatter: DeepSeek-V3's reduce-scatter of the routed experts' output)
    assert wrapped.sac_cached is not None and wrapped.gemm_groups and wrapped.sac_saved_kinds == {"sdpa_flash",
                                                                                                  "reduce_scatter"}
