"""The `exact` FLOPs convention: every op that does arithmetic, the attention over its whole score matrix.

Products (`linear`, `grouped_mm`, a `matmul` of two activations) cost what the `paper` convention gives them (2mnk
forward, twice that backward) with nothing halved for causality, the router included. Every other op costs a
number of FLOPs per element, forward and backward, counted from its formula below, one FLOP per add, multiply,
divide, exp, log, sqrt or tanh (a transcendental is one FLOP, as the hardware's special-function unit issues it);
comparisons, copies, gathers, casts and layout changes cost nothing. The element is one of the op's first output
unless `basis` says its first input (reductions). The backward counts what the input and parameter gradients
need, reusing what the forward saved (e.g. softmax's output, the norm's reciprocal RMS); an op whose gradient is
the incoming gradient unchanged (a residual add) costs nothing backward.

These counts are a convention, shown term by term so that a reader can dispute one; they are not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from symmem.graph import Dataflow, Op, global_size


@dataclass(frozen=True)
class ElementCost:
    forward: int
    backward: int
    basis: str  # "out": per element of the first output; "in": of the first input
    why: str


ELEMENTWISE: dict[str, ElementCost] = {
    "add": ElementCost(1, 0, "out", "x + y; the gradient passes to both unchanged"),
    "mul": ElementCost(1, 2, "out", "x·y; dx = g·y, dy = g·x"),
    "scale": ElementCost(1, 1, "out", "c·x; dx = c·g"),
    "param_mul": ElementCost(1, 3, "out", "w·x; dx = g·w, dw = sum(g·x) (a multiply and an add)"),
    "affine": ElementCost(2, 3, "out", "a·x + c; dx = a·g, da = sum(g·x), dc = sum(g)"),
    "div": ElementCost(1, 4, "out", "x / y; dx = g / y, dy = -g·x / y^2 (negate, multiply, divide, square)"),
    "sqrt": ElementCost(1, 2, "out", "sqrt(x); dx = g / (2·y)"),
    "clamp": ElementCost(1, 1, "out", "one compare-select forward (counted as one), the masked gradient"),
    "dropout": ElementCost(2, 2, "out", "x·mask·1/(1-p); the same two multiplies on the gradient"),
    "sigmoid": ElementCost(3, 3, "out", "1/(1 + exp(-x)): exp, add, divide; dx = g·y·(1 - y)"),
    "silu": ElementCost(4, 5, "out", "x·sigmoid(x); dx = g·σ·(1 + x·(1 - σ)): σ again saved, 5 ops"),
    "gelu": ElementCost(9, 13, "out", "tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x^3))): cube 2, "
                                     "scale 1, add 1, scale 1, tanh 1, add 1, multiply 2; its derivative "
                                     "through tanh' = 1 - tanh^2 and the cubic's 1 + 3·0.044715·x^2, 13"),
    "softplus": ElementCost(3, 3, "out", "log(1 + exp(x)); dx = g·sigmoid(x) (exp, add, divide)"),
    "softmax": ElementCost(5, 4, "out", "max, subtract, exp, sum, divide; dx = y·(g - sum(g·y)): multiply, "
                                        "sum, subtract, multiply"),
    "router_score": ElementCost(5, 4, "out", "the router's normalisation, counted as a softmax"),
    "rmsnorm": ElementCost(4, 7, "out", "square, sum, multiply by the reciprocal RMS, multiply by the weight; "
                                        "dx = r·(w·g) - x·r^3·mean(x·w·g) and dw = sum(g·x̂): 7"),
    "rms_rsqrt": ElementCost(2, 3, "in", "square and sum per input element (the rsqrt is per row); backward "
                                         "through the square"),
    "layernorm": ElementCost(7, 9, "out", "mean 1, subtract 1, square 1, sum 1, multiply by 1/σ 1, weight 1, "
                                          "bias 1; dx, dw and db: 9"),
    "rope": ElementCost(3, 3, "out", "x·cos + rotate(x)·sin; its gradient is the same rotation of g"),
    "rope_tables_mul": ElementCost(3, 3, "out", "as rope"),
    "sum": ElementCost(1, 0, "in", "one add per input element; the gradient is broadcast"),
    "max": ElementCost(1, 0, "in", "one compare per input element (counted as one); the gradient is scattered"),
    "index_add": ElementCost(1, 0, "in", "one add per added element; the gradient is gathered"),
    "cross_entropy": ElementCost(5, 2, "in", "a softmax over the logits (5); dx = softmax - one-hot, scaled (2)"),
    "tanh": ElementCost(1, 3, "out", "tanh(x), one op (soft-capping); dx = g·(1 - y^2): square, subtract, multiply"),
}
# no arithmetic (copies, gathers, casts, layout, integer selection), so no FLOPs
MOVES = frozenset({"argtopk", "cast", "combine", "concat", "contiguous", "dispatch", "embedding", "expand", "gather",
                   "index", "masked_fill", "no_grad", "region", "reshape", "rotary_emb", "select", "topk", "view"})


def element_flops(op: Op, flow: Dataflow) -> tuple[sympy.Expr, sympy.Expr]:
    """(forward, backward) FLOPs of a non-product op, global sizes; (0, 0) for a move. An op kind in neither
    table raises: a new kind must be given a cost, not silently none."""
    from symmem.errors import SymmemError

    if op.kind in MOVES:
        return sympy.Integer(0), sympy.Integer(0)
    cost = ELEMENTWISE.get(op.kind)
    if cost is None:
        raise SymmemError(f"flops-convention = 'exact': op kind {op.kind!r} ({op.name}) has no FLOP count; "
                          "give it one in symmem/flops/exact.py")
    tensor = flow.tensors[op.inputs[0] if cost.basis == "in" else op.outputs[0]]
    n = global_size(tensor.dims)
    return cost.forward * n, cost.backward * n
