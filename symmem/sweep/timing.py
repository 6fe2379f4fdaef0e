"""Ranking a sweep's configurations by estimated step time (`symmem sweep --rank-by time`).

Each configuration that fits is rebuilt as the Scenario `symmem memory` would build (the same rules as the
per-configuration path, `space.reference_records`) and timed by `symmem.steptime.step_time`: the same estimate
`symmem memory --gpu NAME` prints, configuration by configuration (tens of milliseconds each, so the count is
bounded: `MAX_TIMED`). The compiled path still decides what fits.
"""

from __future__ import annotations

from symmem.accounting.states import zero_stage
from symmem.errors import SymmemError
from symmem.parallel.schedule import Schedule
from symmem.sweep.rules import make_parallel, pipeline_layout

MAX_TIMED = 20_000  # configurations that fit, timed one by one


def scenario_of(space, record: dict):
    """The Scenario of one record (as `reference_records` builds it)."""
    name, _, v = record["schedule"].partition(":")
    sched = Schedule(name, int(v) if v else 1)
    par = make_parallel(space.base, space.gpus, record["tp"], record["pp"], record["ep"], record["etp"],
                        record["cp"])
    return space.base.replace(parallel=par, layout=pipeline_layout(space.base, record["pp"]),
                              recompute_name=record["recompute"], schedule=sched, zero=zero_stage(record["zero"]),
                              microbatches=record["microbatches"], b=record["b"], s=record["s"])


def rank_by_time(space, records: list[dict], top: int) -> list[dict]:
    """`records` (configurations that fit) with `time_s`, `tokens_per_s`, `tokens_per_s_per_gpu` and `mfu`, fastest
    first (ties in sweep order), the first `top` (all with 0). At the space's global batch every record trains on
    the same tokens per iteration, so fastest first is most tokens/s (per GPU: the GPU count is the sweep's) first;
    without one the CLI refuses to rank by time."""
    from symmem.steptime import step_time

    if space.base.gpu_name is None:
        raise SymmemError("--rank-by time: needs a GPU by name for its speed (--gpu H100, H800, H200, B200, A100)")
    if len(records) > MAX_TIMED:
        raise SymmemError(f"--rank-by time: {len(records):,} configurations fit, more than the {MAX_TIMED:,} timed "
                          "one by one; narrow the sweep, or rank by headroom (--rank-by headroom)")
    out = []
    for r in records:
        st = step_time(scenario_of(space, r))
        out.append({**r, "time_s": st.time_s, "tokens_per_s": st.tokens_per_s,
                    "tokens_per_s_per_gpu": st.tokens_per_s_per_gpu, "mfu": st.mfu,
                    "global_batch_size": r["b"] * r["microbatches"] * r["dp"]})
    out.sort(key=lambda r: (r["time_s"], r["ordinal"]))
    return out[:top] if top else out
