"""Named derived quantities (`stage.activations.mla`, `layer.activations`, `gpu.params`, ...): what `symmem check`
compares against.

Each quantity is an expression in b, s and the model's sizes (the scenario's parallel sizes substituted), with
provenance: for every monomial, the ops and tensors (or weights) that produce it. Per-block quantities
(`stage.activations.<block>`, `layer.activations.<block>`) take their block names from the blocks the scenario's
dataflows contain: the engine knows no block by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy

from symmem.accounting.analysis import stage_activation_expr, stage_params, stage_terms
from symmem.accounting.evaluate import expand_sum
from symmem.accounting.params import MOE_GROUPS, weight_uses
from symmem.check.compare import monomials, term_sources
from symmem.errors import SymmemError
from symmem.graph import local_size
from symmem.model import stage_parts
from symmem.parallel.layout import Stage
from symmem.scenario import Scenario


@dataclass(frozen=True)
class Quantity:
    name: str
    description: str
    unit: str  # "bytes", "parameters" or "FLOPs"
    derive: Callable[[Scenario, int, int | None], tuple[sympy.Expr, dict[sympy.Expr, list[str]]]]


def _activations(block: str | None):
    def derive(scn: Scenario, stage: int, layer: int | None):
        st = scn.stages[stage]
        terms = [t for t in stage_terms(scn, st) if block is None or t.block == block]
        return stage_activation_expr(scn, st, block), term_sources(terms)

    return derive


def _layer_activations(block: str | None):
    def derive(scn: Scenario, stage: int, layer: int | None):
        one = Stage(stage, (_layer_of(scn, stage, layer),), False, False, 0)
        terms = [t for t in stage_terms(scn, one) if (block is None or t.block == block) and t.part != "rope tables"]
        expr = expand_sum((t.count, t.nbytes) for t in terms)
        return expr, term_sources(terms)

    return derive


def _layer_of(scn: Scenario, stage: int, layer: int | None) -> int:
    """The decoder layer a `layer.*` quantity is of: the given one, or the stage's first."""
    st = scn.stages[stage]
    if layer is None:
        if not st.layers:
            raise SymmemError(f"stage = {stage}: holds no decoder layer; give --layer")
        return st.layers[0]
    n = scn.model.value("L")
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n:
        raise SymmemError(f"layer = {layer!r}: the model has decoder layers 0..{n - 1}")
    return layer


def _params(groups: tuple[str, ...]):
    def derive(scn: Scenario, stage: int, layer: int | None):
        st = scn.stages[stage]
        axes = scn.parallel.axis_sizes()
        pairs = []
        sources: dict[sympy.Expr, list[str]] = {}
        for use in weight_uses(stage_parts(scn.model, st, scn.convention)):
            if use.weight.group not in groups:
                continue
            n = local_size(use.weight.dims, axes)
            pairs.append((use.count, n))
            for mono in monomials(use.count * n):
                sources.setdefault(mono, []).append(f"{use.part}/{use.block}: weight {use.weight.name} of {use.op}")
        # expanded from the polynomials: adding the sympy sum term by term re-sorted it each time
        return expand_sum(pairs), sources

    return derive


def _states(scn: Scenario, stage: int, layer: int | None):
    """Model-state bytes per GPU: `states.state_bytes` over the per-GPU parameter expressions (exact shards)."""
    from symmem.accounting.states import state_bytes

    p, z = scn.precision, scn.zero
    expr = sympy.Integer(0)
    for held in scn.schedule.held_stages(stage, scn.parallel.pp):  # DualPipe: the mirror stage's states too
        sp = stage_params(scn, scn.stages[held])
        dense = sp.per_gpu_expr["dense"]
        moe = sum((sp.per_gpu_expr[g] for g in MOE_GROUPS), sympy.Integer(0))
        sb = state_bytes(dense, moe, scn.parallel.dense_shard, scn.parallel.expert_dp, p, z)
        expr += sb.weights + sb.gradients + sb.optimizer
    expr = sympy.expand(expr)
    sources = {m: [f"model states ({p.name} recipe, ZeRO {int(z)})"] for m in monomials(expr)}
    return expr, sources


def _flops(hardware: bool):
    def derive(scn: Scenario, stage: int, layer: int | None):
        from symmem.flops import model_flops

        return model_flops(scn, hardware, scn.flops_convention)

    return derive


def _layer_flops(scn: Scenario, stage: int, layer: int | None):
    from symmem.flops import layer_flops

    return layer_flops(scn, _layer_of(scn, stage, layer), False, scn.flops_convention)


def _comm(axis: str):
    def derive(scn: Scenario, stage: int, layer: int | None):
        from symmem.comm import stage_comm_sources

        return stage_comm_sources(scn, scn.stages[stage], axis)

    return derive


QUANTITIES: dict[str, Quantity] = {}


def _register(q: Quantity) -> None:
    QUANTITIES[q.name] = q


_register(Quantity("stage.activations", "bytes one GPU of the stage keeps for one micro-batch (recomputation "
                   "from --recompute)", "bytes", _activations(None)))
_register(Quantity("layer.activations", "bytes one GPU keeps for one decoder layer and one micro-batch (--layer; "
                   "default the stage's first layer)", "bytes", _layer_activations(None)))
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


_register(Quantity("model.flops", "FLOPs of one micro-batch through the whole model, forward and backward "
                   "(--flops-convention; global sizes)", "FLOPs", _flops(False)))
_register(Quantity("layer.flops", "FLOPs of one decoder layer (--layer; default the stage's first) for one "
                   "micro-batch, forward and backward (--flops-convention; global sizes)", "FLOPs", _layer_flops))
_register(Quantity("model.flops_hardware", "model.flops plus the forward recomputation computes again "
                   "(--recompute)", "FLOPs", _flops(True)))

for _axis, _what in (("tp", "tensor-parallel (and sequence-parallel) collectives"), ("etp", "expert "
                     "tensor-parallel collectives"), ("ep", "expert all-to-alls"), ("cp", "the context-parallel ring"),
                     ("pp", "pipeline sends")):
    _register(Quantity(f"stage.comm.{_axis}", f"bytes one GPU of the stage sends per micro-batch for {_what}, "
                       "derived from the shardings (symmem/comm.py)", "bytes", _comm(_axis)))

PER_BLOCK = {"stage.activations": _activations, "layer.activations": _layer_activations}


def blocks_of(scn: Scenario) -> tuple[str, ...]:
    """The blocks the scenario's dataflows contain, in the order they first appear."""
    seen: dict[str, None] = {}
    for st in scn.stages:
        for part in stage_parts(scn.model, st, scn.convention, scn.flow_impl):
            for op in part.flow.ops:
                seen.setdefault(op.block, None)
    return tuple(b for b in seen if b)


def available(scn: Scenario) -> dict[str, Quantity]:
    """Every quantity of `scn`: the fixed ones and one per block for each per-block family."""
    out = dict(QUANTITIES)
    for base, make in PER_BLOCK.items():
        for blk in blocks_of(scn):
            out[f"{base}.{blk}"] = Quantity(f"{base}.{blk}", f"the {blk} blocks' part of {base}", "bytes",
                                            make(blk))
    return out


def quantity(name: str, scn: Scenario | None = None) -> Quantity:
    if name in QUANTITIES:
        return QUANTITIES[name]
    base, _, blk = name.rpartition(".")
    if base in PER_BLOCK and blk:
        if scn is None:
            return Quantity(name, f"the {blk} blocks' part of {base}", "bytes", PER_BLOCK[base](blk))
        known = available(scn)
        if name in known:
            return known[name]
        raise SymmemError(f"quantity = {name!r}: no block {blk!r} in {scn.model.name}'s dataflows; blocks: "
                          f"{', '.join(blocks_of(scn))}")
    raise SymmemError(f"quantity = {name!r}: unknown; known: {', '.join(QUANTITIES)}, and "
                      f"{', '.join(b + '.<block>' for b in PER_BLOCK)}")


def derive(name: str, scn: Scenario, stage: int, layer: int | None = None
           ) -> tuple[sympy.Expr, dict[sympy.Expr, list[str]]]:
    """The quantity `name` (`symmem check --list`) of `stage` (and `layer`, for `layer.*`), derived as a sympy
    expression in the model's symbols, b and s, with the parallel sizes substituted; with, for each monomial,
    which ops' saved tensors or weights it comes from."""
    if not 0 <= stage < len(scn.stages):
        raise SymmemError(f"stage = {stage}: the scenario has stages 0..{len(scn.stages) - 1}")
    return quantity(name, scn).derive(scn, stage, layer)
