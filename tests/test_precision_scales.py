"""Scaling-factor bytes of TransformerEngine's formats (symmem/precision/scales.py), worked by hand from the shapes
its get_scale_shape / make_empty allocate (TE c188b533), including shapes that do not divide the block."""

import pytest

from symmem.errors import SymmemError
from symmem.precision import quantized_bytes


def test_blockwise_128x128_on_a_shape_that_does_not_divide():
    # M = 300, K = 1000: ceil(300/128) = 3 row blocks, ceil(1000/128) = 8 column blocks, padded to 8 (a multiple of
    # 4): 3 x 8 FP32 scales rowwise = 96 bytes; columnwise ceil(1000/128) = 8 by round_up(3, 4) = 4: 32 x 4 = 128
    q = quantized_bytes((300, 1000), "fp8_block_2d", rowwise=True, columnwise=True)
    assert q.data == 2 * 300 * 1000 and q.scales == 3 * 8 * 4 + 8 * 4 * 4


def test_blockwise_1x128_on_a_shape_that_does_not_divide():
    # rowwise: (ceil(K/128), round_up(M, 4)) = (ceil(200/128) = 2, round_up(5·7 = 35, 4) = 36): 72 FP32 scales
    assert quantized_bytes((5, 7, 200), "fp8_block_1d").scales == 2 * 36 * 4
    # columnwise: (ceil(M/128), round_up(K, 4)) = (1, 200): 200 FP32 scales
    assert quantized_bytes((5, 7, 200), "fp8_block_1d", rowwise=False, columnwise=True).scales == 1 * 200 * 4


def test_mxfp8_and_nvfp4_padding():
    # MXFP8 M = 64, K = 96: rowwise (round_up(64, 128) = 128, round_up(96/32 = 3, 4) = 4) one-byte scales
    assert quantized_bytes((64, 96), "mxfp8").scales == 128 * 4
    # NVFP4 M = 48, K = 80: data 48·80/2 bytes; scales (round_up(48, 128) = 128, round_up(80/16 = 5, 4) = 8) plus
    # one FP32 amax
    q = quantized_bytes((48, 80), "nvfp4")
    assert q.data == 48 * 80 // 2 and q.scales == 128 * 8 + 4


def test_per_tensor_scaling():
    q = quantized_bytes((3, 4096), "fp8_tensor", rowwise=True, columnwise=True)
    assert (q.data, q.scales) == (2 * 3 * 4096, 2 * 4)


@pytest.mark.parametrize("fmt, shape", [("mxfp8", (48, 100)), ("nvfp4", (40, 24))])
def test_formats_that_need_whole_blocks_refuse_the_rest(fmt, shape):
    with pytest.raises(SymmemError, match="divisible"):
        quantized_bytes(shape, fmt)
