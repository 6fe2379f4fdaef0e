"""Sweeps of parallel configurations: enumeration, the rules that reject, and two evaluation paths.

The space is the product of ten axes, in this order (the order ranks ties and numbers each configuration):
TP, PP, EP, ETP, recomputation, schedule, ZeRO, micro-batches M, sequence length s, micro-batch size b.
A configuration is valid when the GPU count is DP·TP·PP with DP an integer, a pipeline layout exists (`paper`
when valid, else `even`), the engine's `Parallel` and model checks pass (EP·ETP | DP·TP, TP | heads, h_F and
vocabulary, EP | experts, ETP | expert width) and the schedule accepts M. Rejections carry the engine's message.

`iter_blocks` is the compiled path: one derivation per structural case (`sweep_compile`), then exact
vectorised evaluation over tiles of the (ZeRO, M, s, b) grid of each parallel arrangement. `reference_records`
builds a `Scenario` per configuration and calls `analysis.memory`: the same engine, one configuration at a time.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .errors import SymmemError
from .layout import LayoutSpec, layers_per_stage
from .params import GROUPS, MOE_GROUPS
from .parallel import Parallel
from .recompute import policy
from .scenario import Scenario
from .schedule import Schedule
from .states import state_bytes, zero_stage
from .sweep_compile import INT64_SAFE, CompiledCase, compile_case

AXES = ("tp", "pp", "ep", "etp", "recompute", "schedule", "zero", "microbatches", "s", "b")
COMPONENTS = ("weights", "gradients", "optimizer", "activations")
CHUNK = 1 << 18  # configurations per evaluated tile


@dataclass(frozen=True)
class Space:
    """What to sweep. `base` carries everything fixed: model, convention, precision, MTP, routing, rules,
    activation dtype, sequence-parallel flags, GPU capacity, fragmentation and buffer ranges."""

    base: Scenario
    gpus: int
    tp: tuple[int, ...]
    pp: tuple[int, ...]
    ep: tuple[int, ...]
    etp: tuple[int, ...]
    recompute: tuple[str, ...]
    schedule: tuple[Schedule, ...]
    zero: tuple[int, ...]
    microbatches: tuple[int | None, ...]  # None: M = PP
    s: tuple[int, ...]
    b: tuple[int, ...]

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise SymmemError(f"gpus = {self.gpus!r}: must be a positive integer")
        for name in AXES:
            values = getattr(self, name)
            if not values:
                raise SymmemError(f"{name}: empty; give at least one value")
        for name in ("tp", "pp", "ep", "etp", "s", "b"):
            for v in getattr(self, name):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise SymmemError(f"{name} = {v!r}: must be a positive integer")
        for m in self.microbatches:
            if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
                raise SymmemError(f"microbatches = {m!r}: must be a positive integer")
        for z in self.zero:
            zero_stage(z)
        for r in self.recompute:
            policy(r)
        if not any(self.gpus % (t * p) == 0 for t in self.tp for p in self.pp):
            raise SymmemError(f"gpus = {self.gpus}: no TP·PP of the sweep divides it (TP in {list(self.tp)}, "
                              f"PP in {list(self.pp)})")
        if self.size >= 2**62:
            raise SymmemError(f"the sweep has {self.size:.3g} configurations: too many to number; narrow the ranges")

    @property
    def capacity(self) -> int:
        return self.base.gpu_memory

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(getattr(self, a)) for a in AXES)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        out, acc = [], 1
        for n in reversed(self.shape):
            out.append(acc)
            acc *= n
        return tuple(reversed(out))

    def config(self, ordinal: int) -> dict:
        """The axis values of configuration number `ordinal` (M shown as given: None means PP)."""
        idx = np.unravel_index(ordinal, self.shape)
        out = {a: getattr(self, a)[int(i)] for a, i in zip(AXES, idx)}
        out["schedule"] = schedule_name(out["schedule"])
        return out


def schedule_name(s: Schedule) -> str:
    return f"interleaved:{s.chunks}" if s.name == "interleaved" else s.name


# ------------------------------------------------------------------------------------------------ the rules
def pipeline_layout(base: Scenario, pp: int) -> LayoutSpec:
    """The `paper` layout when it is valid for PP, else `even`; a `SymmemError` naming both reasons if neither."""
    n_layers = base.model.value("L")
    try:
        layers_per_stage(LayoutSpec("paper"), n_layers, pp)
        return LayoutSpec("paper")
    except SymmemError as e1:
        try:
            layers_per_stage(LayoutSpec("even"), n_layers, pp)
            return LayoutSpec("even")
        except SymmemError as e2:
            raise SymmemError(f"{e1}; {e2}") from None


def check_world(gpus: int, tp: int, pp: int) -> int:
    if gpus % (tp * pp):
        raise SymmemError(f"gpus = {gpus}: not divisible by TP·PP = {tp}·{pp} = {tp * pp}")
    return gpus // (tp * pp)


def make_parallel(base: Scenario, gpus: int, tp: int, pp: int, ep: int, etp: int) -> Parallel:
    par = base.parallel
    return Parallel(tp=tp, pp=pp, ep=ep, etp=etp, dp=gpus // (tp * pp), world=gpus,
                    sequence_parallel=par.sequence_parallel, moe_sequence_parallel=par.moe_sequence_parallel)


RULES = ("world", "layout", "parallel", "schedule")  # checked in this order; a configuration fails the first


@dataclass(frozen=True)
class Rejection:
    """Configurations that pass the rules before `rule` and fail it for `reason`: those with the axis values
    of `where`."""

    rule: str
    where: tuple[tuple[str, object], ...]
    reason: str
    count: int

    def matches(self, config: dict) -> bool:
        return all(config[k] == v for k, v in self.where)

    def as_dict(self) -> dict:
        return {**dict(self.where), "rule": self.rule, "reason": self.reason, "configurations": self.count}


# --------------------------------------------------------------------------------------- compiled evaluation
@dataclass
class Block:
    """One evaluated tile: every array is shaped (ZeRO, M, s, b) over the index arrays given."""

    space: Space
    combo: dict  # tp, pp, ep, etp, dp, edp, layout, recompute, schedule
    base_ordinal: int
    z_idx: np.ndarray
    m_idx: np.ndarray
    s_idx: np.ndarray
    b_idx: np.ndarray
    m_values: np.ndarray  # M of each m_idx (None resolved to PP)
    low: np.ndarray
    high: np.ndarray
    alloc: np.ndarray
    cls: np.ndarray  # which stage class peaks
    stage_index: tuple[int, ...]  # the stage each class is named by
    states: np.ndarray  # (classes, len(z_idx), 3): weights, gradients, optimizer bytes

    @property
    def size(self) -> int:
        return int(self.high.size)

    def ordinals(self, flat: np.ndarray) -> np.ndarray:
        zi, mi, si, bi = np.unravel_index(flat, self.high.shape)
        st = self.space.strides
        return (self.base_ordinal + self.z_idx[zi] * st[6] + self.m_idx[mi] * st[7] + self.s_idx[si] * st[8]
                + self.b_idx[bi] * st[9])

    def record(self, flat: int) -> dict:
        zi, mi, si, bi = (int(x) for x in np.unravel_index(flat, self.high.shape))
        c = int(self.cls.flat[flat])
        w, g, o = (int(x) for x in self.states[c, zi])
        alloc = int(self.alloc.flat[flat])
        comps = (w, g, o, alloc - w - g - o)
        low, high = int(self.low.flat[flat]), int(self.high.flat[flat])
        cap = self.space.capacity
        return {
            "ordinal": int(self.ordinals(np.array([flat]))[0]),
            **{k: self.combo[k] for k in ("tp", "pp", "ep", "etp", "dp", "edp", "layout", "recompute", "schedule")},
            "zero": self.space.zero[self.z_idx[zi]], "microbatches": int(self.m_values[mi]),
            "s": self.space.s[self.s_idx[si]], "b": self.space.b[self.b_idx[bi]],
            "stage": self.stage_index[c], **dict(zip(COMPONENTS, comps)),
            "binding": COMPONENTS[comps.index(max(comps))], "allocated": alloc, "low": low, "high": high,
            "headroom": cap - high, "verdict": _verdict(low, high, cap),
        }


def _verdict(low: int, high: int, capacity: int) -> str:
    from .analysis import verdict

    return verdict(low, high, capacity)


def _tiles(sizes: tuple[int, ...], limit: int) -> Iterator[tuple[slice, ...]]:
    """Tiles of a grid of `sizes`, each at most `limit` cells (or one row of the last axis), in C order."""
    k, inner = len(sizes), 1
    while k > 0 and inner * sizes[k - 1] <= limit:
        inner *= sizes[k - 1]
        k -= 1
    if k == 0:
        yield tuple(slice(0, n) for n in sizes)
        return
    axis = k - 1
    step = max(1, limit // inner)
    rest = tuple(slice(0, n) for n in sizes[k:])
    for outer in itertools.product(*(range(n) for n in sizes[:axis])):
        for start in range(0, sizes[axis], step):
            yield tuple(slice(i, i + 1) for i in outer) + (slice(start, min(start + step, sizes[axis])),) + rest


@lru_cache(maxsize=4096)
def _schedule_table(sched: Schedule, pp: int, m_values: tuple[int, ...], reps: tuple[int, ...]):
    """For each M: valid or the engine's reason; for the valid ones, in-flight numerators per class (at the class's
    lowest stage) over a common denominator. Checks that in-flight never grows with the stage index, which is
    what lets a class be represented by its lowest stage."""
    valid, reasons, ks = [], [], []
    for i, m in enumerate(m_values):
        try:
            sched.check(pp, m)
        except SymmemError as e:
            reasons.append((i, str(e)))
            continue
        k = [sched.in_flight(st, pp, m) for st in range(pp)]
        if any(k[i + 1] > k[i] for i in range(pp - 1)):
            raise SymmemError(f"schedule {sched.name}: in-flight micro-batches grow with the stage index at "
                              f"PP = {pp}, M = {m}; the compiled sweep assumes they do not")
        valid.append(i)
        ks.append([k[r] for r in reps])
    den = math.lcm(*(f.denominator for row in ks for f in row)) if ks else 1
    kn = np.array([[int(f * den) for f in row] for row in ks], dtype=np.int64).T.reshape(len(reps), len(ks))
    return np.array(valid, dtype=np.int64), tuple(reasons), kn, den


def _ceil_div(x: np.ndarray, d: int) -> np.ndarray:
    return x if d == 1 else -((-x) // d)


def _frag(alloc: np.ndarray, f: float) -> np.ndarray:
    """ceil(alloc · f) with alloc converted to a float first: `math.ceil(alloc * f)` of the reference path."""
    if alloc.dtype == object:
        return np.array([math.ceil(x * f) for x in alloc.flat], dtype=object).reshape(alloc.shape)
    return np.ceil(alloc.astype(np.float64) * f).astype(np.int64)


def _clip(x: np.ndarray) -> np.ndarray:
    """Back to int64; a value past 2^63 (no GPU has that) saturates, so it can only be 'does not fit'."""
    if x.dtype != object:
        return x
    return np.array([min(int(v), 2**63 - 1) for v in x.flat], dtype=np.int64).reshape(x.shape)


@dataclass
class _Arrangement:
    """One parallel arrangement under one recomputation policy: what every tile of it shares."""

    case: CompiledCase
    tp: int
    ep: int
    etp: int
    params: list[tuple[int, int]]  # (dense, moe) per class
    acts: dict = field(default_factory=dict)  # (s slice, b slice) -> per-class activation bytes per micro-batch


def _activations(arr: _Arrangement, space: Space, s_sl: slice, b_sl: slice) -> list[np.ndarray]:
    key = (s_sl.start, s_sl.stop, b_sl.start, b_sl.stop)
    hit = arr.acts.get(key)
    if hit is None:
        s = np.array(space.s[s_sl], dtype=np.int64)[:, None]
        b = np.array(space.b[b_sl], dtype=np.int64)[None, :]
        hit = [c.activation.ceil_array({"b": b, "s": s, "t": arr.tp, "ep": arr.ep, "etp": arr.etp})
               for c in arr.case.classes]
        if len(arr.acts) > 64:
            arr.acts.clear()
        arr.acts[key] = hit
    return hit


def iter_blocks(space: Space, chunk: int = CHUNK, rejected: list | None = None,
                progress: Callable[[int], None] | None = None, cases: dict | None = None) -> Iterator[Block]:
    """The compiled path: every valid configuration, in tiles of at most `chunk`, exactly evaluated.

    Rejections are appended to `rejected` as `(where, reason, count)`; `progress(n)` is told of every n
    configurations done (valid or not); `cases` collects the structural cases used, by key."""
    base, gpus = space.base, space.gpus
    inner = len(space.zero) * len(space.microbatches) * len(space.s) * len(space.b)
    per_rc = len(space.schedule) * inner
    per_combo = len(space.recompute) * per_rc
    st = space.strides
    frag_lo, frag_hi = base.fragmentation
    buf_lo, buf_hi = base.comm_buffers
    prec = base.precision
    zeros = [zero_stage(z) for z in space.zero]

    def reject(rule: str, where: tuple, reason: str, count: int) -> None:
        if rejected is not None:
            rejected.append((rule, where, reason, count))
        if progress:
            progress(count)

    for (i_tp, tp), (i_pp, pp), (i_ep, ep), (i_etp, etp) in itertools.product(
            enumerate(space.tp), enumerate(space.pp), enumerate(space.ep), enumerate(space.etp)):
        try:
            dp = check_world(gpus, tp, pp)
        except SymmemError as e:
            reject("world", (("tp", tp), ("pp", pp)), str(e), per_combo)
            continue
        try:
            layout = pipeline_layout(base, pp)
        except SymmemError as e:
            reject("layout", (("pp", pp),), str(e), per_combo)
            continue
        try:
            par = make_parallel(base, gpus, tp, pp, ep, etp)
            par.validate_for(base.model)
            base.routing.check_model(base.model.value("N"), ep)
        except SymmemError as e:
            reject("parallel", (("tp", tp), ("pp", pp), ("ep", ep), ("etp", etp)), str(e), per_combo)
            continue
        edp = par.expert_dp
        m_values = tuple(pp if m is None else m for m in space.microbatches)
        for i_rc, rc in enumerate(space.recompute):
            rep = base.replace(parallel=par, layout=layout, recompute_name=rc, schedule=Schedule(), microbatches=None)
            case = compile_case(rep)
            if cases is not None:
                cases[case.key] = case
            reps = tuple(c.index for c in case.classes)
            params = []
            for c in case.classes:
                per = {g: p.ceil({"t": tp, "ep": ep, "etp": etp}) for g, p in zip(GROUPS, c.params)}
                params.append((per["dense"], sum(per[g] for g in MOE_GROUPS)))
            arr = _Arrangement(case, tp, ep, etp, params)
            for i_sch, sched in enumerate(space.schedule):
                valid, reasons, kn, kd = _schedule_table(sched, pp, m_values, reps)
                for mi, reason in reasons:
                    reject("schedule", (("pp", pp), ("schedule", schedule_name(sched)),
                                        ("microbatches", space.microbatches[mi])), reason, inner // len(space.microbatches))
                if not valid.size:
                    continue
                copies = sched.weight_copies
                states = np.zeros((len(reps), len(zeros), 3), dtype=object)
                for c, (dense, moe) in enumerate(params):
                    for zi, z in enumerate(zeros):
                        sb = state_bytes(dense, moe, dp, edp, prec, z)
                        states[c, zi] = (sb.weights * copies, sb.gradients, sb.optimizer)
                state_tot = states.sum(axis=2)
                base_ord = i_tp * st[0] + i_pp * st[1] + i_ep * st[2] + i_etp * st[3] + i_rc * st[4] + i_sch * st[5]
                combo = {"tp": tp, "pp": pp, "ep": ep, "etp": etp, "dp": dp, "edp": edp, "layout": layout.kind,
                         "recompute": rc, "schedule": schedule_name(sched)}
                sizes = (len(zeros), int(valid.size), len(space.s), len(space.b))
                for z_sl, m_sl, s_sl, b_sl in _tiles(sizes, chunk):
                    acts_mb = _activations(arr, space, s_sl, b_sl)
                    block = _evaluate_tile(space, combo, base_ord, z_sl, valid[m_sl], m_sl, s_sl, b_sl,
                                           acts_mb, kn[:, m_sl], kd, state_tot[:, z_sl], states[:, z_sl],
                                           reps, np.array(m_values)[valid[m_sl]], (frag_lo, frag_hi),
                                           (buf_lo, buf_hi))
                    if progress:
                        progress(block.size)
                    yield block


def _evaluate_tile(space, combo, base_ord, z_sl, m_idx, m_sl, s_sl, b_sl, acts_mb, kn, kd, state_tot, states,
                   reps, m_values, frag, bufs) -> Block:
    n_cls = len(reps)
    # A bound (Python integers) decides int64 or exact Python integers for the whole tile.
    a_max = [int(a.max()) for a in acts_mb]
    k_max = [int(kn[c].max()) for c in range(n_cls)]
    st_max = [int(max(state_tot[c])) for c in range(n_cls)]
    alloc_bound = max(st_max[c] + a_max[c] * k_max[c] for c in range(n_cls))
    exact = max(a_max[c] * k_max[c] for c in range(n_cls)) < INT64_SAFE and \
        alloc_bound * (1 + max(frag[1], 1.0)) + bufs[1] < INT64_SAFE
    dt = np.int64 if exact else object
    best = cls = None
    for c in range(n_cls):
        a = acts_mb[c].astype(dt)
        acts = _ceil_div(a[None, :, :] * kn[c].astype(dt)[:, None, None], kd)  # (M, s, b)
        alloc = np.asarray(state_tot[c], dtype=dt)[:, None, None, None] + acts[None]  # (Z, M, s, b)
        if best is None:
            best, cls = alloc, np.zeros(alloc.shape, dtype=np.int8)
        else:
            up = alloc > best
            best = np.where(up, alloc, best)
            cls[up] = c
    low = best + _frag(best, frag[0]) + bufs[0]
    high = best + _frag(best, frag[1]) + bufs[1]
    sp = space
    return Block(sp, combo, base_ord, np.arange(len(sp.zero))[z_sl], m_idx, np.arange(len(sp.s))[s_sl],
                 np.arange(len(sp.b))[b_sl], m_values, _clip(low), _clip(high), _clip(best), cls, reps, states)


# ----------------------------------------------------------------------------------------------- reduction
@dataclass
class Summary:
    space: Space
    total: int = 0
    valid: int = 0
    fits: int = 0
    marginal: int = 0  # fit only at the low end of overheads
    rejections: list[Rejection] = field(default_factory=list)
    ranked: list[dict] = field(default_factory=list)
    cases: int = 0
    derive_seconds: float = 0.0
    seconds: float = 0.0
    region: dict = field(default_factory=dict)  # TP·PP -> (best headroom at high, at low) per b (plot)

    @property
    def does_not_fit(self) -> int:
        return self.valid - self.fits - self.marginal

    @property
    def rejected(self) -> int:
        return self.total - self.valid


def sweep(space: Space, top: int = 20, marginal: bool = False, region: bool = False, chunk: int = CHUNK,
          progress: Callable[[int], None] | None = None) -> Summary:
    """Evaluate the space by the compiled path, streaming: counts, the `top` configurations that fit (all with
    `top` = 0) ranked by headroom (capacity − high), largest first, ties in sweep order; with `marginal`,
    those that fit only at the low end of overheads too; with `region`, the best headroom per TP·PP and b."""
    t0 = time.perf_counter()
    cases: dict = {}
    cap = space.capacity
    out = Summary(space, total=space.size)
    raw_rej: list = []
    heap: list = []  # (headroom, -ordinal, record): the worst kept on top
    kept: list = []
    sentinel = np.iinfo(np.int64).min
    for blk in iter_blocks(space, chunk, raw_rej, progress, cases):
        n = blk.size
        out.valid += n
        fit = blk.high <= cap
        n_fit = int(np.count_nonzero(fit))
        n_low = int(np.count_nonzero(blk.low <= cap))
        out.fits += n_fit
        out.marginal += n_low - n_fit
        if region:
            key = blk.combo["tp"] * blk.combo["pp"]
            rows = out.region.setdefault(key, (np.full(len(space.b), sentinel), np.full(len(space.b), sentinel)))
            for row, arr in zip(rows, (blk.high, blk.low)):
                best = (cap - arr).max(axis=(0, 1, 2))
                row[blk.b_idx] = np.maximum(row[blk.b_idx], best)
        listed = (blk.low <= cap) if marginal else fit
        count = n_low if marginal else n_fit
        if not count:
            continue
        head = (cap - blk.high).ravel()
        idx = np.flatnonzero(listed.ravel())
        if top:
            hv = head[idx]
            if len(heap) >= top:
                keep = hv >= heap[0][0]
                idx, hv = idx[keep], hv[keep]
            if idx.size > top:
                kth = np.partition(hv, idx.size - top)[idx.size - top]
                idx = np.concatenate([idx[hv > kth], idx[hv == kth][: top - int(np.count_nonzero(hv > kth))]])
        ords = blk.ordinals(idx) if idx.size else np.zeros(0, dtype=np.int64)
        for i, o in zip(idx.tolist(), ords.tolist()):
            item = (int(head[i]), -o)
            if not top:
                kept.append((item, blk.record(i)))
            elif len(heap) < top:
                heapq.heappush(heap, (*item, blk.record(i)))
            elif item > heap[0][:2]:
                heapq.heapreplace(heap, (*item, blk.record(i)))
    items = kept if not top else [((h, o), r) for h, o, r in heap]
    out.ranked = [r for _, r in sorted(items, key=lambda x: (-x[0][0], -x[0][1]))]
    agg: dict[tuple, int] = {}
    for rule, where, reason, count in raw_rej:
        agg[(rule, where, reason)] = agg.get((rule, where, reason), 0) + count
    out.rejections = [Rejection(*k, n) for k, n in agg.items()]
    out.cases = len(cases)
    out.derive_seconds = sum(c.seconds for c in cases.values() if c.created >= t0)
    out.seconds = time.perf_counter() - t0
    return out


def compiled_records(space: Space, chunk: int = CHUNK) -> tuple[dict[int, dict], list[Rejection]]:
    """Every valid configuration's record by the compiled path, keyed by ordinal (for tests: small spaces)."""
    raw: list = []
    recs = {}
    for blk in iter_blocks(space, chunk, raw):
        for i in range(blk.size):
            r = blk.record(i)
            recs[r["ordinal"]] = r
    return recs, [Rejection(*x) for x in raw]


# --------------------------------------------------------------------------------------------- reference
def reference_records(space: Space, ordinals=None) -> tuple[dict[int, dict], dict[int, str]]:
    """The per-configuration loop: a `Scenario` per configuration through `analysis.memory`, `peak`, `verdict`.
    Returns records of valid configurations and the reason of every rejected one, keyed by ordinal."""
    from .analysis import memory, peak, verdict

    base, cap = space.base, space.capacity
    records: dict[int, dict] = {}
    rejected: dict[int, str] = {}
    axes = [getattr(space, a) for a in AXES]
    it = enumerate(itertools.product(*axes)) if ordinals is None else (
        (o, tuple(ax[int(i)] for ax, i in zip(axes, np.unravel_index(o, space.shape)))) for o in ordinals)
    for ordinal, (tp, pp, ep, etp, rc, sched, z, m, s, b) in it:
        try:
            dp = check_world(space.gpus, tp, pp)
            layout = pipeline_layout(base, pp)
            par = make_parallel(base, space.gpus, tp, pp, ep, etp)
            scn = base.replace(parallel=par, layout=layout, recompute_name=rc, schedule=sched,
                               zero=zero_stage(z), microbatches=m, b=b, s=s)
        except SymmemError as e:
            rejected[ordinal] = str(e)
            continue
        mems = memory(scn)
        top = peak(mems)
        comps = (top.states.weights, top.states.gradients, top.states.optimizer, top.activations)
        records[ordinal] = {
            "ordinal": ordinal, "tp": tp, "pp": pp, "ep": ep, "etp": etp, "dp": dp, "edp": par.expert_dp,
            "layout": layout.kind, "recompute": rc, "schedule": schedule_name(sched), "zero": z,
            "microbatches": scn.m, "s": s, "b": b, "stage": top.stage.index, **dict(zip(COMPONENTS, comps)),
            "binding": COMPONENTS[comps.index(max(comps))], "allocated": top.allocated, "low": top.low,
            "high": top.high, "headroom": cap - top.high, "verdict": verdict(top.low, top.high, cap)}
    return records, rejected

