"""DeepSeek-V3.2 decoder layers (transformers 5.24) measured against the torch-eager derivation, to the byte:
dense and MoE layers, FP32 and BF16, eager and sdpa attention, eager and grouped_mm experts, with the indexer's
top-k both below and above the sequence length (index_topk 8 against s = 5 and s = 20): the indexer runs under
no_grad, so the saved bytes do not depend on which side of min(index_topk, s) a run is."""

from __future__ import annotations

import pytest

from symmem.validate.harness import tiny_config
from symmem.validate.predict import predict

pytestmark = pytest.mark.torch

POINTS = [(layer, dtype, attn, experts, b, s)
          for layer in (0, 1) for dtype in ("fp32", "bf16")
          for attn, experts in (("eager", "eager"), ("sdpa", "grouped_mm"))
          for b, s in ((2, 5), (1, 20))]


@pytest.mark.parametrize("layer, dtype, attn, experts, b, s", POINTS)
def test_v32_layer_exact(measure, layer, dtype, attn, experts, b, s):
    cfg = tiny_config("deepseek-v3.2")
    m = measure(cfg, layer, b, s, dtype, attn, experts)
    p = predict(cfg, layer, b, s, dtype, attn, experts)
    assert m.saved_bytes - m.shared_saved_bytes == p.layer_bytes
    assert m.shared_saved_bytes == p.shared_bytes
    assert {k: m.param_counts.get(k) for k in p.params} == p.params
