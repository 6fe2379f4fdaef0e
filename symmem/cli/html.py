"""`symmem html`: the scenario's closed forms in one self-contained page (symmem.render.page)."""

from __future__ import annotations

import argparse
import copy
import shlex
import sys

from symmem import _numbers as num
from symmem.cli._flag_rules import memory_only
from symmem.cli.args import add_scenario_args, scenario_from_args
from symmem.errors import SymmemError

MAX_CHOICES = 32  # values one control offers
LISTS = {  # control -> (flag, parse one value)
    "tp": ("--tp-choices", "int"), "pp": ("--pp-choices", "int"), "ep": ("--ep-choices", "int"),
    "cp": ("--cp-choices", "int"), "zero": ("--zero-choices", "int"), "recompute": ("--recompute-choices", "text"),
    "precision": ("--precision-choices", "text"), "gpu": ("--gpu-choices", "text"),
}
LIMITS = {"tp": num.MAX_PARALLEL, "pp": num.MAX_PP, "ep": num.MAX_PARALLEL, "cp": num.MAX_PARALLEL, "zero": 3}


def _args(p: argparse.ArgumentParser) -> None:
    add_scenario_args(p)
    p.add_argument("-o", "--output", default="symmem.html", help="the page to write (default: symmem.html)")
    for key, (flag, _kind) in LISTS.items():
        p.add_argument(flag, dest=f"{key}_choices",
                       help=f"the {key} values the page offers, comma-separated (default: see symmem html --help)")


def _parse_list(text: str, key: str) -> list:
    flag, kind = LISTS[key]
    items = [x.strip() for x in text.split(",")]
    if not items or any(not x for x in items):
        raise SymmemError(f"{flag} = {text[:60]!r}: must be values separated by commas, none empty")
    if len(dict.fromkeys(items)) > MAX_CHOICES:  # (a value given twice is one choice)
        raise SymmemError(f"{flag}: {len(dict.fromkeys(items)):,} values, more than the limit of {MAX_CHOICES}")
    if kind == "int":
        low = 0 if key == "zero" else 1
        out = [num.int_text(x, f"{flag} entry", low, LIMITS[key]) for x in items]
        return sorted(set(out))
    if key == "gpu":
        items = [x.upper() for x in items]
    # every value is checked as its flag would check it, before anything is derived: an unknown one is refused
    # (named with this flag), never offered on the page
    check = {"recompute": "symmem.accounting.recompute:policy", "precision": "symmem.accounting.states:recipe"}
    if key in check:
        import importlib

        module, name = check[key].split(":")
        parse = getattr(importlib.import_module(module), name)
        for x in items:
            try:
                parse(x)
            except SymmemError as exc:
                raise SymmemError(f"{flag} entry {x[:60]!r}: {str(exc).split(': ', 1)[-1]}") from None
    return list(dict.fromkeys(items))


def _gpu_table(capacity: int) -> tuple[dict, str]:
    """The GPUs the page offers (symmem.units.GPUS, capacities as sold), and the name of the scenario's."""
    from symmem.units import GPUS

    table = {name.upper(): cap for name, cap in GPUS.items()}  # (a measured profile's too: `--gpu FILE`)
    for name, cap in table.items():
        if cap == capacity:
            return table, name
    own = f"{capacity}B"
    return {own: capacity, **table}, own


FLAG_NAMES = {"b": "-b", "s": "-s", "global_batch": "--global-batch-size", "first": "--first-stage-layers",
              "last": "--last-stage-layers"}


def _command_line(args) -> str:
    """The flags that made the page, as a command line (shown on the page: how to make it again): each as the user
    would type it (its own option string), a switch only when it was given (a store_true switch left at its default
    is not written as a --no- spelling nobody typed)."""
    parser = argparse.ArgumentParser(add_help=False)
    _args(parser)
    actions = {a.dest: a for a in parser._actions}
    words = ["symmem", "html"]
    for key, value in vars(args).items():
        if key in ("command", "func", "output") or value is None or key.startswith("_"):
            continue
        action = actions.get(key)
        longs = [o for o in (action.option_strings if action else ()) if o.startswith("--")]
        flag = FLAG_NAMES.get(key) or (longs[0] if longs else "--" + key.replace("_", "-"))
        if isinstance(value, bool):
            if isinstance(action, argparse.BooleanOptionalAction):  # default None: a bool was typed
                words.append(flag if value else "--no-" + flag[2:])
            elif value != (action.default if action else False):  # store_true/false away from its default
                words.append(flag)
        else:
            words += [flag, str(value)]
    return " ".join(shlex.quote(w) for w in words)


def _run(args) -> int:
    from symmem.output import write_file
    from symmem.render.page import PageInput, render
    from symmem.units import GPUS

    if args.microbatches is not None:
        raise SymmemError("--microbatches: the page sets M from --global-batch-size (or PP by default); give "
                          "--global-batch-size instead")
    if getattr(args, "compiled", False):  # before the scenario's own checks, whose advice the page cannot take
        raise SymmemError("--compile: torch.compile is not modelled by the page (its script evaluates the eager saved "
                          "sets); use symmem memory --compile")
    base = scenario_from_args(args)
    memory_only(base, "the page", "use symmem memory")
    from symmem.render.page import refusal

    why = refusal(base)  # a scenario the page cannot carry is refused before its choices are rebuilt from it
    if why:
        raise SymmemError(f"html: {why}")
    gpus, initial_gpu = _gpu_table(base.gpu_memory)
    if base.gpu_name is not None and base.gpu_name.lower() in GPUS:
        initial_gpu = base.gpu_name.upper()
    par = base.parallel
    initial = {"tp": par.tp, "pp": par.pp, "ep": par.ep, "cp": par.cp, "dp": par.dp, "zero": int(base.zero),
               "b": base.b, "s": base.s, "global-batch-size": args.global_batch, "recompute": base.recompute_name,
               "precision": base.precision.name, "gpu": initial_gpu}
    moe = base.model.family.routed_experts is not None
    experts = base.model.value(base.model.family.routed_experts[0]) if moe else None
    choices = {
        "tp": sorted({1, 2, 4, 8, par.tp}),
        "pp": sorted({1, 2, 4, 8, 16, par.pp}) if args.layers_per_stage is None else [par.pp],
        "ep": sorted({e for e in (1, 2, 4, 8, 16, 32, 64) if experts is None or e <= experts} | {par.ep}) if moe
        else [par.ep],
        "cp": sorted({1, 2, 4, 8, par.cp}) if base.rules.context_parallel else [par.cp],
        "zero": [0, 1, 2, 3],
        "recompute": list(dict.fromkeys(["none", "selective", "full", base.recompute_name])),
        "precision": list(dict.fromkeys([base.precision.name, "paper", "megatron"])),
        "gpu": list(gpus),
    }
    for key in LISTS:
        text = getattr(args, f"{key}_choices")
        if text is not None:
            choices[key] = _parse_list(text, key)
    unknown = [g for g in choices["gpu"] if g not in gpus]
    if unknown:
        raise SymmemError(f"--gpu-choices: {unknown[0]!r} is no known GPU; known: {', '.join(gpus)}")
    for key in ("zero", "recompute", "precision", "gpu", "tp", "pp", "ep", "cp"):
        if initial[key] not in choices[key]:
            # name where the value comes from: the flag the user gave, or the scenario or model default
            flag = {"zero": "--zero", "recompute": "--recompute", "precision": "--precision", "gpu": "--gpu",
                    "tp": "--tp", "pp": "--pp", "ep": "--ep", "cp": "--cp"}[key]
            typed = getattr(args, key, None) is not None
            whose = f"the {args.scenario} scenario's" if args.scenario else "the default"
            origin = f"{flag} = {initial[key]}" if typed else f"{initial[key]}, {whose} (set it with {flag})"
            raise SymmemError(f"{LISTS[key][0]} = {','.join(map(str, choices[key]))}: must include the page's "
                              f"starting {key}: {origin}")
    gpus = {g: gpus[g] for g in choices["gpu"]}

    def make(settings: dict):
        ns = copy.copy(args)
        for key in ("tp", "pp", "ep", "cp", "dp", "b", "s", "recompute", "precision"):
            setattr(ns, key, settings[key])
        ns.zero = str(settings["zero"])
        ns.edp = None
        ns.global_batch = settings["global-batch-size"]
        gpu = settings["gpu"]
        if gpu.lower() in GPUS:
            ns.gpu, ns.gpu_memory = gpu, None
        else:
            ns.gpu, ns.gpu_memory = None, str(gpus[gpu])
        return scenario_from_args(ns)

    command = _command_line(args)
    page = render(PageInput(make, initial, choices, command, gpus))
    write_file(args.output, page.encode(), "--output")
    arrangements = len(choices["tp"]) * len(choices["pp"]) * len(choices["cp"]) * len(choices["ep"])
    where = "standard output" if args.output == "-" else args.output
    # with -o - the page is standard output: the summary goes to standard error
    print(f"wrote {where} ({len(page.encode()):,} bytes): {arrangements} arrangements; open it in a browser (no "
          "network needed)", file=sys.stderr if args.output == "-" else sys.stdout)
    return 0


COMMAND = ("one self-contained HTML page that evaluates the scenario's closed forms as its controls move", _args, _run)
