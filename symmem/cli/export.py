"""`symmem latex` and `symmem plot`: a scenario's formulas, tables and figures as files."""

from __future__ import annotations

import argparse
import json

from symmem.cli.args import add_scenario_args, scenario_from_args


def scenario_tables(scn):
    """Per-stage parameters, states and memory of one scenario, as tables."""
    from symmem.accounting.analysis import memory, peak, verdict
    from symmem.render.tables import Table
    from symmem.units import fmt_gib

    mems = memory(scn)
    top = peak(mems)
    rows = []
    for m in mems:
        rows.append((m.stage.index, m.params.total, m.states.weights, m.states.gradients, m.states.optimizer,
                     m.activation_per_microbatch, str(m.in_flight), m.activations, m.allocated,
                     f"{fmt_gib(m.low)}-{fmt_gib(m.high)}", verdict(m.low, m.high, scn.gpu_memory)
                     + (" (peak)" if m is top else "")))
    notes = (f"Scenario {scn.name}: {scn.model.name}, {scn.parallel.describe()}; precision {scn.precision.name}, "
             f"ZeRO {int(scn.zero)} ({scn.zero.label}); rules {scn.rules.name}, recompute {scn.policy.label}, "
             f"routing {scn.routing_label}; {scn.schedule.label}, M = {scn.m}, b = {scn.b}, s = {scn.s}.",
             f"Overheads: {scn.fragmentation[0]:.0%}-{scn.fragmentation[1]:.0%} fragmentation and "
             f"{scn.comm_buffers[0]:,}-{scn.comm_buffers[1]:,} bytes of communication buffers; capacity "
             f"{scn.gpu_memory:,} bytes. GiB = 2^30 bytes.")
    params = [(m.stage.index, ", ".join(str(i) for i in m.stage.layers) or "-",
               ("embedding " if m.stage.embedding else "") + ("head " if m.stage.head else "")
               + (f"{m.stage.mtp} MTP" if m.stage.mtp else ""), m.params.per_gpu["dense"],
               m.params.per_gpu["router"], m.params.per_gpu["routed_expert"], m.params.per_gpu["shared_expert"],
               m.params.total, m.params.whole_total) for m in mems]
    return [Table("params_per_stage", f"Parameters per GPU of every stage ({scn.name})",
                  ("stage", "layers", "also", "dense", "routers", "routed experts", "shared experts", "per GPU",
                   "whole stage"), tuple(params), notes[:1], align="rllrrrrrr"),
            Table("memory_per_stage", f"Memory per GPU of every stage ({scn.name})",
                  ("stage", "parameters", "weights B", "gradients B", "optimizer B", "activations per micro-batch B",
                   "in flight", "activations B", "allocated B", "with overheads GiB", "verdict"),
                  tuple(rows), notes, align="rrrrrrrrrll")]


def _latex_args(p: argparse.ArgumentParser) -> None:
    add_scenario_args(p)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--json", action="store_true", help="list what was written as JSON")


def _latex_run(args) -> int:
    from symmem.output import check_target, write_tree
    from symmem.render.report import formulas_tex, report_tex, scenario_formulas
    from symmem.render.tables import render_all

    check_target(args.out)  # a bad --out is refused before anything is derived
    scn = scenario_from_args(args)
    tables = scenario_tables(scn)
    files: dict[str, str | bytes] = {}
    for t in tables:
        files[f"{t.id}.tex"] = render_all(t)[f"{t.id}.tex"]
    files["formulas.tex"] = formulas_tex(scenario_formulas(scn), f"{scn.name}: {scn.parallel.describe()}")
    files["report.tex"] = report_tex(f"symmem: memory of scenario {scn.name}", scn.description or scn.name,
                                     [f"{t.id}.tex" for t in tables], [], r"\input{formulas.tex}")
    write_tree(args.out, files)
    import shlex

    _report_written(args, files, f" (compile with: cd {shlex.quote(str(args.out))} && pdflatex report.tex)")
    return 0


def _report_written(args, files: dict, hint: str = "") -> None:
    if args.json:
        print(json.dumps({"out": args.out, "files": sorted(files)}, indent=2))
    else:
        print(f"wrote {len(files)} files to {args.out}/{hint}")


FIGURES = ("stage_memory", "memory_vs_microbatch", "memory_vs_seqlen", "params_by_block")


def _plot_args(p: argparse.ArgumentParser) -> None:
    add_scenario_args(p)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--figures", default=",".join(FIGURES), help=f"comma-separated: {', '.join(FIGURES)}")
    p.add_argument("--json", action="store_true", help="list what was written as JSON")


def _plot_run(args) -> int:
    from symmem.errors import SymmemError
    from symmem.output import check_target, write_tree
    from symmem.render import plots

    check_target(args.out)  # a bad --out is refused before anything is drawn
    scn = scenario_from_args(args)
    wanted = list(dict.fromkeys(f.strip() for f in args.figures.split(",") if f.strip()))
    if not wanted:
        raise SymmemError(f"--figures = {args.figures!r}: empty; name at least one of {', '.join(FIGURES)}")
    for f in wanted:
        if f not in FIGURES:
            raise SymmemError(f"--figures: {f!r} is unknown; known: {', '.join(FIGURES)}")
    makers = {
        "stage_memory": lambda: plots.figure_stage_memory([(scn.name, scn)]),
        "memory_vs_microbatch": lambda: plots.figure_memory_sweep(scn, "b", [1, 2, 4, 8, 16],
                                                                  getattr(args, "global_batch", None)),
        "memory_vs_seqlen": lambda: plots.figure_memory_sweep(scn, "s", [1024, 2048, 4096, 8192, 16384, 32768]),
        "params_by_block": lambda: plots.figure_params_by_block(scn.model),
    }
    files: dict[str, bytes] = {}
    for name in wanted:
        fig, _ = makers[name]()
        for ext, data in plots.save(fig).items():
            files[f"{name}.{ext}"] = data
    write_tree(args.out, files)
    _report_written(args, files)
    return 0


LATEX = ("LaTeX of a scenario: every derived formula, its tables, and a standalone report.tex", _latex_args,
         _latex_run)
PLOT = ("figures of a scenario (PNG and PDF): per-stage memory, memory against b and s, parameters by block",
        _plot_args, _plot_run)
