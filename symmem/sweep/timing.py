"""Ranking a sweep's configurations by estimated step time (`symmem sweep --rank-by time`).

The compiled path times every configuration that fits on its tile's arrays (`sweep.timetable`: the step-time
model per arrangement over the (s, b) grid, then M, ZeRO and the schedule's bubble on arrays) and keeps the
fastest. Where an arrangement's costs have no such table (the Hugging Face dataflows, sizes stepwise in s) and on
the one-by-one path (`sweep.exact`), each configuration that fits is rebuilt as the Scenario `symmem memory` would
build (the same rules as `space.reference_records`) and timed by `symmem.steptime.step_time`: the same estimate
`symmem memory --gpu NAME` prints (about a millisecond each, so that count is bounded: `MAX_TIMED`). The listed
ones get their tokens/s and MFU from the same time (`with_rates`).
"""

from __future__ import annotations

from symmem.accounting.states import zero_stage
from symmem.errors import SymmemError
from symmem.parallel.schedule import Schedule
from symmem.sweep.rules import make_parallel, pipeline_layout

MAX_TIMED = 20_000  # configurations that fit, timed one by one


def scenario_of(space, record: dict):
    """The Scenario of one record (as `reference_records` builds it)."""
    sched = Schedule.from_label(record["schedule"])
    par = make_parallel(space.base, space.gpus, record["tp"], record["pp"], record["ep"], record["etp"],
                        record["cp"])
    return space.base.replace(parallel=par, layout=pipeline_layout(space.base, record["pp"]),
                              recompute_name=record["recompute"], schedule=sched, zero=zero_stage(record["zero"]),
                              microbatches=record["microbatches"], b=record["b"], s=record["s"])


def check_timed(space) -> None:
    """Ranking by time needs a GPU by name with speed figures (one line otherwise)."""
    from symmem.hardware import GPUS, has_speeds

    name = space.base.gpu_name
    if name is None:
        raise SymmemError("--rank-by time: needs a GPU by name for its speed (--gpu H100, H800, H200, B200, A100)")
    if not has_speeds(name):
        raise SymmemError(f"--gpu = {name!r}: no speed figures for it, which --rank-by time needs; GPUs with speed "
                          f"figures: {', '.join(g for g in GPUS if has_speeds(g))} (or --rank-by headroom)")


def with_rates(space, record: dict) -> dict:
    """`record` (with its `time_s`) with tokens/s, tokens/s per GPU, MFU and the global batch, as
    `steptime.step_time` derives them from the time (the model's FLOPs by Megatron's count, exact)."""
    from symmem.hardware import gpu
    from symmem.steptime import rates

    scn = scenario_of(space, record)
    _fm, tokens_per_s, mfu = rates(scn, gpu(space.base.gpu_name), record["time_s"])
    return {**record, "tokens_per_s": tokens_per_s, "tokens_per_s_per_gpu": tokens_per_s / scn.parallel.world_size,
            "mfu": mfu, "global_batch_size": scn.b * scn.m * scn.parallel.dp}


def ranked(space, fast: list[dict], one_by_one: list[dict], top: int, untimed: list | None = None) -> list[dict]:
    """The fastest `top` (all with 0) of `fast` (timed on arrays, fastest first) and `one_by_one` (untimed),
    ties in sweep order, each with its rates; `untimed` collects why a configuration could not be timed."""
    slow = rank_by_time(space, one_by_one, 0, untimed) if one_by_one else []
    merged = sorted([*fast, *slow], key=lambda r: (r["time_s"], r["ordinal"]))
    merged = merged[:top] if top else merged
    return [r if "mfu" in r else with_rates(space, r) for r in merged]


def rank_by_time(space, records: list[dict], top: int, untimed: list | None = None) -> list[dict]:
    """`records` (configurations that fit) with `time_s`, `tokens_per_s`, `tokens_per_s_per_gpu` and `mfu`, fastest
    first (ties in sweep order), the first `top` (all with 0). At the space's global batch every record trains on
    the same tokens per iteration, so fastest first is most tokens/s (per GPU: the GPU count is the sweep's) first;
    without one the CLI refuses to rank by time. Under a measured profile (`--gpu FILE`) a configuration whose
    traffic takes a link it did not measure is left out, its reason appended to `untimed`."""
    from symmem.steptime import UnmeasuredLink, step_time

    if space.base.gpu_name is None:
        raise SymmemError("--rank-by time: needs a GPU by name for its speed (--gpu H100, H800, H200, B200, A100)")
    if len(records) > MAX_TIMED:
        raise SymmemError(f"--rank-by time: {len(records):,} configurations fit, more than the {MAX_TIMED:,} timed "
                          "one by one; narrow the sweep, or rank by headroom (--rank-by headroom)")
    out = []
    for r in records:
        try:
            st = step_time(scenario_of(space, r))
        except UnmeasuredLink as e:
            if untimed is not None:
                untimed.append(str(e))
                continue
            raise
        out.append({**r, "time_s": st.time_s, "tokens_per_s": st.tokens_per_s,
                    "tokens_per_s_per_gpu": st.tokens_per_s_per_gpu, "mfu": st.mfu,
                    "global_batch_size": r["b"] * r["microbatches"] * r["dp"]})
    out.sort(key=lambda r: (r["time_s"], r["ordinal"]))
    return out[:top] if top else out
