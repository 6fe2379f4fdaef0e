"""How long one training iteration takes, derived from the dataflows: every GEMM with its shape, the fused
attention, the memory-bound ops, every collective with its group's link and message size, the pipeline's bubble,
the data-parallel traffic and the optimizer step (`symmem.steptime.costs`), turned into seconds by a model with
five named constants (`symmem.steptime.model`: its form and each term's reason).

The constants (`CONSTANTS`) are fitted on the measured iterations of symmem/data/megatron_b200.json (ten runs of
Megatron-LM on 8x B200, SimuMax's published measurements: 22 iterations) and judged out of sample: each run's
iterations predicted by the constants fitted on the other nine (`leave_one_run_out`;
derivations/measured_step_times.py writes both figures beside the peer simulator's). Not modelled: overlap of
communication with computation other than TE's CP ring (the measured runs overlap nothing else), contention
between groups sharing a link, the network's own latency (the fitted latency is NVLink's), stragglers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import sympy

from symmem._cache import bounded
from symmem.errors import SymmemError
from symmem.hardware import GPU, gpu
from symmem.steptime.model import (
    Constants,
    StepFeatures,
    breakdown,
    bubble_slots,
    fit,
    leave_one_run_out,
    leave_out,
    seconds,
)

__all__ = ["CONSTANTS", "NEUTRAL", "Constants", "StepFeatures", "StepTime", "UnmeasuredLink", "breakdown",
           "bubble_slots", "check_gpu", "features", "fit", "fsdp_floor", "leave_one_run_out", "leave_out",
           "model_flops_value", "once_costs", "rates", "seconds", "stage_features", "step_time"]

# fitted by `fit` on the 22 measured iterations (derivations/measured_step_times.py shows the fit and each run's
# leave-one-run-out figure; a test checks these are its result to the digits shown)
CONSTANTS = Constants(gemm_efficiency=0.4873, attention_efficiency=0.2553, link_efficiency=1.0, latency_s=1.076e-05,
                      fixed_s=0.02531)
# what chooses the slowest stage while fitting (the fit must not depend on its own result): round figures
NEUTRAL = Constants(gemm_efficiency=0.5, attention_efficiency=0.5, link_efficiency=1.0, latency_s=1e-05, fixed_s=0.0)


@dataclass(frozen=True)
class StepTime:
    gpu: str
    flops_model: int  # one iteration of the whole job, as Megatron's function counts it
    flops_hardware: int  # with recomputation's extra forward
    time_s: float
    tokens_per_s: float
    mfu: float
    comm_bytes: dict = field(default_factory=dict)  # per GPU per iteration, by axis
    seconds_by_part: dict = field(default_factory=dict)  # the iteration by component (model.breakdown)
    world_size: int = 1
    # which model timed it: "measured kernels" (`steptime.measured`: the GPU's kernel profile covers the step) or
    # "fitted" (`steptime.model`), with why the measured kernels do not apply
    model: str = "fitted"
    model_note: str = ""
    constants: dict = field(default_factory=dict)
    # where the model is carried past the iterations it was fitted on (`measured.caveat`), what it may miss
    caveat: str = ""

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.world_size

    def as_dict(self) -> dict:
        return {"gpu": self.gpu, "flops_model": self.flops_model, "flops_hardware": self.flops_hardware,
                "time_s": self.time_s, "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu,
                "comm_bytes": dict(self.comm_bytes), "seconds_by_part": dict(self.seconds_by_part),
                "model": self.model, "model_note": self.model_note, "caveat": self.caveat,
                "constants": dict(self.constants) or _constants_of(self.gpu).as_dict()}


_FLOPS: dict = {}  # what one micro-batch's FLOPs depend on -> exact FLOPs (the sweep times thousands of alike)


def _parts_flops(scn, parts_key, parts, hardware: bool) -> tuple[Fraction, Fraction]:
    """The `megatron` convention's FLOPs of one micro-batch through `parts` (global sizes, forward and backward,
    with `hardware` the recomputed forward again), exact, and of those the GEMMs an FP8/FP4 recipe runs in low
    precision (`symmem.precision.saved.eligible`: every linear but the router and the output head); cached on the
    model, its dataflow convention, the recomputation, the sizes as allocated, b, s and whether a recipe applies."""
    from symmem.accounting.analysis import values
    from symmem.accounting.evaluate import evaluate
    from symmem.flops import op_flops
    from symmem.precision.saved import eligible

    low_precision = scn.precision.low_precision is not None
    key = (scn.model, scn.convention, scn.policy if hardware else None, scn.size_key, scn.b, scn.s, parts_key,
           hardware, low_precision)
    if key not in _FLOPS:
        vals = values(scn)
        total, low = Fraction(0), Fraction(0)
        for part, op, _fwd, op_total in op_flops(scn, parts, hardware, "megatron"):
            value = part.count * evaluate(sympy.sympify(op_total), vals)
            total += value
            if low_precision and eligible(op):
                low += value
        if len(_FLOPS) > 4096:
            _FLOPS.clear()
        _FLOPS[key] = (total, low)
    return _FLOPS[key]


def _stage_flops(scn, stage, hardware: bool) -> tuple[float, float]:
    from symmem.model import stage_parts

    parts = stage_parts(scn.model, stage, scn.convention)
    total, low = _parts_flops(scn, ("stage", stage), parts, hardware)
    n = scn.parallel.tp * scn.parallel.cp
    return float(total) / n, float(low) / n


def model_flops_value(scn, hardware: bool) -> int:
    """`symmem.flops.model_flops` under the `megatron` convention at the scenario's b, s and sizes: an integer."""
    from symmem.model import model_parts

    parts = model_parts(scn.model, scn.convention, with_mtp=scn.mtp)
    value = _parts_flops(scn, ("model", scn.mtp), parts, hardware)[0]
    if value.denominator != 1:
        raise AssertionError("a fractional FLOP count")  # a bug of the rules, never input
    return int(value)


_COSTS: dict = {}  # what a stage's per-micro-batch costs depend on -> StageCosts of every stage


def _stage_costs(scn) -> dict:
    from symmem.steptime.costs import stage_costs

    # the schedule too: an interleaved pipeline sends once per chunk (`comm.pipeline_bytes`)
    key = (scn.activation_key, scn.size_key, scn.b, scn.s, scn.stages, scn.precision.low_precision is not None,
           scn.schedule)
    return bounded(_COSTS, key, 512, lambda: {st: stage_costs(scn, st) for st in scn.stages})


def stage_features(c, lp, sms: int, ceil=math.ceil) -> StepFeatures:
    """One micro-batch slot of a stage as the model reads it (`c` its `costs.StageCosts`, `lp` the precision recipe's
    low-precision GEMMs or None), without once-only costs. `c`'s figures may be arrays, with `ceil` numpy's: the
    sweep's time tables (`sweep.timetable`) read a whole (s, b) grid at once."""
    from symmem.steptime.costs import tiled_flops

    flops, low = tiled_flops(c.gemms, sms, ceil)
    if lp is not None:
        low = low * lp.low_passes[0] / lp.low_passes[1]  # e.g. torchao's rowwise_with_gw_hp: wgrad in BF16
    return StepFeatures(flops, low, lp.gemm if lp is not None else "bf16", c.gemm_bytes, c.attention_flops,
                        c.memory_bytes, tuple((a, v[0], v[1], v[2]) for a, v in sorted(c.comm.items())),
                        c.cp_ring_bytes, 1.0, 0.0, 0, False, 0.0, c.kernels)


def once_costs(scn) -> tuple[float, int, bool, float]:
    """(bytes, calls, crosses nodes) of the data-parallel traffic and the optimizer step's bytes of the stage with
    the most of both (the first of equals): the iteration's once-only costs."""
    from symmem.steptime.costs import dp_cost, optimizer_bytes

    per_stage = [(*dp_cost(scn, st), optimizer_bytes(scn, st)) for st in scn.stages]
    return max(per_stage, key=lambda x: x[0] + x[3])



def features(scn, g: GPU | None = None, constants: Constants | None = None, per_stage=None) -> StepFeatures:
    """The model's reading of `scn` on `g` (B200 by default): M slots of the slowest stage (under `constants`,
    CONSTANTS by default), the bubble's slots at the other stages' mean, and the iteration's once-only costs (the
    data-parallel traffic and the optimizer step of the stage with the most). `per_stage` reads one stage's
    `costs.StageCosts` (default `stage_features`; `kernel_times.kernel_features` passes the kernel profile's)."""
    import dataclasses

    g = g or gpu("B200")
    k = constants or CONSTANTS
    read = per_stage or (lambda c: stage_features(c, scn.precision.low_precision, g.sms))
    per_stage = [read(c) for c in _stage_costs(scn).values()]
    slot = [seconds(f, g, k) for f in per_stage]
    i = max(range(len(per_stage)), key=slot.__getitem__)
    dp, calls, net, opt = once_costs(scn)
    bubble = bubble_slots(scn.schedule, scn.parallel.pp)
    others = [f for j, f in enumerate(per_stage) if j != i] or [per_stage[i]]
    mean = _mean(others, bubble) if bubble else None
    return dataclasses.replace(per_stage[i], slots=float(scn.m), dp_bytes=dp, dp_calls=calls, dp_network=net,
                               optimizer_bytes=opt, bubble=mean, dp_floor=fsdp_floor(scn, scn.stages[i]),
                               dp_overlap=megatron_overlaps(scn, dp) if dp else None)


def megatron_overlaps(scn, dp_most: float) -> tuple | None:
    """Under --overlap-grad-reduce, each stage's (its DP bytes over `dp_most`'s, the stage's index, then
    `megatron_overlap`'s four shares), for `model._megatron_dp`; None without it."""
    from symmem.steptime.costs import dp_cost

    if not scn.ddp.overlap_grad_reduce or int(scn.zero) > 2:
        return None
    out = []
    for st in scn.stages:
        nb = dp_cost(scn, st)[0]
        shares = megatron_overlap(scn, st) if nb else None
        if shares is not None:
            out.append((nb / dp_most, st.index, *shares))
    return tuple(out) or None


def megatron_overlap(scn, stage) -> tuple[float, float, float, float | None] | None:
    """What of `stage`'s data-parallel traffic Megatron's overlap flags run beside compute (`model._megatron_dp`),
    as (the gradient reduction's share of the bytes, the share of it nothing hides, the parameter gather's share,
    the share of it nothing hides, None without --overlap-param-gather); None without --overlap-grad-reduce.

    megatron-core 0.16.1: with overlap_grad_reduce each bucket's reduce-scatter (all-reduce without the distributed
    optimizer) is issued by the backward hook of the last micro-batch once every gradient of the bucket is ready
    (distributed/param_and_grad_buffer.py:530-561, `register_grad_ready`), on the communication stream, beside the
    rest of that backward; the bucket filled last, the one holding the first parameters registered (the buffer is
    laid out in reverse, :711), is reduced after the backward ends. With overlap_param_gather the optimizer step
    leaves the parameters' all-gather to the next forward: each bucket's forward pre-hook waits for its own gather
    and dispatches the next bucket's (distributed_data_parallel.py:406-416, param_and_grad_buffer.py:302-330
    `finish_param_sync`; Megatron-LM turns align_param_gather off outside the interleaved schedule,
    megatron/training/arguments.py:1013), so all but the first bucket's gather (the same, embedding-side bucket)
    run beside the first micro-batch's forward; without it the gather follows the step (distrib_optimizer.py
    `step_with_ready_grads`). Only the first stage is bucketed
    (distributed_data_parallel.py:94-100): elsewhere the one bucket is reduced after the stage's backward (share
    1), which under 1F1B ends before the first stage's (`model._megatron_dp`)."""
    from symmem.profiles import ddp_layouts

    ddp, z = scn.ddp, int(scn.zero)
    if not ddp.overlap_grad_reduce or z > 2:
        return None
    lays = [lay for group, lay in ddp_layouts(scn, stage) if group > 1]
    total = sum(lay.numel for lay in lays)
    if not total:
        return None
    last = sum(lay.buckets[-1][1] - lay.buckets[-1][0] for lay in lays) / total
    p = scn.precision
    if z == 0:  # one all-reduce of the gradients
        return (1.0, last, 0.0, None)
    reduce = p.grad_bytes / (p.grad_bytes + p.weight_bytes)  # `comm.dp_bytes`: params x (grad + weight) bytes
    return (reduce, last, 1.0 - reduce, last if ddp.overlap_param_gather else None)

def fsdp_floor(scn, stage) -> float:
    """The share of `stage`'s parameters in the FSDP unit whose traffic nothing hides (`model._dp_exposed`): the
    unit that holds the embedding, gathered first in the forward and reduced last in the backward (9dec370: the
    root, `fully_shard(model)`, with the final norm and the output; 0.3.0: the embedding alone,
    torchtitan/distributed/fsdp.py:185-190); on a stage without it, its first transformer block. 0 under a profile
    without FSDP2's prefetching (`Profile.dp_prefetch`) or where the traffic is not FSDP's (ZeRO-3)."""
    from symmem.accounting.analysis import _stage_counts
    from symmem.model import stage_parts

    first = scn.profile.dp_prefetch
    if not first or int(scn.zero) != 3:
        return 0.0
    parts = stage_parts(scn.model, stage, scn.convention)

    def params(ps) -> int:
        return sum(dict(_stage_counts(scn.size_key, scn.parallel, tuple(ps), False)[0]).values())

    total = params(parts)
    layers = [p for p in parts if p.is_layers]
    if stage.embedding:
        unit = [p for p in parts if not p.is_layers] if first == "root" else [p for p in parts if p.kind == "embedding"]
        return params(unit) / total
    blocks = sum(p.count for p in layers)
    return params(layers) / blocks / total if blocks else 1.0


def _mean(fs: list[StepFeatures], slots: float) -> StepFeatures:
    """The stages' mean slot, taken `slots` times, with no once-only costs."""
    n = len(fs)
    comm: dict = {}
    for f in fs:
        for a, nb, calls, net in f.comm:
            e = comm.setdefault(a, [0.0, 0.0, net])
            e[0] += nb / n
            e[1] += calls / n
    avg = {name: sum(getattr(f, name) for f in fs) / n for name in
           ("gemm_flops", "gemm_low_flops", "gemm_bytes", "attention_flops", "memory_bytes", "cp_ring_bytes",
            "kernels")}
    return StepFeatures(avg["gemm_flops"], avg["gemm_low_flops"], fs[0].low_format, avg["gemm_bytes"],
                        avg["attention_flops"], avg["memory_bytes"],
                        tuple((a, v[0], v[1], v[2]) for a, v in sorted(comm.items())), avg["cp_ring_bytes"], slots,
                        0.0, 0, False, 0.0, avg["kernels"])


def check_gpu(scn, g: GPU) -> None:
    """A recipe's formats need a GPU generation (CUDA compute capability): one line when `g` lacks it."""
    lp = scn.precision.low_precision
    if lp is not None and g.compute_capability < lp.min_compute_capability:
        need = ".".join(map(str, lp.min_compute_capability))
        have = ".".join(map(str, g.compute_capability))
        raise SymmemError(f"gpu = {g.name}: compute capability {have}; precision {scn.precision.name} needs {need} "
                          "or higher (TransformerEngine's support checks)")


def step_time(scn, gpu_name: str | None = None) -> StepTime:
    """The estimated iteration of the scenario's job on `gpu_name` (or the scenario's GPU)."""
    name = gpu_name or scn.gpu_name
    if name is None:
        raise SymmemError("gpu: the step time needs a GPU by name (--gpu H100, H800, H200, B200, A100)")
    g = gpu(name)
    check_gpu(scn, g)
    f = features(scn, g)
    from symmem.steptime import measured
    from symmem.steptime.model import DEVICE_CONSTANTS

    # a measured profile (`--gpu FILE`) times no traffic over a link it did not measure, whichever model times the
    # step (without collectives it has links of infinite speed, `hardware_profile.register`)
    _check_links(scn, f, g)
    why = measured.applies(scn, g)
    if why is None:  # the GPU's measured kernels cover the step (`steptime.measured`)
        km = measured.KERNEL_CONSTANTS[g.name]
        parts = measured.breakdown(measured.iteration(scn, g), km)
        model, constants = "measured kernels", km.as_dict()
    else:
        k = _constants_of(g.name)  # a measured profile's own (`--gpu FILE`), else the fitted ones
        parts = breakdown(f, g, k)
        model, constants = "fitted", k.as_dict()
    t = sum(parts.values())
    par = scn.parallel
    fm, tokens_per_s, mfu = rates(scn, g, t)
    fh = model_flops_value(scn, True) * scn.m * par.dp
    comm = {a: int(f.comm_bytes(a) * scn.m) for a in ("tp", "cp", "ep", "pp")}
    comm["cp"] += int(f.cp_ring_bytes * scn.m)
    comm["tp"] += int(f.comm_bytes("etp") * scn.m)
    comm["dp"] = int(f.dp_bytes)
    return StepTime(g.name, fm, fh, t, tokens_per_s, mfu, comm, parts, par.world_size, model,
                    "" if why is None else why, constants,
                    # (the caveat is the fitted constants'; a calibrated device's are measured, none fitted)
                    measured.caveat(scn) if why is None and g.name not in DEVICE_CONSTANTS else "")


class UnmeasuredLink(SymmemError):
    """A measured profile (`--gpu FILE`) lacks the link this step's traffic takes: the sweep leaves such a
    configuration untimed, `symmem memory` refuses it."""


def _constants_of(gpu_key: str) -> Constants:
    """The step-time constants of a GPU: its measured profile's (`--gpu FILE`), else the fitted `CONSTANTS`."""
    from symmem.steptime.model import DEVICE_CONSTANTS

    return DEVICE_CONSTANTS.get(gpu_key, CONSTANTS)


def _check_links(scn, f, g) -> None:
    """A measured profile (`--gpu FILE`) times no traffic over a link it did not measure: none at all when it
    measured no collectives, none across machines when it measured one, none in a group larger than the processes
    it measured among (`UnmeasuredLink`, one line)."""
    from symmem.steptime.costs import GPUS_PER_NODE, group_size

    stages = [f] + ([f.bubble] if f.bubble is not None else [])
    sent = {a for s in stages for a, nb, _c, _n in s.comm if nb}
    if f.dp_bytes:
        sent.add("dp")
    if any(s.cp_ring_bytes for s in stages):
        sent.add("cp")
    if math.isinf(g.nvlink) and sent:
        raise UnmeasuredLink(f"gpu {g.name}: its profile measured no collectives (one device), and this step "
                             "communicates; measure on several devices (symmem calibrate --devices N) or use a "
                             "GPU by name")
    if math.isinf(g.network) and _spans_nodes(f):
        raise UnmeasuredLink(f"gpu {g.name}: its profile measured the link within one machine only, and this step "
                             f"has groups spanning machines of {GPUS_PER_NODE} GPUs; use a GPU by name, or fewer "
                             "GPUs a group")
    if g.measured_group is not None:
        for axis in sorted(sent):
            par = scn.parallel  # (the data-parallel traffic: the dense and the expert buffers' groups)
            moe = scn.model.family.routed_experts is not None
            n = max(par.dense_shard, par.expert_dp if moe else 0) if axis == "dp" else group_size(scn, axis)
            if n > g.measured_group:
                raise UnmeasuredLink(f"gpu {g.name}: its profile measured collectives among {g.measured_group} "
                                     f"processes, and this step's {axis} groups have {n} GPUs; measure with "
                                     f"symmem calibrate --devices {n} or use a GPU by name")


def _spans_nodes(f) -> bool:
    """Whether any of the step's traffic crosses machines (a group spanning nodes: `costs.span`)."""
    stages = [f] + ([f.bubble] if f.bubble is not None else [])
    return (bool(f.dp_bytes) and f.dp_network) or any(net and nb for s in stages for _a, nb, _c, net in s.comm)


def rates(scn, g: GPU, t: float) -> tuple[int, float, float]:
    """(the iteration's model FLOPs by Megatron's count, tokens/s, MFU) of `scn` at `t` seconds an iteration on
    `g`: M·DP micro-batches of b·s tokens."""
    par = scn.parallel
    replicas = scn.m * par.dp
    fm = model_flops_value(scn, False) * replicas
    return fm, scn.b * scn.s * replicas / t, fm / (par.world_size * g.bf16 * t)
