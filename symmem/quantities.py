"""Named derived quantities (`stage.activations.mla`, `gpu.params`, ...): what `symmem check` compares against.

Each quantity is an expression in b, s and the model's sizes (the scenario's parallel sizes substituted), with
provenance: for every monomial, the ops and tensors (or weights) that produce it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy

from .analysis import stage_activation_expr, stage_params, stage_terms
from .check.compare import monomials, term_sources
from .errors import SymmemError
from .graph import local_size
from .model import stage_parts
from .params import MOE_GROUPS, weight_uses
from .scenario import Scenario

BLOCKS = ("mla", "moe", "mlp", "embedding", "head", "mtp")


@dataclass(frozen=True)
class Quantity:
    name: str
    description: str
    unit: str  # "bytes" or "parameters"
    derive: Callable[[Scenario, int], tuple[sympy.Expr, dict[sympy.Expr, list[str]]]]


def _activations(block: str | None):
    def derive(scn: Scenario, stage: int):
        st = scn.stages[stage]
        terms = [t for t in stage_terms(scn, st) if block is None or t.block == block]
        return stage_activation_expr(scn, st, block), term_sources(terms)

    return derive


def _params(groups: tuple[str, ...]):
    def derive(scn: Scenario, stage: int):
        st = scn.stages[stage]
        axes = scn.parallel.axis_sizes()
        expr = sympy.Integer(0)
        sources: dict[sympy.Expr, list[str]] = {}
        for use in weight_uses(stage_parts(scn.model, st, scn.convention)):
            if use.weight.group not in groups:
                continue
            e = use.count * local_size(use.weight.dims, axes)
            expr += e
            for mono in monomials(e):
                sources.setdefault(mono, []).append(f"{use.part}/{use.block}: weight {use.weight.name} of {use.op}")
        return sympy.expand(expr), sources

    return derive


def _states(scn: Scenario, stage: int):
    """Model-state bytes per GPU: `states.state_bytes` over the per-GPU parameter expressions (exact shards)."""
    from .states import state_bytes

    sp = stage_params(scn, scn.stages[stage])
    dense = sp.per_gpu_expr["dense"]
    moe = sum((sp.per_gpu_expr[g] for g in MOE_GROUPS), sympy.Integer(0))
    p, z = scn.precision, scn.zero
    sb = state_bytes(dense, moe, scn.parallel.dp, scn.parallel.expert_dp, p, z, scn.schedule.weight_copies)
    expr = sympy.expand(sb.weights + sb.gradients + sb.optimizer)
    sources = {m: [f"model states ({p.name} recipe, ZeRO {int(z)})"] for m in monomials(expr)}
    return expr, sources


QUANTITIES: dict[str, Quantity] = {}


def _register(q: Quantity) -> None:
    QUANTITIES[q.name] = q


_register(Quantity("stage.activations", "bytes one GPU of the stage keeps for one micro-batch (recomputation "
                   "from --recompute)", "bytes", _activations(None)))
for _blk in BLOCKS:
    _register(Quantity(f"stage.activations.{_blk}", f"the {_blk} blocks' part of stage.activations", "bytes",
                       _activations(_blk)))
_register(Quantity("gpu.params", "parameters one GPU of the stage holds", "parameters",
                   _params(("dense", "router", "routed_expert", "shared_expert"))))
_register(Quantity("gpu.params.dense", "its non-MoE parameters (sharded over DP under ZeRO)", "parameters",
                   _params(("dense",))))
_register(Quantity("gpu.params.moe", "its MoE parameters: routers and experts (sharded over EDP)", "parameters",
                   _params(MOE_GROUPS)))
_register(Quantity("gpu.params.experts", "its routed and shared experts' parameters", "parameters",
                   _params(("routed_expert", "shared_expert"))))
_register(Quantity("gpu.states", "model-state bytes per GPU: weights, gradients, optimizer (--zero, --precision)",
                   "bytes", _states))


def quantity(name: str) -> Quantity:
    try:
        return QUANTITIES[name]
    except KeyError:
        raise SymmemError(f"quantity = {name!r}: unknown; known: {', '.join(QUANTITIES)}") from None


def derive(name: str, scn: Scenario, stage: int) -> tuple[sympy.Expr, dict[sympy.Expr, list[str]]]:
    if not 0 <= stage < len(scn.stages):
        raise SymmemError(f"stage = {stage}: the scenario has stages 0..{len(scn.stages) - 1}")
    return quantity(name).derive(scn, stage)
