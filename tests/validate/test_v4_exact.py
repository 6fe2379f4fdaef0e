"""DeepSeek-V4 decoder layers (transformers 5.24) measured against the torch-eager derivation, to the byte:
mHC around every block, sliding attention with hash-routed MoE (layer 0) and with sqrt-softplus routed MoE
(layer 1 of a config whose layers are all sliding), FP32 and BF16, b = 1 (the expanded KV head flattens to a view)
and b = 2 (to copies), grouped_mm experts (transformers' default) and eager ones; HCA and CSA layers on both sides
of their compressed lengths' rounding."""

from __future__ import annotations

import pytest

from symmem.validate.harness import tiny_config
from symmem.validate.predict import predict

pytestmark = pytest.mark.torch

SLIDING = {"layer_types": ["sliding_attention"] * 3}
POINTS = [(layer, dtype, b, s) for layer in (0, 1) for dtype in ("fp32", "bf16") for b, s in ((2, 5), (1, 20))]


@pytest.mark.parametrize("layer, dtype, b, s", POINTS)
def test_v4_sliding_layer_exact(measure, layer, dtype, b, s):
    cfg = tiny_config("deepseek-v4", **SLIDING)
    m = measure(cfg, layer, b, s, dtype, "eager", "grouped_mm")
    p = predict(cfg, layer, b, s, dtype, "eager", "grouped_mm")
    assert p.layer_kind == ("sliding_hash" if layer == 0 else "sliding_moe")
    assert m.saved_bytes - m.shared_saved_bytes == p.layer_bytes
    assert m.shared_saved_bytes == p.shared_bytes == 0
    assert {k: m.param_counts.get(k) for k in p.params} == p.params


# HCA (layer 2 of the tiny config, compress rate 8): W = floor(s / 8) entries; s = 5, 7 give none (the compressor
# returns no entry and kv_proj's output is not kept), s = 8 one, s = 20, 23 two (the tail rounds down).
HCA_POINTS = [(dtype, b, s) for dtype in ("fp32", "bf16") for b, s in ((2, 5), (1, 7), (1, 8), (1, 20), (2, 23))]


@pytest.mark.parametrize("dtype, b, s", HCA_POINTS)
def test_v4_hca_layer_exact(measure, dtype, b, s):
    cfg = tiny_config("deepseek-v4")
    m = measure(cfg, 2, b, s, dtype, "eager", "grouped_mm")
    p = predict(cfg, 2, b, s, dtype, "eager", "grouped_mm")
    assert p.layer_kind == "hca_moe"
    assert m.saved_bytes - m.shared_saved_bytes == p.layer_bytes
    assert m.shared_saved_bytes == p.shared_bytes == 0
    assert {k: m.param_counts.get(k) for k in p.params} == p.params


# CSA (layer 1, compress rate 4, with the lightning indexer): W = floor(s / 4) entries (s = 3: none; s = 4: one;
# s = 17: four, the tail rounds down; s = 20: five); the indexer picks min(index_topk, W) of them, but its indices
# only build a mask over the dense s + W keys, so the saved bytes do not depend on index_topk: index_topk 4 is
# below W = 5 at s = 20 and above W at s = 3, 4, 17 (and 64 above W everywhere).
CSA_POINTS = [(dtype, b, s, k) for dtype in ("fp32", "bf16") for b, s in ((2, 3), (1, 4), (2, 17), (1, 20))
              for k in (4, 64)]


@pytest.mark.parametrize("dtype, b, s, index_topk", CSA_POINTS)
def test_v4_csa_layer_exact(measure, dtype, b, s, index_topk):
    cfg = tiny_config("deepseek-v4", index_topk=index_topk)
    m = measure(cfg, 1, b, s, dtype, "eager", "grouped_mm")
    p = predict(cfg, 1, b, s, dtype, "eager", "grouped_mm")
    assert p.layer_kind == "csa_moe"
    assert m.saved_bytes - m.shared_saved_bytes == p.layer_bytes
    assert m.shared_saved_bytes == p.shared_bytes == 0
    assert {k: m.param_counts.get(k) for k in p.params} == p.params


def test_v4_csa_bytes_do_not_depend_on_index_topk():
    """The derivation itself: index_topk below and above W gives the same bytes (the dense eager attention)."""
    below = predict(tiny_config("deepseek-v4", index_topk=4), 1, 1, 20, "bf16", "eager", "grouped_mm")
    above = predict(tiny_config("deepseek-v4", index_topk=64), 1, 1, 20, "bf16", "eager", "grouped_mm")
    assert below.layer_bytes == above.layer_bytes


# experts_implementation="eager" (the per-expert loop of the modeling file): every layer type, both dtypes
EAGER_POINTS = [(layer, dtype, b, s) for layer in (0, 1, 2) for dtype in ("fp32", "bf16") for b, s in ((2, 5), (1, 20))]


@pytest.mark.parametrize("layer, dtype, b, s", EAGER_POINTS)
def test_v4_eager_experts_exact(measure, layer, dtype, b, s):
    cfg = tiny_config("deepseek-v4")
    m = measure(cfg, layer, b, s, dtype, "eager", "eager")
    p = predict(cfg, layer, b, s, dtype, "eager", "eager")
    assert m.saved_bytes - m.shared_saved_bytes == p.layer_bytes
    assert {k: m.param_counts.get(k) for k in p.params} == p.params


def test_v4_sdpa_refused():
    from symmem.errors import SymmemError

    with pytest.raises(SymmemError, match="eager attention only"):
        predict(tiny_config("deepseek-v4"), 0, 1, 5, "fp32", "sdpa", "grouped_mm")
