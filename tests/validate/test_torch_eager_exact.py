"""The torch-eager rule set on the hf dataflows against real PyTorch: every point equal to the byte.

Tiny V3-, V2- and V2-Lite-shaped configs, dense and MoE layers, fp32 and bf16, eager and sdpa attention (sdpa's
math backend, and its flash-attention-for-CPU backend when v_head_dim = d_h + d_hr), eager and grouped_mm experts,
several (b, s) including b = 1 and s = 1; parameters per module; whole-model parameters.
"""

from __future__ import annotations

import pytest
from _cases import FAMILIES, POINTS, check, combos, config

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layer,dtype,attn,experts", combos())
def test_grid(measure, family, layer, dtype, attn, experts):
    cfg = config(family)
    for b, s in POINTS:
        check(measure, cfg, layer, b, s, dtype, attn, experts)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_sdpa_flash_backend(measure, family, dtype):
    # v_head_dim = qk_nope_head_dim + qk_rope_head_dim: sdpa runs flash-attention-for-CPU (no s² term)
    cfg = config(family, v_head_dim=24)
    flash = [check(measure, cfg, layer, b, s, dtype, attn, experts)
             for layer, d, attn, experts in combos() if d == dtype
             for b, s in ((1, 6), (2, 5), (3, 1), (3, 7))]
    assert flash


VARIATIONS = (
    {"hidden_size": 96}, {"intermediate_size": 112}, {"num_attention_heads": 8, "num_key_value_heads": 8},
    {"qk_nope_head_dim": 24}, {"v_head_dim": 12}, {"qk_rope_head_dim": 4}, {"kv_lora_rank": 24},
    {"moe_intermediate_size": 48}, {"n_routed_experts": 16}, {"num_experts_per_tok": 3}, {"n_shared_experts": 2},
    {"num_hidden_layers": 2, "first_k_dense_replace": 0},
)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("change", VARIATIONS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_one_size_at_a_time(measure, family, change):
    cfg = config(family, **change)
    if family != "deepseek-v2-lite":
        cfg_q = config(family, q_lora_rank=40, **change)
        check(measure, cfg_q, 1, 2, 5, "bf16", "sdpa", "grouped_mm")
    layers = range(cfg["first_k_dense_replace"], 2) if cfg["first_k_dense_replace"] else (0, 1)
    for layer in layers:
        for dtype, attn, experts in (("fp32", "eager", "eager"), ("bf16", "sdpa", "grouped_mm"),
                                     ("bf16", "eager", "eager"), ("fp32", "sdpa", "grouped_mm")):
            for b, s in ((2, 5), (1, 4)):
                check(measure, cfg, layer, b, s, dtype, attn, experts)


@pytest.mark.parametrize("family", FAMILIES)
def test_whole_model_parameters(family):
    from symmem.accounting.analysis import model_totals
    from symmem.config import from_dict
    from symmem.validate import measure_model_params

    cfg = config(family)
    measured = measure_model_params(cfg)
    totals = model_totals(from_dict(cfg, family))
    assert measured["total"] == totals.total
