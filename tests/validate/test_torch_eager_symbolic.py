"""The torch-eager derivation as formulas: equal to the measured catalogue's closed forms symbol by symbol
(docs/torch_eager_saved_tensors.md, section 5), and equal to polynomials fitted to real PyTorch measurements."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy
from _cases import ATTNS, DTYPES, FAMILIES, combos, config

from symmem.blocks.mla import d_v_symbol
from symmem.blocks.mla import q_latent as has_q_latent
from symmem.blocks.symbols import N, N_r, N_s, d_c, d_cq, d_h, d_hr, h, h_E, h_F, n_h
from symmem.config import from_dict
from symmem.symbols import b, s
from symmem.validate.predict import predict


def catalogue(cfg: dict, kind: str, dtype: str, attn: str, experts: str, unit_b: bool, unit_s: bool) -> sympy.Expr:
    """Section 5 of the catalogue, written out: the measured closed form of one layer's bytes (shared tables apart)."""
    model = from_dict(cfg)
    d_v = d_v_symbol(model)
    p, bf = (4, 0) if dtype == "fp32" else (2, 1)
    t, d_qk = b * s, d_h + d_hr
    T = t * N_r
    v1 = unit_b or unit_s
    flash = attn == "sdpa" and cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"] == cfg["v_head_dim"]
    norms = 2 * (4 * t * h + 4 * t + 2 * p * t * h)
    q_latent = 4 * t * d_cq + 4 * t + 2 * p * t * d_cq if has_q_latent(model) else 0
    kv_latent = 4 * t * (d_c + d_hr * (1 - bf)) + 4 * t + 2 * p * t * d_c
    o_proj_in = p * t * n_h * d_v
    if attn == "eager":
        core = (2 * p * b * n_h * s * d_qk + 4 * b * n_h * s**2 + bf * 2 * b * n_h * s**2
                + (p * t * n_h * (d_h + d_v) if v1 else p * b * n_h * s * d_v))
    elif not flash:
        core = 8 * b * n_h * s * d_qk + 4 * b * n_h * s**2 + (
            4 * t * n_h * (d_h + d_v) if v1 and dtype == "fp32" else 4 * b * n_h * s * d_v)
    else:
        core = 2 * p * b * n_h * s * d_qk + p * t * n_h * (d_h + d_v) + p * b * n_h * s * d_v + 4 * b * n_h * s
        if unit_s:  # at s = 1 o_proj keeps the very output flash keeps (no copy by .contiguous())
            o_proj_in = 0
    attention = norms + q_latent + kv_latent + o_proj_in + core
    if kind == "dense":
        return sympy.expand(attention + 4 * p * t * h_F)
    router = bf * 4 * t * h + 4 * t * N
    if cfg["model_type"] == "deepseek_v3":
        router += 12 * t * N_r + 4 * t
    elif cfg.get("topk_method") == "group_limited_greedy":
        router += t * N + 8 * t * N_r
    else:
        router += 8 * t * N_r
    routed = 28 * T + 4 * N + 2 * p * T * h + 4 * p * T * h_E if experts == "grouped_mm" else (
        20 * T + 3 * p * T * h + 4 * p * T * h_E)
    return sympy.expand(attention + router + routed + 4 * p * t * N_s * h_E)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("v_head_dim", [16, 24], ids=["math", "flash"])
def test_derived_expression_is_the_catalogue_formula(family, v_head_dim):
    cfg = config(family, v_head_dim=v_head_dim)
    for layer, dtype, attn, experts in combos():
        kind = "dense" if layer == 0 else "moe"
        for bv, sv in ((2, 5), (1, 6), (3, 1), (1, 1)):
            derived = predict(cfg, layer, bv, sv, dtype, attn, experts).expression
            want = catalogue(cfg, kind, dtype, attn, experts, bv == 1, sv == 1)
            assert sympy.expand(derived - want) == 0, (family, layer, dtype, attn, experts, bv, sv)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_shared_tables_formula(family, dtype):
    p = 4 if dtype == "fp32" else 2
    want = 2 * p * s * d_hr if family == "deepseek-v3" else 4 * s * d_hr  # V2: complex64 freqs_cis in both dtypes
    got = predict(config(family), 1, 2, 5, dtype).shared_expression
    assert sympy.expand(got - want) == 0


def test_fp32_upcast_is_no_copy():
    # in fp32, RMSNorm's .to(float32) is the input itself: the layer input is kept once, not twice
    cfg = config("deepseek-v3")
    f32 = predict(cfg, 0, 2, 5, "fp32").expression
    assert f32.coeff(b * s * h) == 2 * (4 + 2 * 4)  # two norms: input (4) + normalized (4) + output (4) bytes each


# ------------------------------------------------------------------------------------------- fitted to PyTorch
def _fit(rows: list[tuple[dict, int]], basis: list[sympy.Expr]) -> sympy.Expr:
    """The exact polynomial in `basis` through every (values, bytes) point (least squares, then zero residual)."""
    a = sympy.Matrix([[mono.subs(v) for mono in basis] for v, _ in rows])
    y = sympy.Matrix([m for _, m in rows])
    coef = (a.T * a).LUsolve(a.T * y)
    assert a * coef == y, "the measurements are not a polynomial in this basis"
    return sympy.expand(sum(c * mono for c, mono in zip(coef, basis, strict=True)))


@pytest.mark.torch
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layer,dtype,attn,experts", [(0, "fp32", "eager", "eager"), (1, "bf16", "sdpa", "grouped_mm"),
                                                      (1, "fp32", "sdpa", "eager"), (1, "bf16", "eager", "eager")])
def test_fitted_coefficients_are_derived(measure, family, layer, dtype, attn, experts):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    cfg = config(family)
    model = from_dict(cfg)
    subs = {k: v for k, v in model.substitutions().items() if k not in (b, s)}
    # b, s > 1: every term is b·s, b·s² or a constant (grouped_mm's offsets); fit a wider basis anyway
    grid = [(bv, sv) for bv in (2, 3, 4) for sv in (2, 3, 4, 5)]
    rows = [({b: bv, s: sv}, _measured(measure, cfg, layer, bv, sv, dtype, attn, experts)) for bv, sv in grid]
    fitted = _fit(rows, [sympy.Integer(1), b, s, b * s, s**2, b * s**2, b**2, b**2 * s])
    derived = predict(cfg, layer, 2, 5, dtype, attn, experts).expression.subs(subs)
    assert sympy.expand(fitted - derived) == 0
    # b = 1: the value's reshape is a view; a different polynomial in s
    rows = [({s: sv}, _measured(measure, cfg, layer, 1, sv, dtype, attn, experts)) for sv in (2, 3, 4, 5, 6)]
    fitted = _fit(rows, [sympy.Integer(1), s, s**2])
    derived = predict(cfg, layer, 1, 4, dtype, attn, experts).expression.subs(subs).subs(b, 1)
    assert sympy.expand(fitted - derived) == 0
    assert Fraction(int(fitted.coeff(s, 2))) > 0  # the s² of the probabilities


def _measured(measure, cfg, layer, bv, sv, dtype, attn, experts) -> int:
    m = measure(cfg, layer, bv, sv, dtype, attn, experts)
    return m.saved_bytes - m.shared_saved_bytes


@pytest.mark.parametrize("attn", ATTNS)
def test_regimes_differ_only_in_the_value_and_output(attn):
    # b = 1 keeps all of kv_b_proj's output through the value's view: n_h·d_h more per token than the copy (eager)
    cfg = config("deepseek-v3")
    big = predict(cfg, 0, 2, 5, "fp32", attn).expression
    one = predict(cfg, 0, 1, 5, "fp32", attn).expression
    assert sympy.expand(one - big) == 4 * b * s * n_h * d_h
