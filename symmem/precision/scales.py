"""Scale tensors of block-quantized tensors: their shapes follow from the block size, the tensor's shape and the
framework's padding, with ceilings where a dimension does not divide.

A quantized 2-D tensor of M rows and K columns (rows: tokens of an activation, or output features of a weight;
columns: the dimension a GEMM contracts) has one scale per block of `rows × cols` elements. Its scale tensor holds
ceil(M / rows) × ceil(K / cols) scales, each dimension then rounded up to the multiple the kernels need
(TransformerEngine pads MXFP8 and NVFP4 scales to 128 × 4 tiles, blockwise FP8 scales to multiples of 4).

>>> import sympy
>>> m = sympy.Symbol("m", positive=True, integer=True)
>>> Blocks(1, 128, 4).nbytes(m, 7168)
224*m
>>> Blocks(128, 128, 4).nbytes(300, 200)   # ceil(300/128) = 3 by ceil(200/128) = 2 blocks, FP32
24
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy


def ceil_div(x: sympy.Expr | int, q: int) -> sympy.Expr:
    """ceil(x / q) for a positive integer x (a sympy ceiling when x is symbolic; exact for numbers)."""
    x = sympy.Integer(x) if isinstance(x, int) else x
    if q == 1:
        return x
    return sympy.ceiling(x / q)


def round_up(x: sympy.Expr | int, q: int) -> sympy.Expr:
    """x rounded up to a multiple of q (TE's `round_up_to_nearest_multiple`, pytorch/utils.py:746-750)."""
    x = sympy.Integer(x) if isinstance(x, int) else x
    if q == 1:
        return x
    return q * ceil_div(x, q)


@dataclass(frozen=True)
class Blocks:
    """One scale per `rows` × `cols` block, `scale_bytes` bytes each; the scale tensor's two dimensions rounded up
    to multiples of `pad_rows` and `pad_cols`."""

    rows: int
    cols: int
    scale_bytes: int
    pad_rows: int = 1
    pad_cols: int = 1

    def shape(self, m: sympy.Expr, k: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
        return (round_up(ceil_div(m, self.rows), self.pad_rows), round_up(ceil_div(k, self.cols), self.pad_cols))

    def nbytes(self, m: sympy.Expr | int, k: sympy.Expr | int) -> sympy.Expr:
        r, c = self.shape(m, k)
        return self.scale_bytes * r * c

    @property
    def label(self) -> str:
        pad = f", padded to {self.pad_rows}x{self.pad_cols}" if (self.pad_rows, self.pad_cols) != (1, 1) else ""
        return f"{self.rows}x{self.cols} blocks, {self.scale_bytes}-byte scales{pad}"
