"""The configurations and points the validation tests run, and the one comparison they all make."""

from __future__ import annotations

import itertools

from symmem.validate import tiny_config
from symmem.validate.predict import predict

FAMILIES = ("deepseek-v3", "deepseek-v2", "deepseek-v2-lite")
DTYPES = ("fp32", "bf16")
ATTNS = ("eager", "sdpa")
EXPERTS = ("eager", "grouped_mm")
# b = 1 and s = 1 are the points where the attention value's reshape stays a view of kv_b_proj's output
POINTS = ((1, 1), (1, 6), (2, 2), (2, 5), (3, 1), (3, 7), (4, 3))


def combos(layer_kinds=("dense", "moe")):
    """(layer index, dtype, attn, experts) for each layer kind of the tiny configs (layer 0 dense, 1 MoE)."""
    out = []
    for kind in layer_kinds:
        for dtype, attn in itertools.product(DTYPES, ATTNS):
            for experts in (EXPERTS if kind == "moe" else ("eager",)):
                out.append((0 if kind == "dense" else 1, dtype, attn, experts))
    return out


def check(measure, cfg: dict, layer: int, b: int, s: int, dtype: str, attn: str, experts: str) -> int:
    """Assert predicted == measured to the byte (layer, shared tables, parameters per module); return the bytes."""
    m = measure(cfg, layer, b, s, dtype, attn, experts)
    p = predict(cfg, layer, b, s, dtype, attn, experts)
    where = f"{cfg['model_type']} layer {layer} b={b} s={s} {dtype} attn={attn} experts={experts}"
    assert p.layer_kind == m.layer_kind, where
    assert p.layer_bytes == m.saved_bytes - m.shared_saved_bytes, where
    assert p.shared_bytes == m.shared_saved_bytes, where
    assert p.params == m.param_counts, where
    assert p.paper_params == p.params["total"], where
    return p.layer_bytes


def config(family: str, **overrides) -> dict:
    return tiny_config(family, **overrides)
