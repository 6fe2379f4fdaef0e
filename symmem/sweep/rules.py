"""The rules a swept configuration must pass, in the order they are checked (`RULES`): the GPU count, the pipeline
layout, the parallel sizes (the engine's `Parallel` checks), the schedule. Used by the compiled path
(`sweep.evaluate`) and the per-configuration loop (`sweep.space.reference_records`) alike."""

from __future__ import annotations

from symmem.errors import SymmemError
from symmem.parallel.layout import LayoutSpec, layers_per_stage
from symmem.parallel.sizes import Parallel
from symmem.scenario import Scenario


def pipeline_layout(base: Scenario, pp: int) -> LayoutSpec:
    """The profile's framework's own split when it has one (torchtitan's), else the `paper` layout when it is valid
    for PP, else `even`; a `SymmemError` naming the reasons if none."""
    n_layers = base.model.value("L")
    if base.profile.layout is not None:
        spec = LayoutSpec(base.profile.layout)
        layers_per_stage(spec, n_layers, pp)
        return spec
    try:
        layers_per_stage(LayoutSpec("paper"), n_layers, pp)
        return LayoutSpec("paper")
    except SymmemError as e1:
        try:
            layers_per_stage(LayoutSpec("even"), n_layers, pp)
            return LayoutSpec("even")
        except SymmemError as e2:
            raise SymmemError(f"{e1}; {e2}") from None


def check_world(gpus: int, tp: int, pp: int, cp: int = 1) -> int:
    if gpus % (tp * cp * pp):
        if cp == 1:
            raise SymmemError(f"gpus = {gpus}: not divisible by TP·PP = {tp}·{pp} = {tp * pp}")
        raise SymmemError(f"gpus = {gpus}: not divisible by TP·CP·PP = {tp}·{cp}·{pp} = {tp * cp * pp}")
    return gpus // (tp * cp * pp)


def make_parallel(base: Scenario, gpus: int, tp: int, pp: int, ep: int, etp: int, cp: int = 1) -> Parallel:
    par = base.parallel
    return Parallel(tp=tp, pp=pp, ep=ep, etp=etp, dp=gpus // (tp * cp * pp), world=gpus, cp=cp,
                    cp_comm_type=par.cp_comm_type, sequence_parallel=par.sequence_parallel,
                    moe_sequence_parallel=par.moe_sequence_parallel)


RULES = ("world", "layout", "parallel", "schedule")  # checked in this order; a configuration fails the first


GLOBAL_BATCH_RULE = "global batch"


def global_batch_reason(global_batch: int) -> str:
    return (f"micro-batch x micro-batches x DP is not the global batch of {global_batch:,} (Megatron: "
            "--global-batch-size = --micro-batch-size x M x DP)")
