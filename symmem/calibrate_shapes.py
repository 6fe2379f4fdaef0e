"""The kernels one GPU runs in a model's step, at the shapes the measured-kernels model looks them up by
(symmem/steptime/measured.py): what `symmem calibrate --model NAME` times, so that the kernel table it writes holds
each of the step's own shapes measured, none read off a neighbour.

Read off the dataflow the step time is computed from (`steptime.costs.stage_costs`, every stage):

* each dense GEMM (m rows, k inner, n columns: a module's linears fused as the model times them) once;
* each routed experts' grouped GEMM as (local experts, tokens per expert, n, k), the key
  `steptime.kernels.gemm_seconds` reads a grouped launch by (tokens per expert under the scenario's routing: the
  balanced load by default, rounded to a whole token);
* each fused attention as (b, s, heads, KV heads, qk dim, v dim) after TP and CP (`steptime.costs.attention_shape`).

Shapes that come out fractional (a load spread over experts) are taken to the nearest whole number, at least 1, as
the step looks them up (`steptime.kernels.whole_rows`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelKernels:
    gemm: tuple[tuple[int, int, int], ...]  # (m, k, n)
    grouped: tuple[tuple[int, int, int, int], ...]  # (local experts, tokens per expert, n, k)
    attention: tuple[tuple[int, int, int, int, int, int], ...]  # (b, s, heads, kv heads, qk dim, v dim)


def _whole(x: float) -> int:
    from symmem.steptime.kernels import whole_rows

    return whole_rows(x)


def model_kernels(scn) -> ModelKernels:
    """The distinct kernel shapes of one micro-batch on one GPU of each stage of `scn`, sorted."""
    from symmem.steptime.costs import stage_costs

    gemm, grouped, attention = set(), set(), set()
    for stage in scn.stages:
        c = stage_costs(scn, stage)
        for m, k, n, experts, _copies, _again, _low in c.gemms:
            if m <= 0 or k <= 0 or n <= 0:
                continue
            if experts > 1:
                grouped.add((int(experts), _whole(m), _whole(n), _whole(k)))
            else:
                gemm.add((_whole(m), _whole(k), _whole(n)))
        for *shape, _copies, _again in c.attentions:
            attention.add(tuple(_whole(x) for x in shape))
    return ModelKernels(tuple(sorted(gemm)), tuple(sorted(grouped)), tuple(sorted(attention)))


def unmeasured_note(scn, p) -> str | None:
    """A note when some of `scn`'s kernel shapes are not rows of a calibrated device's table `p` (a
    `steptime.kernels.KernelProfile` from `symmem calibrate`): those are read off the nearest measured shapes, which
    a table calibrated for another model or other flags may hold few of; None when every shape was measured."""
    import math

    mk = model_kernels(scn)

    def measured(points, at) -> bool:
        at = tuple(math.log(x) for x in at)
        return any(all(abs(a - b) < 1e-9 for a, b in zip(pt, at, strict=True)) for pt in points)

    shapes = [measured(p.gemm["TN"][0], g) for g in mk.gemm]
    shapes += [bool(p.grouped) and measured(p.grouped["fwd"][0], g) for g in mk.grouped]
    shapes += [measured(p.attention[0], a[1:]) for a in mk.attention]
    missing = shapes.count(False)
    if not missing:
        return None
    where = p.source.get("shapes_from") or "no model's own kernels (symmem calibrate without --model)"
    return (f"note: {missing} of this step's {len(shapes)} kernel shapes were not measured on {p.gpu} (its table: "
            f"{where}); they are read off the nearest measured shapes: symmem calibrate --model with this step's "
            "flags measures them")
