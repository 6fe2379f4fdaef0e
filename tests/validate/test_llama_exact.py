"""Hugging Face's LlamaDecoderLayer (transformers 5.24.0) under the torch-eager rule set, against real PyTorch.

Where the numbers come from: `measure` runs the real layer in torch 2.13 and counts the storages autograd keeps
(symmem.validate.harness); `catalogue` below is the closed form of the measured catalogue
(docs/torch_eager_saved_tensors.md, section 8), written out by hand, not read from the engine; parameter counts are
recounted from the module shapes of LlamaAttention / LlamaMLP. The engine's prediction (`predict`) must equal all
three, to the byte.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest
import sympy
from _cases import POINTS, check

from symmem.blocks.gqa import n_kv
from symmem.blocks.symbols import d_h, h, h_F, n_h
from symmem.symbols import b, s
from symmem.validate import tiny_config
from symmem.validate.predict import predict

DTYPES, ATTNS = ("fp32", "bf16"), ("eager", "sdpa")
SETTINGS = tuple(itertools.product(DTYPES, ATTNS))
EDGE_POINTS = ((1, 1), (1, 5), (2, 7), (3, 1))


def llama(**overrides) -> dict:
    return tiny_config("llama", **overrides)


# ------------------------------------------------------------------------------------------------ the catalogue
def catalogue(cfg: dict, dtype: str, attn: str, unit_b: bool, unit_s: bool) -> sympy.Expr:
    """Section 8 of the catalogue: one LlamaDecoderLayer's bytes (the rotary tables apart), in symbols."""
    p = 4 if dtype == "fp32" else 2
    bf = 0 if dtype == "fp32" else 1
    t = b * s
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    norms = 2 * (4 * t * h + 4 * t + 2 * p * t * h)  # FP32 input (the input itself in FP32), rsqrt, normed, output
    mlp = 4 * p * t * h_F  # gate, silu, up, silu·up
    if attn == "eager":
        # k and v as bmm keeps them: repeat_kv's copies at n_h heads; with one kv head repeat_kv is a stride-0
        # view and matmul's flattening copies it unless b = 1
        kv_heads = n_h if heads != kv and not (kv == 1 and unit_b) else n_kv
        core = p * t * n_h * d_h + 2 * p * t * kv_heads * d_h + 4 * b * n_h * s**2 + bf * 2 * b * n_h * s**2
        o_proj_in = p * t * n_h * d_h
    else:
        # flash-attention-for-CPU: q, k, v, output (= o_proj's input), FP32 logsumexp; k, v at n_kv heads with
        # enable_gqa (head_dim <= 256) or packing (s = 1), else repeat_kv's copies (views with one kv head)
        repeat = heads != kv and head_dim > 256 and not unit_s and kv != 1
        kv_heads = n_h if repeat else n_kv
        core = 2 * p * t * n_h * d_h + 2 * p * t * kv_heads * d_h + 4 * t * n_h
        o_proj_in = 0
    return sympy.expand(norms + core + o_proj_in + mlp)


CATALOGUE_CONFIGS = (
    {}, {"num_key_value_heads": 4}, {"num_attention_heads": 8, "num_key_value_heads": 2}, {"num_key_value_heads": 1},
    {"head_dim": 24}, {"head_dim": 272}, {"head_dim": 272, "num_key_value_heads": 1},
)


def _ids(change: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in change.items()) or "base"


@pytest.mark.parametrize("change", CATALOGUE_CONFIGS, ids=_ids)
def test_derived_expression_is_the_catalogue_formula(change):
    cfg = llama(**change)
    for dtype, attn in SETTINGS:
        for bv, sv in ((2, 5), (1, 6), (3, 1), (1, 1)):
            derived = predict(cfg, 0, bv, sv, dtype, attn).expression
            want = catalogue(cfg, dtype, attn, bv == 1, sv == 1)
            assert sympy.expand(derived - want) == 0, (change, dtype, attn, bv, sv)


@pytest.mark.parametrize("dtype", DTYPES)
def test_shared_tables_formula(dtype):
    p = 4 if dtype == "fp32" else 2
    assert sympy.expand(predict(llama(), 0, 2, 5, dtype).shared_expression - 2 * p * s * d_h) == 0  # cos, sin


# ------------------------------------------------------------------------------------------------ real PyTorch
@pytest.mark.torch
@pytest.mark.parametrize("dtype,attn", SETTINGS)
def test_grid(measure, dtype, attn):
    cfg = llama()
    for bv, sv in POINTS:
        check(measure, cfg, 0, bv, sv, dtype, attn, "eager")
    check(measure, cfg, cfg["num_hidden_layers"] - 1, 2, 5, dtype, attn, "eager")


GQA = (
    {"num_attention_heads": 4, "num_key_value_heads": 4},  # ratio 1: no repeat_kv
    {"num_attention_heads": 4, "num_key_value_heads": 2},  # ratio 2
    {"num_attention_heads": 8, "num_key_value_heads": 2},  # ratio 4
    {"num_attention_heads": 4, "num_key_value_heads": 1},  # multi-query: repeat_kv is a view
    {"head_dim": 24, "tie_word_embeddings": True},  # head_dim given (n_h·d_h ≠ h), tied embeddings
    {"head_dim": 272},  # > 256: sdpa gets repeat_kv's copies (s > 1) or a packed query (s = 1)
    {"head_dim": 264, "num_key_value_heads": 1},
)


@pytest.mark.torch
@pytest.mark.parametrize("change", GQA, ids=_ids)
def test_gqa_and_head_dim(measure, change):
    cfg = llama(**change)
    for (dtype, attn), (bv, sv) in itertools.product(SETTINGS, EDGE_POINTS):
        check(measure, cfg, 0, bv, sv, dtype, attn, "eager")


def random_config(rng: random.Random) -> dict:
    kv = rng.choice((1, 2, 3, 4))
    heads = kv * rng.choice((1, 2, 4))
    head_dim = rng.choice((None, 8, 12, 16, 20))
    hidden = heads * rng.choice((4, 6, 8, 12))  # HF's LlamaConfig wants a multiple of the heads, head_dim or not
    return llama(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                 intermediate_size=rng.choice((40, 64, 72, 100)), tie_word_embeddings=rng.random() < 0.5,
                 num_hidden_layers=rng.randint(1, 2))


@pytest.mark.torch
@pytest.mark.parametrize("seed", range(8))
def test_random_config(measure, seed):
    rng = random.Random(1000 + seed)
    cfg = random_config(rng)
    for dtype, attn in SETTINGS:
        points = [(rng.randint(1, 4), rng.randint(1, 9)) for _ in range(2)]
        for bv, sv in points:
            check(measure, cfg, rng.randrange(cfg["num_hidden_layers"]), bv, sv, dtype, attn, "eager")


def test_random_configs_are_valid_hf_configs():
    for seed in range(8):
        cfg = random_config(random.Random(1000 + seed))
        assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0
        assert cfg["hidden_size"] % cfg["num_attention_heads"] == 0


def _fit(rows, basis):
    a = sympy.Matrix([[mono.subs(v) for mono in basis] for v, _ in rows])
    y = sympy.Matrix([m for _, m in rows])
    coef = (a.T * a).LUsolve(a.T * y)
    assert a * coef == y, "the measurements are not a polynomial in this basis"
    return sympy.expand(sum(c * mono for c, mono in zip(coef, basis, strict=True)))


@pytest.mark.torch
@pytest.mark.parametrize("dtype,attn", [("fp32", "eager"), ("bf16", "sdpa")])
def test_fitted_coefficients_are_derived(measure, dtype, attn):
    cfg = llama()
    rows = []
    for bv, sv in itertools.product((1, 2, 3), (1, 2, 3, 4)):
        m = measure(cfg, 0, bv, sv, dtype, attn, "eager")
        rows.append(({b: bv, s: sv}, m.saved_bytes - m.shared_saved_bytes))
    fitted = _fit(rows, [sympy.Integer(1), b, s, b * s, s**2, b * s**2, b**2, b**2 * s])
    from symmem.config import from_dict

    subs = {k: v for k, v in from_dict(cfg).substitutions().items() if k not in (b, s)}
    derived = predict(cfg, 0, 2, 5, dtype, attn).expression.subs(subs)
    assert sympy.expand(fitted - derived) == 0  # one polynomial in every regime (b = 1 and s = 1 included)


@pytest.mark.torch
@pytest.mark.parametrize("change", [{}, {"head_dim": 24, "num_key_value_heads": 1, "tie_word_embeddings": True}])
def test_parameters_by_hand(measure, change):
    from symmem.accounting.analysis import model_totals
    from symmem.config import from_dict
    from symmem.validate import measure_model_params

    cfg = llama(**change)
    hid, heads, kv, ffn, vocab = (cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                   "intermediate_size", "vocab_size"))
    hd = cfg.get("head_dim") or hid // heads
    pc = measure(cfg, 0, 1, 3, "fp32", "eager", "eager").param_counts
    want = {"input_layernorm": hid, "post_attention_layernorm": hid, "self_attn.q_proj": hid * heads * hd,
            "self_attn.k_proj": hid * kv * hd, "self_attn.v_proj": hid * kv * hd, "self_attn.o_proj": heads * hd * hid,
            "mlp.gate_proj": hid * ffn, "mlp.up_proj": hid * ffn, "mlp.down_proj": ffn * hid}
    assert pc == {**want, "total": sum(want.values())}
    assert predict(cfg, 0, 1, 3).params == pc
    whole = measure_model_params(cfg)
    per_layer = sum(want.values())
    heads_and_embeddings = vocab * hid * (1 if cfg["tie_word_embeddings"] else 2)
    assert whole["total"] == cfg["num_hidden_layers"] * per_layer + hid + heads_and_embeddings
    assert model_totals(from_dict(cfg)).total == whole["total"]


# ------------------------------------------------------------------------------------------------ symmem measure
@pytest.mark.torch
@pytest.mark.parametrize("argv", [
    ["--layer", "0", "-b", "2", "-s", "7", "--dtype", "fp32", "--attn", "eager", "--experts", "eager"],
    ["--layer", "0", "-b", "2", "-s", "7", "--dtype", "fp32", "--attn", "sdpa", "--experts", "eager"],
    ["--layer", "1", "-b", "2", "-s", "7", "--dtype", "bf16", "--attn", "eager"],
    ["--layer", "0", "-b", "2", "-s", "7", "--dtype", "bf16", "--attn", "sdpa", "--experts", "grouped_mm"],
    ["--layer", "0", "-b", "1", "-s", "6", "--dtype", "bf16", "--attn", "eager"],
    ["--layer", "0", "-b", "3", "-s", "1", "--dtype", "fp32", "--attn", "sdpa"],
])
def test_measure_cli(tmp_path, capsys, measure, argv):
    from symmem.cli.main import _Parser
    from symmem.cli.measure import COMMAND

    path = tmp_path / "tiny-llama.json"
    path.write_text(json.dumps(llama()))
    help_text, add_args, run = COMMAND
    parser = _Parser(prog="symmem measure", description=help_text)
    add_args(parser)
    assert run(parser.parse_args(["--config", str(path), *argv, "--json"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] and out["shared_match"] and out["params_match"]
    assert out["measured"] == out["predicted"] > 0 and out["measured_shared"] == out["predicted_shared"] > 0
    assert "n_h" in out["expression"] and "d_h" in out["shared_expression"]
    assert "experts: ignored" in out["notes"]


@pytest.mark.parametrize("key,value", [("attention_dropout", 0.1), ("attention_bias", True), ("mlp_bias", True)])
def test_unmodelled_config_keys(key, value):
    from symmem.errors import SymmemError

    with pytest.raises(SymmemError, match=key):
        predict(llama(**{key: value}), 0, 2, 5)
