"""Seconds from costs: the step-time model's form and its five named constants.

For the busiest pipeline stage, one micro-batch's slot is

    GEMMs      Σ 2mkn / (peak · GEMM_EFFICIENCY)  +  Σ 2(mk + kn + mn) / HBM          (each GEMM's own shape)
  + attention  causal FLOPs / (peak · ATTENTION_EFFICIENCY)
  + memory     bytes of the norms, RoPE, SwiGLU, adds, permutes, cross-entropy / HBM
  + collectives, each group:  bytes / (link · LINK_EFFICIENCY)  +  calls · LATENCY
  + the CP ring's time beyond the attention it overlaps (TE's P2P ring sends step i+1's K/V while step i computes)

where peak is the GPU's dense tensor-core rate (BF16, or FP8/FP4 for the GEMMs a recipe quantizes), HBM its memory
bandwidth and link NVLink within a node or the GPU's network adapter when the group spans nodes (both per
direction, from the vendors' datasheets, `symmem.hardware`). The GEMM term is a roofline read as a sum: a large
GEMM is compute-bound and runs at GEMM_EFFICIENCY of the peak, a thin one (few tokens per expert, a large TP
degree) is slowed by the bytes it must move: the efficiency is a function of the GEMM's shape, not a figure per
model kind. A collective's time is latency plus bytes over bandwidth, so a small message reaches a smaller
fraction of the link than a large one. Then

    iteration = (M + bubble) · slot  +  data-parallel traffic  +  optimizer step bytes / HBM  +  FIXED

(the measured runs overlap neither the TP collectives, `--disable-tp-comm-overlap-*`, nor the gradient reduction
and parameter gather, `overlap_grad_reduce`/`overlap_param_gather` off; the pipeline's sends are synchronous,
1F1B without `--overlap-p2p-comm`). The five constants are fitted (`fit`) by non-negative least squares on the
relative error of measured iterations; `leave_one_run_out` fits without each run and predicts it, `leave_out`
without a whole kind of run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from symmem.errors import SymmemError


@dataclass(frozen=True)
class Constants:
    """The model's five constants (each fitted: `fit`; values in `symmem.steptime.CONSTANTS`)."""

    gemm_efficiency: float  # fraction of the dense tensor-core peak a large GEMM reaches
    attention_efficiency: float  # fraction of the dense BF16 peak the fused attention reaches (causal FLOPs)
    link_efficiency: float  # fraction of the link's per-direction bandwidth a collective's bytes move at
    latency_s: float  # seconds per collective call (NCCL's launch and ring start-up)
    fixed_s: float  # seconds per iteration the model leaves out (launches, the loss, logging, the schedule's own)

    def as_dict(self) -> dict:
        return asdict(self)


# constants derived from a measured hardware profile (`symmem.hardware_profile.register`), by GPU key: they replace
# the fitted CONSTANTS for that device
DEVICE_CONSTANTS: dict[str, Constants] = {}


@dataclass(frozen=True)
class StepFeatures:
    """What the model reads of a scenario: one micro-batch on one GPU of the busiest stage, and the iteration's
    once-only costs."""

    gemm_flops: float
    gemm_low_flops: float  # of gemm_flops, at the recipe's low-precision rate
    low_format: str  # bf16, fp8, fp4
    gemm_bytes: float
    attention_flops: float
    memory_bytes: float
    comm: tuple  # (group, bytes, calls, crosses nodes) per micro-batch
    cp_ring_bytes: float
    slots: float  # M + the schedule's bubble
    dp_bytes: float
    dp_calls: int
    dp_network: bool
    optimizer_bytes: float
    kernels: float = 0.0
    # FSDP2's prefetching (`Profile.dp_prefetch`): the share of the stage's parameters in the unit whose traffic
    # nothing hides (`steptime.fsdp_floor`), the rest of the data-parallel traffic running beside the compute
    # (`_dp_exposed`); 0: none overlapped (Megatron's runs as measured)
    dp_floor: float = 0.0
    # Megatron's --overlap-grad-reduce / --overlap-param-gather (`steptime.megatron_overlap`): (the gradient
    # reduction's share of the DP bytes, its unhidden share, the parameter gather's share, its unhidden share)
    dp_overlap: tuple | None = None
    # the pipeline's bubble: the other stages' mean slot (its `slots` the schedule's bubble, no once-only costs):
    # 1F1B takes (M - 1) slots of the slowest stage and one of every stage, M·max + (PP - 1)·mean(others)
    bubble: StepFeatures | None = None

    def comm_bytes(self, axis: str) -> float:
        return sum(b for a, b, _c, _n in self.comm if a == axis)


def _any(x) -> bool:
    """Whether a figure (a number, or an array of them: the sweep's time tables) is anywhere nonzero."""
    return bool(x.any()) if hasattr(x, "any") else bool(x)


def _not_below_zero(x):
    return x.clip(min=0.0) if hasattr(x, "clip") else max(0.0, x)


def _link(g, network: bool) -> float:
    return g.network if network else g.nvlink


def _dot(row: list[float], known: float, k: Constants) -> float:
    x = (1 / k.gemm_efficiency, 1 / k.attention_efficiency, 1 / k.link_efficiency, k.latency_s, k.fixed_s)
    return sum(r * v for r, v in zip(row, x, strict=True)) + known


def _terms(f: StepFeatures, g) -> dict[str, tuple[list[float], float]]:
    """Each component of `f.slots` micro-batch slots of `f`'s stage as `(row, known)`: its seconds are
    `row · (1/gemm_eff, 1/attention_eff, 1/link_eff, latency, fixed) + known` (the one form `fit` and `breakdown`
    both read)."""
    gemm = (f.gemm_flops - f.gemm_low_flops) / g.bf16
    if _any(f.gemm_low_flops):
        gemm += f.gemm_low_flops / g.rate(f.low_format)
    n = f.slots
    out = {"gemm": ([n * gemm, 0.0, 0.0, 0.0, 0.0], n * f.gemm_bytes / g.hbm),
           "attention": ([0.0, n * f.attention_flops / g.bf16, 0.0, 0.0, 0.0], 0.0),
           "memory_bound": ([0.0] * 5, n * f.memory_bytes / g.hbm),
           "launches": ([0.0, 0.0, 0.0, n * f.kernels, 0.0], 0.0)}
    for axis, nb, calls, net in f.comm:
        row, known = out.setdefault(f"comm_{axis}", ([0.0] * 5, 0.0))
        row[2] += n * nb / _link(g, net)
        if g.step_latency is None:
            row[3] += n * calls
        else:  # a measured profile's own latency per ring step (`hardware.GPU.step_latency`)
            out[f"comm_{axis}"] = (row, known + n * calls * g.step_latency)
    return out


def _once(f: StepFeatures, g) -> dict[str, tuple[list[float], float]]:
    """The iteration's once-only components, in the same form."""
    fitted = g.step_latency is None  # (else a measured profile's own latency per ring step)
    return {"comm_dp": ([0.0, 0.0, f.dp_bytes / _link(g, f.dp_network), f.dp_calls if fitted else 0.0, 0.0],
                        0.0 if fitted else f.dp_calls * g.step_latency),
            "optimizer": ([0.0] * 5, f.optimizer_bytes / g.hbm),
            "fixed": ([0.0, 0.0, 0.0, 0.0, 1.0], 0.0)}


def coefficients(f: StepFeatures, g) -> tuple[list[float], float]:
    """The iteration's time as `row · (1/gemm_eff, 1/attention_eff, 1/link_eff, latency, fixed) + known`, the CP
    ring's overlap and FSDP2's left out (they make the model nonlinear; no measured run has either)."""
    if f.dp_floor or f.dp_overlap:
        raise SymmemError("step-time fit: a row with overlapped data-parallel traffic is not linear in the constants")
    parts = [*_terms(f, g).values(), *_once(f, g).values()]
    if f.bubble is not None:
        parts += _terms(f.bubble, g).values()
    return [sum(col) for col in zip(*(r for r, _ in parts), strict=True)], sum(kn for _, kn in parts)


def _slot_breakdown(f: StepFeatures, g, k: Constants) -> dict[str, float]:
    out = {name: _dot(row, known, k) for name, (row, known) in _terms(f, g).items()}
    if _any(f.cp_ring_bytes):  # the ring's time beyond the attention it overlaps, per slot
        ring = f.cp_ring_bytes / (_link(g, False) * k.link_efficiency)
        out["comm_cp_ring_exposed"] = f.slots * _not_below_zero(ring - out["attention"] / f.slots)
    return out


# the components of a slot the GPU's compute stream runs (what FSDP2's collectives can run beside)
COMPUTE = ("gemm", "attention", "memory_bound", "launches")


def _dp_exposed(dp: float, compute: float, floor: float) -> float:
    """The seconds of FSDP2's data-parallel traffic (`dp`) the step waits for, beside `compute` seconds on the
    compute stream (torch 2.13 torch/distributed/fsdp/_fully_shard/): each unit's all-gather runs on the all-gather
    stream (_fsdp_param_group.py:89) ahead of the unit's own compute, issued while the unit before computes
    (forward: when the CPU, running ahead, reaches the unit's pre-forward; backward: the previous unit's
    pre-backward prefetches it, `_backward_prefetch`, :795-830); each unit's gradient reduce-scatter runs on the
    reduce-scatter stream (:92) after its backward (`post_backward`, :588) beside the next unit's. What waits: the
    first unit's all-gather (nothing computes before it) and the last unit's reduce-scatter (the root's
    post-backward callback waits for it, _fsdp_state.py:395-430), both the unit that holds the embedding, whose
    share of the stage's parameters is `floor` (`steptime.fsdp_floor`), and whatever traffic exceeds the compute
    it runs beside. Approximations by totals: the floor is that share of all the traffic (its backward all-gather
    counted too, which a unit not resharded after forward does not make), and a unit whose traffic exceeds its own
    compute waits even where the step's totals do not."""
    return max(dp - compute, dp * floor) if floor else dp


# of a slot's compute, the backward's: a GEMM's backward is two GEMMs of its forward's FLOPs (data and weight
# gradients), so two thirds of the GEMMs' time (the attention's backward, 2.5 forwards, and recomputation's extra
# forward are not told apart: a recomputing step's backward is longer, and this under-states what it can hide)
BACKWARD_SHARE = 2 / 3


def _megatron_dp(dp: float, slot_compute: float, overlaps: tuple) -> float:
    """The seconds of Megatron's data-parallel traffic the step waits for under --overlap-grad-reduce (and
    --overlap-param-gather): `dp` the seconds of the stage `steptime.once_costs` chose, `overlaps` each stage's
    (its traffic over that one's, its index, and `steptime.megatron_overlap`'s shares), `slot_compute` the seconds
    of one micro-batch's compute on the slowest stage (1F1B; other schedules are refused).

    * The gradient reduction: on a stage it runs beside the last micro-batch's backward, at least its last bucket's
      share waited for (`_dp_exposed`'s form); stage i's backward ends i backward slots before the first stage's
      (the first stage runs the last backward), and the gradient norm's all-reduce over the pipeline
      (megatron/core/optimizer/clip_grads.py) makes every stage's step wait for the first stage: that much of
      stage i's reduction is hidden too. The step waits for the latest stage.
    * The parameter gather, under --overlap-param-gather (Megatron-LM sets align_param_gather off outside the
      interleaved schedule, megatron/training/arguments.py:1013 at d98e8a6, so each bucket's forward pre-hook
      dispatches the next bucket's gather, distributed_data_parallel.py:406-416): the first stage's beside its
      first forward, at least its first bucket's share; a later stage has one bucket, gathered whole by the
      pre-hook of its first forward, which cannot start before it (its input arrives then): each later stage's
      gather delays the first micro-batch's way through the pipeline, so their sum is waited for. Without the flag
      every stage gathers after the optimizer step, at once: the largest is waited for.

    (Without the overlap flags the model counts the busiest stage's traffic whole, as its constants were fitted on
    the measured runs, none of which overlapped. The traffic of a stage is `dp` scaled by its bytes, latency
    included.)"""
    backward, forward = slot_compute * BACKWARD_SHARE, slot_compute * (1 - BACKWARD_SHARE)
    reduced = max(max(0.0, _dp_exposed(dp * ratio * reduce, backward, reduce_floor) - i * backward)
                  for ratio, i, reduce, reduce_floor, _g, _gf in overlaps)
    gathers = [(i, dp * ratio * gather, gather_floor) for ratio, i, _r, _rf, gather, gather_floor in overlaps]
    if any(floor is None for _i, _g, floor in gathers):  # after the step, every stage at once
        return reduced + max(g for _i, g, _f in gathers)
    return reduced + sum(_dp_exposed(g, forward, floor) if i == 0 else g for i, g, floor in gathers)


def breakdown(f: StepFeatures, g, k: Constants) -> dict[str, float]:
    """Seconds of one iteration by component (their sum is the iteration)."""
    out = _slot_breakdown(f, g, k)
    if f.bubble is not None:
        out["bubble"] = sum(_slot_breakdown(f.bubble, g, k).values())
    out.update({name: _dot(row, known, k) for name, (row, known) in _once(f, g).items()})
    if f.dp_floor:
        out["comm_dp"] = _dp_exposed(out["comm_dp"], sum(out.get(c, 0.0) for c in COMPUTE), f.dp_floor)
    if f.dp_overlap:
        out["comm_dp"] = _megatron_dp(out["comm_dp"], sum(out.get(c, 0.0) for c in COMPUTE) / f.slots,
                                      f.dp_overlap)
    return out


def seconds(f: StepFeatures, g, k: Constants) -> float:
    return sum(breakdown(f, g, k).values())


def slot_seconds(f: StepFeatures, g, k: Constants):
    """Seconds of `f.slots` micro-batch slots of `f`'s stage, without the iteration's once-only costs (a
    StepFeatures of arrays gives an array: the sweep's time tables)."""
    return sum(_slot_breakdown(f, g, k).values())


def once_seconds(f: StepFeatures, g, k: Constants) -> float:
    """Seconds of the iteration's once-only costs of `f` but the fixed constant: its data-parallel traffic and
    optimizer step."""
    return sum(_dot(row, known, k) for name, (row, known) in _once(f, g).items() if name != "fixed")


def _nnls(a, y):
    """Lawson and Hanson's non-negative least squares (numpy; a few unknowns): argmin |a x - y|, x >= 0."""
    import numpy as np

    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    for _ in range(3 * n + 10):
        w = a.T @ (y - a @ x)
        if passive.all() or w[~passive].max(initial=-1.0) <= 1e-12 * max(1.0, abs(w).max()):
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], y, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
    return x


def fit(rows) -> Constants:
    """The constants minimising the relative errors of `rows` ((StepFeatures, GPU, measured seconds)), non-negative
    (numpy). An efficiency whose inverse fits to zero is unbounded: the rows do not determine it (one line)."""
    import numpy as np

    a, y = [], []
    for f, g, measured in rows:
        row, known = coefficients(f, g)
        # each efficiency at most 1 (no rate beyond the datasheet's): 1/e = 1 + z with z >= 0
        known += row[0] + row[1] + row[2]
        a.append([v / measured for v in row])
        y.append((measured - known) / measured)
    x = _nnls(np.array(a), np.array(y))
    x[:3] += 1
    for i, name in enumerate(("gemm_efficiency", "attention_efficiency", "link_efficiency")):
        if x[i] <= 0:
            raise SymmemError(f"step-time fit: {name} is not determined by the {len(rows)} rows given")
    return Constants(float(1 / x[0]), float(1 / x[1]), float(1 / x[2]), float(x[3]), float(x[4]))


def leave_one_run_out(rows_by_run: dict) -> dict[str, tuple[Constants, list[float]]]:
    """For each run: the constants fitted on every other run's rows, and its own rows' predicted seconds."""
    out = {}
    for run in rows_by_run:
        k, predicted = leave_out(rows_by_run, {run})
        out[run] = (k, predicted[run])
    return out


def leave_out(rows_by_run: dict, held: set) -> tuple[Constants, dict[str, list[float]]]:
    """The constants fitted on the rows of every run not in `held`, and the held runs' rows' predicted seconds:
    a kind of run held out whole (all CP runs, all MoE runs, one model size) tells how the model does on a kind it
    has not seen, which leaving one run out among its siblings does not."""
    k = fit([r for name, rs in rows_by_run.items() if name not in held for r in rs])
    return k, {run: [seconds(f, g, k) for f, g, _m in rows_by_run[run]] for run in held}


def bubble_slots(schedule, pp: int) -> float:
    """The pipeline bubble in slots (one slot: a micro-batch's forward and backward through the stage), taking a
    backward as twice a forward, its input and weight halves equal (F = B_input = W = 1/3 slot):

    * GPipe and 1F1B: PP - 1 (Huang et al. 2019; Narayanan et al. 2021, arXiv 2104.04473, section 2.2);
    * interleaved 1F1B with v chunks a GPU: (PP - 1) / v (Narayanan et al. 2021, section 2.2.2);
    * ZB-1P (ZB-H1): (PP - 1)(F + B - 2W) in the DeepSeek-V3 report's notation (arXiv 2412.19437, Table 2; Qi et
      al. 2023, arXiv 2401.10241) with B the whole backward: (PP - 1)(1/3 + 2/3 - 2/3) = (PP - 1) / 3;
    * DualPipe: (PP/2 - 1)(F&B + B - 3W) (the same Table 2; B the whole backward), each chunk a whole stage
      (GPU i runs stage i and stage PP - 1 - i, `Schedule.held_stages`: F = 1/3, B = 2/3, W = 1/3 slot), with no
      credit for the overlap inside F&B (F&B = F + B = 1): (PP/2 - 1)(1 + 2/3 - 1) = 2(PP/2 - 1)/3."""
    if pp <= 1:
        return 0.0
    if schedule.name == "interleaved":
        return (pp - 1) / schedule.chunks
    if schedule.name == "zb1p":
        return (pp - 1) / 3
    if schedule.name == "dualpipe":
        return 2 * max(pp / 2 - 1, 0) / 3
    return float(pp - 1)
