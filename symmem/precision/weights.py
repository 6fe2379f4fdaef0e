"""Static bytes an FP8/FP4 recipe adds per GPU: the quantized copies of the GEMM weights (data, transposed copies,
scale tensors whose shapes follow from each weight's local shape) and the GEMMs' scaling state; and what it
removes (a high-precision working copy the recipe does not keep).

A GEMM is a linear op, or the linear ops that share a `module:` tag (Megatron-Core fuses W_UQ and W_QR into one
linear_q_up_proj, gate and up into one linear_fc1): one weight of N = the sum of their output features, quantized
as one tensor. A grouped GEMM (local experts) is one GEMM per group. A weight is N rows (output features) by K
columns (the contracted dimension), as TE and PyTorch store it.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from symmem.accounting.evaluate import ceil_int, evaluate
from symmem.graph import AxisSizes, local_size
from symmem.precision.gemm import gemm_split
from symmem.precision.saved import eligible


@dataclass(frozen=True)
class Gemm:
    """One quantized GEMM weight of a part: local sizes (expressions), its weight group, its weights' names."""

    part: str
    name: str
    group: str
    groups: sympy.Expr  # separate GEMMs (local experts)
    n: sympy.Expr
    k: sympy.Expr
    params: sympy.Expr  # local parameters of the weights (groups × n × k)
    count: int  # copies of the part on the stage


def gemms(parts, axes: AxisSizes) -> list[Gemm]:
    """The low-precision GEMM weights of `parts` (eligible linear ops, fused by module), with local sizes."""
    out: list[Gemm] = []
    for part in parts:
        modules: dict[str, list] = {}
        for op in part.flow.ops:
            if not eligible(op) or any(w.shared_with is not None for w in op.weights):
                continue
            key = next((t for t in sorted(op.tags) if t.startswith("module:")), op.name)
            modules.setdefault(key, []).append(op)
        for key, ops in modules.items():
            splits = [gemm_split(op, part.flow) for op in ops]
            ks = {local_size(s.k, axes) for s in splits}
            gs = {local_size(s.groups, axes) for s in splits}
            if len(ks) == 1 and len(gs) == 1:
                n = sympy.Add(*[local_size(s.n, axes) for s in splits])
                (k,), (g,) = ks, gs
                out.append(Gemm(part.name, key, ops[0].weights[0].group, g, n, k, g * n * k, part.count))
            else:  # ops tagged as one module that contract different dimensions: quantized one by one
                for op, s in zip(ops, splits, strict=True):
                    g, n, k = (local_size(d, axes) for d in (s.groups, s.n, s.k))
                    out.append(Gemm(part.name, op.name, op.weights[0].group, g, n, k, g * n * k, part.count))
    return out


@dataclass(frozen=True)
class QuantizedStates:
    """Per GPU: bytes of quantized weight copies (data and scales), of scaling state, and of the high-precision
    working copies the recipe drops (to subtract from the weights)."""

    copies: int
    scales: int  # the scale tensors and per-tensor scalars inside `copies`
    scaling_state: int
    dropped_weights: int

    @property
    def added(self) -> int:
        return self.copies + self.scaling_state


def _number(x: sympy.Expr, values: dict) -> sympy.Expr:
    """`x` at `values` when that is a whole number (a GEMM dimension), else `x` unchanged."""
    v = evaluate(x, values)
    return sympy.Integer(v.numerator) if v.denominator == 1 else x


def quantized_states(precision, parts, axes: AxisSizes, values: dict, weight_copies: int = 1,
                     shard=None) -> QuantizedStates:
    """The quantized weight state one GPU holds for `parts` under `precision` (a `Precision` with a
    `low_precision` part). `shard(bytes_by_group)` applies the ZeRO-3 split to the dropped working copies."""
    lp = precision.low_precision
    if lp is None:
        return QuantizedStates(0, 0, 0, 0)
    copies = scales = state = 0
    dropped: dict[str, int] = {}
    for g in gemms(parts, axes):
        encs = lp.copies_for(g.group)
        n, k = (_number(x, values) for x in (g.n, g.k))  # the local shape's numbers: the ceilings as integers
        data = sympy.Add(*[e.data_bytes(n, k) for e in encs])
        scale = sympy.Add(*[e.scale_bytes(n, k) for e in encs])
        mult = g.count * weight_copies
        copies += mult * ceil_int(evaluate(g.groups * (data + scale), values))
        scales += mult * ceil_int(evaluate(g.groups * scale, values))
        state += mult * ceil_int(evaluate(g.groups * lp.scaling_state_bytes_per_gemm(), values))
        if lp.drops_hp_weight:
            dropped[g.group] = dropped.get(g.group, 0) + mult * ceil_int(evaluate(g.params, values))
    drop = 0
    if dropped:
        drop = shard(dropped) if shard is not None else sum(dropped.values()) * precision.weight_bytes
    return QuantizedStates(copies, scales, state, drop)
