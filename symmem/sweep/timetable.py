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

import math
from dataclasses import dataclass

import numpy as np

from symmem.errors import SymmemError
from symmem.steptime.costs import TILE as _TILE
from symmem.steptime.costs import TILE_N as _TILE_N

DIRECT_POINTS = 6  # up to this many (s, b) points, read every point directly (the forms cost six readings)


@dataclass(frozen=True)
class SlotTable:
    """One arrangement and recomputation over the swept (s, b) grid, in seconds under `steptime.CONSTANTS`."""

    slot: np.ndarray  # (s, b): one micro-batch's slot of the slowest stage (the CP ring's exposed part included)
    mean: np.ndarray  # (s, b): the other stages' mean slot (the slowest stage's own when there is one stage)


def _pass(rows, cols: float, inner, experts: int, sms: int):
    """`costs._pass_flops` with the rows, or the inner size, an array: full tiles in waves over the SMs (the same
    products in the same order, in float64)."""
    tiles = np.ceil(rows / _TILE) * math.ceil(cols / _TILE_N) * experts
    return 2 * inner * _TILE * _TILE_N * np.ceil(tiles / sms) * sms


def _gemm_arrays(gemms, m_scale, sms: int):
    """(tiled FLOPs, of them low precision, HBM bytes) of template GEMMs whose rows are m1·m_scale (arrays):
    `costs.wave_flops` (forward m x n, data gradient m x k, weight gradient k x n over m) and the recomputed
    forward again, as `costs.tiled_flops`; the bytes as `costs` counts them."""
    total = low = nbytes = 0.0
    for m1, k, n, e, copies, again, is_low in gemms:
        m = m1 * m_scale
        f = _pass(m, n, k, e, sms) + _pass(m, k, n, e, sms) + _pass(np.full_like(m, k), n, m, e, sms)
        if again:
            f = f + _pass(m, n, k, e, sms)
        f = copies * f
        total = total + f
        if is_low:
            low = low + f
        nbytes = nbytes + copies * 2 * (m * k + k * n + m * n) * e * (4 if again else 3)
    return total, low, nbytes


def _form(c, basis):
    return sum(ci * xi for ci, xi in zip(c, basis, strict=True))


def stage_arrays(scn, s_values: tuple[int, ...], b_values: tuple[int, ...], sms: int) -> list[dict]:
    """Each stage's per-micro-batch costs over the (s, b) grid, shaped (len(s), len(b)): tiled GEMM FLOPs (`flops`,
    of them `low`), GEMM bytes, attention FLOPs, memory-bound bytes, kernels, the CP ring's bytes and, per
    collective group, (bytes, calls, spans nodes)."""
    from symmem.steptime.costs import span, stage_costs, tiled_flops

    shape = (len(s_values), len(b_values))
    if shape[0] * shape[1] <= DIRECT_POINTS:
        out = [{"flops": np.zeros(shape), "low": np.zeros(shape), "gemm_bytes": np.zeros(shape),
                "attention": np.zeros(shape), "memory": np.zeros(shape), "kernels": np.zeros(shape),
                "ring": np.zeros(shape), "comm": {}} for _ in scn.stages]
        for i, s in enumerate(s_values):
            for j, b in enumerate(b_values):
                at = scn.replace(b=b, s=s)
                for st, o in zip(at.stages, out, strict=True):
                    c = stage_costs(at, st)
                    o["flops"][i, j], o["low"][i, j] = tiled_flops(c.gemms, sms)
                    for name, v in (("gemm_bytes", c.gemm_bytes), ("attention", c.attention_flops),
                                    ("memory", c.memory_bytes), ("kernels", c.kernels), ("ring", c.cp_ring_bytes)):
                        o[name][i, j] = v
                    for axis, (nb, calls, net) in c.comm.items():
                        entry = o["comm"].setdefault(axis, [np.zeros(shape), calls, net])
                        if entry[1:] != [calls, net]:
                            raise SymmemError(f"the {axis} collectives' calls depend on b or s")
                        entry[0][i, j] = nb
        return out
    from symmem.steptime.forms import stage_templates

    big_s = s_values[0]
    s = np.array(s_values, dtype=np.float64)[:, None]
    b = np.array(b_values, dtype=np.float64)[None, :]
    k = s / big_s
    basis = [np.ones(shape), np.broadcast_to(k, shape), b * k, np.broadcast_to(k * k, shape), b * k * k]
    m_scale = (b * s) / big_s  # a GEMM's rows at (s, b) over its rows at (1, S)
    out = []
    for t in stage_templates(scn.replace(b=1, s=big_s)):
        flops, low, nbytes = _gemm_arrays(t["gemms"], m_scale, sms)
        comm = {axis: [np.broadcast_to(_form(c, basis), shape), calls, span(scn, axis)]
                for axis, (c, calls) in t["comm"].items()}
        out.append({"flops": np.broadcast_to(flops, shape), "low": np.broadcast_to(low, shape),
                    "gemm_bytes": np.broadcast_to(nbytes, shape), "attention": _form(t["attention"], basis),
                    "memory": _form(t["memory"], basis), "kernels": np.full(shape, float(t["kernels"])),
                    "ring": _form(t["ring"], basis), "comm": comm})
    return out


def slot_table(scn, s_values: tuple[int, ...], b_values: tuple[int, ...], gpu, schedule_bubble: float) -> SlotTable:
    """`SlotTable` of `scn` (its arrangement, recomputation and schedule) on `gpu` over the grid, as
    `steptime.features` and `model.breakdown` compute it configuration by configuration."""
    from symmem.steptime import CONSTANTS

    k = CONSTANTS
    lp = scn.precision.low_precision
    arrays = stage_arrays(scn, s_values, b_values, gpu.sms)
    lin, att, ring = [], [], []
    for a in arrays:
        low = a["low"] * (lp.low_passes[0] / lp.low_passes[1]) if lp is not None else 0.0
        gemm = (a["flops"] - low) / gpu.bf16
        if lp is not None:
            gemm = gemm + low / gpu.rate(lp.gemm)
        attention = a["attention"] / gpu.bf16 / k.attention_efficiency
        t = gemm / k.gemm_efficiency + a["gemm_bytes"] / gpu.hbm + attention + a["memory"] / gpu.hbm \
            + a["kernels"] * k.latency_s
        for nb, calls, net in a["comm"].values():
            t = t + nb / (gpu.network if net else gpu.nvlink) / k.link_efficiency + calls * k.latency_s
        lin.append(t)
        att.append(attention)
        ring.append(a["ring"] / (gpu.nvlink * k.link_efficiency))
    lin, att, ring = (np.array(np.broadcast_arrays(*x)) for x in (lin, att, ring))
    slot = lin + np.maximum(0.0, ring - att)  # (stages, s, b)
    i = np.argmax(slot, axis=0)  # the first of the slowest, as `features`' max
    pick = np.take_along_axis(slot, i[None], axis=0)[0]
    n = slot.shape[0]
    if n == 1 or not schedule_bubble:
        return SlotTable(pick, pick)

    def others(x):
        return (x.sum(axis=0) - np.take_along_axis(x, i[None], axis=0)[0]) / (n - 1)

    mean = others(lin) + np.maximum(0.0, others(ring) - others(att))
    return SlotTable(pick, mean)


def once_seconds(scn, gpu) -> float:
    """The iteration's once-only seconds (without the fixed constant): the data-parallel traffic and the optimizer
    step of the stage with the most bytes of both (`steptime.features`)."""
    from symmem.steptime import CONSTANTS
    from symmem.steptime.costs import dp_cost, optimizer_bytes

    k = CONSTANTS
    best = None
    for st in scn.stages:
        dp, calls, net = dp_cost(scn, st)
        opt = optimizer_bytes(scn, st)
        if best is None or dp + opt > best[0] + best[3]:
            best = (dp, calls, net, opt)
    dp, calls, net, opt = best
    return dp / (gpu.network if net else gpu.nvlink) / k.link_efficiency + calls * k.latency_s + opt / gpu.hbm


_SLOTS: dict = {}  # (arrangement's scenario, grid, GPU, bubble or not) -> SlotTable, or False: no forms
_ONCE: dict = {}  # (arrangement's scenario, ZeRO, M under ZeRO-3, GPU) -> once-only seconds
_BLOCKS: dict = {}  # (space, GPU) -> {a tile's arrangements, recomputation, schedule, ZeRO, M -> its arrays}


def block_times(blk, flat: np.ndarray) -> np.ndarray | None:
    """Seconds of one iteration at the flat positions `flat` of the tile `blk` (`evaluate.Block`), or None when
    one of their arrangements has no table (the caller times those one by one). Only the arrangements `flat`
    reaches are tabled (the others of the tile may never fit)."""
    from symmem.steptime import CONSTANTS

    sp = blk.space
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


class _Tile:
    """A tile's arrangements' tables, filled as positions reach them: (slot, mean) shaped (arrangement, s, b) over
    the whole grid, the once-only seconds (arrangement, ZeRO, M) and the schedule's bubble in slots."""

    def __init__(self, blk) -> None:
        from symmem.parallel.schedule import Schedule
        from symmem.steptime import bubble_slots

        n, shape = len(blk.pars), (len(blk.space.s), len(blk.space.b))
        name, _, v = blk.schedule.partition(":")
        self.schedule = Schedule(name, int(v) if v else 1)
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
