"""Bytes per parameter of the model states under a precision recipe (a leaf module: the BF16 recipes in
symmem.accounting.states and the FP8/FP4 ones in symmem.precision.recipes both build on it)."""

from __future__ import annotations

from dataclasses import dataclass

from symmem._numbers import MAX_STATE_BYTES
from symmem.errors import SymmemError


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter for each model state."""

    name: str
    weight_bytes: int  # the weights the forward pass reads
    grad_bytes: int  # gradients (accumulated)
    master_bytes: int  # an FP32 master copy of the weights, kept with the optimizer (0: none)
    optimizer_bytes: int  # optimizer moments (Adam: two FP32 moments = 8)
    # FP8/FP4 recipes (symmem.precision.recipes.LowPrecision): quantized weight copies, scaling state, and how
    # linear ops keep their inputs; None: plain mixed precision
    low_precision: object | None = None

    def __post_init__(self) -> None:
        for f in ("weight_bytes", "grad_bytes", "master_bytes", "optimizer_bytes"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_STATE_BYTES:
                raise SymmemError(f"precision.{f} = {v!r}: must be an integer number of bytes from 0 to "
                                  f"{MAX_STATE_BYTES}")
        if self.weight_bytes == 0:
            raise SymmemError("precision.weight_bytes = 0: the weights take at least 1 byte per parameter")

    @property
    def per_parameter(self) -> int:
        return self.weight_bytes + self.grad_bytes + self.master_bytes + self.optimizer_bytes
