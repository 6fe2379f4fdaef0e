"""Precision recipes as data: BF16 mixed precision and the FP8/FP4 recipes of TransformerEngine, torchao and
DeepSeek-V3, as rules on weights, gradients, optimizer moments, saved tensors and scale tensors.

The names are listed here without importing the engine (the command line's help lists them).
"""

from __future__ import annotations

# The BF16 recipes (symmem.accounting.states) and the FP8/FP4 ones (symmem.precision.recipes), in that order.
RECIPE_NAMES = ("paper", "megatron", "te-delayed", "te-current", "te-blockwise", "te-mxfp8", "te-nvfp4",
                "deepseek-v3-fp8", "torchao-float8-tensorwise", "torchao-float8-rowwise",
                "torchao-float8-rowwise-gw-hp")


def recipe(name: str):
    """The `Precision` called `name` (see RECIPE_NAMES)."""
    from symmem.accounting.states import recipe as find

    return find(name)
