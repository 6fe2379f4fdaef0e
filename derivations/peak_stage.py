"""What the paper misses (3): the busiest stage, by the paper's sum and by symmem's timeline peak, with the verdict
drawn from the timeline peak and the reserved memory estimated from it (as `symmem memory` draws it)."""

from __future__ import annotations

from symmem.accounting.analysis import memory, verdict
from symmem.accounting.reserved import replay_refusal, stage_reserved
from symmem.accounting.states import ZeroStage
from symmem.render.tables import Table
from symmem.units import GB, fmt_gb, fmt_gib

from ._common import main, scenario

SUM = "the paper's sum (states + activations x in flight)"
PEAK = "symmem's timeline peak"


def configurations():
    """(recompute policy, ZeRO stage, b) of every row, in row order."""
    return [(policy, zero, b) for policy in ("none", "selective", "deepseek", "full")
            for zero in (ZeroStage.NONE, ZeroStage.OS_G_P) for b in (1, 2, 4)]


def busiest(scn):
    """(stage with the largest paper's sum, stage with the highest timeline peak, stage with the most parameters)
    of one configuration; the timeline peak's stage is the one `symmem memory` marks as its peak."""
    mems = memory(scn)
    by_sum = max(mems, key=lambda m: (m.allocated, -m.stage.index))
    by_peak = max(mems, key=lambda m: (m.peak_allocated, -m.stage.index))
    most_params = max(mems, key=lambda m: (m.params.total, -m.stage.index))
    return by_sum, by_peak, most_params


def tables() -> list[Table]:
    base = scenario("paper")
    capacity = f"{base.gpu_memory / GB:g} GB"
    rows, replayed, refusal, flips = [], [], None, []
    for policy, zero, b in configurations():
        scn = base.replace(recompute_name=policy, zero=zero, b=b)
        by_sum, top, most_params = busiest(scn)
        ev = top.peak.event
        low, high = top.reserved
        r = stage_reserved(scn, top.stage)
        replayed.append(r)
        if r is None and refusal is None:
            refusal = replay_refusal(scn, top.stage)
        by_sum_verdict = verdict(by_sum.low, by_sum.high, scn.gpu_memory)  # the paper's sum with the same ranges
        if by_sum_verdict != verdict(low, high, scn.gpu_memory):
            flips.append(f"{policy} recomputation, ZeRO {zero.label}, b = {b} ({by_sum_verdict} by the sum)")
        rows.append((policy, zero.label, b, most_params.stage.index,
                     by_sum.stage.index, by_sum.allocated, fmt_gib(by_sum.allocated),
                     top.stage.index, top.peak_allocated, fmt_gib(top.peak_allocated),
                     f"{ev.phase}, {ev.part}, {ev.op}",
                     f"{fmt_gib(low)}-{fmt_gib(high)}",
                     verdict(low, high, scn.gpu_memory)))
    columns = ["recomputation", "ZeRO", "b", "stage with the most parameters",
               "stage with the largest sum", f"{SUM}, bytes", f"{SUM}, GiB",
               "timeline-peak stage", f"{PEAK}, bytes", f"{PEAK}, GiB", "timeline peak at (phase, part, op)",
               "reserved estimate from the timeline peak, GiB", f"verdict at {capacity} (from the reserved estimate)"]
    if any(r is not None for r in replayed):  # the caching allocator replayed: the profile says its order
        columns.insert(-1, "reserved, allocator replayed, GiB")
        rows = [row[:-1] + ("-" if r is None else fmt_gib(r),) + row[-1:]
                for row, r in zip(rows, replayed, strict=True)]
        align = "llrrrrrrrrllrl"
    else:
        align = "llrrrrrrrrlll"
    replay_note = ("" if refusal is None else
                   f" No replayed reserved (symmem.accounting.reserved.stage_reserved): {refusal}.")
    return [Table("peak_stage",
                  f"Busiest stage of the paper's case: the paper's sum and symmem's timeline peak per configuration "
                  f"({base.schedule.label}, M = {base.m}, s = {base.s}; capacity {capacity} = "
                  f"{fmt_gib(base.gpu_memory)} GiB)",
                  tuple(columns), tuple(rows),
                  ("The paper's sum = model states + saved activations per micro-batch x micro-batches in flight "
                   "(StageMemory.allocated), taken at the stage where it is largest; it is not a peak.",
                   "Symmem's timeline peak = the bytes allocated at the busiest moment of the step "
                   "(StageMemory.peak_allocated; the number `symmem memory` prints as peak), with framework "
                   "buffers, transient tensors, activation gradients and workspaces; the event names the moment.",
                   f"Reserved estimate = timeline peak x (1 + {base.fragmentation[0]:.0%}.."
                   f"{base.fragmentation[1]:.0%}) "
                   f"allocator fragmentation + {fmt_gb(base.comm_buffers[0])}-{fmt_gb(base.comm_buffers[1])} GB "
                   f"communication buffers (the paper's ranges; StageMemory.reserved).{replay_note}",
                   f"Verdict as `symmem memory` draws it: fits if the high end of the reserved estimate is at most "
                   f"{capacity}, fits only at the low end of overheads if only its low end is, else does not fit. "
                   + (f"The paper's sum with its overheads (5-30 % of the sum, the same buffers) gives another "
                      f"verdict for: {'; '.join(flips)}." if flips else
                      "The paper's sum with its overheads gives the same verdicts."),
                   "Stage with the most parameters: the stage whose GPU holds the most parameters (the first of "
                   "equals), where the paper looks for the peak. GiB = 2^30 bytes, GB = 10^9 bytes."),
                  align=align)]


if __name__ == "__main__":
    main(tables)
