"""`symmem check`: is a hand derivation right? Parsed safely, compared term by term, with provenance."""

from __future__ import annotations

import argparse
import json

from symmem._numbers import MAX_STAGE_INDEX
from symmem.cli.args import add_scenario_args, int_arg, scenario_from_args
from symmem.units import fmt_gib


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("formula", nargs="?", help="the formula, in LaTeX (10bsh + 8bs(d_{cq}+d_c)) or plain (10*b*s*h)")
    p.add_argument("--quantity", default="stage.activations", help="what to compare with (see --list)")
    p.add_argument("--stage", type=int_arg(0, MAX_STAGE_INDEX), default=None,
                   help="pipeline stage (default 1, the paper's worst case; 0 when there is one stage)")
    p.add_argument("--layer", type=int_arg(0, MAX_STAGE_INDEX), default=None,
                   help="decoder layer of a layer.* quantity (default: the stage's first layer)")
    p.add_argument("--list", action="store_true", help="list the quantities")
    p.add_argument("--strict", action="store_true", help="'equal at this scenario only' counts as different")
    p.add_argument("--json", action="store_true")
    add_scenario_args(p)


def _claimed(text: str, scn):
    from symmem.check import scenario_formula

    return scenario_formula(text, scn)


def run(args) -> int:
    from symmem.accounting.analysis import values
    from symmem.check.compare import DIFFERENT, EQUAL, compare
    from symmem.check.quantities import available, derive, quantity
    from symmem.errors import SymmemError
    from symmem.render.latex import latex, plain

    if args.list:
        extra = [f for f, given in (("formula", args.formula is not None), ("--strict", args.strict),
                                    ("--stage", args.stage is not None), ("--layer", args.layer is not None))
                 if given]
        if extra:  # (the list's exit 0 must not read as a verdict on a formula it did not check)
            raise SymmemError(f"--list: lists the quantities; it takes no {extra[0]} (check it without --list)")
        listed = available(scenario_from_args(args))
        if args.json:
            print(json.dumps({q.name: {"unit": q.unit, "description": q.description}
                              for q in listed.values()}, indent=2, sort_keys=True))
        else:
            for q in listed.values():
                print(f"{q.name:<28} {q.unit:<10} {q.description}")
        return 0
    if args.formula is None:
        raise SymmemError("formula: missing; give the formula to check, or --list")
    scn = scenario_from_args(args)
    q = quantity(args.quantity, scn)
    if args.layer is not None and not q.name.startswith("layer."):  # was silently ignored
        raise SymmemError(f"--layer = {args.layer}: applies only to per-layer quantities (layer.*, --list names "
                          f"them); --quantity {q.name} is not per layer")
    if args.layer is not None and 0 <= args.layer < scn.model.value("L"):
        home = next(st.index for st in scn.stages if args.layer in st.layers)
        if args.stage is None:
            args.stage = home  # (the layer's own stage)
        elif args.stage != home:
            raise SymmemError(f"--layer = {args.layer}: not on stage {args.stage} (it is on stage {home}); drop "
                              "--stage or give that one")
    if args.stage is None:
        args.stage = 1 if len(scn.stages) > 1 else 0
    claimed = _claimed(args.formula, scn)
    derived, sources = derive(q.name, scn, args.stage, args.layer)
    vals = values(scn)
    from symmem.check import check_valued

    check_valued(derived, claimed, vals, scn)
    cmp = compare(derived, claimed, vals, sources)
    code = 0 if cmp.verdict == EQUAL else 1 if (cmp.verdict == DIFFERENT or args.strict) else 0
    at = (f"b = {scn.b}, s = {scn.s} and {scn.model.name}'s sizes" if q.unit in ("bytes", "FLOPs")
          else f"{scn.model.name}'s sizes")
    if args.json:
        print(json.dumps({
            "quantity": q.name, "unit": q.unit, "stage": args.stage, "layer": args.layer, "scenario": scn.name,
            "recompute": scn.policy.label, "rules": scn.rules.name, "routing": scn.routing_label,
            "verdict": cmp.verdict, "condition": dict(cmp.condition), "derived": plain(derived),
            "claimed": plain(claimed), "difference": plain(cmp.difference), "difference_value": cmp.worth,
            "evaluated_at": at,
            "terms": [{"monomial": plain(r.monomial), "latex": latex(r.monomial), "derived": str(r.derived),
                       "claimed": str(r.claimed), "difference_value": r.worth, "from": list(r.sources)}
                      for r in (cmp.differing if cmp.verdict != EQUAL else cmp.rows)],
        }, indent=2, sort_keys=True))
        return code
    # Everything is formatted before anything is printed: a failure leaves no verdict half-shown.
    of = f"layer {args.layer} (stage {args.stage})" if args.layer is not None else f"stage {args.stage}"
    lines = [f"{q.name} ({q.unit}) of {of}, scenario {scn.name}: {scn.parallel.describe()}; "
             f"rules {scn.rules.name}, recompute {scn.policy.label}, routing {scn.routing_label}",
             f"derived: {plain(derived)}",
             f"yours:   {plain(claimed)}"]
    if cmp.verdict == EQUAL:
        lines.append("verdict: EQUAL")
        print("\n".join(lines))
        return code
    unit = q.unit
    worth = f"{cmp.worth:,} {unit}" + (f" ({fmt_gib(cmp.worth)} GiB)" if q.unit == "bytes" else "")
    if cmp.condition:
        cond = ", ".join(f"{k} = {v}" for k, v in cmp.condition)
        lines.append(f"verdict: {cmp.verdict}: equal only when {cond} (the scenario's values); in general the "
                     f"difference is {plain(cmp.difference)}")
    else:
        lines.append(f"verdict: DIFFERENT by {plain(cmp.difference)}, worth {worth} at {at}")
    lines.append(f"{'term':<22} {'derived':>9} {'yours':>9} {'worth (' + unit + ')':>22} {'GiB':>7}  comes from")
    for r in cmp.differing:
        gib = fmt_gib(r.worth) if q.unit == "bytes" else ""
        src = "; ".join(r.sources) if r.sources else "(nothing in the derivation)"
        lines.append(f"{plain(r.monomial):<22} {str(r.derived):>9} {str(r.claimed):>9} {r.worth:>22,} {gib:>7}  "
                     f"{src}")
    print("\n".join(lines))
    return code


COMMAND = ("check a hand derivation against a derived quantity, term by term", add_args, run)
