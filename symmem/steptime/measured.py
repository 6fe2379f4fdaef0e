"""The step-time model from a GPU's measured kernels (its kernel profile, `steptime.kernels`): what `step_time`
answers on a GPU that has one (B200), for the steps the profile's tables cover (`applies`).

For the busiest pipeline stage, one micro-batch's slot is

    GEMMs       each GEMM's three passes at the times measured for its shape   x GEMM_SLOWDOWN
  + attention   the fused attention forward and backward at the measured times x ATTENTION_SLOWDOWN
  + memory      bytes of the norms, RoPE, SwiGLU, adds, permutes, cross-entropy / (HBM x the profile's default
                fraction; its own fractions for the permutes and the cross-entropy are not read)
  + collectives each at NCCL's time measured on the GPU's node for its kind and group size (the profile's
                `collectives`, SimuMax's networks.high_intra_node): bytes / (efficiency x link) + latency per ring
                step + a fixed latency per call (all-to-all's by group size); pipeline sends as measured p2p
  + kernels     x LAUNCH (each kernel's launch and its gap on the stream; counted as `costs.part_costs` counts
                them: a grouped experts' GEMM one launch per local expert and pass)

and the iteration is M slots of the busiest stage, the schedule's bubble at the other stages' mean, the
data-parallel reduce-scatter and all-gather (the same measured collectives; the dense buffer over DP x CP, the
experts' over their data-parallel group), the optimizer step's bytes at the profile's bandwidth, and FIXED. As in
the fitted model, an interleaved schedule's sends are charged two latencies a micro-batch (its bytes are all
counted). Nothing here is fitted on iteration times but the four named constants: the two
slowdowns (at least 1: a kernel in an iteration runs as fast as alone at most), the launch cost and the fixed
seconds, fitted by non-negative least squares on the relative error of the measured Megatron-LM iterations
(`fit`; derivations/measured_step_times.py reports them held out by kind of run, beside the fitted model's).

What the profile's tables do not cover falls back to the fitted model (`steptime.model`), and `applies` says why:
FP8/FP4 GEMMs (the tables are BF16), groups spanning nodes (the collectives were measured within one node: in
effect any step on more than 8 GPUs), the P2P CP ring (its overlap with the attention is the fitted model's),
FSDP2's prefetching and Megatron's overlap flags (what runs beside the compute is the fitted model's), ZeRO-3 (its
gathers per layer and micro-batch) and DualPipe (a GPU holding two stages)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache

from symmem._cache import bounded
from symmem.errors import SymmemError


@dataclass(frozen=True)
class KernelConstants:
    """The four constants the measured kernels leave (each fitted: `fit`; values in `KERNEL_CONSTANTS`)."""

    gemm_slowdown: float  # a GEMM in the iteration over the same GEMM measured alone (at least 1)
    attention_slowdown: float  # the fused attention in the iteration over the same kernel measured alone (at least 1)
    launch_s: float  # seconds per kernel launched
    fixed_s: float  # seconds per iteration the model leaves out (the loss's reductions, logging, the schedule's own)

    def as_dict(self) -> dict:
        return asdict(self)


# fitted by `fit` on the 22 measured iterations of symmem/data/megatron_b200.json (a test checks these are its
# result to the digits shown; derivations/measured_step_times.py shows each kind of run held out)
KERNEL_CONSTANTS = {"B200": KernelConstants(gemm_slowdown=1.0235, attention_slowdown=1.4887, launch_s=8.90e-06,
                                            fixed_s=0.01876)}

_KIND = {"all-gather": "all_gather", "reduce-scatter": "reduce_scatter", "all-reduce": "all_reduce",
         "all-to-all": "all2all"}
GIB = 2**30


def collective_seconds(p, kind: str, nbytes: float, n: int) -> float:
    """One collective of `kind` moving `nbytes` per GPU (its ring volume: (n-1)/n of the buffer, twice for an
    all-reduce) among `n` GPUs of one node, at NCCL's time measured on the profile's GPU: SimuMax's formula
    (simumax/core/config.py `compute_net_op_time`): bytes / (efficiency x link GiB/s) + latency per ring step
    (2(n - 1) steps for an all-reduce, n - 1 otherwise) + the call's fixed latency."""
    return collective_calls_seconds(p, kind, nbytes, 1, n) if nbytes > 0 else 0.0


def p2p_seconds(p, nbytes: float) -> float:
    t = p.collectives["p2p"]
    return nbytes / (t["efficient_factor"] * p.link_gib * GIB) + t["latency_us"] * 1e-6


def scenario_reason(scn, gpu_name: str, zero: bool = True) -> str | None:
    """Why `scn`'s steps on `gpu_name` are not timed by the measured kernels whatever the arrangement, or None
    (then `applies` decides by the arrangement); with `zero` False, leaving out the ZeRO stage's test (the page's
    reader sets ZeRO, and its script tests it)."""
    from symmem.steptime.kernels import profile

    if gpu_name not in KERNEL_CONSTANTS or profile(gpu_name) is None:
        return f"{gpu_name} has no kernel profile"
    if scn.precision.low_precision is not None:
        return f"precision {scn.precision.name}: the profile's GEMMs are BF16"
    if scn.profile.dp_prefetch:
        return f"profile {scn.profile.name}: FSDP2's overlapped traffic is the fitted model's"
    if scn.ddp.overlap_grad_reduce:
        return "--overlap-grad-reduce: the overlapped traffic is the fitted model's"
    if zero and int(scn.zero) >= 3:
        return "ZeRO-3: the parameters gathered per layer and micro-batch are the fitted model's"
    if len(scn.schedule.held_stages(0, scn.parallel.pp)) > 1:
        return f"schedule {scn.schedule.label}: a GPU holding two stages is the fitted model's"
    if "n_h" not in dict(scn.model.values):
        return f"{scn.model.name}: no attention heads the profile can read"
    return None


@cache
def fitted_sequences() -> tuple[int, int]:
    """The shortest and the longest sequence of the measured iterations the four constants are fitted on
    (symmem/data/megatron_b200.json)."""
    import json
    from importlib import resources

    runs = json.loads(resources.files("symmem.data").joinpath("megatron_b200.json").read_text())["runs"]
    lengths = [int(r["batch"]["seq_length"]) for r in runs]
    return min(lengths), max(lengths)


def caveat(scn) -> str:
    """What a step beyond the fitted iterations' sequences may miss, or "" (docs/step_time.md: at 131,072 tokens
    the attention's slowdown fitted at 4,096-32,768 is carried over, and SimuMax's 131,072-token kernel runs slower
    per FLOP than its 32,768-token one, so such a step may come out slow)."""
    low, high = fitted_sequences()
    if scn.s <= high:
        return ""
    return caveat_text(scn.s, low, high)


def caveat_text(s: int, low: int, high: int) -> str:
    """`caveat`'s sentence (the page's script writes the same, `kernelCaveat`)."""
    return (f"s = {s:,} is longer than any iteration the constants were fitted on ({low:,} to {high:,} tokens): "
            "the attention's slowdown over its measured kernel is carried over, which may make the step slow "
            "(docs/step_time.md)")


# the groups whose spanning nodes takes a step out of the profile's collectives (measured within one node)
AXES = ("tp", "etp", "cp", "ep", "dp", "pp")


def applies(scn, g) -> str | None:
    """None when `scn`'s step on `g` is timed by the measured kernels; else why not (then the fitted model times
    it). The page's script makes the same test (symmem/render/templates/page.html.j2 `measuredKernels`)."""
    from symmem.steptime.costs import span

    why = scenario_reason(scn, g.name)
    if why is not None:
        return why
    par = scn.parallel
    if par.cp > 1 and par.cp_comm_type != "a2a":
        return f"CP {par.cp} over the P2P ring: its overlap with the attention is the fitted model's"
    if any(span(scn, axis) for axis in AXES):
        return "a group spans nodes: the profile's collectives were measured within one node"
    return None


_PARTS: dict = {}


def _part_terms(scn, part, gpu_name: str) -> tuple[dict, float]:
    """One copy of `part`, one micro-batch, one GPU: seconds by component at the profile's times (no constant
    applied) and the kernels launched; cached on what `costs.part_costs` is, the parallel layout (a collective's
    group size) and the GPU: its kernel profile itself (a calibrated device registered again under its key is
    another profile) and its HBM bandwidth."""
    from symmem.steptime.costs import fused_tags, part_costs
    from symmem.steptime.kernels import profile

    par = scn.parallel
    key = (part.flow, part.kind, part.is_layers, scn.model, scn.convention, scn.rules, scn.policy, scn.routing,
           scn.act_bytes, par, scn.size_key, scn.b, scn.s, fused_tags(scn), gpu_name, profile(gpu_name),
           _hbm(gpu_name))
    return bounded(_PARTS, key, 8192, lambda: _make_part_terms(scn, part, part_costs(scn, part), gpu_name))


def _make_part_terms(scn, part, c, g_name: str) -> tuple[dict, float]:
    from symmem.steptime.costs import group_size
    from symmem.steptime.kernels import attention_seconds, gemm_seconds, profile

    p = profile(g_name)
    out = {"gemm": sum(n * gemm_seconds(p, m, k, nn, e, again) for m, k, nn, e, n, again, _low in c.gemms),
           "attention": sum(n * attention_seconds(p, *shape, again) for *shape, n, again in c.attentions),
           "memory_bound": c.memory_bytes / (_hbm(g_name) * p.memory_bound)}
    for (axis, kind), (nb, calls) in _part_collectives(scn, part).items():
        name = f"comm_{axis}"
        out[name] = out.get(name, 0.0) + collective_calls_seconds(p, kind, nb, calls, group_size(scn, axis))
    return out, c.kernels


def _part_collectives(scn, part) -> dict[tuple[str, str], list[float]]:
    """One copy of `part`'s collectives, one micro-batch: {(axis, kind): [bytes summed over its calls, calls]}, the
    calls that move any bytes (what `collective_calls_seconds` times; a call of no bytes costs nothing)."""
    from symmem.accounting.activations import runs_again
    from symmem.accounting.analysis import _tokens_per_expert, values
    from symmem.accounting.evaluate import evaluate
    from symmem.comm import flow_collectives
    from symmem.symbols import E_tok

    par = scn.parallel
    axes = par.axis_sizes()
    vals = dict(values(scn))
    vals[E_tok] = evaluate(_tokens_per_expert(scn.activation_key, axes), vals)

    def again(op) -> bool:
        return part.is_layers and runs_again(op, part.flow, scn.rules, scn.policy)

    out: dict[tuple[str, str], list[float]] = {}
    for coll in flow_collectives(part.flow, axes, scn.act_bytes, again, par.cp_comm_type == "a2a"):
        if coll.kind not in _KIND:  # the P2P CP ring: `applies` keeps such steps out
            raise SymmemError(f"cp_comm_type = {par.cp_comm_type!r}: the CP ring is not timed by the measured "
                              "kernels (steptime.measured.applies)")
        nb = float(evaluate(coll.nbytes, vals))
        if nb > 0:
            entry = out.setdefault((coll.axis, coll.kind), [0.0, 0])
            entry[0] += nb
            entry[1] += 1
    return out


def stage_collectives(scn, stage) -> dict[tuple[str, str], list[float]]:
    """`_part_collectives` of one GPU of `stage`, each part times its copies (the page's template reads them,
    render.page_steptime)."""
    from symmem.model import stage_parts

    out: dict[tuple[str, str], list[float]] = {}
    for part in stage_parts(scn.model, stage, scn.convention):
        for key, (nb, calls) in _part_collectives(scn, part).items():
            entry = out.setdefault(key, [0.0, 0])
            entry[0] += part.count * nb
            entry[1] += part.count * calls
    return out


def collective_calls_seconds(p, kind: str, nbytes: float, calls: int, n: int) -> float:
    """`calls` collectives of `kind` among `n` GPUs moving `nbytes` in all: `collective_seconds` summed over the
    calls (its time is affine in the bytes: their sum over the link, each call's latencies)."""
    if n <= 1 or calls <= 0:
        return 0.0
    t = p.collectives[_KIND[kind]]
    steps = 2 * (n - 1) if kind == "all-reduce" else n - 1
    by_n = t.get("fixed_latency_us_by_comm_num") or {}
    fixed = by_n.get(str(n), t.get("fixed_latency_us", 0.0))
    return nbytes / (t["efficient_factor"] * p.link_gib * GIB) + calls * (steps * t["latency_us"] + fixed) * 1e-6


def _hbm(name: str) -> float:
    from symmem.hardware import gpu

    return gpu(name).hbm


def stage_terms(scn, stage, g) -> tuple[dict, float]:
    """One micro-batch through one GPU of `stage`: seconds by component at the profile's times and the kernels
    launched (its parts', each times its copies, and the pipeline's sends as measured p2p)."""
    from symmem.model import stage_parts
    from symmem.steptime.costs import stage_costs
    from symmem.steptime.kernels import profile

    out: dict = {}
    kernels = 0.0
    for part in stage_parts(scn.model, stage, scn.convention):
        terms, k = _part_terms(scn, part, g.name)
        for name, v in terms.items():
            out[name] = out.get(name, 0.0) + part.count * v
        kernels += part.count * k
    pp = stage_costs(scn, stage).comm.get("pp") if scn.parallel.pp > 1 else None
    if pp is not None and pp[1]:
        nb, sends, _net = pp
        out["comm_pp"] = sends * p2p_seconds(profile(g.name), nb / sends)
    return out, kernels


# the components the two slowdowns multiply; every other is taken as measured
SCALED = {"gemm": "gemm_slowdown", "attention": "attention_slowdown"}


def _slot(terms: dict, kernels: float, k: KernelConstants) -> dict:
    out = {name: v * getattr(k, SCALED[name]) if name in SCALED else v for name, v in terms.items()}
    out["launches"] = kernels * k.launch_s
    return out


@dataclass(frozen=True)
class Iteration:
    """One iteration's reading: the busiest stage's slot (`terms`, `kernels`), M, the bubble's slots and the other
    stages' mean slot, and the once-only seconds (data-parallel traffic, optimizer step)."""

    terms: dict
    kernels: float
    m: int
    bubble: float
    others: dict
    others_kernels: float
    comm_dp: float
    optimizer: float


def iteration(scn, g) -> Iteration:
    from symmem.comm import dp_groups
    from symmem.steptime.costs import dp_cost, optimizer_bytes
    from symmem.steptime.kernels import profile
    from symmem.steptime.model import bubble_slots

    per_stage = [stage_terms(scn, st, g) for st in scn.stages]
    p = profile(g.name)
    # the busiest stage at the profile's times (the constants' round figures: the choice must not depend on a fit)
    neutral = KernelConstants(1.0, 1.0, 1e-05, 0.0)
    i = max(range(len(per_stage)), key=lambda j: sum(_slot(*per_stage[j], neutral).values()))
    others = [st for j, st in enumerate(per_stage) if j != i] or [per_stage[i]]
    mean: dict = {}
    for terms, _k in others:
        for name, v in terms.items():
            mean[name] = mean.get(name, 0.0) + v / len(others)
    # the data-parallel traffic of the stage with the most (with the optimizer step's bytes), as `once_costs`;
    # each buffer in its own group (the dense parameters over DP x CP, the experts' over the expert DP group)
    stages = [(st, dp_cost(scn, st)[0], optimizer_bytes(scn, st)) for st in scn.stages]
    st, _nb, opt = max(stages, key=lambda x: x[1] + x[2])
    pr = scn.precision
    dp = 0.0
    for n, nb in dp_groups(scn, st):
        if int(scn.zero) == 0:  # one all-reduce of the gradients
            dp += collective_seconds(p, "all-reduce", float(nb), n)
        else:  # the distributed optimizer: a reduce-scatter of the gradients, an all-gather of the parameters
            reduce = pr.grad_bytes / (pr.grad_bytes + pr.weight_bytes)
            dp += (collective_seconds(p, "reduce-scatter", float(nb) * reduce, n)
                   + collective_seconds(p, "all-gather", float(nb) * (1 - reduce), n))
    return Iteration(per_stage[i][0], per_stage[i][1], scn.m, bubble_slots(scn.schedule, scn.parallel.pp), mean,
                     sum(k for _t, k in others) / len(others), dp, opt / (g.hbm * p.memory_bound))


def breakdown(it: Iteration, k: KernelConstants) -> dict:
    """Seconds of the iteration by component (their sum is the iteration)."""
    out = {name: it.m * v for name, v in _slot(it.terms, it.kernels, k).items()}
    if it.bubble:
        out["bubble"] = it.bubble * sum(_slot(it.others, it.others_kernels, k).values())
    out.update({"comm_dp": it.comm_dp, "optimizer": it.optimizer, "fixed": k.fixed_s})
    return out


def seconds(it: Iteration, k: KernelConstants) -> float:
    return sum(breakdown(it, k).values())


def _row(it: Iteration) -> tuple[list[float], float]:
    """The iteration as `row · (gemm_slowdown, attention_slowdown, launch_s, fixed_s) + known`."""
    n, b = it.m, it.bubble
    gemm = n * it.terms.get("gemm", 0.0) + b * it.others.get("gemm", 0.0)
    att = n * it.terms.get("attention", 0.0) + b * it.others.get("attention", 0.0)
    kernels = n * it.kernels + b * it.others_kernels
    known = sum(n * v for name, v in it.terms.items() if name not in SCALED)
    known += sum(b * v for name, v in it.others.items() if name not in SCALED)
    return [gemm, att, kernels, 1.0], known + it.comm_dp + it.optimizer


def fit(rows) -> KernelConstants:
    """The constants minimising the relative errors of `rows` ((Iteration, measured seconds)), the slowdowns at
    least 1, the launch and fixed seconds at least 0 (non-negative least squares, numpy)."""
    import numpy as np

    from symmem.steptime.model import _nnls

    a, y = [], []
    for it, measured in rows:
        row, known = _row(it)
        known += row[0] + row[1]  # slowdown = 1 + z, z >= 0
        a.append([v / measured for v in row])
        y.append((measured - known) / measured)
    x = _nnls(np.array(a), np.array(y))
    return KernelConstants(float(1 + x[0]), float(1 + x[1]), float(x[2]), float(x[3]))


def leave_out(rows_by_run: dict, held: set) -> tuple[KernelConstants, dict[str, list[float]]]:
    """The constants fitted without the runs in `held`, and the held runs' rows' predicted seconds."""
    k = fit([r for name, rs in rows_by_run.items() if name not in held for r in rs])
    return k, {run: [seconds(it, k) for it, _m in rows_by_run[run]] for run in held}

