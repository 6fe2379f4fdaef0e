"""The bytes of one quantized tensor, data and scaling factors, as TransformerEngine allocates them (TE c188b533,
the 2.11.0 build). A tensor of shape (..., K) is seen as M x K with M the product of the leading dimensions; the
rowwise copy feeds the forward GEMM, the columnwise (transposed) copy the backward's.

* `fp8_tensor` (delayed and current scaling, per tensor): one byte an element and one FP32 `scale_inv`
  (transformer_engine/pytorch/tensor/float8_tensor.py).
* `fp8_block_1d` (1x128 blocks, the DeepSeek-V3 report's activations, arXiv 2412.19437 section 3.3) and
  `fp8_block_2d` (128x128 blocks, its weights): one byte an element; FP32 scales, shaped as
  tensor/float8_blockwise_tensor.py:125-184 `get_scale_shape` gives them for the GEMM-ready layout: 2D rowwise
  (ceil(M/128), round_up(ceil(K/128), 4)), columnwise (ceil(K/128), round_up(ceil(M/128), 4)); 1D rowwise
  (ceil(K/128), round_up(M, 4)), columnwise (ceil(M/128), round_up(K, 4)). Shapes that do not divide the block are
  covered by the ceilings.
* `mxfp8` (32-element blocks, E8M0 scales of one byte): tensor/mxfp8_tensor.py:112-145 allocates rowwise scales
  (round_up(M, 128), round_up(K/32, 4)) and columnwise (round_up(M/32, 4), round_up(K, 128)), and asserts that M
  and K divide by 32 (constants.py:91).
* `nvfp4` (16-element blocks, E4M3 scales of one byte, plus a per-tensor FP32 amax): two elements a byte
  (`convert_shape_for_fp4`), scales from tensor/nvfp4_tensor.py:215-247 `get_scale_shape`: rowwise
  (round_up(M, 128), round_up(ceil(K/16), 4)), columnwise (round_up(K, 128), round_up(ceil(M/16), 4)); one FP32
  amax per copy (nvfp4_tensor.py:325); M and K must divide by 16 (the make_empty check, constants.py:93).

The shapes are written once, as `Blocks` (one scale per block, the scale tensor's dimensions padded), in
`TE_SCALES`; `quantized_bytes` reads them for integer shapes, and the precision recipes (symmem.precision.recipes)
for the symbolic shapes of the dataflow (a token count b·s), where a ceiling stays a sympy ceiling.

>>> import sympy
>>> m = sympy.Symbol("m", positive=True, integer=True)
>>> Blocks(1, 128, 4).nbytes(m, 7168)
224*m
>>> Blocks(128, 128, 4).nbytes(300, 200)   # ceil(300/128) = 3 by ceil(200/128) = 2 blocks, FP32
24
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

from symmem.errors import SymmemError

FORMATS = ("fp8_tensor", "fp8_block_1d", "fp8_block_2d", "mxfp8", "nvfp4")
BLOCK = {"fp8_block_1d": 128, "fp8_block_2d": 128, "mxfp8": 32, "nvfp4": 16}


def ceil_div(x: sympy.Expr | int, q: int) -> sympy.Expr:
    """ceil(x / q) for a positive integer x (a sympy ceiling when x is symbolic; exact for numbers)."""
    x = sympy.Integer(x) if isinstance(x, int) else x
    if q == 1:
        return x
    if x.is_Integer:  # a number: integer arithmetic (sympy's ceiling asks its assumptions system first)
        return sympy.Integer(-(-int(x) // q))
    y = x / q
    if isinstance(x, (sympy.Symbol, sympy.Mul, sympy.ceiling)):
        # A product of positive symbols (or a ceiling of one) over q: sympy's ceiling would only find it whole or
        # leave it be, after asking whether it lies in (0, 1], (1, 2], ... (`_eval_const_number`, sympy 1.14:
        # about 4 ms a call, most of the FP8/FP4 tables' time); whole is asked here, once.
        return y if y.is_integer else sympy.ceiling(y, evaluate=False)
    return sympy.ceiling(y)


def round_up(x: sympy.Expr | int, q: int) -> sympy.Expr:
    """x rounded up to a multiple of q (TE's `round_up_to_nearest_multiple`)."""
    x = sympy.Integer(x) if isinstance(x, int) else x
    if q == 1:
        return x
    return q * ceil_div(x, q)


@dataclass(frozen=True)
class Blocks:
    """One scale per `rows` x `cols` block of an M x K tensor, `scale_bytes` bytes each; the scale tensor's two
    dimensions (blocks along M, blocks along K) rounded up to multiples of `pad_rows` and `pad_cols`. The order in
    which TE stores the two dimensions does not change the product."""

    rows: int
    cols: int
    scale_bytes: int
    pad_rows: int = 1
    pad_cols: int = 1

    def shape(self, m: sympy.Expr | int, k: sympy.Expr | int) -> tuple[sympy.Expr, sympy.Expr]:
        return (round_up(ceil_div(m, self.rows), self.pad_rows), round_up(ceil_div(k, self.cols), self.pad_cols))

    def nbytes(self, m: sympy.Expr | int, k: sympy.Expr | int) -> sympy.Expr:
        r, c = self.shape(m, k)
        return self.scale_bytes * r * c

    @property
    def label(self) -> str:
        pad = f", padded to {self.pad_rows}x{self.pad_cols}" if (self.pad_rows, self.pad_cols) != (1, 1) else ""
        return f"{self.rows}x{self.cols} blocks, {self.scale_bytes}-byte scales{pad}"


# (format, columnwise) -> the scale tensor of an M x K tensor, as in the module docstring (blocks along M, along K).
TE_SCALES: dict[tuple[str, bool], Blocks] = {
    ("fp8_block_2d", False): Blocks(128, 128, 4, 1, 4),  # (ceil(M/128), round_up(ceil(K/128), 4))
    ("fp8_block_2d", True): Blocks(128, 128, 4, 4, 1),  # (ceil(K/128), round_up(ceil(M/128), 4))
    ("fp8_block_1d", False): Blocks(1, 128, 4, 4, 1),  # (ceil(K/128), round_up(M, 4))
    ("fp8_block_1d", True): Blocks(128, 1, 4, 1, 4),  # (ceil(M/128), round_up(K, 4))
    ("mxfp8", False): Blocks(1, 32, 1, 128, 4),  # (round_up(M, 128), round_up(K/32, 4))
    ("mxfp8", True): Blocks(32, 1, 1, 4, 128),  # (round_up(M/32, 4), round_up(K, 128))
    ("nvfp4", False): Blocks(1, 16, 1, 128, 4),  # (round_up(M, 128), round_up(ceil(K/16), 4))
    ("nvfp4", True): Blocks(16, 1, 1, 4, 128),  # (round_up(K, 128), round_up(ceil(M/16), 4))
}
PER_TENSOR = {"fp8_tensor": 4, "nvfp4": 4}  # FP32 scalars per copy: scale_inv; NVFP4's amax


@dataclass(frozen=True)
class QuantizedBytes:
    data: int
    scales: int  # scaling factors (and amax where the format keeps one)

    @property
    def total(self) -> int:
        return self.data + self.scales


def quantized_bytes(shape: tuple[int, ...], fmt: str, rowwise: bool = True, columnwise: bool = False
                    ) -> QuantizedBytes:
    """The bytes TransformerEngine allocates for a tensor of `shape` in `fmt`, with its rowwise and/or columnwise
    copies."""
    if fmt not in FORMATS:
        raise SymmemError(f"format = {fmt!r}: unknown; known: {', '.join(FORMATS)}")
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise SymmemError(f"shape = {shape!r}: must be positive integers")
    m, k = math.prod(shape[:-1]), shape[-1]
    if fmt in ("mxfp8", "nvfp4") and (m % BLOCK[fmt] or k % BLOCK[fmt]):
        raise SymmemError(f"shape = {shape!r}: {fmt} needs both M = {m} and K = {k} divisible by {BLOCK[fmt]} "
                          "(TransformerEngine asserts it)")
    copies = [c for c, on in ((False, rowwise), (True, columnwise)) if on]
    data = scales = 0
    for col in copies:
        data += m * k // 2 if fmt == "nvfp4" else m * k
        blocks = TE_SCALES.get((fmt, col))
        scales += (int(blocks.nbytes(m, k)) if blocks else 0) + PER_TENSOR.get(fmt, 0)
    return QuantizedBytes(data, scales)
