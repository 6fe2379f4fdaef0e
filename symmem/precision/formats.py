"""Element formats: how many bits one element takes, and how a tensor of them packs into whole bytes.

A tensor's data is stored row by row: the last (contiguous) dimension of its storage is packed, each row rounded up
to whole bytes. For 8-, 16- and 32-bit formats this is elements × bytes; for FP4 (E2M1) it is what
TransformerEngine allocates, two elements per byte along the last dimension (`NVFP4Quantizer.convert_shape_for_fp4`,
TE d0067d0 transformer_engine/pytorch/tensor/nvfp4_tensor.py:335-340: `shape[-1] // 2`, a last dimension TE
requires to be a multiple of 16, nvfp4_tensor.py:267-270; an odd one is rounded up here); for DeepSeek's 12-bit
E5M6 the report gives no layout, so it is packed the same way (3 bytes per 2 elements, a row rounded up).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from symmem.precision.scales import ceil_div


@dataclass(frozen=True)
class Format:
    """One element format: its name as printed and its width in bits."""

    name: str
    bits: int

    def row_bytes(self, n: sympy.Expr) -> sympy.Expr:
        """Bytes of one stored row of `n` elements (rounded up to a whole byte)."""
        if self.bits % 8 == 0:
            return (self.bits // 8) * n
        return ceil_div(self.bits * n, 8)

    def packed_bytes(self, rows: sympy.Expr, cols: sympy.Expr) -> sympy.Expr:
        """Bytes of a `rows` × `cols` tensor stored row-major (each row packed, rounded up to whole bytes)."""
        return rows * self.row_bytes(cols)


FP32 = Format("fp32", 32)
BF16 = Format("bf16", 16)
E4M3 = Format("e4m3", 8)  # OCP FP8, the forward format of every FP8 recipe here
E5M2 = Format("e5m2", 8)  # OCP FP8, gradients under TE's HYBRID format
E5M6 = Format("e5m6", 12)  # DeepSeek-V3's format for the input of the linear after attention (report, sec. 3.3.4)
E2M1 = Format("e2m1", 4)  # FP4 (NVFP4 and MXFP4 data)
E8M0 = Format("e8m0", 8)  # a power-of-two scale, one byte (MX formats)
UE4M3 = Format("e4m3", 8)  # NVFP4's block scale: FP8 E4M3, one byte
