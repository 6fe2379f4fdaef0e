"""Issue 44: the declared decoder families' Hugging Face layers (transformers 5.24.0) under the torch-eager rule set,
against real PyTorch on the CPU, to the byte: saved bytes per layer kind (each kind a tiny odd config has: dense,
MoE, sliding), the rotary tables shared by the layers, and the layer's parameters; fp32 and bf16, eager and sdpa
attention, eager and grouped_mm experts; at b = 2, s = 8 (a sliding window of 8 bites: sdpa gets a mask) and at
b = 1, s = 5 (it does not). What transformers or symmem does not run is refused in one line (Gemma 2 and gpt-oss with
sdpa, sdpa with attention dropout, grouped_mm for gpt-oss's and Llama 4's experts)."""

from __future__ import annotations

import pytest

from symmem.config import from_dict
from symmem.errors import SymmemError
from symmem.validate.predict import predict
from symmem.validate.tiny_configs import TINY, tiny

pytestmark = pytest.mark.torch

NOT_WRITTEN: tuple[str, ...] = ()  # every declared family has its hf dataflow
EAGER_ONLY = {"gemma2": "eager attention only", "gpt_oss": "eager attention only",
              "seed_oss": "attention_dropout > 0 with sdpa"}
ONE_EXPERTS_IMPL = ("gpt_oss", "llama4_text")  # eager experts only (grouped_mm refused)


def _layers(model_type: str) -> list[int]:
    """The first layer of each kind the tiny config has."""
    kinds = from_dict(tiny(model_type), model_type).layer_kinds()
    return sorted({kinds.index(k) for k in set(kinds)})


CASES = [pytest.param(mt, layer, dtype, attn, id=f"{mt}-{layer}-{dtype}-{attn}")
         for mt in sorted(TINY) if mt not in NOT_WRITTEN for layer in _layers(mt)
         for dtype in ("fp32", "bf16") for attn in ("eager", "sdpa") if not (attn == "sdpa" and mt in EAGER_ONLY)]


def _check(measure, mt: str, layer: int, b: int, s: int, dtype: str, attn: str, experts: str = "eager",
           **overrides) -> None:
    cfg = tiny(mt, **overrides)
    m = measure(cfg, layer, b, s, dtype, attn, experts)
    p = predict(cfg, layer, b, s, dtype, attn, experts, name=mt)
    assert m.layer_kind == p.layer_kind.split("_")[0]
    assert (m.layer_saved_bytes + m.input_saved_bytes, m.shared_saved_bytes) == (p.layer_bytes, p.shared_bytes)
    assert m.unreachable_saved_bytes == 0
    assert m.param_counts["total"] == p.params["total"] == p.paper_params


@pytest.mark.parametrize("mt, layer, dtype, attn", CASES)
def test_layer_saved_bytes_equal_pytorch(measure, mt, layer, dtype, attn):
    _check(measure, mt, layer, 2, 8, dtype, attn)


@pytest.mark.parametrize("mt", sorted(set(TINY) - set(NOT_WRITTEN)))
def test_short_sequence_batch_one(measure, mt):
    # b = 1 (reshapes that stay views), s = 5 below the window of 8 (no sliding mask)
    for layer in _layers(mt):
        _check(measure, mt, layer, 1, 5, "bf16", "eager" if mt in EAGER_ONLY else "sdpa")


@pytest.mark.parametrize("mt", [mt for mt in sorted(TINY) if mt not in NOT_WRITTEN + ONE_EXPERTS_IMPL and "moe" in
                                from_dict(tiny(mt), mt).family.layer_kind_order])
def test_grouped_mm_experts(measure, mt):
    # grouped_mm on the CPU needs every stride a multiple of 16 bytes: expert widths of 24 and 40
    moe = next(i for i, k in enumerate(from_dict(tiny(mt), mt).layer_kinds()) if k.startswith("moe"))
    widths = {"moe_intermediate_size": 24} if "moe_intermediate_size" in tiny(mt) else {"intermediate_size": 40}
    for dtype in ("fp32", "bf16"):
        _check(measure, mt, moe, 2, 8, dtype, "eager", "grouped_mm", **widths)


@pytest.mark.parametrize("mt, attn, experts, words", [("gemma2", "sdpa", "eager", "eager attention only"),
                                                      ("gpt_oss", "sdpa", "eager", "eager attention only"),
                                                      ("seed_oss", "sdpa", "eager", "math backend"),
                                                      ("gpt_oss", "eager", "grouped_mm", "eager experts"),
                                                      ("llama4_text", "eager", "grouped_mm", "one implementation")])
def test_what_is_not_modelled_is_refused(mt, attn, experts, words):
    kinds = from_dict(tiny(mt), mt).layer_kinds()
    layer = next(i for i, k in enumerate(kinds) if k.startswith("moe")) if experts != "eager" else 0
    with pytest.raises(SymmemError, match=words):
        predict(tiny(mt), layer, 2, 8, "fp32", attn, experts, name=mt)
