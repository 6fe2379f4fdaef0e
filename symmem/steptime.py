"""How long one training iteration takes: FLOPs and communication derived from the dataflows, turned into seconds
by a model a reader can follow, with four named constants fitted on measured runs.

For the busiest pipeline stage, per micro-batch on one GPU:

* compute: the stage's hardware FLOPs (the `megatron` convention of `symmem.flops`, plus recomputation's extra
  forward) over TP·CP GPUs, at `EFFICIENCY` of the GPU's dense BF16 peak (one figure for dense models, one for
  models with routed experts, whose grouped expert GEMMs run smaller);
* communication, as `symmem.comm` derives it from the dataflows' shardings (every collective, its rule and source
  there): the tensor-parallel all-gathers and reduce-scatters of sequence parallelism (or all-reduces without it),
  the backward's re-gathers included; the measured runs disable TransformerEngine's overlap of these with GEMMs
  (`--disable-tp-comm-overlap-*`), so they are exposed, at `TP_BANDWIDTH` of NVLink's per-direction bandwidth;
  the expert all-to-alls (dispatch and combine, forward and backward) at NVLink's bandwidth; the context-parallel
  ring is reported but not timed (TE overlaps each ring step with the attention of the previous one,
  context_parallel.py AttnFuncWithCPAndKVP2P), nor are the pipeline sends (one activation per micro-batch);

the pipeline runs M such slots plus its schedule's bubble (`bubble_slots`: PP - 1 for 1F1B, divided by the chunks
when interleaved, ZB-1P's and DualPipe's from their papers);
then the data-parallel gradient and parameter traffic (`symmem.comm.dp_bytes`: the distributed optimizer's FP32
gradient reduce-scatter and BF16 parameter all-gather), not overlapped in the measured runs
(`overlap_grad_reduce` and `overlap_param_gather` off), at NVLink's bandwidth; and `FIXED_SECONDS` per iteration
(the optimizer step and what the model leaves out). Under an FP8/FP4 recipe the eligible GEMMs (every linear but
the router and the output head) run at the GPU's dense FP8/FP4 rate at the same efficiency: uncalibrated, no
measured low-precision iteration is in the project. Not modelled: scale-out networks (every measured run is one
8-GPU node), overlap of any kind.

The constants are fitted (`fit`) by least squares on the relative error of the 18 measured iterations of
symmem/data/megatron_b200.json (six runs at 4, 8 and 32 micro-batches; SimuMax's published measurements), the same
rows the model is then shown against (`paper_tables/measured_step_times.md`): an in-sample fit, no per-run constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import sympy

from symmem.errors import SymmemError
from symmem.hardware import GPU, gpu

# fitted by `fit` on the 18 measured iterations (derivations/measured_step_times.py shows the fit; a test checks
# these are its result to the digits shown)
EFFICIENCY = {"dense": 0.4364, "moe": 0.3029}  # fraction of dense BF16 peak
TP_BANDWIDTH = 0.3023  # fraction of NVLink per direction the exposed TP collectives reach
FIXED_SECONDS = 0.02315  # per iteration


@dataclass(frozen=True)
class StepFeatures:
    """What the model reads of a scenario (per GPU of the busiest stage)."""

    flops_mb: float  # hardware FLOPs per micro-batch
    tp_bytes_mb: float
    ep_bytes_mb: float
    dp_bytes: float  # per iteration
    pp_bytes_mb: float
    slots: float  # M + (PP - 1) / v
    moe: bool
    cp_bytes_mb: float = 0.0  # the context-parallel ring: overlapped with the attention, reported, not timed
    flops_low_mb: float = 0.0  # of flops_mb, the GEMMs an FP8/FP4 recipe runs in low precision
    low_format: str = "bf16"  # their tensor-core format (fp8, fp4)


@dataclass(frozen=True)
class StepTime:
    gpu: str
    flops_model: int  # one iteration of the whole job, as Megatron's function counts it
    flops_hardware: int  # with recomputation's extra forward
    time_s: float
    tokens_per_s: float
    mfu: float
    comm_bytes: dict = field(default_factory=dict)  # per GPU per iteration, by axis

    def as_dict(self) -> dict:
        return {"gpu": self.gpu, "flops_model": self.flops_model, "flops_hardware": self.flops_hardware,
                "time_s": self.time_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "comm_bytes": dict(self.comm_bytes), "constants": {
                    "efficiency": dict(EFFICIENCY), "tp_bandwidth": TP_BANDWIDTH, "fixed_seconds": FIXED_SECONDS}}


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


_PER_MICROBATCH: dict = {}  # (activation key, sizes, b, s, stages) -> (busiest stage's FLOPs, its bytes by axis)


def _per_microbatch(scn) -> tuple[float, dict[str, float]]:
    """The busiest stage's hardware FLOPs and communication bytes per micro-batch, by axis; the same for every
    micro-batch count, ZeRO stage and schedule, so cached on what they depend on."""
    from symmem.comm import stage_comm_bytes
    from symmem.symbols import b, s

    key = (scn.activation_key, scn.size_key, scn.b, scn.s, scn.stages, scn.precision.low_precision is not None)
    if key not in _PER_MICROBATCH:
        flops = {st: _stage_flops(scn, st, True) for st in scn.stages}
        busiest = max(scn.stages, key=lambda st: flops[st][0])
        at = {**scn.size_values(), b: scn.b, s: scn.s}
        comm = {k: float(v.xreplace(at)) for k, v in stage_comm_bytes(scn, busiest).items()}
        if len(_PER_MICROBATCH) > 512:
            _PER_MICROBATCH.clear()
        _PER_MICROBATCH[key] = (flops[busiest], comm)
    return _PER_MICROBATCH[key]


def features(scn) -> StepFeatures:
    from symmem.comm import dp_bytes

    (flops, low), comm = _per_microbatch(scn)
    lp = scn.precision.low_precision
    if lp is not None:
        low = low * lp.low_passes[0] / lp.low_passes[1]  # e.g. torchao's rowwise_with_gw_hp: wgrad in BF16
    return StepFeatures(flops, comm.get("tp", 0.0) + comm.get("etp", 0.0), comm.get("ep", 0.0),
                        float(max(dp_bytes(scn, st) for st in scn.stages)), comm.get("pp", 0.0),
                        scn.m + bubble_slots(scn.schedule, scn.parallel.pp),
                        scn.model.family.routed_experts is not None, comm.get("cp", 0.0), low,
                        lp.gemm if lp is not None else "bf16")


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


def check_gpu(scn, g: GPU) -> None:
    """A recipe's formats need a GPU generation (CUDA compute capability): one line when `g` lacks it."""
    lp = scn.precision.low_precision
    if lp is not None and g.compute_capability < lp.min_compute_capability:
        need = ".".join(map(str, lp.min_compute_capability))
        have = ".".join(map(str, g.compute_capability))
        raise SymmemError(f"gpu = {g.name}: compute capability {have}; precision {scn.precision.name} needs {need} "
                          "or higher (TransformerEngine's support checks)")


def seconds(f: StepFeatures, g: GPU, efficiency=None, tp_bandwidth: float | None = None,
            fixed: float | None = None) -> float:
    eff = (efficiency or EFFICIENCY)["moe" if f.moe else "dense"]
    bw = TP_BANDWIDTH if tp_bandwidth is None else tp_bandwidth
    compute = (f.flops_mb - f.flops_low_mb) / (g.bf16 * eff)
    if f.flops_low_mb:
        compute += f.flops_low_mb / (g.rate(f.low_format) * eff)
    slot = compute + f.tp_bytes_mb / (g.nvlink * bw) + f.ep_bytes_mb / g.nvlink
    return f.slots * slot + f.dp_bytes / g.nvlink + (FIXED_SECONDS if fixed is None else fixed)


def step_time(scn, gpu_name: str | None = None) -> StepTime:
    """The estimated iteration of the scenario's job on `gpu_name` (or the scenario's GPU)."""
    name = gpu_name or scn.gpu_name
    if name is None:
        raise SymmemError("gpu: the step time needs a GPU by name (--gpu H100, H800, H200, B200, A100)")
    g = gpu(name)
    check_gpu(scn, g)
    f = features(scn)
    t = seconds(f, g)
    par = scn.parallel
    replicas = scn.m * par.dp
    fm = model_flops_value(scn, False) * replicas
    fh = model_flops_value(scn, True) * replicas
    tokens = scn.b * scn.s * replicas
    comm = {"tp": int(f.tp_bytes_mb * scn.m), "cp": int(f.cp_bytes_mb * scn.m), "ep": int(f.ep_bytes_mb * scn.m),
            "pp": int(f.pp_bytes_mb * scn.m), "dp": int(f.dp_bytes)}
    return StepTime(g.name, fm, fh, t, tokens / t, fm / (par.world_size * g.bf16 * t), comm)


def fit(rows: list[tuple[StepFeatures, GPU, float]]) -> tuple[dict, float, float]:
    """(efficiency, tp_bandwidth, fixed) minimising the relative errors of `rows` (features, GPU, measured s):
    linear least squares in 1/efficiency, 1/bandwidth and the fixed seconds (numpy)."""
    import numpy as np

    a, y, w = [], [], []
    for f, g, measured in rows:
        compute = f.slots * f.flops_mb / g.bf16
        a.append([0.0 if f.moe else compute, compute if f.moe else 0.0, f.slots * f.tp_bytes_mb / g.nvlink, 1.0])
        y.append(measured - f.slots * f.ep_bytes_mb / g.nvlink - f.dp_bytes / g.nvlink)
        w.append(1 / measured)
    a, y, w = np.array(a), np.array(y), np.array(w)
    x, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    if min(x[:3]) <= 0 or not all(math.isfinite(v) for v in x):
        raise SymmemError("step-time fit: a fitted rate is not positive; the rows do not determine the model")
    return {"dense": float(1 / x[0]), "moe": float(1 / x[1])}, float(1 / x[2]), float(x[3])
