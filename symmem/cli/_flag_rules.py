"""Flag rules of `scenario_from_args` (cli/args.py) that name the flag to type, kept apart so args.py changes by
one call each: `--schedule interleaved:V` (sweep's spelling) and a routing model given without its parameter; and
the flags only `symmem memory` models (`memory_only`), which the sweep and the page refuse."""

from __future__ import annotations

import argparse

from symmem import _numbers as num
from symmem.errors import SymmemError


def schedule_spelling(args: argparse.Namespace) -> argparse.Namespace:
    """`--schedule interleaved:V` means `--schedule interleaved --chunks V`, as in `symmem sweep` (and
    `interleaved-zb:V`, torch's interleaved zero bubble, `--schedule interleaved-zb --chunks V`)."""
    text = getattr(args, "schedule", None)
    if not text or ":" not in text:
        return args
    from symmem.parallel.schedule import CHUNKED

    name, _, v = text.partition(":")
    if name.strip() not in CHUNKED:
        raise SymmemError(f"--schedule = {text!r}: only interleaved and interleaved-zb take :V (virtual stages per "
                          "GPU)")
    chunks = num.int_text(v, f"--schedule {text[:40]!r}: V", 2, num.MAX_CHUNKS)
    if args.chunks is not None and args.chunks != chunks:
        raise SymmemError(f"--chunks = {args.chunks}: conflicts with --schedule {text}; give V once")
    return argparse.Namespace(**{**vars(args), "schedule": name.strip(), "chunks": chunks})


# routing model -> (its parameter's flag, the Routing field, what it is)
_PARAMETERS = {"capacity": ("--capacity-factor", "capacity_factor", "e.g. --capacity-factor 1.25"),
               "dynamic": ("--rank-load", "rank_load", "the busiest rank's load over the balanced share, e.g. "
                           "--rank-load 1.5")}


def routing_parameter(args: argparse.Namespace, kind: str, scenario_routing) -> None:
    """`--routing capacity` without `--capacity-factor` (or `dynamic` without `--rank-load`), when the scenario's
    own routing does not give one: name the flag (was: "capacity_factor = None")."""
    if kind not in _PARAMETERS:
        return
    flag, field, example = _PARAMETERS[kind]
    if getattr(args, field) is None and not (scenario_routing.kind == kind
                                             and getattr(scenario_routing, field) is not None):
        raise SymmemError(f"--routing {kind}: needs {flag} ({example})")


def memory_only(scn, where: str, instead: str, compile_modelled: bool = False) -> None:
    """Refuse the scenario's flags that only `symmem memory` models, for the sweep or the page (`where`): torch.compile
    on the page (its script evaluates the eager saved sets; the sweep builds each torchtitan configuration as `symmem
    memory` does, compiled regions and all) and Megatron's DDP buckets (their tables read one bucket per buffer)."""
    if scn.compiled and not compile_modelled:
        raise SymmemError(f"--compile: torch.compile is not modelled by {where} (its tables read the eager saved "
                          "sets); use symmem memory --compile")
    if scn.ddp.flags:
        raise SymmemError(f"{scn.ddp.flags}: Megatron's DDP buckets are not modelled by {where} (its tables read one "
                          f"bucket per buffer); {instead}")
