"""Which dimensions of a linear op's input and weight are the GEMM's rows, contracted columns and groups.

A linear op multiplies its input (tokens × features) by a weight written, in the blocks, as `lead + (K dims) +
(N dims)`: `lead` are dimensions that index separate GEMMs (the local experts of a grouped GEMM), the K dims are
the input's trailing feature dimensions, the N dims the output features. A weight written output-first (the MoE
router, `(N, H)`) is matched from the end. The split is read from the dataflow, never typed per block.
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem.errors import SymmemError
from symmem.graph import Dataflow, Dim, Op, Weight


@dataclass(frozen=True)
class GemmSplit:
    """A linear op's dimensions: `groups` (separate GEMMs), `k` (contracted), `n` (output features) of the
    weight; `m` the input's token dimensions, and how many leading / trailing input dimensions are groups / K."""

    groups: tuple[Dim, ...]
    m: tuple[Dim, ...]
    k: tuple[Dim, ...]
    n: tuple[Dim, ...]
    input_k: int = 0  # trailing input dimensions that are K (0: as many as `k` has)

    def __post_init__(self) -> None:
        if not self.input_k:
            object.__setattr__(self, "input_k", len(self.k))

    @property
    def input_lead(self) -> int:
        return len(self.groups)


def gemm_split(op: Op, flow: Dataflow, weight: Weight | None = None) -> GemmSplit:
    """The GEMM dimensions of linear op `op` (its first weight unless `weight` is given)."""
    x = flow.tensors[op.inputs[0]].dims
    if weight is None:
        if not op.weights:
            raise SymmemError(f"op {op.name}: a linear op without a weight has no GEMM shape")
        weight = op.weights[0]
    w = weight.dims
    lead = 0
    while lead < min(len(w) - 1, len(x) - 1) and w[lead] == x[lead]:
        lead += 1
    rest = w[lead:]
    for k in range(min(len(rest) - 1, len(x) - lead - 1), 0, -1):
        if rest[:k] == x[len(x) - k:]:  # input-first: (K..., N...)
            return GemmSplit(w[:lead], x[lead:len(x) - k], rest[:k], rest[k:])
        if rest[len(rest) - k:] == x[len(x) - k:]:  # output-first: (N..., K...)
            return GemmSplit(w[:lead], x[lead:len(x) - k], rest[len(rest) - k:], rest[:len(rest) - k])
    # The input does not show the contraction (DeepSeek-V4's grouped o_a_proj reads its input regrouped): the
    # weight's output dimensions are the ones it shares with the output's trailing dimensions, the rest are K; the
    # input is quantized along its last dimension.
    y = flow.tensors[op.outputs[0]].dims
    for n in range(min(len(w) - 1, len(y)), 0, -1):
        if w[:n] == y[len(y) - n:]:
            return GemmSplit((), x[:-1], w[n:], w[:n], input_k=1)
        if w[len(w) - n:] == y[len(y) - n:]:
            return GemmSplit((), x[:-1], w[:len(w) - n], w[len(w) - n:], input_k=1)
    raise SymmemError(f"op {op.name}: weight {weight.name} shares no trailing dimensions with its input "
                      f"{op.inputs[0]} or output {op.outputs[0]}: no GEMM shape to quantize")
