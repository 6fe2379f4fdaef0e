"""The compiled path of a sweep: exact vectorised evaluation over tiles of the configuration grid.

For each PP (one pipeline layout) the valid (TP, EP, ETP) arrangements are stacked on one axis; for each
recomputation policy the structural case is derived once (`sweep_compile.compile_case`); then, per schedule, the
grid (arrangement, ZeRO, M, s, b) is evaluated in tiles of at most `chunk` configurations:

* parameters per GPU of every stage class: the compiled polynomials in t, ep, etp over the arrangements;
* model states: the ZeRO sharding of `states.state_bytes`, on arrays;
* activations per micro-batch: the compiled polynomial in b, s, t, ep, etp over the tile;
* in flight: `Schedule.in_flight` of the class's lowest stage for each M (computed once per PP and schedule);
* the peak stage (the largest allocation, the lowest index on ties), then fragmentation and buffers as
  `analysis.stage_memory` applies them (float fractions of the exact integer allocation, rounded up).

Integers stay exact: a bound computed with Python integers picks int64 (no overflow possible) or Python integers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from symmem.accounting.params import GROUPS, MOE_GROUPS
from symmem.accounting.states import Precision, zero_stage
from symmem.errors import SymmemError
from symmem.parallel.schedule import WALKED, Schedule
from symmem.sweep.compile import INT64_SAFE, array_maxima, compile_case, derived_parallel
from symmem.sweep.rules import GLOBAL_BATCH_RULE, check_world, global_batch_reason, make_parallel, pipeline_layout

COMPONENTS = ("weights", "gradients", "optimizer", "dynamic")  # dynamic: what the step adds at the peak event
CHUNK = 1 << 18  # configurations per evaluated tile


@dataclass
class Block:
    """One evaluated tile: arrays shaped (arrangement, ZeRO, M, s, b) over the index arrays given."""

    space: object  # the sweep.Space
    pp: int
    layout: str
    recompute: str
    schedule: str
    par: dict[str, np.ndarray]  # per arrangement: tp, ep, etp, dp, edp, and `base` (its first ordinal)
    z_idx: np.ndarray
    m_idx: np.ndarray
    s_idx: np.ndarray
    b_idx: np.ndarray
    m_values: np.ndarray  # M of each m_idx (None resolved to PP)
    fits_high: np.ndarray  # bool: high <= capacity (fits)
    fits_low: np.ndarray  # bool: low <= capacity (fits at the low end of overheads)
    alloc: np.ndarray
    cls: np.ndarray  # which stage class peaks
    stage_index: tuple[int, ...]  # the stage each class is named by
    states: np.ndarray  # (classes, arrangements, ZeRO, 3): weights, gradients, optimizer bytes
    classes: tuple = ()  # the structural case's stage classes (which event binds, in `record`)
    kn: np.ndarray | None = None  # in flight per class and M: kn / kd
    kd: int = 1
    ok: np.ndarray | None = None  # bool, the alloc's shape: of the global batch (Space.global_batch), or None
    excluded: int = 0  # configurations of this tile that are not of the global batch (neither fit nor counted)
    pars: tuple = ()  # per arrangement: its `Parallel` (the step time's tables, `sweep.timetable`)

    @property
    def size(self) -> int:
        return int(self.alloc.size)

    def reserved_at(self, flat: np.ndarray, end: int) -> np.ndarray:
        """The reserved estimate (end 0: low, 1: high) at the flat positions `flat`, as
        `analysis.StageMemory.reserved` computes it: ceil(peak · (1 + fragmentation)) + buffers."""
        base = self.space.base
        return _reserved(self.alloc.ravel()[flat], base.fragmentation[end]) + base.comm_buffers[end]

    @property
    def low(self) -> np.ndarray:  # whole arrays: the feasible-region plot and tests (the sweep counts by mask)
        return self.reserved_at(np.arange(self.size), 0).reshape(self.alloc.shape)

    @property
    def high(self) -> np.ndarray:
        return self.reserved_at(np.arange(self.size), 1).reshape(self.alloc.shape)

    def ordinals(self, flat: np.ndarray) -> np.ndarray:
        """Sweep numbers of the flat positions `flat` (increasing with `flat`)."""
        pi, zi, mi, si, bi = np.unravel_index(flat, self.alloc.shape)
        st = self.space.strides
        return (self.par["base"][pi] + self.z_idx[zi] * st[7] + self.m_idx[mi] * st[8] + self.s_idx[si] * st[9]
                + self.b_idx[bi] * st[10])

    def record(self, flat: int, lazy_event: bool = False) -> dict:
        """One configuration's record; with `lazy_event` its binding event is left None and `_event` holds the
        function that finds it (what costs most in a record: a sweep ranked by time finds it for the listed
        ones only, `finish_events`)."""
        from symmem.accounting.analysis import verdict

        pi, zi, mi, si, bi = (int(x) for x in np.unravel_index(flat, self.alloc.shape))
        c = int(self.cls.flat[flat])
        w, g, o = (int(x) for x in self.states[c, pi, zi])
        alloc = int(self.alloc.flat[flat])
        comps = (w, g, o, alloc - w - g - o)
        sp = self.space
        at = {"t": int(self.par["tp"][pi]), "ep": int(self.par["ep"][pi]), "etp": int(self.par["etp"][pi]),
              "cp": int(self.par["cp"][pi]), "V": int(self.par["V"][pi]), "s": sp.s[self.s_idx[si]],
              "b": sp.b[self.b_idx[bi]]}
        cls, zero, k = self.classes[c], zero_stage(sp.zero[self.z_idx[zi]]), Fraction(int(self.kn[c, mi]), self.kd)
        event = None if lazy_event else binding_event(cls, at, zero, k)
        base = sp.base  # `reserved_at` of this one position: the peak as a float times 1 + f, rounded up, + buffers
        low, high = (math.ceil(float(alloc) * (1 + base.fragmentation[end])) + base.comm_buffers[end]
                     for end in (0, 1))
        cap = sp.capacity
        par = {k: int(self.par[k][pi]) for k in ("tp", "cp", "ep", "etp", "dp", "edp")}
        return {
            "ordinal": int(self.par["base"][pi]) + sum(
                int(i) * st for i, st in zip((self.z_idx[zi], self.m_idx[mi], self.s_idx[si], self.b_idx[bi]),
                                             sp.strides[7:], strict=True)),
            "tp": par["tp"], "cp": par["cp"], "pp": self.pp, "ep": par["ep"], "etp": par["etp"], "dp": par["dp"],
            "edp": par["edp"], "layout": self.layout, "recompute": self.recompute, "schedule": self.schedule,
            "zero": sp.zero[self.z_idx[zi]], "microbatches": int(self.m_values[mi]),
            "s": sp.s[self.s_idx[si]], "b": sp.b[self.b_idx[bi]],
            "stage": self.stage_index[c], **dict(zip(COMPONENTS, comps, strict=True)),
            "binding": COMPONENTS[comps.index(max(comps))], "event": event, "peak_allocated": alloc,
            "low": low, "high": high,
            "headroom": cap - high, "verdict": verdict(low, high, cap),
            **({"_event": lambda: binding_event(cls, at, zero, k)} if lazy_event else {}),
        }


def finish_events(records: list[dict]) -> list[dict]:
    """`records` with each lazily left binding event found (`Block.record(..., lazy_event=True)`)."""
    out = []
    for r in records:
        r = dict(r)
        find = r.pop("_event", None)
        if find is not None:
            r["event"] = find()
        out.append(r)
    return out


def _value(poly, at: dict) -> Fraction:
    total = Fraction(0)
    for c, powers in poly.terms:
        for name, e in powers:
            c = c * Fraction(at[name]) ** e
        total += c
    return total


_BINDING: dict = {}


def binding_event(cls, at: dict, zero: int, k: Fraction) -> str:
    """Which candidate event of the stage class binds at one configuration, exactly as `timeline.stage_peak`
    picks it: the first of the largest ceil((k − 1) · saved + own + ZeRO extras)."""
    key = (id(cls), tuple(sorted(at.items())), min(zero, 3) if zero >= 2 else 0, k)
    hit = _BINDING.get(key)
    if hit is not None and hit[0] is cls:
        return hit[1]
    base = (k - 1) * _value(cls.saved, at)
    best, label = None, "optimizer step"
    for ev in cls.events:
        extra = ev.zero3 if zero >= 3 else ev.zero2 if zero >= 2 else None
        v = base + _value(ev.own, at) + (_value(extra, at) if extra is not None else 0)
        v = -((-v.numerator) // v.denominator)
        if best is None or v > best:
            best, label = v, ev.label
    if len(_BINDING) > 100_000:
        _BINDING.clear()
    _BINDING[key] = (cls, label)
    return label


def tiles(sizes: tuple[int, ...], limit: int) -> Iterator[tuple[slice, ...]]:
    """Tiles of a grid of `sizes`, each at most `limit` cells (or part of one row of the last axis), C order."""
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
def schedule_table(sched: Schedule, pp: int, m_values: tuple[int, ...], reps: tuple[int, ...]):
    """For each M: valid, or the engine's reason; for the valid ones, in-flight numerators per class (at the
    class's lowest stage) over one denominator. Checks that in flight never grows with the stage index, which is
    what lets a class of identical stages be represented by its lowest stage."""
    valid, reasons, ks = [], [], []
    for i, m in enumerate(m_values):
        try:
            sched.check(pp, m)
        except SymmemError as e:
            reasons.append((i, str(e)))
            continue
        k = [sched.in_flight(st, pp, m) for st in range(pp)]
        if any(k[j + 1] > k[j] for j in range(pp - 1)):
            raise SymmemError(f"schedule {sched.name}: in-flight micro-batches grow with the stage index at "
                              f"PP = {pp}, M = {m}; the compiled sweep assumes they do not")
        valid.append(i)
        ks.append([k[r] for r in reps])
    den = math.lcm(*(f.denominator for row in ks for f in row)) if ks else 1
    kn = np.array([[int(f * den) for f in row] for row in ks], dtype=np.int64).T.reshape(len(reps), len(ks))
    return np.array(valid, dtype=np.int64), tuple(reasons), kn, den


def _layout_reason(sched: Schedule, scn) -> str | None:
    """Why the schedule cannot run on the scenario's pipeline layout (interleaving's chunks), or None."""
    try:
        sched.check_layout(tuple(len(st.layers) for st in scn.stages))
    except SymmemError as e:
        return str(e)
    return None


def state_arrays(dense: np.ndarray, moe: np.ndarray, dp: np.ndarray, edp: np.ndarray, precision: Precision,
                 zero: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`states.state_bytes` over arrays of arrangements (one stage per GPU: DualPipe is not compiled)."""

    def share(n, group, sharded):
        return -((-n) // group) if sharded else n

    def part(nbytes, sharded):
        return nbytes * (share(dense, dp, sharded) + share(moe, edp, sharded))

    z = zero_stage(zero)
    return (part(precision.weight_bytes, z >= 3), part(precision.grad_bytes, z >= 2),
            part(precision.master_bytes + precision.optimizer_bytes, z >= 1))


def _clip(x: np.ndarray) -> np.ndarray:
    """Back to int64; a value past 2^63 bytes (no GPU has that) saturates, so it can only be 'does not fit'."""
    if x.dtype != object:
        return x
    return np.array([min(int(v), 2**63 - 1) for v in x.flat], dtype=np.int64).reshape(x.shape)


def _arrangements(space, pp: int, i_pp: int, reject) -> tuple[object, dict]:
    """The valid (TP, CP, EP, ETP) arrangements for PP, grouped by what the derivation depends on beyond PP: EP
    for histogram routing (TP, CP, EP and ETP are variables of the compiled polynomials), and TP 1 under a rule
    set whose workspaces exist only under sequence parallelism (below); each arrangement
    carries the vocabulary the profile allocates at its TP (`V`, a variable where Megatron pads it per TP);
    rejections reported in the order the rules are checked."""

    base, gpus, st = space.base, space.gpus, space.strides
    per_combo = len(space.recompute) * len(space.schedule) * len(space.zero) * len(space.microbatches) * \
        len(space.s) * len(space.b)
    layout: object = None
    groups: dict = {}
    pad = base.profile.padded_vocabulary if base.model.has("V") else None
    for (i_tp, tp), (i_cp, cp), (i_ep, ep), (i_etp, etp) in itertools.product(
            enumerate(space.tp), enumerate(space.cp), enumerate(space.ep), enumerate(space.etp)):
        try:
            dp = check_world(gpus, tp, pp, cp)
        except SymmemError as e:
            reject("world", (("tp", tp), ("cp", cp), ("pp", pp)), str(e), per_combo)
            continue
        if layout is None:
            try:
                layout = pipeline_layout(base, pp)
            except SymmemError as e:
                layout = e
        if isinstance(layout, SymmemError):
            reject("layout", (("pp", pp),), str(layout), per_combo)
            continue
        try:
            par = make_parallel(base, gpus, tp, pp, ep, etp, cp)
            par.validate_for(base.model)
            base.routing.check_model(base.model, ep)
        except SymmemError as e:
            reject("parallel", (("tp", tp), ("cp", cp), ("pp", pp), ("ep", ep), ("etp", etp)), str(e), per_combo)
            continue
        derive_as = derived_parallel(par, base.rules)  # TP 1 with workspaces: derived apart
        key = (ep if base.routing.kind == "histogram" else None, derive_as is not par, cp > 1)
        g = groups.setdefault(key, {"par": derive_as, "tp": [], "cp": [], "ep": [], "etp": [], "dp": [], "edp": [],
                                    "base": [], "pars": [], "V": []})
        for k, v in (("tp", tp), ("cp", cp), ("ep", ep), ("etp", etp), ("dp", dp), ("edp", par.expert_dp),
                     ("base", i_tp * st[0] + i_cp * st[1] + i_pp * st[2] + i_ep * st[3] + i_etp * st[4]),
                     ("pars", par), ("V", pad(base.model.value("V"), tp) if pad is not None else 0)):
            g[k].append(v)
    return layout, groups


def iter_blocks(space, chunk: int = CHUNK, rejected: list | None = None,
                progress: Callable[[int], None] | None = None, cases: dict | None = None,
                depths: tuple[int, ...] | None = None) -> Iterator[Block]:
    """Every valid configuration of `space`, exactly evaluated, in tiles of at most `chunk`; with `depths`, those
    of the pipeline depths `space.pp[i]` for i in `depths` only.

    Rejections are appended to `rejected` as `(rule, where, reason, count)`; `progress(n)` hears of every n
    configurations done (valid or not); `cases` collects the structural cases used, by key."""
    base, st = space.base, space.strides
    n_sb = len(space.s) * len(space.b)

    def reject(rule: str, where: tuple, reason: str, count: int) -> None:
        if rejected is not None:
            rejected.append((rule, where, reason, count))
        if progress:
            progress(count)

    if any(sch.name in WALKED for sch in space.schedule):  # a caller's error: `needs_exact` routes these
        raise SymmemError("the compiled sweep does not walk ZB-H1 or DualPipe; evaluate them one by one "
                          "(symmem.sweep.exact.sweep_exact)")
    for i_pp, pp in enumerate(space.pp):
        if depths is not None and i_pp not in depths:
            continue
        layout, groups = _arrangements(space, pp, i_pp, reject)
        for g in groups.values():
            par = {k: np.array(v, dtype=np.int64) for k, v in g.items() if k not in ("par", "pars")}
            n_par = len(par["tp"])
            tep = {"t": par["tp"], "ep": par["ep"], "etp": par["etp"], "cp": par["cp"]}
            if base.profile.padded_vocabulary is not None and base.model.has("V"):
                tep["V"] = par["V"]
            for i_rc, rc in enumerate(space.recompute):
                rep = base.replace(parallel=g["par"], layout=layout, recompute_name=rc, schedule=Schedule(),
                                   microbatches=None)
                regions = []
                for s_part, b_part, scn in _regions(rep, space):
                    case = compile_case(scn)
                    if cases is not None:
                        cases[case.key] = case
                    counts = []
                    for c in case.classes:
                        per = {grp: np.broadcast_to(p.ceil_array(tep), (n_par,))
                               for grp, p in zip(GROUPS, c.params, strict=True)}
                        counts.append((per["dense"], sum(per[grp] for grp in MOE_GROUPS)))
                    bufs = _buffers(scn, case, g["pars"], space.s)
                    regions.append((s_part, b_part, case, tuple(c.index for c in case.classes), counts, {}, bufs))
                for i_sch, sched in enumerate(space.schedule):
                    # M not given: the schedule's default (PP; 2·PP for DualPipe), as Scenario.m resolves it
                    m_values = tuple(sched.default_microbatches(pp) if m is None else m for m in space.microbatches)
                    valid_m, reasons, _, _ = schedule_table(sched, pp, m_values, regions[0][3])
                    for mi, reason in reasons:
                        reject("schedule", (("pp", pp), ("schedule", sched.spelled),
                                            ("microbatches", space.microbatches[mi])), reason,
                               n_par * len(space.zero) * n_sb)
                    layout_reason = _layout_reason(sched, rep)
                    if layout_reason is not None:
                        # as Scenario checks it: after M, so only the valid M values are rejected here
                        for mi in valid_m:
                            reject("schedule", (("pp", pp), ("schedule", sched.spelled),
                                                ("microbatches", space.microbatches[int(mi)])), layout_reason,
                                   n_par * len(space.zero) * n_sb)
                        continue
                    bases = par["base"] + i_rc * st[5] + i_sch * st[6]
                    for s_part, b_part, case, reps, counts, acts_cache, bufs in regions:
                        valid, _, kn, kd = schedule_table(sched, pp, m_values, reps)
                        if not valid.size:
                            continue
                        states = _states(space, counts, par)  # one stage per GPU: DualPipe is not compiled
                        sizes = (n_par, len(space.zero), int(valid.size), s_part.stop - s_part.start,
                                 b_part.stop - b_part.start)
                        for p_sl, z_sl, m_sl, s_sl, b_sl in tiles(sizes, chunk):
                            s_sl = slice(s_sl.start + s_part.start, s_sl.stop + s_part.start)
                            b_sl = slice(b_sl.start + b_part.start, b_sl.stop + b_part.start)
                            key = (p_sl.start, p_sl.stop, s_sl.start, s_sl.stop, b_sl.start, b_sl.stop)
                            if key not in acts_cache:
                                if len(acts_cache) > 64:
                                    acts_cache.clear()
                                acts_cache[key] = _activations(case, space, {k: v[p_sl] for k, v in tep.items()},
                                                               s_sl, b_sl)
                            blk = _evaluate(space, acts_cache[key], kn[:, m_sl], kd, states[:, p_sl, z_sl],
                                            [zero_stage(z) for z in space.zero[z_sl]],
                                            None if bufs is None else bufs[:, p_sl, s_sl])
                            m_here = np.array(m_values)[valid[m_sl]]
                            ok, excluded = _of_global_batch(space, par["dp"][p_sl], m_here, b_sl, blk[2].shape)
                            if ok is not None:
                                blk = (blk[0] & ok, blk[1] & ok, *blk[2:])
                                if excluded and rejected is not None:
                                    rejected.append((GLOBAL_BATCH_RULE, (("pp", pp),),
                                                     global_batch_reason(space.global_batch), excluded))
                            yield Block(space, pp, layout.kind, rc, sched.spelled,
                                        {**{k: v[p_sl] for k, v in par.items()}, "base": bases[p_sl]},
                                        np.arange(len(space.zero))[z_sl], valid[m_sl],
                                        np.arange(len(space.s))[s_sl], np.arange(len(space.b))[b_sl],
                                        m_here, *blk, reps, states[:, p_sl, z_sl],
                                        case.classes, kn[:, m_sl], kd, ok, excluded, tuple(g["pars"][p_sl]))
                            if progress:
                                progress(int(blk[0].size))


def _of_global_batch(space, dp: np.ndarray, m: np.ndarray, b_sl: slice, shape) -> tuple[np.ndarray | None, int]:
    """Where micro-batch x M x DP is the space's global batch, shaped (arrangement, ZeRO, M, s, b) as a tile's
    arrays; and how many of the tile's configurations are not (None, 0 without a global batch)."""
    if space.global_batch is None:
        return None, 0
    b = np.array(space.b[b_sl], dtype=np.int64)
    ok = (dp[:, None, None, None, None] * m[None, None, :, None, None].astype(np.int64)
          * b[None, None, None, None, :]) == space.global_batch
    ok = np.broadcast_to(ok, shape)
    return ok, int(ok.size - np.count_nonzero(ok))


def _buffers(scn, case, pars: list, s_values: tuple[int, ...]) -> np.ndarray | None:
    """The profile's framework buffers (`analysis.stage_buffers`: DDP padding, TE's dummy weight-gradient buffers,
    workspaces, the RoPE table) per stage class, arrangement and s, exactly as `symmem memory` adds them: shaped
    (class, arrangement, s), or None when the profile has none. They depend on the arrangement's numbers (DP for
    the buffers' padding, the local weight shapes), so they are computed per arrangement with the engine's own
    function, and on s only linearly (the RoPE table): they are computed at s = 1 and 2 and checked at a third
    point before being extended to every swept s."""
    if scn.profile.buffers is None:
        return None
    key = (case.key, tuple(pars), s_values)
    hit = _BUFFERS.get(key)
    if hit is not None:
        return hit
    s = np.array(s_values, dtype=np.int64)
    out = np.zeros((len(case.classes), len(pars), len(s)), dtype=np.int64)
    for j, par in enumerate(pars):
        at = scn.replace(parallel=par)
        for c, cls in enumerate(case.classes):
            stage = at.stages[cls.index]
            v1, v2, v3 = (_buffer_total(at, stage, x) for x in (1, 2, 3))
            if v3 - v2 != v2 - v1:
                raise SymmemError(f"profile {scn.profile.name!r}: its buffers are not linear in s; the compiled "
                                  "sweep cannot extend them (check configurations with symmem memory)")
            out[c, j] = v1 + (v2 - v1) * (s - 1)
    if len(_BUFFERS) > 4096:
        _BUFFERS.clear()
    _BUFFERS[key] = out
    return out


_BUFFERS: dict = {}  # a sweep run again (or its plot) finds its arrangements' buffers here


@lru_cache(maxsize=65536)
def _buffer_total(scn, stage, s: int) -> int:
    """The framework buffers of one GPU of `stage` at sequence length `s` (`analysis.stage_buffers` at that s)."""
    from symmem.accounting.analysis import values
    from symmem.model import stage_parts

    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    return sum(buf.nbytes for buf in scn.profile.buffers(scn, stage, parts, values(scn, s_value=s)))


def _regions(rep, space) -> list[tuple[slice, slice, object]]:
    """Parts of the (s, b) grid that share one derivation. The paper's dataflows do not depend on b or s; the
    Hugging Face ones (`Scenario.flow_impl`) depend on whether b = 1 and whether s = 1 (a reshape is then a
    view), so b = 1 and s = 1 (the first values of the sorted axes, when present) are derived apart. A model whose
    sizes are step functions of s (V3.2, V4: `compile.stepwise_in_s`) is derived once per s."""
    from symmem.sweep.compile import stepwise_in_s

    ns, nb = len(space.s), len(space.b)
    stepwise = stepwise_in_s(rep)
    if rep.flow_impl is None and not stepwise:
        return [(slice(0, ns), slice(0, nb), rep)]
    if stepwise:
        s_parts = [slice(i, i + 1) for i in range(ns)]
    else:
        s_parts = [slice(0, 1), slice(1, ns)] if space.s[0] == 1 and ns > 1 else [slice(0, ns)]
    if rep.flow_impl is None:
        return [(sp, slice(0, nb), rep.replace(s=space.s[sp.start])) for sp in s_parts]
    b_parts = [slice(0, 1), slice(1, nb)] if space.b[0] == 1 and nb > 1 else [slice(0, nb)]
    return [(sp, bp, rep.replace(b=space.b[bp.start], s=space.s[sp.start])) for sp in s_parts for bp in b_parts]


def _states(space, counts, par) -> np.ndarray:
    """(classes, arrangements, ZeRO, 3) bytes; Python integers if int64 could overflow (it cannot, for any real
    model, but the bound is checked rather than assumed)."""
    prec = space.base.precision
    n_max = max(int(max(d.max(), m.max())) for d, m in counts)
    dt = np.int64 if 2 * n_max * prec.per_parameter < INT64_SAFE else object
    out = np.zeros((len(counts), len(par["tp"]), len(space.zero), 3), dtype=dt)
    for c, (dense, moe) in enumerate(counts):
        for zi, z in enumerate(space.zero):  # dense states shard over DP·CP (Parallel.dense_shard)
            for j, arr in enumerate(state_arrays(dense.astype(dt), moe.astype(dt), (par["dp"] * par["cp"]).astype(dt),
                                                 par["edp"].astype(dt), prec, z)):
                out[c, :, zi, j] = arr
    return out


def _activations(case, space, tep: dict, s_sl: slice, b_sl: slice) -> list[tuple[np.ndarray, dict]]:
    """Per stage class, shaped (arrangement, s, b): the saved bytes per micro-batch, and the largest candidate
    event's bytes without the other micro-batches in flight, by ZeRO variant (0: below 2, 2, 3): the elementwise
    maximum of the undominated candidates' exact ceilings, plus each group's ZeRO extras."""
    s = np.array(space.s[s_sl], dtype=np.int64)[None, :, None]
    b = np.array(space.b[b_sl], dtype=np.int64)[None, None, :]
    arrays = {"b": b, "s": s, **{k: v[:, None, None] for k, v in tep.items()}}
    tep3 = {k: v[:, None, None] for k, v in tep.items()}
    variants = {_variant(z) for z in space.zero}
    maxima = array_maxima(arrays)  # once for every candidate of every class
    powers: dict = {}  # the arrays' powers, likewise
    shape = (len(tep["t"]), s.shape[1], b.shape[2])
    out = []
    for c in case.classes:
        num, den = c.saved.fraction_array(arrays)
        saved = (np.broadcast_to(num, shape), den if np.ndim(den) == 0 else np.broadcast_to(den, shape))
        dyn: dict[int, np.ndarray] = {}
        for g in c.groups:
            nums, den = g.scaled  # over one denominator: the ceiling of the largest, one division
            m = None
            for p in nums:
                v = p.ceil_array(arrays, maxima, powers)
                m = v if m is None else np.maximum(m, v)
            d = den.ceil_array({k: v for k, v in arrays.items() if k in den.variables})
            if not (np.ndim(d) == 0 and d == 1):
                if m.dtype == object or np.asarray(d).dtype == object:
                    m, d = m.astype(object), np.asarray(d).astype(object)
                m = -((-m) // d)
            m = np.broadcast_to(m, shape)
            for zv, extra in ((0, None), (2, g.zero2), (3, g.zero3)):
                if zv not in variants:
                    continue  # a ZeRO variant the sweep does not ask for (megatron-te: ZeRO-1 only)
                v = m if extra is None or not extra.terms else m + extra.ceil_array(tep3)
                dyn[zv] = v if zv not in dyn else np.maximum(dyn[zv], v)
        out.append((saved, dyn))
    return out


def _variant(z: int) -> int:
    return 3 if z >= 3 else 2 if z == 2 else 0


def _evaluate(space, acts_mb: list, kn: np.ndarray, kd: int, states: np.ndarray, zeros: list[int],
              framework: np.ndarray | None = None):
    """(low, high, peak allocated, peak class) over (arrangement, ZeRO, M, s, b): per class, the model states +
    the profile's framework buffers (`framework`, (class, arrangement, s), or None) + ceil((k − 1) · saved per
    micro-batch) + the largest event's own bytes under the configuration's ZeRO; then the reserved range at the
    peak as `analysis.StageMemory.reserved` applies it."""
    base = space.base
    frag, bufs = base.fragmentation, base.comm_buffers
    n_cls = len(acts_mb)
    state_tot = states.sum(axis=3)  # (classes, arrangements, ZeRO)
    variants = [_variant(z) for z in zeros]
    a_max = [int(a[0].max()) for a, _ in acts_mb]
    d_max = [max(int(d[v].max()) for v in set(variants)) for _, d in acts_mb]
    k_max = [int(kn[c].max()) for c in range(n_cls)]
    b_max = [int(framework[c].max()) if framework is not None else 0 for c in range(n_cls)]
    alloc_bound = max(int(state_tot[c].max()) + a_max[c] * k_max[c] + d_max[c] + b_max[c] for c in range(n_cls))
    exact = (max(a_max[c] * k_max[c] for c in range(n_cls)) < INT64_SAFE
             and alloc_bound * (1 + max(frag[1], 1.0)) + bufs[1] < INT64_SAFE)
    dt = np.int64 if exact else object
    best = cls = None
    for c in range(n_cls):
        (num, den), dyn = acts_mb[c]
        k_1 = (kn[c] - kd).astype(dt)[None, :, None, None]
        whole = None
        if kd == 1 and (np.ndim(den) != 0 or den != 1):
            # saved per micro-batch in whole bytes (every tensor is, at a valid configuration): then
            # ceil((k - 1) · num / den) = (k - 1) · (num / den), divided once on (P, s, b), not at the full size
            n_, d_ = num.astype(dt), (den if np.ndim(den) == 0 else den.astype(dt))
            q, r = n_ // d_, n_ % d_  # (np.divmod has no object loop)
            if not r.any():
                whole = q
        if whole is not None:
            other = whole[:, None] * k_1
        else:
            other = num.astype(dt)[:, None] * k_1  # (P, M, s, b)
            den = den * kd if np.ndim(den) == 0 else den.astype(dt)[:, None] * kd
            if np.ndim(den) != 0 or den != 1:
                other = -((-other) // den)  # ceil((k − 1) · saved), exactly
        if len(set(variants)) == 1:
            d = dyn[variants[0]].astype(dt)[:, None]  # (P, 1, s, b)
        else:
            d = np.stack([dyn[v].astype(dt) for v in variants], axis=1)  # (P, Z, s, b)
        # what does not depend on M (states, framework buffers, the event's own bytes) is added on (P, Z, s, b)
        # first: one addition at the full (P, Z, M, s, b) size instead of three (exact: integers)
        static = state_tot[c].astype(dt)[:, :, None, None]
        if framework is not None:
            static = static + framework[c].astype(dt)[:, None, :, None]
        alloc = other[:, None] + (d + static)[:, :, None]
        if best is None:
            best, cls = alloc, np.zeros(alloc.shape, dtype=np.int8)
        else:
            up = alloc > best
            best = np.where(up, alloc, best)
            cls[up] = c
    # Fits: ceil(peak · (1 + f)) + buffers <= capacity, i.e. peak · (1 + f) <= capacity - buffers (an integer), in
    # the same float64 product `StageMemory.reserved` rounds up: exact, and no integer array of reserved bytes
    cap = space.capacity
    if best.dtype == object:
        fits = [np.array([math.ceil(x * (1 + f)) + b <= cap for x in best.flat]).reshape(best.shape)
                for f, b in zip(frag, bufs, strict=True)]
    else:
        as_float = best.astype(np.float64)
        fits = [as_float * (1 + f) <= cap - b for f, b in zip(frag, bufs, strict=True)]
    return fits[1], fits[0], _clip(best), cls


def _reserved(alloc: np.ndarray, f: float) -> np.ndarray:
    """ceil(alloc · (1 + f)) with alloc converted to a float first, as `StageMemory.reserved`."""
    g = 1 + f
    if alloc.dtype == object:
        return np.array([math.ceil(x * g) for x in alloc.flat], dtype=object).reshape(alloc.shape)
    return np.ceil(alloc.astype(np.float64) * g).astype(np.int64)
