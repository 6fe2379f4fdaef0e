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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from symmem.errors import SymmemError

FORMATS = ("fp8_tensor", "fp8_block_1d", "fp8_block_2d", "mxfp8", "nvfp4")
BLOCK = {"fp8_block_1d": 128, "fp8_block_2d": 128, "mxfp8": 32, "nvfp4": 16}


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


@dataclass(frozen=True)
class QuantizedBytes:
    data: int
    scales: int  # scaling factors (and amax where the format keeps one)

    @property
    def total(self) -> int:
        return self.data + self.scales


def _scale_shape(fmt: str, m: int, k: int, columnwise: bool) -> tuple[int, int, int]:
    """(outer, inner, bytes per scale)."""
    if fmt == "fp8_block_2d":
        return ((math.ceil(k / 128), _up(math.ceil(m / 128), 4), 4) if columnwise
                else (math.ceil(m / 128), _up(math.ceil(k / 128), 4), 4))
    if fmt == "fp8_block_1d":
        return (math.ceil(m / 128), _up(k, 4), 4) if columnwise else (math.ceil(k / 128), _up(m, 4), 4)
    if fmt == "mxfp8":
        return (_up(m // 32, 4), _up(k, 128), 1) if columnwise else (_up(m, 128), _up(k // 32, 4), 1)
    return (_up(k, 128), _up(math.ceil(m / 16), 4), 1) if columnwise else (_up(m, 128), _up(math.ceil(k / 16), 4), 1)


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
        if fmt == "fp8_tensor":
            data, scales = data + m * k, scales + 4
            continue
        data += m * k // 2 if fmt == "nvfp4" else m * k
        outer, inner, per = _scale_shape(fmt, m, k, col)
        scales += outer * inner * per + (4 if fmt == "nvfp4" else 0)
    return QuantizedBytes(data, scales)
