"""The kernels one GPU runs in a model's step, at the shapes the measured-kernels model looks them up by
(symmem/steptime/measured.py): what `symmem calibrate --model NAME` times, so that the kernel table it writes holds
each of the step's own shapes measured, none read off a neighbour.

Read off the dataflow the step time is computed from (`steptime.costs.stage_costs`, every stage):

* each dense GEMM (m rows, k inner, n columns: a module's linears fused as the model times them) once;
* each routed experts' grouped GEMM as (local experts, tokens per expert, n, k), the key
  `steptime.kernels.gemm_seconds` reads a grouped launch by (tokens per expert under the scenario's routing: the
  balanced load by default, rounded to a whole token);
* each fused attention as (b, s, heads, KV heads, qk dim, v dim) after TP and CP (`steptime.costs.attention_shape`).

Shapes that come out fractional (a load spread over experts) are rounded to the nearest whole number, at least 1."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelKernels:
    gemm: tuple[tuple[int, int, int], ...]  # (m, k, n)
    grouped: tuple[tuple[int, int, int, int], ...]  # (local experts, tokens per expert, n, k)
    attention: tuple[tuple[int, int, int, int, int, int], ...]  # (b, s, heads, kv heads, qk dim, v dim)


def _whole(x: float) -> int:
    return max(1, round(x))


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
