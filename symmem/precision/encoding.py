"""How one stored copy of a 2-D tensor is laid out: its data format, whether the data is stored transposed, its
block scales and any per-tensor scalars. `Encoding.nbytes(m, k)` gives the bytes of an m × k tensor.

>>> from symmem.precision.formats import E2M1
>>> from symmem.precision.scales import Blocks
>>> nvfp4_rowwise = Encoding("nvfp4", E2M1, Blocks(1, 16, 1, 128, 4), per_tensor=4)
>>> nvfp4_rowwise.nbytes(100, 33)   # 100 rows of ceil(33/2) = 17 bytes; scales 128 x 4; one FP32 amax
2216
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from symmem.precision.formats import Format
from symmem.precision.scales import Blocks


@dataclass(frozen=True)
class Encoding:
    """One stored copy of an m × k tensor (m rows: tokens or output features; k: the contracted dimension)."""

    name: str  # a short name, printed as the kept tensor's dtype (e.g. "e4m3 1x128")
    data: Format
    scales: Blocks | None = None  # block scales, or None (per-tensor scaling: see per_tensor)
    per_tensor: int = 0  # bytes of per-tensor FP32 scalars held with the copy (TE's scale_inv, NVFP4's amax)
    transposed: bool = False  # the data is stored k × m (TE's column-wise copies): FP4 then packs along m
    source: str = ""  # where the layout is written down (file:line at a pinned commit, or a report section)

    def data_bytes(self, m: sympy.Expr, k: sympy.Expr) -> sympy.Expr:
        return self.data.packed_bytes(k, m) if self.transposed else self.data.packed_bytes(m, k)

    def scale_bytes(self, m: sympy.Expr, k: sympy.Expr) -> sympy.Expr:
        return (self.scales.nbytes(m, k) if self.scales is not None else sympy.Integer(0)) + self.per_tensor

    def nbytes(self, m: sympy.Expr | int, k: sympy.Expr | int) -> sympy.Expr:
        m = sympy.Integer(m) if isinstance(m, int) else m
        k = sympy.Integer(k) if isinstance(k, int) else k
        return self.data_bytes(m, k) + self.scale_bytes(m, k)
