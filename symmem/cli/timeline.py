"""`symmem timeline --stage N --out F`: one training step on one GPU of a stage, drawn: what is alive, stacked by
component, event by event (forward and backward of every micro-batch in schedule order, then the optimizer step),
with the peak marked."""

from __future__ import annotations

import argparse

from symmem.cli.args import _print_json, add_scenario_args, int_arg, scenario_from_args
from symmem.errors import SymmemError

MAX_STAGE = 1 << 20
MAX_EVENTS = 50_000  # events drawn: every op of every micro-batch's forward and backward (about 80 us each)


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stage", type=int_arg(0, MAX_STAGE), default=0, help="pipeline stage (default 0)")
    p.add_argument("--out", required=True, help="the figure file: .png or .pdf")
    p.add_argument("--json", action="store_true", help="also print the series (bytes per component per event)")
    add_scenario_args(p)


def series(scn, stage_index: int) -> tuple[list[str], list[dict[str, int]], int]:
    """(event labels, bytes alive per component at each event, index of the peak)."""
    from fractions import Fraction

    from symmem.accounting.analysis import stage_memory, stage_step_series, values
    from symmem.accounting.evaluate import ceil_int
    from symmem.accounting.timeline import amount_values

    if not 0 <= stage_index < len(scn.stages):
        raise SymmemError(f"--stage = {stage_index}: the scenario has stages 0..{len(scn.stages) - 1}")
    st = scn.stages[stage_index]
    _check_events(scn, st)
    static = stage_memory(scn, st).peak.static
    states = sum(v for k, v in static.items() if k in ("weights", "gradients", "optimizer states"))
    buffers = sum(static.values()) - states
    vals = values(scn)
    value = amount_values(vals)
    labels, rows = [], []
    for ev in stage_step_series(scn, st):
        comp: dict[str, int | Fraction] = {}
        for a in ev.amounts:
            comp[a.component] = comp.get(a.component, 0) + value(a.nbytes)
        rows.append({"model states": states, "framework buffers": buffers,
                     **{k: ceil_int(Fraction(v)) for k, v in comp.items()}})
        labels.append(f"{ev.phase}: {ev.part} {ev.op}".strip())
    peak = max(range(len(rows)), key=lambda i: sum(rows[i].values()))
    return labels, rows, peak


def _check_events(scn, st) -> None:
    """Refuse a step with more events than MAX_EVENTS before any is built: M micro-batches times the ops of one."""
    from collections import Counter

    from symmem.accounting.analysis import stage_timeline_events
    from symmem.model import stage_parts
    from symmem.parallel.schedule import Schedule

    # (a GPU running several chunks of torchtitan's split: its parts' events counted on a 1F1B copy, whose candidate
    # events are one micro-batch's, not the walked step's)
    probe = scn.replace(schedule=Schedule()) if st.chunk_layers else scn
    ops = Counter(ev.part for ev in stage_timeline_events(probe, st) if ev.phase in ("forward", "backward"))
    per_microbatch = sum(p.count * ops[p.name] for p in stage_parts(scn.model, st, scn.convention, scn.flow_impl))
    if scn.m * per_microbatch + 1 > MAX_EVENTS:
        raise SymmemError(f"--microbatches = {scn.m:,}: stage {st.index} has {per_microbatch:,} events per "
                          f"micro-batch, {scn.m * per_microbatch + 1:,} in the step, more than the limit of "
                          f"{MAX_EVENTS:,} a timeline draws; give fewer micro-batches (symmem memory gives the "
                          "peak at any M)")


def draw(scn, stage_index: int, labels, rows, peak) -> dict[str, bytes]:
    from symmem.render.plots import _figure, save
    from symmem.units import GIB

    comps = list(dict.fromkeys(k for r in rows for k in r))
    fig = _figure(figsize=(7.2, 4.0))
    ax = fig.add_subplot()
    xs = list(range(len(rows)))
    ax.stackplot(xs, [[r.get(c, 0) / GIB for r in rows] for c in comps], labels=comps, linewidth=0)
    top = sum(rows[peak].values()) / GIB
    ax.axvline(peak, color="black", linewidth=0.6, linestyle="--")
    ax.annotate(f"peak {top:.2f} GiB\n{labels[peak][:60]}", (peak, top), xytext=(0.02, 0.97),
                textcoords="axes fraction", va="top", fontsize=7, arrowprops={"arrowstyle": "->", "linewidth": 0.5})
    ax.set_xlabel("event (every op of every micro-batch's forward and backward, then the optimizer step)")
    ax.set_ylabel("allocated on one GPU (GiB)")
    ax.set_title(f"{scn.name}, stage {stage_index}: one training step ({scn.profile.name} profile)", fontsize=9)
    ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    return save(fig)


def _run(args) -> int:
    from pathlib import Path

    from symmem.output import write_file

    suffix = Path(args.out).suffix.lower()
    if suffix not in (".png", ".pdf"):
        raise SymmemError(f"--out = {args.out!r}: must end in .png or .pdf")
    scn = scenario_from_args(args)
    labels, rows, peak = series(scn, args.stage)
    files = draw(scn, args.stage, labels, rows, peak)
    write_file(args.out, files[suffix[1:]])
    if args.json:
        _print_json({"scenario": scn.name, "stage": args.stage, "unit": "bytes", "peak_index": peak,
                     "peak_allocated": sum(rows[peak].values()), "events": [
                         {"event": lab, **row} for lab, row in zip(labels, rows, strict=True)]})
    else:
        print(f"wrote {args.out}: {len(rows)} events, peak {sum(rows[peak].values()):,} bytes at {labels[peak]}")
    return 0


COMMAND = ("draw one training step of one GPU of a stage: what is alive, by component, with the peak marked",
           _add_args, _run)
