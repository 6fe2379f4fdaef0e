"""Precision recipes as data: BF16 mixed precision and the FP8/FP4 recipes of TransformerEngine, torchao and
DeepSeek-V3, as rules on weights, gradients, optimizer moments, saved tensors and scale tensors; and the bytes of
one quantized tensor, data and scaling factors, as TransformerEngine allocates them (`quantized_bytes`, see
`scales`).

The recipe names are listed here without importing sympy or the engine (the command line's help lists them); the
names of `scales` are loaded when first used.
"""

from __future__ import annotations

# The BF16 and FP32 recipes (symmem.accounting.states) and the FP8/FP4 ones (symmem.precision.recipes), in that order.
RECIPE_NAMES = ("paper", "megatron", "fp32", "te-delayed", "te-current", "te-blockwise", "te-mxfp8", "te-nvfp4",
                "deepseek-v3-fp8", "torchao-float8-tensorwise", "torchao-float8-rowwise",
                "torchao-float8-rowwise-gw-hp")

__all__ = ["FORMATS", "RECIPE_NAMES", "QuantizedBytes", "quantized_bytes"]


def __getattr__(name: str):
    if name in ("FORMATS", "QuantizedBytes", "quantized_bytes"):
        from symmem.precision import scales

        return getattr(scales, name)
    raise AttributeError(f"module 'symmem.precision' has no attribute {name!r}")
