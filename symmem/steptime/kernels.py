"""A GPU's kernel profile: what its kernels were measured to reach, by shape (symmem/data/kernels/NAME.json, each
file citing where its numbers come from; tools/simumax_kernels.py writes one from SimuMax's published tables).

The step-time model reads a GEMM's time and the fused attention's time off the profile instead of one fitted
efficiency for every shape:

* **GEMMs**: each pass (forward TN, data gradient NN, weight gradient NT) at the efficiency measured for its
  (m, k, n); a shape not measured takes the measured shapes nearest it in (log m, log k, log n), weighted by the
  inverse of their distance (`_nearest`; any tied with the fourth-nearest taken too). Routed experts (one grouped
  launch of the local experts) at the grouped GEMM's efficiency measured for (experts, tokens per expert, n, k)
  and pass, the same way.
* **Attention**: forward and backward at the efficiency measured for (sequence, heads, KV heads, head dims), under
  the FLOP convention the measurements were taken with (forward 2·base, backward 5·base, base =
  b·s²·max(heads, KV heads)·(qk dim + v dim)); between measured sequence lengths, the nearest measured shapes in
  (log s, log heads, log KV heads, log dims), weighted as above; never below a shorter measured sequence's
  (`attention_efficiency`: the kernel's efficiency does not fall with the sequence).

What the profile's figures are is the file's `source`: numbers measured on the GPU by others, copied unchanged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources

NEAREST = 4  # measured shapes an unmeasured one is read from (inverse-distance weighted in log space)


@dataclass(frozen=True, eq=False)  # one per GPU (`profile` caches it): hashed by identity
class KernelProfile:
    gpu: str
    peak: float  # FLOP/s the efficiencies are fractions of
    source: dict
    gemm: dict  # layout -> (points (log m, log k, log n), efficiencies)
    grouped: dict  # stage -> (points (log experts, log tokens, log n, log k), efficiencies)
    attention: tuple  # (points (log s, log heads, log kv heads, log qk, log v), fwd efficiencies, bwd efficiencies)
    memory_bound: float  # fraction of HBM bandwidth an elementwise kernel reaches
    collectives: dict
    link_gib: float  # the link the collectives' efficiencies are fractions of, GiB/s per direction
    # the attention's efficiency held at the best of the shorter sequences measured (`attention_efficiency`): a
    # published table of the fused kernel measured in bursts; a calibrated device times the step's own shapes as
    # they run there (a CPU's SDPA is not a flash kernel: its efficiency can fall with the sequence)
    attention_floor: bool = False


def _points(rows, cols) -> tuple:
    return tuple(tuple(math.log(r[c]) for c in cols) for r in rows)


# a device measured by `symmem calibrate` and registered for `--gpu FILE` (hardware_profile.register): its key ->
# its kernel profile (symmem.calibrate_kernels.kernel_profile)
REGISTERED: dict[str, KernelProfile] = {}


def profile(gpu_name: str) -> KernelProfile | None:
    """The kernel profile of a GPU: a calibrated device's (`REGISTERED`), else the one published for it by name
    (symmem/data/kernels/NAME.json), or None."""
    return REGISTERED.get(gpu_name) or _published(gpu_name)


@cache
def _published(gpu_name: str) -> KernelProfile | None:
    path = resources.files("symmem.data").joinpath("kernels", f"{gpu_name}.json")
    if not path.is_file():
        return None
    d = json.loads(path.read_text())
    gemm = {}
    for layout in ("TN", "NN", "NT"):
        rows = [r for r in d["gemm"]["rows"] if r[0] == layout]
        gemm[layout] = (_points(rows, (1, 2, 3)), tuple(r[4] for r in rows))
    grouped = {}
    for stage in ("fwd", "bwd_grad_act", "bwd_grad_w"):
        rows = [r for r in d["grouped_gemm"]["rows"] if r[0] == stage]
        grouped[stage] = (_points(rows, (1, 2, 3, 4)), tuple(r[5] for r in rows))
    att = d["attention"]["rows"]
    return KernelProfile(d["gpu"], d["peak_tflops"] * 1e12, d["source"], gemm, grouped,
                         (_points(att, (1, 2, 3, 4, 5)), tuple(r[6] for r in att), tuple(r[7] for r in att)),
                         d["memory_bound"]["default"], d["collectives"], d["collectives"]["link_gib_per_s"],
                         attention_floor=True)


TIE = 1e-9  # distances within this relative margin of the NEAREST-th one are ties, all of them taken


def _distance(p, at) -> float:
    """Euclidean, the squares summed in coordinate order (the page's script sums them the same way: the same bits)."""
    total = 0.0
    for x, y in zip(p, at, strict=True):
        total += (x - y) * (x - y)
    return math.sqrt(total)


def _nearest(points, values, at) -> float:
    """The value at `at`: a measured point's own, else the NEAREST measured points' values weighted by the inverse
    of their (log-space) distance, with every point as near as the NEAREST-th (within TIE) taken too: a shape
    midway between measured ones (powers of two often are) has equidistant neighbours, and which of them a cut at
    NEAREST kept would turn on the last bit of a logarithm."""
    dist = sorted(((_distance(p, at), i) for i, p in enumerate(points)))
    if dist[0][0] < 1e-12:
        return values[dist[0][1]]
    cut = dist[min(NEAREST, len(dist)) - 1][0] * (1 + TIE)
    near = [(d, i) for d, i in dist if d <= cut]
    w = [1 / d for d, _i in near]
    return sum(wi * values[i] for wi, (_d, i) in zip(w, near, strict=True)) / sum(w)


@lru_cache(maxsize=65536)
def gemm_efficiency(p: KernelProfile, layout: str, m: float, k: float, n: float) -> float:
    points, values = p.gemm[layout]
    return _nearest(points, values, (math.log(m), math.log(k), math.log(n)))


@lru_cache(maxsize=65536)
def grouped_efficiency(p: KernelProfile, stage: str, experts: int, tokens: float, n: float, k: float) -> float:
    points, values = p.grouped[stage]
    return _nearest(points, values, (math.log(experts), math.log(tokens), math.log(n), math.log(k)))


def whole_rows(m: float) -> int:
    """The rows a GEMM's efficiency is looked up at: a kernel runs whole rows, and an expert's mean load (b·s·top-k /
    experts, often fractional) is taken to the nearest whole number of tokens, halves up (the page's script rounds
    the same way), at least 1, as `symmem calibrate --model` measures it (calibrate_shapes); the FLOPs stay at the
    mean. A mean load below one token is the row of one token, its time scaled by the load: the experts that get
    no token skipped."""
    return max(1, math.floor(m + 0.5))


def gemm_seconds(p: KernelProfile, m: float, k: float, n: float, experts: int, forward_again: bool) -> float:
    """One GEMM (m rows, k inner, n columns; `experts` local experts of a grouped launch, m rows each) through
    forward, data gradient and weight gradient, and the forward once more when recomputed. A profile without grouped
    GEMMs measured (a device calibrated for no model with routed experts) times the experts as that many GEMMs of
    m rows."""
    if m <= 0 or k <= 0 or n <= 0:
        return 0.0
    flops = 2 * m * k * n * experts
    rows = whole_rows(m)
    if experts > 1 and p.grouped:
        effs = [grouped_efficiency(p, s, experts, rows, n, k) for s in ("fwd", "bwd_grad_act", "bwd_grad_w")]
    else:
        effs = [gemm_efficiency(p, "TN", rows, k, n), gemm_efficiency(p, "NN", rows, n, k),
                gemm_efficiency(p, "NT", n, rows, k)]
    passes = [effs[0], effs[1], effs[2]] + ([effs[0]] if forward_again else [])
    return sum(flops / (p.peak * e) for e in passes)


def measured_attention_efficiency(p: KernelProfile, s: float, heads: float, kv_heads: float, qk: float,
                                  v: float) -> tuple[float, float]:
    """The forward and backward efficiency the profile's table gives at the shape (the nearest measured shapes'), as
    measured: `attention_efficiency` is what the model times the attention at."""
    return _attention_at(p, (math.log(s), math.log(heads), math.log(kv_heads), math.log(qk), math.log(v)))


def _attention_at(p: KernelProfile, at: tuple) -> tuple[float, float]:
    points, fwd, bwd = p.attention
    return _nearest(points, fwd, at), _nearest(points, bwd, at)


@lru_cache(maxsize=65536)
def attention_efficiency(p: KernelProfile, s: float, heads: float, kv_heads: float, qk: float, v: float):
    """The forward and backward efficiency the attention runs at: for a published GPU table (`attention_floor`), each
    the best the table gives at this shape and at each shorter sequence it measured (the same heads and dims); for
    a calibrated device, the table's reading. A fused causal kernel's efficiency does not fall
    as the sequence grows (its tiles' work is the same at any length, and the masked diagonal tiles and the last
    wave's idle SMs are a smaller share of a longer one: the FlashAttention-2 and -3 papers' throughput rises with
    the sequence to a plateau, arXiv 2307.08691 Figs. 4-5, 2407.08608 Fig. 5). So a measured figure below a
    shorter sequence's says how it was measured, not the kernel: SimuMax's B200 table reads the same GQA shapes at
    0.99-1.00 of the peak at 131,072 tokens against 1.17-1.20 at 32,768 (forward, its FLOP convention), and times
    each shape as the median kernel span of twenty runs with a device sync after each
    (simu_tools/efficency_test/test_fa_efficiency.py:156-236 at 4dcaae5): a 5 ms kernel between syncs against a
    95 ms one, likely at different clocks (not verified: no GPU here). docs/step_time.md, "Long sequences"."""
    rest = (math.log(heads), math.log(kv_heads), math.log(qk), math.log(v))
    ef, eb = _attention_at(p, (math.log(s), *rest))
    if not p.attention_floor:
        return ef, eb
    for short in sorted({pt[0] for pt in p.attention[0]}):
        if short < math.log(s) - 1e-12:
            f, b = _attention_at(p, (short, *rest))
            ef, eb = max(ef, f), max(eb, b)
    return ef, eb


def attention_flops(b: float, s: float, heads: float, kv_heads: float, qk: float, v: float) -> tuple[float, float]:
    """The fused attention's forward and backward FLOPs under the profiles' convention (SimuMax's measurements'):
    2·base and 5·base, base = b·s²·max(heads, kv heads)·(qk + v), the dense count although the kernel is causal."""
    base = b * s * s * max(heads, kv_heads) * (qk + v)
    return 2 * base, 5 * base


def attention_seconds(p: KernelProfile, b: float, s: float, heads: float, kv_heads: float, qk: float, v: float,
                      forward_again: bool) -> float:
    """The fused causal attention of b sequences of s tokens over `heads` query heads (and `kv_heads`) on one GPU,
    forward and backward (and the forward again when recomputed), under the profile's FLOP convention."""
    if s <= 0 or heads <= 0:
        return 0.0
    fwd, bwd = attention_flops(b, s, heads, kv_heads, qk, v)
    ef, eb = attention_efficiency(p, s, heads, max(kv_heads, 1.0), qk, v)
    return (fwd / ef) * (2 if forward_again else 1) / p.peak + bwd / eb / p.peak


def fit_rest(rows):
    """The constants the kernel times leave: link efficiency (at most 1), latency per call and the fixed seconds
    per iteration, by non-negative least squares on the relative error of `rows` ((StepFeatures, GPU, measured
    seconds)); the GEMM and attention efficiencies are 1 (their times are the profile's)."""
    import numpy as np

    from symmem.steptime.model import Constants, _nnls, coefficients

    a, y = [], []
    for f, g, measured in rows:
        row, known = coefficients(f, g)
        known += row[0] + row[1] + row[2]  # 1/link = 1 + z, z >= 0
        a.append([row[2] / measured, row[3] / measured, row[4] / measured])
        y.append((measured - known) / measured)
    x = _nnls(np.array(a), np.array(y))
    return Constants(1.0, 1.0, float(1 / (1 + x[0])), float(x[1]), float(x[2]))
