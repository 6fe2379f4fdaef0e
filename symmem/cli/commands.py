"""The subcommands: each is (help, add_arguments, run)."""

from __future__ import annotations

import argparse
import json

from symmem._numbers import MAX_STAGE_INDEX
from symmem.cli.args import _print_json, add_scenario_args, int_arg, scenario_from_args
from symmem.units import fmt_gb, fmt_gib


# ------------------------------------------------------------------------------------------------ params
def _params_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="deepseek-v3", help="preset name or config.json path")
    p.add_argument("--convention", default="paper", help="TP convention (does not change whole-model totals)")
    p.add_argument("--symbolic", action="store_true", help="print the expressions in the paper's symbols")
    p.add_argument("--json", action="store_true")


def _params_run(args) -> int:
    from symmem.accounting.analysis import model_totals
    from symmem.accounting.params import GROUPS, count_by_group, weight_uses
    from symmem.config import load_model
    from symmem.errors import SymmemError
    from symmem.graph import global_size
    from symmem.model import model_parts
    from symmem.render.latex import plain

    model = load_model(args.model)
    if args.convention not in model.family.conventions:
        raise SymmemError(f"--convention = {args.convention!r}: unknown for {model.family.name} models; known: "
                          f"{', '.join(model.family.conventions)}")
    subs = model.substitutions()
    parts = model_parts(model, args.convention, with_mtp=True)
    totals = model_totals(model, args.convention)
    per_part: dict[str, dict] = {}
    per_block: dict[str, int] = {}
    by_group = {g: 0 for g in GROUPS}
    for part in parts:
        uses = weight_uses([part], unique=True)
        groups = count_by_group(uses, None)  # already multiplied by the part's layer count
        expr = sum(groups.values()) / part.count
        total = int(sum(groups.values()).subs(subs))
        per_part[part.name] = {"count": part.count, "per_copy": int(expr.subs(subs)), "total": total,
                               **({"expression": plain(expr)} if args.symbolic else {})}
        for u in uses:
            key = f"{part.name}/{u.block}"
            per_block[key] = per_block.get(key, 0) + u.count * int(global_size(u.weight.dims).subs(subs))
        if part.kind != "mtp":
            for g, e in groups.items():
                by_group[g] += int(e.subs(subs))
    result = {"model": model.name, "total": totals.total, "activated": totals.activated, "mtp": totals.mtp,
              "total_with_mtp": totals.total + totals.mtp, "by_group": by_group, "per_part": per_part,
              "per_block": per_block, "ignored_config_keys": list(model.ignored_keys), "notes": list(model.notes),
              "conventions": {
                  "total": "embedding + all decoder layers + final norm + output head; no MTP; parameters only "
                           "(buffers such as e_score_correction_bias excluded)",
                  "activated": "per token: without the input embedding, with the output head; routed experts "
                               "at N_r of N"}}
    if args.json:
        _print_json(result)
        return 0
    print(f"{model.name}: {totals.total:,} parameters ({totals.total / 1e9:.1f}B), "
          f"activated per token {totals.activated:,} ({totals.activated / 1e9:.1f}B); "
          f"MTP modules {totals.mtp:,} more")
    if model.ignored_keys:
        print(f"  config keys not used by the engine: {', '.join(model.ignored_keys)}")
    for note in model.notes:
        print(f"  note: {note}")
    print("  by group: " + ", ".join(f"{g} {n:,}" for g, n in by_group.items()))
    for name, d in per_part.items():
        line = f"  {name:<14} {d['count']:>3} x {d['per_copy']:>16,} = {d['total']:>18,}"
        if args.symbolic:
            line += f"   per copy: {d['expression']}"
        print(line)
    return 0


# ------------------------------------------------------------------------------------------------ states
def _states_args(p: argparse.ArgumentParser) -> None:
    add_scenario_args(p, activations=False)
    p.add_argument("--stage", type=int_arg(0, MAX_STAGE_INDEX), help="only this stage")
    p.add_argument("--symbolic", action="store_true", help="per-GPU parameter expressions")
    p.add_argument("--json", action="store_true")


def _stage_filter(scn, stage):
    from symmem.errors import SymmemError

    if stage is None:
        return scn.stages
    if not 0 <= stage < len(scn.stages):
        raise SymmemError(f"--stage = {stage}: the scenario has stages 0..{len(scn.stages) - 1}")
    return (scn.stages[stage],)


def _states_run(args) -> int:
    from symmem.accounting.analysis import stage_params, stage_states
    from symmem.accounting.params import MOE_GROUPS
    from symmem.render.latex import plain

    scn = scenario_from_args(args)
    rows = []
    for st in _stage_filter(scn, args.stage):
        sp = stage_params(scn, st)
        sb = stage_states(scn, sp)
        row = {"stage": st.index, "layers": [st.layers[0], st.layers[-1]] if st.layers else [],
               "embedding": st.embedding, "head": st.head, "mtp": st.mtp,
               "params_per_gpu": {"dense": sp.dense, "moe": sp.moe, "total": sp.total, **sp.per_gpu},
               "params_whole_stage": sp.whole_total,
               # DualPipe: the GPU holds a second stage, whose states bytes_per_gpu includes
               "held_stages": list(scn.schedule.held_stages(st.index, scn.parallel.pp)),
               "bytes_per_gpu": {"weights": sb.weights, "gradients": sb.gradients, "optimizer": sb.optimizer,
                                 "total": sb.total}}
        if args.symbolic:
            row["params_per_gpu_expression"] = {
                "dense": plain(sp.per_gpu_expr["dense"]),
                "moe": plain(sum(sp.per_gpu_expr[g] for g in MOE_GROUPS))}
        rows.append(row)
    if args.json:
        _print_json({"scenario": scn.name, "parallel": _describe(scn), "zero": scn.zero.label,
                     "precision": scn.precision.name, "stages": rows, "config_notes": _config_notes(scn)})
        return 0
    print(f"scenario {scn.name}: {scn.model.name}, {_describe(scn)}; precision {scn.precision.name} "
          f"({scn.precision.per_parameter} B/param), ZeRO {int(scn.zero)} ({scn.zero.label})")
    for line in _config_notes(scn):
        print(line)
    print(f"{'stage':>5} {'layers':>8} {'dense/GPU':>14} {'MoE/GPU':>15} {'total/GPU':>15} "
          f"{'weights GiB':>11} {'grads GiB':>9} {'optim GiB':>9} {'states GiB':>10}")
    for r in rows:
        lay = f"{r['layers'][0]}-{r['layers'][1]}" if r["layers"] else "-"
        b = r["bytes_per_gpu"]
        p = r["params_per_gpu"]
        print(f"{r['stage']:>5} {lay:>8} {p['dense']:>14,} {p['moe']:>15,} {p['total']:>15,} "
              f"{fmt_gib(b['weights']):>11} {fmt_gib(b['gradients']):>9} {fmt_gib(b['optimizer']):>9} "
              f"{fmt_gib(b['total']):>10}")
        if args.symbolic:
            print(f"      dense = {r['params_per_gpu_expression']['dense']}")
            print(f"      moe   = {r['params_per_gpu_expression']['moe']}")
    return 0


# ------------------------------------------------------------------------------------------- activations
def _act_args(p: argparse.ArgumentParser) -> None:
    add_scenario_args(p)
    p.add_argument("--stage", type=int_arg(0, MAX_STAGE_INDEX), help="only this stage")
    p.add_argument("--symbolic", action="store_true", help="print the per-micro-batch expressions")
    p.add_argument("--json", action="store_true")


def _settings(scn) -> dict:
    return {"scenario": scn.name, "model": scn.model.name, "parallel": _describe(scn),
            "rules": scn.rules.name, "recompute": scn.policy.label, "routing": scn.routing_label,
            "schedule": scn.schedule.label, "microbatches": scn.m, "b": scn.b, "s": scn.s,
            "global_batch_size": scn.b * scn.m * scn.parallel.dp}


def _act_run(args) -> int:
    import sympy

    from symmem.accounting.analysis import stage_terms, to_int, values
    from symmem.render.latex import plain

    scn = scenario_from_args(args)
    vals = values(scn)
    stages = []
    for st in _stage_filter(scn, args.stage):
        terms = stage_terms(scn, st)
        blocks: dict[str, sympy.Expr] = {}
        for t in terms:
            blocks[t.block] = blocks.get(t.block, 0) + t.total
        per_layer = {}
        for t in terms:
            per_layer.setdefault(t.part, 0)
            per_layer[t.part] += t.nbytes
        total = sympy.expand(sum(blocks.values()))
        k = scn.schedule.in_flight(st.index, scn.parallel.pp, scn.m, scn.schedule_runtime)
        per_mb = to_int(total, vals)
        row = {"stage": st.index,
               "per_block": {blk: to_int(e, vals) for blk, e in sorted(blocks.items())},
               "per_layer": {p: to_int(e, vals) for p, e in per_layer.items()},
               "per_microbatch": per_mb, **in_flight_fields(k),
               "per_gpu": -(-per_mb * k.numerator // k.denominator)}
        if args.symbolic:
            row["expression"] = plain(total)
            row["per_block_expression"] = {blk: plain(sympy.expand(e)) for blk, e in sorted(blocks.items())}
        stages.append(row)
    if args.json:
        _print_json({**_settings(scn), "unit": "bytes", "stages": stages, "config_notes": _config_notes(scn)})
        return 0
    s = _settings(scn)
    print(f"scenario {s['scenario']}: {s['model']}, {s['parallel']}")
    for line in _config_notes(scn):
        print(line)
    print(f"rules {s['rules']}, recompute {s['recompute']}, routing {s['routing']}, schedule {s['schedule']} "
          f"with M = {s['microbatches']}, b = {s['b']}, s = {s['s']} (global batch {s['global_batch_size']:,})")
    print(f"{'stage':>5} {'per micro-batch (bytes)':>24} {'GiB':>8} {'in flight':>9} {'per GPU GiB':>11} {'GB':>8}"
          "  blocks (bytes per micro-batch)")
    for r in stages:
        blocks = ", ".join(f"{k} {v:,}" for k, v in r["per_block"].items())
        print(f"{r['stage']:>5} {r['per_microbatch']:>24,} {fmt_gib(r['per_microbatch']):>8} {_in_flight_text(r):>9} "
              f"{fmt_gib(r['per_gpu']):>11} {fmt_gb(r['per_gpu']):>8}  {blocks}")
        if args.symbolic:
            for blk, e in r["per_block_expression"].items():
                print(f"      {blk}: {e}")
    return 0


def in_flight_fields(k) -> dict:
    """Micro-batches in flight for JSON: a number, an int when whole; otherwise a float, with the exact fraction
    beside it as a string ("in_flight_exact": "15/2")."""
    if k.denominator == 1:
        return {"in_flight": int(k)}
    return {"in_flight": float(k), "in_flight_exact": f"{k.numerator}/{k.denominator}"}


def _in_flight_text(row: dict) -> str:
    return row.get("in_flight_exact", str(row["in_flight"]))


# ------------------------------------------------------------------------------------------------ memory
def _memory_args(p: argparse.ArgumentParser) -> None:
    add_scenario_args(p)
    p.add_argument("--json", action="store_true")


def _verdict(low: int, high: int, reserved: int | None, capacity: int) -> str:
    """From the replayed reserved memory where the profile has one (what the job fails on), else from the range."""
    from symmem.accounting.analysis import verdict

    if reserved is None:
        return verdict(low, high, capacity)
    return "fits (replayed reserved)" if reserved <= capacity else "does not fit (replayed reserved)"


def _config_notes(scn) -> list[str]:
    """How the model's config was read (its notes: a model_type read as another) and the keys its family does not
    read that may change what a step holds (family.unread_note)."""
    from symmem.family import unread_note

    return [f"note: {n}" for n in scn.model.notes] + [n for n in (unread_note(scn.model),) if n]


def time_notes(scn) -> list[str]:
    """What the step time leaves out of a scenario whose memory models it (said wherever the time is shown)."""
    out = []
    if scn.compiled:
        out.append("note: --compile: the step time is the eager step's (torch.compile's fused kernels are not "
                   "modelled in time); the memory is the compiled step's")
    r = scn.parallel.hsdp_replicate
    if r > 1:
        out.append(f"note: --hsdp-replicate {r}: the step time shards the optimizer and times the gradients' "
                   "traffic as FSDP over DP x CP (HSDP's all-reduce across its replicas and their larger optimizer "
                   "shards are not modelled in time); the memory is HSDP's")
    return out


def _describe(scn) -> str:
    """The arrangement's line; a dense model's says nothing of a MoE block."""
    return scn.parallel.describe(scn.model.family.routed_experts is not None)


def _constants_said(step) -> str:
    """Where the step-time constants come from: a measured profile's (`--gpu FILE`) or the fit."""
    from symmem.steptime.model import DEVICE_CONSTANTS

    if step.model == "measured kernels" and step.gpu in DEVICE_CONSTANTS:  # calibrated (`--gpu FILE`)
        return ("each GEMM pass, attention and collective at the time symmem calibrate measured for it on the "
                "device (the nearest measured shapes), nothing fitted")
    if step.model == "measured kernels":
        return (f"each GEMM, attention and collective at the time measured for it on {step.gpu} "
                "(symmem/data/kernels/), four constants fitted on measured B200 runs"
                + (f"; {step.caveat}" if step.caveat else ""))
    from symmem.steptime.measured import KERNEL_CONSTANTS

    k = DEVICE_CONSTANTS.get(step.gpu)
    if k is None:
        return "five constants fitted on measured B200 runs" + (f"; not the measured kernels: {step.model_note}"
                                                                 if step.model_note and step.gpu in KERNEL_CONSTANTS
                                                                 else "")
    from symmem.hardware import GPUS

    g = GPUS.get(step.gpu)
    links = ("" if g is None or g.step_latency is None else
             f", collectives at {g.nvlink / 1e9:,.2f} GB/s and {g.step_latency * 1e6:,.1f} us a ring step")
    return (f"rates measured on the device (--gpu profile), nothing fitted: GEMMs at the best measured GEMM rate, "
            f"attention at {k.attention_efficiency:.3f} of it, {k.latency_s * 1e6:.2f} us a kernel{links}, MFU of "
            "the measured GEMM rate")


def _stages(rows) -> str:
    return ", ".join(str(r["stage"]) for r in rows)


def memory_rows(scn):
    from symmem.accounting.analysis import QUANTIZED, memory, stage_params
    from symmem.accounting.reserved import replay_refusal, replayed_microbatches, stage_reserved

    mems = memory(scn)
    top = max(mems, key=lambda m: (m.peak_allocated, -m.stage.index))
    rows = []
    for m in mems:
        ev = m.peak.event
        low, high = m.reserved
        held = scn.schedule.held_stages(m.stage.index, scn.parallel.pp)  # DualPipe: two stages' parameters
        reserved = stage_reserved(scn, m.stage)
        params = sum(stage_params(scn, scn.stages[i]).total for i in held)
        rows.append({"stage": m.stage.index, "params_per_gpu": params, "held_stages": list(held),
                     "weights": m.states.weights,
                     "gradients": m.states.gradients, "optimizer": m.states.optimizer,
                     # FP8/FP4 recipes: quantized weight copies, their scales and scaling state (0 otherwise)
                     "quantized_weights": m.states.quantized,
                     "framework_buffers": {k: v for k, v in m.peak.static.items()
                                           if k not in ("weights", "gradients", "optimizer states", QUANTIZED)},
                     "activations_per_microbatch": m.activation_per_microbatch,
                     **in_flight_fields(m.in_flight),
                     "activations": m.activations,
                     "allocated": m.allocated,  # model states + saved activations in flight: the sum, not the peak
                     "peak_allocated": m.peak_allocated,
                     "peak_event": {"phase": ev.phase, "part": ev.part, "op": ev.op,
                                    "microbatch": "the last in flight" if ev.phase != "optimizer step" else None},
                     "peak_breakdown": {**m.peak.static, **m.peak.dynamic},
                     "reserved_low": low, "reserved_high": high,
                     # the caching allocator replayed (profiles that say their allocation order), else null
                     "reserved": reserved,
                     # the micro-batches the replay walked (the warm-up and REPLAYED_PAIRS steady pairs at most)
                     "reserved_replayed_microbatches": (replayed_microbatches(scn, m.stage)
                                                        if reserved is not None
                                                        and scn.profile.allocation_order != "fsdp2" else None),
                     "reserved_not_replayed": (replay_refusal(scn, m.stage)
                                               if scn.profile.allocation_order else None),
                     "verdict": _verdict(low, high, reserved, scn.gpu_memory), "peak": m is top})
    return rows, top


def _memory_run(args) -> int:
    from symmem.cli._default_notes import default_notes
    from symmem.cli._inapplicable import notes

    scn = scenario_from_args(args)
    rows, top = memory_rows(scn)
    unused = notes(args, scn)
    defaults = default_notes(args, scn)
    settings = {**_settings(scn), "zero": scn.zero.label, "precision": scn.precision.name,
                "profile": scn.profile.name, "gpu_memory": scn.gpu_memory, "fragmentation": list(scn.fragmentation),
                "comm_buffers": list(scn.comm_buffers)}
    step = None
    from symmem.accounting.recompute import Recompute
    from symmem.hardware import has_speeds, no_speeds_note

    # the step time needs the GPU's speed (--gpu NAME); a GPU with a capacity but no speed figures (H20, MI300X)
    # answers with its capacity and says why there is no step time
    no_step = no_speeds_note(scn.gpu_name) if scn.gpu_name is not None and not has_speeds(scn.gpu_name) else None
    if no_step is None and scn.gpu_name is not None and scn.policy.kind is Recompute.SELECTIVE_LAYER:
        no_step = (f"step time: not derived under recompute {scn.policy.label} (the step-time model treats every "
                   "layer alike); the memory above is derived")
    profile_notes: list[str] = []
    if scn.gpu_name is not None and no_step is None:
        from symmem.steptime import step_time
        from symmem.steptime.kernels import REGISTERED

        step = step_time(scn)
        if step.model == "measured kernels" and scn.gpu_name in REGISTERED:  # a calibrated device's own table
            from symmem.calibrate_shapes import unmeasured_note

            profile_notes = [n for n in (unmeasured_note(scn, REGISTERED[scn.gpu_name]),) if n]
        from symmem.hardware_profile import dtype_note

        profile_notes += [n for n in (dtype_note(scn.gpu_name),) if n]
        profile_notes += time_notes(scn)
    if args.json:
        _print_json({**settings, "unit": "bytes", "peak_stage": top.stage.index, "stages": rows,
                     "step": step.as_dict() if step else None, "flag_notes": unused, "default_notes": defaults,
                     "profile_notes": profile_notes, "config_notes": _config_notes(scn),
                     **({"step_unavailable": no_step} if no_step else {})})
        return 0
    print(f"scenario {scn.name}: {scn.model.name}, {_describe(scn)}")
    for line in unused + defaults + profile_notes + _config_notes(scn):
        print(line)
    print(f"ZeRO {int(scn.zero)} ({scn.zero.label}), precision {scn.precision.name}; profile {scn.profile.name}, "
          f"rules {scn.rules.name}, recompute {scn.policy.label}, routing {scn.routing_label}; schedule "
          f"{scn.schedule.label}, M = {scn.m}, b = {scn.b}, s = {scn.s}, "
          f"global batch {scn.b * scn.m * scn.parallel.dp:,}")
    print(f"GPU capacity {scn.gpu_memory:,} bytes ({fmt_gb(scn.gpu_memory)} GB, {fmt_gib(scn.gpu_memory)} GiB); "
          f"reserved = peak x (1 + {scn.fragmentation[0]:.0%}..{scn.fragmentation[1]:.0%}) + communication buffers "
          f"{fmt_gb(scn.comm_buffers[0])}-{fmt_gb(scn.comm_buffers[1])} GB")
    quant = any(r["quantized_weights"] for r in rows)  # an FP8/FP4 recipe's weight copies: a column of their own
    derived = any(r["reserved"] is not None for r in rows)
    refused = [r for r in rows if r["reserved_not_replayed"]]
    if refused:
        print(f"reserved not derived for stage(s) {_stages(refused)}; stage "
              f"{refused[0]['stage']}: {refused[0]['reserved_not_replayed']}")
    if derived:
        where = ("symmem/accounting/fsdp2_reserved.py, expandable segments" if scn.profile.allocation_order == "fsdp2"
                 else "symmem/accounting/reserved.py")
        print("reserved: PyTorch's caching allocator replayed over the step as the framework allocates "
              f"({where}); NCCL's buffers are outside it")
        cut = [r for r in rows if (r.get("reserved_replayed_microbatches") or scn.m) < scn.m]
        if cut:
            from symmem.accounting.reserved import REPLAYED_PAIRS

            which = "every stage replays" if len(cut) == len(rows) else f"stage(s) {_stages(cut)} replay"
            print(f"reserved: of M = {scn.m} micro-batches, {which} the warm-up and "
                  f"{REPLAYED_PAIRS} steady 1F1B pairs ({cut[0]['reserved_replayed_microbatches']} micro-batches at "
                  f"stage {cut[0]['stage']}), then the cool-down: the allocator's state never repeats, so this is "
                  "not proven equal to the whole step (in a survey of six models at M = 256, the whole step's "
                  "figure was at most 28 MiB higher)")
    print(f"{'stage':>5} {'weights':>8} " + (f"{'fp8/fp4':>8} " if quant else "") + f"{'grads':>8} {'optim':>8} "
          f"{'act/mb':>8} {'x':>5} {'sum':>8} {'peak':>8} "
          + (f"{'reserved':>9} " if derived else "") + f"{'reserved (low-high)':>20}  verdict; peak event")
    for r in rows:
        mark = "  <- peak" if r["peak"] else ""
        ev = r["peak_event"]
        print(f"{r['stage']:>5} {fmt_gib(r['weights']):>8} "
              + (f"{fmt_gib(r['quantized_weights']):>8} " if quant else "") + f"{fmt_gib(r['gradients']):>8} "
              f"{fmt_gib(r['optimizer']):>8} {fmt_gib(r['activations_per_microbatch']):>8} {_in_flight_text(r):>5} "
              f"{fmt_gib(r['allocated']):>8} {fmt_gib(r['peak_allocated']):>8} "
              + (f"{fmt_gib(r['reserved']):>9} " if derived else "")
              + f"{fmt_gib(r['reserved_low']) + '-' + fmt_gib(r['reserved_high']):>20}  "
              f"{r['verdict']}; {ev['phase']} {ev['part']} {ev['op']}{mark}")
    print("(GiB = 2^30 bytes; sum = model states + saved activations in flight, as the paper adds them; peak = "
          "the busiest moment of the step, with framework buffers, transients and activation gradients)")
    if quant:
        print("(fp8/fp4 = the recipe's quantized weight copies with their scale tensors and scaling state; "
              "symmem.precision)")
    if step is not None:
        print(f"step on {step.gpu}: {step.time_s:.3f} s estimated per iteration, {step.tokens_per_s:,.0f} tokens/s, "
              f"MFU {step.mfu:.1%}; {step.flops_model:.3e} model FLOPs per iteration (Megatron's count), "
              f"{step.flops_hardware:.3e} with recomputation "
              f"(symmem/steptime/: derived per op, {_constants_said(step)})")
        sent = ", ".join(f"{axis.upper()} {fmt_gib(n)}" for axis, n in step.comm_bytes.items() if n)
        print(f"sent per GPU per iteration (GiB; symmem/comm.py): {sent or 'nothing'}")
    if no_step:
        print(no_step)
    return 0


# ------------------------------------------------------------------------------------------------- paper
def _paper_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="paper_tables", help="output folder (default: paper_tables/)")
    p.add_argument("--json", action="store_true", help="list what was written as JSON")


def _paper_run(args) -> int:
    from symmem.output import check_target, write_tree
    from symmem.render.paper import generate

    check_target(args.out)  # a bad --out is refused before seconds of generation
    files = generate()
    written = write_tree(args.out, files)
    if args.json:
        print(json.dumps({"out": args.out, "files": sorted(files)}, indent=2))
    else:
        print(f"wrote {len(written)} files to {args.out}/")
    return 0


def _optional(module: str, name: str = "COMMAND"):
    """A command defined in its own module as NAME = (help, add_args, run)."""
    import importlib

    return getattr(importlib.import_module(f"symmem.cli.{module}"), name)


COMMANDS = {
    "params": ("whole-model parameter counts (total, activated, per block)", _params_args, _params_run),
    "states": ("per-stage and per-GPU parameters and model-state bytes under a scenario and ZeRO stage",
               _states_args, _states_run),
    "activations": ("activation memory per block, layer, stage, micro-batch and GPU", _act_args, _act_run),
    "memory": ("the whole per-GPU memory breakdown of every stage, with a verdict", _memory_args, _memory_run),
    "paper": ("regenerate the paper's tables (and the ones it misses) into a folder", _paper_args, _paper_run),
    "check": _optional("check"),
    "latex": _optional("export", "LATEX"),
    "plot": _optional("export", "PLOT"),
    "sweep": _optional("sweep"),
    "measure": _optional("measure"),
    "timeline": _optional("timeline"),
    "html": _optional("html"),
    "calibrate": _optional("calibrate"),
}
