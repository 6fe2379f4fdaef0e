"""The step-time model's costs as forms in b and s: per arrangement, each stage's costs of one micro-batch as
functions of b and s, and the model's FLOPs per micro-batch (read by the page, `render.page_steptime`, and by the
sweep's time tables, `sweep.timetable`).

`symmem.steptime.costs.stage_costs` reads every GEMM, the attention, the memory-bound ops and the collectives off
the dataflows at one (b, s). What the page needs is the same at any (b, s), so the costs are read at six points,
b in {1, 2} and s in {S, 2S, 3S}, and written in the forms the dataflows give them, each form checked at a point it
was not read from (as the compiled sweep extends the framework buffers in s, `sweep.evaluate._buffers`):

* a GEMM's rows m are the tokens it multiplies, m = m₁ · b·s / S with m₁ its rows at (1, S) (k, n, its local
  experts, copies, whether it is recomputed and its precision do not depend on b or s); its HBM bytes follow from
  (m, k, n), as `costs` counts them;
* the attention's causal FLOPs, the memory-bound bytes, each collective's bytes and the CP ring's bytes are
  c0 + c1·s + c2·b·s + c3·s² + c4·b·s² (the attention's scores are b·s², most tensors b·s; a learned position
  embedding reads s rows whatever b);
* the kernels launched and each collective's calls do not depend on b or s;
* the model's FLOPs per micro-batch (Megatron's count, for the MFU) likewise.

A scenario whose costs are not of these forms raises SymmemError: the page then shows no step time (with the
reason), the sweep times its configurations one by one.
"""

from __future__ import annotations

import math

from symmem.errors import SymmemError
from symmem.steptime.costs import TILE, gemm_bytes

REL = 1e-9  # how close a form must come at the point it was not read from (the costs are floats)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b), 1.0)


# (b, s / S) of the points the costs are read at: the first five fix the five coefficients, the sixth checks them
POINTS = ((1, 1), (1, 2), (2, 1), (1, 3), (2, 2), (2, 3))


def _basis(b: int, k: int) -> list[int]:
    """1, s, b·s, s², b·s² at (b, s = k·S), in units of S."""
    return [1, k, b * k, k * k, b * k * k]


def _fit(values: list[float], what: str) -> list[float]:
    """(c0, ..., c4) of c0 + c1·s + c2·b·s + c3·s² + c4·b·s² (s in units of S) through the first five points' values,
    checked at the sixth."""
    import numpy as np

    a = np.array([_basis(b, k) for b, k in POINTS[:5]], dtype=float)
    c = [float(x) for x in np.linalg.solve(a, np.array(values[:5], dtype=float))]
    b6, k6 = POINTS[5]
    if not _close(sum(ci * xi for ci, xi in zip(c, _basis(b6, k6), strict=True)), values[5]):
        raise SymmemError(f"{what} is no polynomial c0 + c1·s + c2·b·s + c3·s² + c4·b·s²")
    return c


def stage_templates(scn) -> list[dict]:
    """Each stage's costs of one micro-batch as the forms above, with S = scn.s (b·s and b·s² in units of S)."""
    from symmem.steptime.costs import stage_costs

    big_s = scn.s
    at = [scn.replace(b=b, s=k * big_s) for b, k in POINTS]
    per_point = [[stage_costs(p, st) for st in p.stages] for p in at]
    out = []
    for j in range(len(scn.stages)):
        cs = [pp[j] for pp in per_point]
        base = cs[0].gemms
        gemms = []
        for i, (m, k, n, e, copies, again, low) in enumerate(base):
            for (b, ks), c in zip(POINTS, cs, strict=True):  # m at (b, s) = m at (1, S) · b·s / S, as the page has it
                m2, k2, n2, e2, copies2, again2, low2 = c.gemms[i]
                mine = m * (b * ks * big_s) / big_s
                if (k2, n2, e2, copies2, again2, low2) != (k, n, e, copies, again, low) or not _close(m2, mine) \
                        or math.ceil(m2 / TILE) != math.ceil(mine / TILE):
                    raise SymmemError(f"stage {j}: a GEMM's rows are not proportional to b·s")
            gemms.append([m, k, n, e, copies, bool(again), bool(low)])
        for (b, ks), c in zip(POINTS, cs, strict=True):  # the bytes `costs` counted follow from the shapes
            tokens = b * ks * big_s
            nb = sum(cp * gemm_bytes(m * tokens / big_s, k, n, e, 4 if again else 3)
                     for m, k, n, e, cp, again, _low in gemms)
            if not _close(nb, c.gemm_bytes):
                raise SymmemError(f"stage {j}: the GEMMs' bytes do not follow from their shapes")
        if any(c.kernels != cs[0].kernels for c in cs):
            raise SymmemError(f"stage {j}: the kernels launched depend on b or s")
        comm = {}  # whether a group spans nodes depends on DP (the pipeline's): the page decides, as costs.span
        for axis in sorted(cs[0].comm):
            if any(set(c.comm) != set(cs[0].comm) for c in cs):
                raise SymmemError(f"stage {j}: its collectives depend on b or s")
            steps = {c.comm[axis][1] for c in cs}
            if len(steps) != 1:
                raise SymmemError(f"stage {j}: the {axis} collectives' calls depend on b or s")
            comm[axis] = [_fit([c.comm[axis][0] for c in cs], f"stage {j}: the {axis} bytes"), steps.pop()]
        out.append({
            "gemms": gemms,
            "attention": _fit([c.attention_flops for c in cs], f"stage {j}: the attention's FLOPs"),
            "memory": _fit([c.memory_bytes for c in cs], f"stage {j}: the memory-bound bytes"),
            "ring": _fit([c.cp_ring_bytes for c in cs], f"stage {j}: the CP ring's bytes"),
            "kernels": cs[0].kernels, "comm": comm,
        })
    return out


def model_flops(scn) -> list[list[float]]:
    """Megatron's FLOPs of one micro-batch through the whole model as the five coefficients (`_fit`), without and
    with recomputation's extra forward."""
    from symmem.steptime import model_flops_value

    out = []
    for hardware in (False, True):
        vals = [float(model_flops_value(scn.replace(b=b, s=k * scn.s), hardware)) for b, k in POINTS]
        out.append(_fit(vals, "the model's FLOPs"))
    return out
