"""Ranking by time on the compiled path: the step-time model (`symmem.steptime`) over a tile's arrays.

`symmem.steptime.step_time` times one configuration: each stage's costs of one micro-batch read off the dataflows
(`steptime.costs.stage_costs`), turned into seconds by the model's five constants, the slowest stage taken M times,
the others' mean over the schedule's bubble, and the iteration's once-only costs (data-parallel traffic and the
optimizer step of the stage with the most). Of these, only the per-micro-batch costs depend on b and s, and only
the once-only costs on ZeRO and M (ZeRO-3's gathers per micro-batch). So, per parallel arrangement and
recomputation (as the memory's structural cases):

* each stage's slot over the swept (s, b) grid, as arrays: read directly at every (s, b) when the grid has at most
  `DIRECT_POINTS` points, else through the forms the dataflows give the costs (`steptime.forms`: read at six
  (b, s) points, each form checked at a point it was not read from; a GEMM's rows proportional to b·s, its tiles
  counted at every (s, b));
* the slowest stage per (s, b) (the first on ties, as `features` picks it) and the other stages' mean slot, both in
  seconds under `CONSTANTS`;
* per ZeRO stage (and M under ZeRO-3) the once-only seconds, from the engine's own functions.

A configuration's time is then M·slot + bubble·mean + once + fixed, on arrays: no Scenario per configuration. It is
`step_time`'s figure to float rounding (tests/test_sweep_time.py holds the two side by side on every configuration
that fits). Arrangements whose costs are not of these forms (the Hugging Face dataflows, sizes stepwise in s) have
no table: the caller times their configurations one by one (`timing.rank_by_time`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from symmem.errors import SymmemError

DIRECT_POINTS = 6  # up to this many (s, b) points, read every point directly (the forms cost six readings)


@dataclass(frozen=True)
class SlotTable:
    """One arrangement and recomputation over the swept (s, b) grid, in seconds under `steptime.CONSTANTS`."""

    slot: np.ndarray  # (s, b): one micro-batch's slot of the slowest stage (the CP ring's exposed part included)
    mean: np.ndarray  # (s, b): the other stages' mean slot (the slowest stage's own when there is one stage)


def _stacked(points: list, shape: tuple[int, int]):
    """One stage's `StageCosts` read at every (s, b) point (C order) as one `StageCosts` of arrays shaped `shape`:
    the GEMMs' rows and every figure an array; what does not depend on b or s (the GEMMs' other sizes, the
    collectives' calls and spans) checked to be the same at every point."""
    from symmem.steptime.costs import StageCosts

    first = points[0]

    def grid(values) -> np.ndarray:
        return np.array(list(values), dtype=np.float64).reshape(shape)

    if any(len(c.gemms) != len(first.gemms) or [g[1:] for g in c.gemms] != [g[1:] for g in first.gemms]
           or {a: v[1:] for a, v in c.comm.items()} != {a: v[1:] for a, v in first.comm.items()} for c in points):
        raise SymmemError("a GEMM's sizes or a collective's calls depend on b or s")
    gemms = [(grid(c.gemms[i][0] for c in points), *g[1:]) for i, g in enumerate(first.gemms)]
    comm = {a: [grid(c.comm[a][0] for c in points), *v[1:]] for a, v in first.comm.items()}
    return StageCosts(*(grid(getattr(c, name) for c in points) for name in
                        ("gemm_bytes", "attention_flops", "memory_bytes")), comm,
                      grid(c.kernels for c in points), grid(c.cp_ring_bytes for c in points), gemms)


def _content(scn, stage) -> tuple:
    """What `costs.stage_costs` reads of a stage: its parts (compared without their layer indices), whether it
    holds the head and the embedding (its pipeline sends), and the kind of its last layer (the residual stream it
    sends, `comm.pipeline_bytes`)."""
    from symmem.accounting.recompute import Recompute
    from symmem.model import stage_parts

    last = scn.model.layer_kinds()[stage.layers[-1]] if stage.layers else None
    # (per-layer checkpointing picks layers by their index: then the stage's own layers)
    by_index = stage.layers if scn.policy.kind is Recompute.SELECTIVE_LAYER else None
    return stage_parts(scn.model, stage, scn.convention), stage.head, stage.embedding, last, by_index


def stage_arrays(scn, s_values: tuple[int, ...], b_values: tuple[int, ...]) -> list:
    """Each stage's `costs.StageCosts` of one micro-batch over the (s, b) grid, its figures (and the GEMMs' rows)
    arrays shaped (len(s), len(b)): read at every point when there are at most `DIRECT_POINTS`, else through the
    forms in b and s (`steptime.forms`)."""
    from symmem.steptime.costs import StageCosts, gemm_bytes, span, stage_costs

    shape = (len(s_values), len(b_values))
    if shape[0] * shape[1] <= DIRECT_POINTS:
        at = [scn.replace(b=b, s=s) for s in s_values for b in b_values]
        done: dict = {}  # a stage's content -> its arrays (a pipeline's middle stages alike; read, never changed)
        out = []
        for j, st in enumerate(scn.stages):
            key = _content(scn, st)
            if key not in done:
                done[key] = _stacked([stage_costs(p, p.stages[j]) for p in at], shape)
            out.append(done[key])
        return out
    from symmem.steptime.forms import stage_templates

    big_s = s_values[0]
    s = np.array(s_values, dtype=np.float64)[:, None]
    b = np.array(b_values, dtype=np.float64)[None, :]
    k = s / big_s
    basis = [np.ones(shape), np.broadcast_to(k, shape), b * k, np.broadcast_to(k * k, shape), b * k * k]

    def form(c) -> np.ndarray:
        return sum(ci * xi for ci, xi in zip(c, basis, strict=True))

    m_scale = np.broadcast_to((b * s) / big_s, shape)  # a GEMM's rows at (s, b) over its rows at (1, S)
    out = []
    for t in stage_templates(scn.replace(b=1, s=big_s)):
        gemms = [(m1 * m_scale, k_, n, e, copies, again, low) for m1, k_, n, e, copies, again, low in t["gemms"]]
        nbytes = sum(copies * gemm_bytes(m, k_, n, e, 4 if again else 3) for m, k_, n, e, copies, again, _ in gemms)
        comm = {axis: [form(c), calls, span(scn, axis)] for axis, (c, calls) in t["comm"].items()}
        out.append(StageCosts(nbytes + np.zeros(shape), form(t["attention"]), form(t["memory"]), comm,
                              np.full(shape, float(t["kernels"])), form(t["ring"]), gemms))
    return out


def slot_table(scn, s_values: tuple[int, ...], b_values: tuple[int, ...], gpu, schedule_bubble: float) -> SlotTable:
    """`SlotTable` of `scn` (its arrangement, recomputation and schedule) on `gpu` over the grid: each stage read as
    `steptime.features` reads it (`stage_features`, on arrays) and timed by the model's own `slot_seconds`; the
    slowest per (s, b), the first of equals as `features` picks it; the other stages' mean as `steptime._mean`
    takes it (each figure averaged, then timed)."""
    from symmem.steptime import CONSTANTS, StepFeatures, stage_features
    from symmem.steptime.model import slot_seconds

    shape = (len(s_values), len(b_values))
    fs = [stage_features(c, scn.precision.low_precision, gpu.sms, np.ceil)
          for c in stage_arrays(scn, s_values, b_values)]
    slot = np.array([np.broadcast_to(slot_seconds(f, gpu, CONSTANTS), shape) for f in fs])  # (stages, s, b)
    i = np.argmax(slot, axis=0)[None]
    pick = np.take_along_axis(slot, i, axis=0)[0]
    n = len(fs)
    if n == 1 or not schedule_bubble:
        return SlotTable(pick, pick)

    def others(values) -> np.ndarray:  # the mean over the stages but the slowest, per (s, b)
        x = np.array([np.broadcast_to(v, shape) for v in values], dtype=np.float64)
        return (x.sum(axis=0) - np.take_along_axis(x, i, axis=0)[0]) / (n - 1)

    def field(name: str) -> np.ndarray:
        return others(getattr(f, name) for f in fs)

    axes = dict.fromkeys(a for f in fs for a, *_ in f.comm)  # in order, each with the first stage's span
    comm = []
    for a in sorted(axes):
        rows = [{ax: (nb, calls) for ax, nb, calls, _net in f.comm}.get(a, (0.0, 0)) for f in fs]
        net = next(x[3] for f in fs for x in f.comm if x[0] == a)
        comm.append((a, others(r[0] for r in rows), others(r[1] for r in rows), net))
    mean = StepFeatures(field("gemm_flops"), field("gemm_low_flops"), fs[0].low_format, field("gemm_bytes"),
                        field("attention_flops"), field("memory_bytes"), tuple(comm), field("cp_ring_bytes"), 1.0,
                        0.0, 0, False, 0.0, field("kernels"))
    return SlotTable(pick, np.broadcast_to(slot_seconds(mean, gpu, CONSTANTS), shape))


def once_seconds(scn, gpu) -> float:
    """The iteration's once-only seconds (without the fixed constant): the data-parallel traffic and the optimizer
    step of the stage with the most bytes of both (`steptime.once_costs`), timed by the model's `once_seconds`."""
    from symmem.steptime import CONSTANTS, StepFeatures, once_costs
    from symmem.steptime import model as step_model

    dp, calls, net, opt = once_costs(scn)
    f = StepFeatures(0.0, 0.0, "bf16", 0.0, 0.0, 0.0, (), 0.0, 0.0, dp, calls, net, opt)
    return step_model.once_seconds(f, gpu, CONSTANTS)


_SLOTS: dict = {}  # (arrangement's scenario, grid, GPU, bubble or not) -> SlotTable, or False: no forms
_ONCE: dict = {}  # (arrangement's scenario, ZeRO, M under ZeRO-3, GPU) -> once-only seconds
_BLOCKS: dict = {}  # (space, GPU) -> {a tile's arrangements, recomputation, schedule, ZeRO, M -> its arrays}


def block_times(blk, flat: np.ndarray) -> np.ndarray | None:
    """Seconds of one iteration at the flat positions `flat` of the tile `blk` (`evaluate.Block`), or None when
    one of their arrangements has no table (the caller times those one by one). Only the arrangements `flat`
    reaches are tabled (the others of the tile may never fit)."""
    from symmem.hardware_profile import measured
    from symmem.steptime import CONSTANTS

    sp = blk.space
    if measured(sp.base.gpu_name):  # its own constants and measured links: one by one, by steptime.step_time
        return None
    if sp.base.profile.dp_prefetch:  # FSDP2's overlapped traffic (`model._dp_exposed`): not in these tables
        return None
    pi = np.unravel_index(flat, blk.alloc.shape)[0]
    if _measured_kernels(sp, [blk.pars[i] for i in np.unique(pi)]):
        return None
    per_space = _BLOCKS.get(sp)
    if per_space is None:
        if len(_BLOCKS) > 8:
            _BLOCKS.clear()
        per_space = _BLOCKS[sp] = {}
    key = (blk.pp, blk.recompute, blk.schedule, blk.pars, blk.z_idx.tobytes(), blk.m_idx.tobytes())
    tile = per_space.get(key)
    if tile is None:
        tile = per_space[key] = _Tile(blk)
    pi, zi, mi, si, bi = np.unravel_index(flat, blk.alloc.shape)
    if not tile.fill(blk, np.unique(pi)):
        return None
    si, bi = blk.s_idx[si], blk.b_idx[bi]  # the tables span the whole grid
    m_val = blk.m_values.astype(np.float64)[mi]
    return m_val * tile.slot[pi, si, bi] + tile.bubble * tile.mean[pi, si, bi] + tile.once[pi, zi, mi] \
        + CONSTANTS.fixed_s


def _measured_kernels(sp, pars) -> bool:
    """Whether any of these arrangements is timed by the GPU's measured kernels (`steptime.measured.applies`), which
    these tables (the fitted model's) do not hold: those are timed one by one, by `steptime.step_time`."""
    from symmem.hardware import gpu
    from symmem.steptime.measured import KERNEL_CONSTANTS, applies

    if sp.base.gpu_name not in KERNEL_CONSTANTS:
        return False
    g = gpu(sp.base.gpu_name)
    return any(applies(sp.base.replace(parallel=par), g) is None for par in pars)


class _Tile:
    """A tile's arrangements' tables, filled as positions reach them: (slot, mean) shaped (arrangement, s, b) over
    the whole grid, the once-only seconds (arrangement, ZeRO, M) and the schedule's bubble in slots."""

    def __init__(self, blk) -> None:
        from symmem.parallel.schedule import Schedule
        from symmem.steptime import bubble_slots

        n, shape = len(blk.pars), (len(blk.space.s), len(blk.space.b))
        self.schedule = Schedule.from_label(blk.schedule)
        self.bubble = bubble_slots(self.schedule, blk.pp)
        self.slot, self.mean = np.zeros((n, *shape)), np.zeros((n, *shape))
        self.once = np.zeros((n, len(blk.z_idx), len(blk.m_values)))
        self.done = np.zeros(n, dtype=bool)
        self.untabled = False

    def fill(self, blk, arrangements: np.ndarray) -> bool:
        """Table the `arrangements` not yet tabled; False when one has no table."""
        from symmem.accounting.states import zero_stage
        from symmem.hardware import gpu as gpu_named
        from symmem.steptime import check_gpu
        from symmem.sweep.compile import stepwise_in_s
        from symmem.sweep.rules import pipeline_layout

        todo = [int(p) for p in arrangements if not self.done[p]]
        if self.untabled or not todo:
            return not self.untabled
        sp = blk.space
        base = sp.base
        g = gpu_named(base.gpu_name)
        layout = pipeline_layout(base, blk.pp)
        for p in todo:
            scn = base.replace(parallel=blk.pars[p], layout=layout, recompute_name=blk.recompute,
                               schedule=self.schedule, microbatches=None, b=sp.b[0], s=sp.s[0])
            if scn.flow_impl is not None or stepwise_in_s(scn):
                self.untabled = True
                return False
            check_gpu(scn, g)
            key = (scn, sp.s, sp.b, g.name, self.bubble != 0)
            hit = _SLOTS.get(key)
            if hit is None:
                try:
                    hit = slot_table(scn, sp.s, sp.b, g, self.bubble)
                except SymmemError:
                    hit = False  # its costs are not of the forms: timed one by one
                if len(_SLOTS) > 4096:
                    _SLOTS.clear()
                _SLOTS[key] = hit
            if hit is False:
                self.untabled = True
                return False
            self.slot[p], self.mean[p] = hit.slot, hit.mean
            for z_pos, z_i in enumerate(blk.z_idx.tolist()):
                zero = zero_stage(sp.zero[z_i])
                for m_pos, m in enumerate(blk.m_values.tolist()):
                    okey = (scn, zero, m if int(zero) == 3 else None, g.name)
                    t = _ONCE.get(okey)
                    if t is None:
                        t = once_seconds(scn.replace(zero=zero, microbatches=m), g)
                        if len(_ONCE) > 65536:
                            _ONCE.clear()
                        _ONCE[okey] = t
                    self.once[p, z_pos, m_pos] = t
            self.done[p] = True
        return True
