"""Precision as a rule on saved tensors: a recipe wraps a rule set, so that what a linear op keeps for backward
is its input in the recipe's FP8 or FP4 encoding (data plus scale tensors), and every reading of the rule set
(activations per micro-batch, the timeline's peak, `symmem check`) sees the same tensors.

A quantized copy is a synthetic tensor named after the tensor it encodes (`attn.x_norm.q`), with the original's
dims (so that parallel splitting applies as to any tensor) and a `QuantizedLayout` that says how its bytes follow
from its local shape. It is a copy beside the original: when another op keeps the original at high precision
(the router keeps the MoE block's normed input, which the shared experts' FP8 GEMMs keep quantized), both are kept,
as the frameworks do (each GEMM module quantizes and saves its own input).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy

from symmem.graph import AxisSizes, Dataflow, Dim, DType, Op, Tensor, local_size
from symmem.precision.encoding import Encoding
from symmem.precision.gemm import gemm_split
from symmem.symbols import E_tok


@dataclass(frozen=True)
class QuantizedLayout:
    """The bytes of a quantized copy of a tensor: its first `groups` dims index separately quantized tensors
    (experts), its last `k` dims are the columns, the dims between are the rows."""

    encoding: Encoding
    groups: int
    k: int

    def nbytes(self, dims: tuple[Dim, ...], axes: AxisSizes, e_tok: sympy.Expr) -> sympy.Expr:
        return _quantized_bytes(self, dims, axes, e_tok)


@lru_cache(maxsize=16384)
def _quantized_bytes(layout: QuantizedLayout, dims: tuple[Dim, ...], axes: AxisSizes,
                     e_tok: sympy.Expr) -> sympy.Expr:
    def size(ds: tuple[Dim, ...]) -> sympy.Expr:
        n = local_size(ds, axes)
        return n.xreplace({E_tok: e_tok}) if n.has(E_tok) else n

    g = size(dims[:layout.groups])
    m = size(dims[layout.groups:len(dims) - layout.k])
    k = size(dims[len(dims) - layout.k:])
    return g * layout.encoding.nbytes(m, k)


def quantized(tensor: Tensor, encoding: Encoding, groups: int = 0, k: int = 1) -> Tensor:
    """A quantized copy of `tensor` (a synthetic tensor; its name derives from the original's)."""
    return Tensor(f"{tensor.name}.q", tensor.dims, DType(encoding.name, 1),
                  packing=QuantizedLayout(encoding, groups, k))


def eligible(op: Op) -> bool:
    """Whether a linear op runs as a low-precision GEMM: every linear but the MoE router (DeepSeek-V3 report sec.
    3.3: "the MoE gating modules" keep their precision; Megatron-Core's router is a torch linear, not a TE module)
    and the output head ("the output head", ibid.; Megatron's output layer is a ColumnParallelLinear, not TE)."""
    return op.kind == "linear" and "routing" not in op.tags and not op.name.endswith("lm_head") and bool(op.weights)


def input_copy(op: Op, flow: Dataflow, encoding: Encoding) -> Tensor:
    """The quantized copy of a linear op's input, its groups and columns read from the GEMM shape."""
    split = gemm_split(op, flow)
    return quantized(flow.tensors[op.inputs[0]], encoding, split.input_lead, split.input_k)
