"""Sweeps of parallel configurations: enumeration, the rules that reject, and two evaluation paths.

The space is the product of eleven axes, in this order (the order ranks ties and numbers each configuration):
TP, CP, PP, EP, ETP, recomputation, schedule, ZeRO, micro-batches M, sequence length s, micro-batch size b.
A configuration is valid when the GPU count is DP·TP·CP·PP with DP an integer, a pipeline layout exists (`paper`
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
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from symmem.accounting.recompute import policy
from symmem.accounting.states import zero_stage
from symmem.errors import SymmemError
from symmem.parallel.schedule import Schedule
from symmem.scenario import Scenario
from symmem.sweep.evaluate import CHUNK, COMPONENTS, Block, iter_blocks
from symmem.sweep.rules import RULES, check_world, global_batch_reason, make_parallel, pipeline_layout

AXES = ("tp", "cp", "pp", "ep", "etp", "recompute", "schedule", "zero", "microbatches", "s", "b")
__all__ = ["AXES", "CHUNK", "COMPONENTS", "RULES", "Block", "Rejection", "Space", "Summary", "compiled_records",
           "iter_blocks", "pipeline_layout", "reference_records", "sweep", "microbatch_candidates"]


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
    cp: tuple[int, ...] = (1,)  # context-parallel sizes (each must divide every s)
    # Megatron's --global-batch-size: sequences per iteration; a configuration counts only where micro-batch x M x
    # DP equals it (megatron/core/num_microbatches_calculator.py: M = global batch // (micro-batch x DP), asserted
    # to divide); `microbatches` then holds every M some layout needs (`microbatch_candidates`)
    global_batch: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise SymmemError(f"gpus = {self.gpus!r}: must be a positive integer")
        for name in AXES:
            values = getattr(self, name)
            if not values:
                raise SymmemError(f"{name}: empty; give at least one value")
        for name in ("tp", "cp", "pp", "ep", "etp", "s", "b"):
            for v in getattr(self, name):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise SymmemError(f"{name} = {v!r}: must be a positive integer")
        for m in self.microbatches:
            if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
                raise SymmemError(f"microbatches = {m!r}: must be a positive integer")
        if self.global_batch is not None and (isinstance(self.global_batch, bool)
                                              or not isinstance(self.global_batch, int) or self.global_batch < 1):
            raise SymmemError(f"global_batch = {self.global_batch!r}: must be a positive integer")
        for z in self.zero:
            zero_stage(z)
        for r in self.recompute:
            policy(r)
        pps = set(self.pp)  # linear in the axes, not their product: a long TP and PP axis stay cheap
        if not any(self.gpus % (t * c) == 0 and any(p in pps for p in _divisors(self.gpus // (t * c)))
                   for t in self.tp for c in self.cp):
            cp = f", CP in {list(self.cp)}" if self.cp != (1,) else ""
            raise SymmemError(f"gpus = {self.gpus}: no TP·{'CP·' if cp else ''}PP of the sweep divides it (TP in "
                              f"{list(self.tp)}{cp}, PP in {list(self.pp)})")
        for c in self.cp:  # each rank holds s/CP tokens (Scenario's rule), checked before anything is enumerated
            bad = next((s for s in self.s if s % c), None)
            if bad is not None:
                raise SymmemError(f"cp = {c}: must divide every swept sequence length (s = {bad} is not a multiple)")
        if self.size >= 2**62:
            raise SymmemError(f"the sweep has {self.size:.3g} configurations: too many to number; narrow the ranges")

    @property
    def capacity(self) -> int:
        return self.base.gpu_memory

    @cached_property  # a sweep asks for it once per record (a frozen dataclass: computed once, kept in __dict__)
    def shape(self) -> tuple[int, ...]:
        return tuple(len(getattr(self, a)) for a in AXES)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def strides(self) -> tuple[int, ...]:
        out, acc = [], 1
        for n in reversed(self.shape):
            out.append(acc)
            acc *= n
        return tuple(reversed(out))

    def config(self, ordinal: int) -> dict:
        """The axis values of configuration number `ordinal` (M shown as given: None means PP)."""
        idx = np.unravel_index(ordinal, self.shape)
        out = {a: getattr(self, a)[int(i)] for a, i in zip(AXES, idx, strict=True)}
        out["schedule"] = out["schedule"].spelled
        return out


def microbatch_candidates(gpus: int, tp, cp, pp, b, global_batch: int) -> tuple[int, ...]:
    """Every M that some layout of the axes needs for `global_batch` sequences per iteration: global batch /
    (micro-batch x DP), DP = GPUs / (TP x CP x PP), where it divides (Megatron's rule)."""
    out = set()
    for t in tp:
        for c in cp:
            for p in pp:
                if gpus % (t * c * p):
                    continue
                dp = gpus // (t * c * p)
                out |= {global_batch // (x * dp) for x in b if global_batch % (x * dp) == 0}
    return tuple(sorted(out))


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in small]


# ------------------------------------------------------------------------------------------------ the rules
# (symmem.sweep.rules: shared with the compiled path)


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
    rank_by: str = "headroom"  # how `ranked` is ordered: "headroom" here; the CLI may rank by "time"
    exact: bool = False  # evaluated one by one (symmem.sweep.exact), not by the compiled path
    # ranked by time under a measured profile: why each configuration that fits was left untimed (a link the
    # profile did not measure: `steptime.UnmeasuredLink`)
    untimed: list = field(default_factory=list)

    @property
    def does_not_fit(self) -> int:
        return self.valid - self.fits - self.marginal

    @property
    def rejected(self) -> int:
        return self.total - self.valid


def sweep(space: Space, top: int = 20, marginal: bool = False, region: bool = False, chunk: int = CHUNK,
          progress: Callable[[int], None] | None = None, lazy_events: bool = False,
          rank_by: str = "headroom") -> Summary:
    """Evaluate the space by the compiled path, streaming: counts, the `top` configurations that fit (all with
    `top` = 0) ranked by headroom (capacity − high), largest first, ties in sweep order; with `marginal`,
    those that fit only at the low end of overheads too; with `region`, the best headroom per TP·PP and b; with
    `lazy_events` each record's binding event left to `evaluate.finish_events`. With `rank_by` "time" (the
    space's base names a GPU) they are ranked by the estimated iteration time instead, fastest first, each record
    with its time, tokens/s and MFU (`sweep.timing`): timed on the tile's arrays (`sweep.timetable`), or one by one
    where an arrangement's costs have no such table."""
    from symmem.sweep import timing

    timed = rank_by == "time"
    if timed:
        timing.check_timed(space)
    elif rank_by != "headroom":
        raise SymmemError(f"rank_by = {rank_by!r}: must be 'headroom' or 'time'")
    t0 = time.perf_counter()
    out = Summary(space, total=space.size)

    def depth(i_pp: int, child: bool = False) -> _Depth:
        part = _sweep_depth(space, i_pp, top, marginal, region, chunk, None if child else progress, lazy_events,
                            timed, t0)
        if child:  # what crosses the pipe: no closures (a listed record's binding event found here)
            from symmem.sweep.evaluate import finish_events

            part.items = [(item, finish_events([r])[0]) for item, r in part.items]
            part.one_by_one = finish_events(part.one_by_one)
        return part

    from symmem._twocores import map_on_two_cores

    # the pipeline depths shared with a forked child where there are two cores (each a third to a fifth of the
    # sweep), then merged in sweep order: the same counts, records and rejections as one process
    depths = list(range(len(space.pp)))  # (in sweep order: the first error in it is raised, as one process would)
    order = sorted(depths, key=lambda i: -space.pp[i])  # handed out the deepest (the costliest) first
    parts = dict(zip(depths, map_on_two_cores(depth, depths, child_work=lambda i: depth(i, child=True),
                                              take_order=order), strict=True))
    items: list = []
    one_by_one: list = []
    raw_rej: list = []
    cases = 0
    for i_pp in range(len(space.pp)):
        part = parts[i_pp]
        out.valid += part.valid
        out.fits += part.fits
        out.marginal += part.marginal
        for key, rows in part.region.items():
            mine = out.region.setdefault(key, rows)
            if mine is not rows:
                out.region[key] = tuple(np.maximum(a, b) for a, b in zip(mine, rows, strict=True))
        items += part.items
        one_by_one += part.one_by_one
        raw_rej += part.rejected
        cases += part.cases
        out.derive_seconds += part.derive_seconds
        if progress and part.unreported:  # (the child's share, heard of here)
            progress(part.unreported)
    ranked = sorted(items, key=lambda x: (-x[0][0], -x[0][1]))
    out.ranked = [r for _, r in (ranked[:top] if top else ranked)]
    if timed:
        out.ranked = timing.ranked(space, out.ranked, one_by_one, top, out.untimed)
        out.rank_by = "time"
    agg: dict[tuple, int] = {}
    for rule, where, reason, count in raw_rej:
        agg[(rule, where, reason)] = agg.get((rule, where, reason), 0) + count
    out.rejections = [Rejection(*k, n) for k, n in agg.items()]
    out.cases = cases
    out.seconds = time.perf_counter() - t0
    return out


@dataclass
class _Depth:
    """What one pipeline depth of a sweep found (`_sweep_depth`), merged by `sweep`."""

    valid: int = 0
    fits: int = 0
    marginal: int = 0
    region: dict = field(default_factory=dict)
    items: list = field(default_factory=list)  # ((value, -ordinal), record): its best `top` (all with 0)
    one_by_one: list = field(default_factory=list)
    rejected: list = field(default_factory=list)
    cases: int = 0
    derive_seconds: float = 0.0
    unreported: int = 0  # configurations done that `progress` did not hear of (in the child)


def _sweep_depth(space: Space, i_pp: int, top: int, marginal: bool, region: bool, chunk: int, progress,
                 lazy_events: bool, timed: bool, t0: float) -> _Depth:
    """`sweep`'s loop over the configurations of one pipeline depth, `space.pp[i_pp]`: its counts, its best `top`
    records, and what it rejected, in sweep order."""
    from symmem.sweep.timetable import block_times

    cases: dict = {}
    cap = space.capacity
    out = _Depth()
    heap: list = []  # (value, -ordinal, record): the worst kept on top
    kept: list = []
    sentinel = np.iinfo(np.int64).min

    def heard(n: int) -> None:
        out.unreported += n

    for blk in iter_blocks(space, chunk, out.rejected, progress or heard, cases, depths=(i_pp,)):
        n = blk.size - blk.excluded
        out.valid += n
        fit = blk.fits_high
        n_fit = int(np.count_nonzero(fit))
        n_low = int(np.count_nonzero(blk.fits_low))
        out.fits += n_fit
        out.marginal += n_low - n_fit
        if region:
            keys = blk.par["tp"] * blk.pp
            heads = [cap - arr if blk.ok is None else np.where(blk.ok, cap - arr, sentinel)
                     for arr in (blk.high, blk.low)]  # configurations off the global batch: none
            bests = [h.max(axis=(1, 2, 3)) for h in heads]  # (arrangement, b)
            for key in np.unique(keys).tolist():
                rows = out.region.setdefault(key, (np.full(len(space.b), sentinel),
                                                   np.full(len(space.b), sentinel)))
                for row, best in zip(rows, bests, strict=True):
                    row[blk.b_idx] = np.maximum(row[blk.b_idx], best[keys == key].max(axis=0))
        listed = blk.fits_low if marginal else fit
        count = n_low if marginal else n_fit
        if not count:
            continue
        idx = np.flatnonzero(listed.ravel())
        if timed:
            seconds = block_times(blk, idx)
            if seconds is None:
                out.one_by_one += [blk.record(i, lazy_events) for i in idx.tolist()]
                continue
            hv = -seconds  # larger is better, as headroom
        else:
            hv = cap - blk.reserved_at(idx, 1)  # headroom of the listed ones only, aligned with idx
        if top:
            if len(heap) >= top:
                keep = hv >= heap[0][0]
                idx, hv = idx[keep], hv[keep]
            if idx.size > top:
                kth = np.partition(hv, idx.size - top)[idx.size - top]
                first = np.concatenate([np.flatnonzero(hv > kth),
                                        np.flatnonzero(hv == kth)[: top - int(np.count_nonzero(hv > kth))]])
                idx, hv = idx[first], hv[first]
        ords = blk.ordinals(idx) if idx.size else np.zeros(0, dtype=np.int64)
        for i, h, o in zip(idx.tolist(), hv.tolist(), ords.tolist(), strict=True):
            item = (h if timed else int(h), -o)
            if not top:
                kept.append((item, _record(blk, i, lazy_events, timed, h)))
            elif len(heap) < top:
                heapq.heappush(heap, (*item, _record(blk, i, lazy_events, timed, h)))
            elif item > heap[0][:2]:
                heapq.heapreplace(heap, (*item, _record(blk, i, lazy_events, timed, h)))
    out.items = kept if not top else [((h, o), r) for h, o, r in heap]
    out.cases = len(cases)
    out.derive_seconds = sum(c.seconds for c in cases.values() if c.created >= t0)
    return out


def _record(blk, i: int, lazy_events: bool, timed: bool, value) -> dict:
    """The record of a listed position; ranked by time, with its time (`value` is minus the seconds)."""
    r = blk.record(i, lazy_events)
    if timed:
        r["time_s"] = -value
    return r


def compiled_records(space: Space, chunk: int = CHUNK, ordinals=None) -> tuple[dict[int, dict], list[Rejection]]:
    """Every valid configuration's record by the compiled path (those of `ordinals` only, if given), keyed by
    ordinal (for tests: small spaces)."""
    raw: list = []
    recs = {}
    wanted = None if ordinals is None else set(ordinals)
    for blk in iter_blocks(space, chunk, raw):
        ords = blk.ordinals(np.arange(blk.size))
        ok = None if blk.ok is None else blk.ok.ravel()
        for i, o in enumerate(ords.tolist()):
            if ok is not None and not ok[i]:
                continue
            if wanted is None or o in wanted:
                r = blk.record(i)
                recs[r["ordinal"]] = r
            else:
                recs[o] = None
    return recs, [Rejection(*x) for x in raw]


# --------------------------------------------------------------------------------------------- reference
def reference_records(space: Space, ordinals=None) -> tuple[dict[int, dict], dict[int, str]]:
    """The per-configuration loop: a `Scenario` per configuration through `analysis.memory`, `peak`, `verdict`.
    Returns records of valid configurations and the reason of every rejected one, keyed by ordinal."""
    from symmem.accounting.analysis import memory, verdict

    base, cap = space.base, space.capacity
    records: dict[int, dict] = {}
    rejected: dict[int, str] = {}
    axes = [getattr(space, a) for a in AXES]
    it = enumerate(itertools.product(*axes)) if ordinals is None else (
        (o, tuple(ax[int(i)] for ax, i in zip(axes, np.unravel_index(o, space.shape), strict=True))) for o in ordinals)
    for ordinal, (tp, cp, pp, ep, etp, rc, sched, z, m, s, b) in it:
        try:
            dp = check_world(space.gpus, tp, pp, cp)
            layout = pipeline_layout(base, pp)
            par = make_parallel(base, space.gpus, tp, pp, ep, etp, cp)
            scn = base.replace(parallel=par, layout=layout, recompute_name=rc, schedule=sched,
                               zero=zero_stage(z), microbatches=m, b=b, s=s)
        except SymmemError as e:
            rejected[ordinal] = str(e)
            continue
        if space.global_batch is not None and b * scn.m * dp != space.global_batch:
            rejected[ordinal] = global_batch_reason(space.global_batch)
            continue
        try:
            mems = memory(scn)  # a profile may refuse a configuration (torchtitan 9dec370: TP; Float8 with per-op AC)
        except SymmemError as e:
            rejected[ordinal] = str(e)
            continue
        top = max(mems, key=lambda m: (m.peak_allocated, -m.stage.index))  # the stage with the highest peak
        pk = top.peak
        low, high = top.reserved
        comps = (top.states.weights, top.states.gradients, top.states.optimizer,
                 top.peak_allocated - top.states.total)
        event = " ".join(x for x in (pk.event.phase, pk.event.part, pk.event.op) if x)
        records[ordinal] = {
            "ordinal": ordinal, "tp": tp, "cp": cp, "pp": pp, "ep": ep, "etp": etp, "dp": dp, "edp": par.expert_dp,
            "layout": layout.kind, "recompute": rc, "schedule": sched.spelled, "zero": z,
            "microbatches": scn.m, "s": s, "b": b, "stage": top.stage.index,
            **dict(zip(COMPONENTS, comps, strict=True)),
            "binding": COMPONENTS[comps.index(max(comps))], "event": event, "peak_allocated": top.peak_allocated,
            "low": low, "high": high, "headroom": cap - high, "verdict": verdict(low, high, cap)}
    return records, rejected

