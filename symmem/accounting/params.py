"""Parameter counts falling out of the dataflows' weights: whole model, per stage, per GPU.

A weight's count on one rank is `local_size` of its annotated shape, the same mechanism activations use.
Groups: `dense`, `router`, `routed_expert`, `shared_expert` (the paper counts the last three as "MoE").
A weight tied to another (the MTP module's embedding and head) is not counted in model totals, but a stage
that holds the tie without the original holds a replica of it, and that replica is counted on its GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sympy

from symmem.accounting.evaluate import as_expr, ceil_int, evaluate, evaluate_form, sum_form
from symmem.graph import AxisSizes, Weight, global_size, local_size
from symmem.model import Part

GROUPS = ("dense", "router", "routed_expert", "shared_expert")
MOE_GROUPS = ("router", "routed_expert", "shared_expert")


@dataclass(frozen=True)
class WeightUse:
    part: str
    block: str
    op: str
    weight: Weight
    count: int  # identical layers holding it
    replica: bool  # a tied weight held on a stage that lacks the original


def weight_uses(parts: Iterable[Part], unique: bool = False) -> list[WeightUse]:
    """Every weight of `parts`. With `unique`, tied weights are left out (they are counted where they live)."""
    parts = tuple(parts)
    owned = {w.name for p in parts for _, w in p.flow.weights() if w.shared_with is None}
    uses: list[WeightUse] = []
    seen_replicas: set[str] = set()
    for p in parts:
        for op, w in p.flow.weights():
            if w.shared_with is not None:
                if unique or w.shared_with in owned or w.shared_with in seen_replicas:
                    continue
                seen_replicas.add(w.shared_with)
                uses.append(WeightUse(p.name, op.block, op.name, w, p.count, True))
            else:
                uses.append(WeightUse(p.name, op.block, op.name, w, p.count, False))
    return uses


def count_by_group(uses: Iterable[WeightUse], axes: AxisSizes | None) -> dict[str, sympy.Expr]:
    """Parameters per group: per rank when `axes` is given, else global (the whole, unsplit weights)."""
    terms: dict[str, list[sympy.Expr]] = {g: [] for g in GROUPS}
    for u in uses:
        n = local_size(u.weight.dims, axes) if axes is not None else global_size(u.weight.dims)
        terms[u.weight.group].append(u.count * n)
    # one Add per group: adding term by term re-sorts the growing sum each time (quadratic in the weights)
    return {g: sympy.Add(*ts) for g, ts in terms.items()}


def count_values(uses: Iterable[WeightUse], axes: AxisSizes | None, values: dict) -> dict[str, int]:
    """`count_by_group` evaluated at `values` (rounded up), without building the sympy sums: each group's sizes
    are added as polynomials (`symmem.accounting.evaluate.sum_form`)."""
    pairs: dict[str, list] = {g: [] for g in GROUPS}
    for u in uses:
        n = local_size(u.weight.dims, axes) if axes is not None else global_size(u.weight.dims)
        pairs[u.weight.group].append((u.count, n))
    out = {}
    for g, ps in pairs.items():
        form = sum_form(tuple(ps))
        out[g] = ceil_int(evaluate_form(form, values) if form is not None else
                          evaluate(as_expr(sympy.Add(*[c * n for c, n in ps])), values))
    return out


def total(groups: dict[str, sympy.Expr]) -> sympy.Expr:
    return sympy.Add(*groups.values())


@dataclass(frozen=True)
class ModelTotals:
    """Whole-model counts, by DeepSeek's published conventions."""

    total: int  # embedding + all layers + final norm + head; no MTP; parameters only
    activated: int  # per token: without the input embedding, with the head; N_r of N routed experts
    mtp: int  # the MTP modules' own parameters (embedding and head shared, not counted again)


def activated_expr(parts: Iterable[Part], fraction: sympy.Expr | None) -> sympy.Expr:
    """Parameters one token passes through: routed experts at `fraction` (N_r/N), the input embedding left out,
    the output head counted (also when it is tied to the embedding: every token still passes through it as the
    head)."""
    terms: list[sympy.Expr] = []
    for part in parts:
        for op, w in part.flow.weights():
            if op.kind == "embedding" or (w.shared_with is not None and part.kind != "head"):
                continue
            size = part.count * global_size(w.dims)
            terms.append(size * fraction if w.group == "routed_expert" else size)
    return sympy.Add(*terms)
