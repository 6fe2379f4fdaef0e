"""How long one training iteration takes: FLOPs and communication derived from the dataflows, turned into seconds
by a model a reader can follow, with four named constants fitted on measured runs.

For the busiest pipeline stage, per micro-batch on one GPU:

* compute: the stage's hardware FLOPs (the `megatron` convention of `symmem.flops`, plus recomputation's extra
  forward) over TP·CP GPUs, at `EFFICIENCY` of the GPU's dense BF16 peak (one figure for dense models, one for
  models with routed experts, whose grouped expert GEMMs run smaller);
* tensor-parallel communication: with sequence parallelism each layer all-gathers and reduce-scatters [b, s, h] twice
  in the forward and twice in the backward (MLM megatron/core/tensor_parallel/mappings.py), each moving (t-1)/t of
  it; the measured runs disable TransformerEngine's overlap of these with GEMMs (`--disable-tp-comm-overlap-*`), so
  they are exposed, at `TP_BANDWIDTH` of NVLink's per-direction bandwidth;
* expert-parallel all-to-all: each MoE layer dispatches and combines the routed tokens, forward and backward (four
  all-to-alls of b·s·N_r·h/t elements, (ep-1)/ep of them leaving the GPU), at NVLink's bandwidth;

the pipeline runs M + PP - 1 such slots (1F1B's fill and drain; interleaving divides the PP - 1 by its chunks);
then the distributed optimizer's gradient reduce-scatter (FP32) and parameter all-gather (BF16) over DP, not
overlapped in the measured runs (`overlap_grad_reduce` and `overlap_param_gather` off), at NVLink's bandwidth; and
`FIXED_SECONDS` per iteration (the optimizer step and what the model leaves out). Not modelled: context
parallelism's ring exchange, scale-out networks (every measured run is one 8-GPU node), overlap of any kind.

The constants are fitted (`fit`) by least squares on the relative error of the 18 measured iterations of
symmem/data/megatron_b200.json (six runs at 4, 8 and 32 micro-batches; SimuMax's published measurements), the same
rows the model is then shown against (`paper_tables/measured_step_times.md`): an in-sample fit, no per-run constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import sympy

from symmem.errors import SymmemError
from symmem.hardware import GPU, gpu

# fitted by `fit` on the 18 measured iterations (derivations/measured_step_times.py shows the fit; a test checks
# these are its result to the digits shown)
EFFICIENCY = {"dense": 0.4353, "moe": 0.3055}  # fraction of dense BF16 peak
TP_BANDWIDTH = 0.2285  # fraction of NVLink per direction the exposed TP collectives reach
FIXED_SECONDS = 0.01903  # per iteration


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


def _stage_flops(scn, stage, hardware: bool) -> float:
    from symmem.accounting.analysis import values
    from symmem.accounting.evaluate import evaluate
    from symmem.flops import op_flops
    from symmem.model import stage_parts

    vals = values(scn)
    total = 0.0
    for part, _op, _fwd, op_total in op_flops(scn, stage_parts(scn.model, stage, scn.convention), hardware,
                                              "megatron"):
        total += part.count * float(evaluate(sympy.sympify(op_total), vals))
    return total / (scn.parallel.tp * scn.parallel.cp)


def features(scn) -> StepFeatures:
    from symmem.accounting.analysis import stage_params

    par, model = scn.parallel, scn.model
    h, act = model.value("h"), scn.act_bytes
    tokens = scn.b * scn.s / par.cp
    kinds = model.layer_kinds()
    busiest = max(scn.stages, key=lambda st: _stage_flops(scn, st, True))
    n_layers = len(busiest.layers)
    moe_layers = sum(1 for i in busiest.layers if model.family.routed_experts and kinds[i] != kinds[0]) \
        if model.family.routed_experts else 0
    tp_bytes = 8 * tokens * h * act * (par.tp - 1) / par.tp * n_layers
    n_r = model.value(model.family.routed_experts[1]) if model.family.routed_experts else 0
    ep_bytes = 4 * tokens * n_r * h * act / par.tp * (par.ep - 1) / par.ep * moe_layers
    params = max(stage_params(scn, st).total for st in scn.stages)
    shard = par.dense_shard
    dp_bytes = params * (scn.precision.grad_bytes + scn.precision.weight_bytes) * (shard - 1) / shard
    chunks = scn.schedule.chunks if scn.schedule.name == "interleaved" else 1
    return StepFeatures(_stage_flops(scn, busiest, True), tp_bytes, ep_bytes, dp_bytes,
                        2 * tokens * h * act if par.pp > 1 else 0.0, scn.m + (par.pp - 1) / chunks,
                        model.family.routed_experts is not None)


def seconds(f: StepFeatures, g: GPU, efficiency=None, tp_bandwidth: float | None = None,
            fixed: float | None = None) -> float:
    eff = (efficiency or EFFICIENCY)["moe" if f.moe else "dense"]
    bw = TP_BANDWIDTH if tp_bandwidth is None else tp_bandwidth
    slot = f.flops_mb / (g.bf16 * eff) + f.tp_bytes_mb / (g.nvlink * bw) + f.ep_bytes_mb / g.nvlink
    return f.slots * slot + f.dp_bytes / g.nvlink + (FIXED_SECONDS if fixed is None else fixed)


def step_time(scn, gpu_name: str | None = None) -> StepTime:
    """The estimated iteration of the scenario's job on `gpu_name` (or the scenario's GPU)."""
    from symmem.flops import model_flops
    from symmem.symbols import b, s

    name = gpu_name or scn.gpu_name
    if name is None:
        raise SymmemError("gpu: the step time needs a GPU by name (--gpu H100, H800, H200, B200, A100)")
    g = gpu(name)
    f = features(scn)
    t = seconds(f, g)
    par = scn.parallel
    at = {**scn.size_values(), b: scn.b, s: scn.s}
    replicas = scn.m * par.dp
    fm = int(model_flops(scn.replace(flops_convention="megatron"), False, "megatron")[0].subs(at)) * replicas
    fh = int(model_flops(scn.replace(flops_convention="megatron"), True, "megatron")[0].subs(at)) * replicas
    tokens = scn.b * scn.s * replicas
    comm = {"tp": int(f.tp_bytes_mb * scn.m), "ep": int(f.ep_bytes_mb * scn.m), "dp": int(f.dp_bytes),
            "pp": int(f.pp_bytes_mb * scn.m * 2)}
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
