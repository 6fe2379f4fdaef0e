"""`symmem sweep`: enumerate parallel configurations on G GPUs, evaluate them by the compiled path, list what fits.

Registered as `"sweep"` in `symmem.cli.commands.COMMANDS`.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys
import time

from symmem import _numbers as num
from symmem.cli._flag_rules import memory_only
from symmem.cli.args import SWEPT, add_scenario_args, add_swept_args, scenario_from_args
from symmem.errors import SymmemError
from symmem.units import GB, GIB, fmt_gb, fmt_gib

MAX_VALUES = 10**7  # values one axis may list
MAX_CONFIGS = 10_000_000  # configurations a sweep may enumerate unless --max-configs raises it
# (TP, PP, EP, ETP) arrangements: each is checked against the rules on its own (about 10-20 microseconds), the
# rest of the space is evaluated in vectorised tiles
MAX_ARRANGEMENTS = 100_000
_ITEM = re.compile(r"^([0-9]+)(?:-([0-9]+)(?::(x?)([0-9]+))?)?$", re.ASCII)
_MAX_DIGITS = 12  # digits of one number in a list or range (every bound below has at most 10)



REPLAY_DEFAULT_MAX = 20  # rows whose reserved memory `--replay` derives by default: every listed one, up to this

def _array(text: str, field: str, minimum: int = 1, maximum: int = num.MAX_S):
    """The sorted unique values of `1,2,4`, `1-64`, `1024-32768:1024`, `1-256:x2` as an int64 array.

    Every number is checked in the text (ASCII digits, at most 12 of them) and against [minimum, maximum]
    before it is built; ranges are counted before they are materialised (numpy, 8 bytes a value)."""
    items = [x.strip() for x in str(text).split(",")]
    if not any(items):
        raise SymmemError(f"{field} = {text!r}: empty; give values such as 1,2,4 or a range 1-64")
    if len(items) > MAX_VALUES:
        raise SymmemError(f"{field}: {len(items):,} items, more than the limit of {MAX_VALUES:,} values")
    shown = text if len(text) <= 60 else f"{text[:40]}... ({len(text):,} characters)"
    import numpy as np  # here: the CLI's parser imports this module, and numpy takes a fifth of a second

    parts: list = []
    count = 0
    for item in items:
        m = _ITEM.match(item)
        if not m:
            raise SymmemError(f"{field} = {shown!r}: {item[:40]!r} is not an integer or a range A-B, A-B:STEP, "
                              "A-B:xF in ASCII digits")
        for g in (1, 2, 4):
            if m.group(g) is not None and len(m.group(g).lstrip("0")) > _MAX_DIGITS:
                raise SymmemError(f"{field} = {shown!r}: a number of {len(m.group(g)):,} digits; values go from "
                                  f"{minimum:,} to {maximum:,}")
        a = int(m.group(1))
        hi = a if m.group(2) is None else int(m.group(2))
        for v in (a, hi):
            if not minimum <= v <= maximum:
                raise SymmemError(f"{field} = {shown!r}: {v:,} is out of range; values go from {minimum:,} to "
                                  f"{maximum:,}")
        if m.group(2) is None:
            parts.append(np.array([a], dtype=np.int64))
            count += 1
        else:
            geometric, k = m.group(3) == "x", int(m.group(4) or 1)
            if hi < a:
                raise SymmemError(f"{field} = {shown!r}: the range {item!r} is empty")
            if k < 1 or (geometric and (k < 2 or a < 1)):
                raise SymmemError(f"{field} = {shown!r}: {item!r} needs a step >= 1 or a factor >= 2 from >= 1")
            if geometric:
                values, v = [], a
                while v <= hi:  # at most 31 values: hi <= 2^31
                    values.append(v)
                    v *= k
                parts.append(np.array(values, dtype=np.int64))
                count += len(values)
            else:
                n = (hi - a) // k + 1
                count += n
                if count > MAX_VALUES:
                    raise SymmemError(f"{field} = {shown!r}: its items list {count:,} values, above the limit "
                                      f"of {MAX_VALUES:,} per axis")
                parts.append(np.arange(a, hi + 1, k, dtype=np.int64))
        if count > MAX_VALUES:
            raise SymmemError(f"{field} = {shown!r}: more than {MAX_VALUES:,} values")
    if len(parts) == 1:  # one value or one range: already sorted and unique
        return parts[0]
    arr = np.sort(np.concatenate(parts), kind="stable")
    return arr[np.concatenate(([True], arr[1:] != arr[:-1]))]


def parse_ints(text: str, field: str, minimum: int = 1, maximum: int = num.MAX_S) -> tuple[int, ...]:
    """`1,2,4`, ranges `1-64` (inclusive), `1024-32768:1024` (a step), `1-256:x2` (a factor); sorted, unique."""
    return tuple(_array(text, field, minimum, maximum).tolist())


def parse_microbatches(text: str) -> tuple[int | None, ...]:
    items = [x.strip() for x in str(text).split(",")]
    pp = any(x.lower() == "pp" for x in items)
    rest = ",".join(x for x in items if x.lower() != "pp")
    values: tuple[int | None, ...] = (parse_ints(rest, "--microbatches", maximum=num.MAX_MICROBATCHES)
                                      if rest.strip() or not pp else ())
    return ((None,) if pp else ()) + values


def parse_recompute(text: str) -> tuple[str, ...]:
    """`none,full,custom:rmsnorm,core_attention,selective`: names after `custom:` that are not policies join it."""
    from symmem.accounting.recompute import Recompute, policy

    named = {r.value for r in Recompute if r is not Recompute.CUSTOM}
    out: list[str] = []
    for item in (x.strip() for x in str(text).split(",")):
        if not item:
            continue
        if item in named or item.startswith("custom:"):
            out.append(item)
        elif out and out[-1].startswith("custom:"):
            out[-1] += "," + item
        else:
            out.append(item)
    if not out:
        raise SymmemError(f"--recompute = {text!r}: empty; give policies such as none,full")
    for name in out:
        policy(name)
    return tuple(dict.fromkeys(out))


def parse_schedules(text: str, chunks: int):
    from symmem.parallel.schedule import CHUNKED, Schedule

    out = []
    for item in (x.strip() for x in str(text).split(",")):
        if not item:
            continue
        name, _, v = item.partition(":")
        if v and name not in CHUNKED:
            raise SymmemError(f"--schedule = {text!r}: only interleaved and interleaved-zb take :V (virtual stages "
                              "per GPU)")
        n = num.int_text(v, f"--schedule {item[:40]!r}: V", 2, num.MAX_CHUNKS) if v else (
            chunks if name in CHUNKED else None)
        out.append(Schedule.named(name, n))
    if not out:
        raise SymmemError(f"--schedule = {text!r}: empty; give schedules such as 1f1b,gpipe")
    return tuple(dict.fromkeys(out))


def _positive(text: str, field: str, maximum: int = num.MAX_GPUS) -> int:
    return num.int_text(text, field, 1, maximum)


def _divisors(n: int, limit: int) -> str:
    return ",".join(str(d) for d in range(1, min(n, limit) + 1) if n % d == 0)


def _powers_of_two_dividing(n: int) -> str:
    out, v = [], 1
    while n % v == 0:
        out.append(str(v))
        v *= 2
    return ",".join(out)


# -------------------------------------------------------------------------------------------------- arguments
def add_args(p: argparse.ArgumentParser) -> None:
    add_scenario_args(p, swept=True, title="what is fixed (a scenario gives the defaults; each flag overrides one "
                                           "field, as in every other command)")
    g = p.add_argument_group("the machine")
    g.add_argument("--gpus", required=True, help="total GPUs G = DP·TP·CP·PP")
    add_swept_args(p)
    o = p.add_argument_group("output")
    fmt = o.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true", help="the ranked list (with --rejected: the rejections)")
    o.add_argument("--rejected", action="store_true", help="list the rejected configurations and why")
    o.add_argument("--top", default="20", help="how many that fit to list (0: all; default 20)")
    o.add_argument("--rank-by", dest="rank_by", choices=("time", "headroom"),
                   help="time: fastest estimated iteration first (symmem/steptime/; needs --gpu NAME); headroom: "
                        "most capacity left first (default: time when the GPU is named, else headroom)")
    o.add_argument("--replay",
                   help="derive the reserved memory of the first N listed configurations by replaying PyTorch's "
                        "caching allocator (profiles that say their allocation order: megatron-te; default: every "
                        f"listed one, up to {REPLAY_DEFAULT_MAX}; 0: none)")
    o.add_argument("--marginal", action="store_true",
                   help="list those that fit only at the low end of overheads too")
    o.add_argument("--plot", metavar="PATH", help="write the feasible region (b against TP·PP): .png, .pdf, .svg")
    o.add_argument("--progress", action="store_true", help="a progress bar on stderr even when it is not a TTY")
    o.add_argument("--chunk", default=str(1 << 18), help=argparse.SUPPRESS)
    o.add_argument("--max-configs", help=f"refuse sweeps of more configurations than this (default {MAX_CONFIGS:,})")


def _flag_rules_out_all(args: argparse.Namespace, axes: dict, model) -> None:
    """A parallel flag the user typed whose every value the model refuses (EP 2 on a model without routed experts,
    TP values none of which divides the vocabulary): one line naming the flag, not "no configuration fits"."""
    fam = model.family
    for field in ("ep", "etp"):
        given = getattr(args, field)
        if fam.routed_experts is None and given is not None and 1 not in axes[field].tolist():
            raise SymmemError(f"--{field} = {given!r}: {model.name} has no routed experts, so every layout needs "
                              f"{field.upper()} 1; omit --{field}")
    for field, name in fam.divisibility:
        given = getattr(args, field, None) if field in axes else None
        if given is None or not model.has(name):
            continue
        size = model.value(name)
        if not any(size % v == 0 for v in axes[field].tolist()):
            raise SymmemError(f"--{field} = {given!r}: no value divides {fam.config_keys[name]} = {size}, which "
                              f"{field.upper()} must divide; every layout of the sweep is ruled out")


def default_recompute(profile: str) -> str:
    """The policies swept when --recompute is not given: the paper's three, or under a torchtitan profile the modes
    torchtitan runs (`activation_checkpoint.mode` none and full, and "selective" with `selective_ac_option = "op"`;
    the paper's selective recomputation of the attention core is not one of them)."""
    return "none,selective-op,full" if profile.startswith("torchtitan") else "none,selective,full"


def space_from_args(args: argparse.Namespace):
    from symmem.parallel.layout import LayoutSpec
    from symmem.parallel.schedule import Schedule
    from symmem.parallel.sizes import Parallel
    from symmem.sweep.space import Space

    gpus = _positive(args.gpus, "--gpus")
    if getattr(args, "hsdp_replicate", None) not in (None, 1):
        # (each layout's DP is the sweep's own; HSDP's replicate x shard mesh over it is not enumerated)
        raise SymmemError(f"--hsdp-replicate {args.hsdp_replicate}: the sweep lays out FSDP over each layout's DP "
                          "and does not sweep HSDP; time an HSDP layout with symmem memory --hsdp-replicate")
    # The fixed settings through the one flag-to-Scenario mapping every command shares (cli/args.py); the swept
    # fields are the sweep's own, and the layout, schedule and M are set per configuration.
    base_args, skip = args, SWEPT
    if getattr(args, "compiled", False) and getattr(args, "fsdp_float8_all_gather", False):
        # checked under a policy the float8 all-gather takes under compile (each configuration under its own)
        base_args, skip = argparse.Namespace(**{**vars(args), "recompute": "full"}), SWEPT - {"recompute"}
    scn = scenario_from_args(base_args, skip=skip)
    # --compile: the torchtitan profiles (the only ones --compile takes) lay their states out themselves, so every
    # configuration is built one by one as `symmem memory` builds it (sweep/exact.py), compiled regions and all
    memory_only(scn, "the sweep", "time a configuration with symmem memory", compile_modelled=True)
    model = scn.model
    seq, moe = scn.parallel.sequence_parallel, scn.parallel.moe_sequence_parallel
    base = scn.replace(parallel=Parallel(sequence_parallel=seq, moe_sequence_parallel=moe,
                                         cp_comm_type=scn.parallel.cp_comm_type),
                       layout=LayoutSpec(), schedule=Schedule(), microbatches=None)
    # A profile that fixes the optimizer's layout (megatron-te: the distributed optimizer, ZeRO-1) sweeps that
    # ZeRO stage unless --zero is given: its framework buffers (the DDP padding) assume it.
    zero_default = str(scn.profile.zero) if scn.profile.zero is not None else "0,1,2,3"
    routed = model.family.routed_experts  # a model without routed experts sweeps EP 1 only
    n_layers, n_experts = model.value("L"), (model.value(routed[0]) if routed else 1)
    chunks = num.int_text(args.chunks, "--chunks", 2, num.MAX_CHUNKS)
    sched = args.schedule or scn.schedule.spelled
    limit = MAX_CONFIGS if args.max_configs is None else _positive(args.max_configs, "--max-configs", 10**12)
    _recompute_of_the_framework(args, scn.profile.name)
    if scn.profile.name.startswith("torchtitan"):
        _fsdp_only(args, scn.profile.name)
        _torchtitan_sweep_flags(args, scn.profile.name)
        zero_default = "3"  # (FSDP2's by construction: another stage would be labelled, not laid out)
    # Every axis is parsed and counted before anything is enumerated; the product is capped.
    par = num.MAX_PARALLEL
    axes = {
        "tp": _array(args.tp, "--tp", maximum=par),
        "cp": _array(args.cp, "--cp", maximum=par),
        "pp": _array(args.pp if args.pp is not None else _divisors(gpus, min(n_layers, num.MAX_PP)), "--pp",
                     maximum=num.MAX_PP),
        "ep": _array(args.ep if args.ep is not None else _powers_of_two_dividing(n_experts), "--ep", maximum=par),
        "etp": _array(args.etp, "--etp", maximum=par),
        "zero": _array(args.zero if args.zero is not None else zero_default, "--zero", minimum=0,
                       maximum=par),  # the stage itself: Space checks
        "s": _array(args.s if args.s is not None else str(scn.s), "-s", maximum=num.MAX_S),
        "b": _array(args.b, "-b", maximum=num.MAX_B),
    }
    _flag_rules_out_all(args, axes, model)
    recompute = parse_recompute(args.recompute or default_recompute(scn.profile.name))
    schedule = parse_schedules(sched, chunks)
    microbatches = parse_microbatches(args.microbatches)
    global_batch = _global_batch(args, scn, gpus, axes)
    if global_batch is not None:
        from symmem.sweep.space import microbatch_candidates

        microbatches = microbatch_candidates(gpus, axes["tp"].tolist(), axes["cp"].tolist(),
                                                 axes["pp"].tolist(), axes["b"].tolist(), global_batch)
        if not microbatches:
            raise SymmemError(f"--global-batch-size = {global_batch:,}: no layout of the sweep divides it (each needs "
                              "micro-batch x DP to divide the global batch, DP = GPUs / (TP x CP x PP)); choose a "
                              "multiple of the GPU count, or other -b values")
    arrangements = math.prod(len(axes[k]) for k in ("tp", "cp", "pp", "ep", "etp"))
    if arrangements > MAX_ARRANGEMENTS:
        raise SymmemError(f"the sweep has {arrangements:,} parallel arrangements (TP, CP, PP, EP, ETP: "
                          f"{', '.join(f'{len(axes[k]):,}' for k in ('tp', 'cp', 'pp', 'ep', 'etp'))} values), more "
                          f"than the limit of {MAX_ARRANGEMENTS:,}; narrow --tp, --cp, --pp, --ep or --etp (e.g. "
                          "powers of two: 1-64:x2)")
    total = math.prod(len(a) for a in axes.values()) * len(recompute) * len(schedule) * len(microbatches)
    if total > limit:
        raise SymmemError(f"the sweep has {total:,} configurations, more than the limit of {limit:,}; narrow the "
                          "ranges, or raise the limit with --max-configs")
    space = Space(
        base=base, gpus=gpus, recompute=recompute, schedule=schedule, microbatches=microbatches,
        global_batch=global_batch, **{k: tuple(a.tolist()) for k, a in axes.items()})
    return space


_SWEEP_AXES = ("tp", "cp", "pp", "ep", "etp")


def _torchtitan_sweep_flags(args, profile: str) -> None:
    """The torchtitan profiles' fixed settings that `symmem memory` refuses otherwise (cli/args.py
    `_framework_flags`), refused in the sweep too, where they are swept fields the scenario's own check never sees:
    a ZeRO stage but FSDP2's 3, a schedule where the profile pipelines nothing."""
    from symmem.profiles import TORCHTITAN_COMMITS

    if args.zero is not None and any(v != 3 for v in _array(args.zero, "--zero", minimum=0, maximum=3).tolist()):
        raise SymmemError(f"--zero = {args.zero}: profile {profile} shards parameters, gradients and optimizer "
                          "states with FSDP2 (ZeRO-3) by construction; use --zero 3 or drop it")
    if profile in TORCHTITAN_COMMITS and args.schedule:
        raise SymmemError(f"--schedule {args.schedule}: profile {profile} (torchtitan {TORCHTITAN_COMMITS[profile]}, "
                          "the code of published runs) models no pipelining; torch's schedules run under --profile "
                          "torchtitan")


def _recompute_of_the_framework(args, profile: str) -> None:
    """Each swept recomputation one the profile's framework runs (scenario.framework_recompute, as memory checks
    it): the sweep's policies are swept fields the scenario's own check never sees."""
    from symmem.accounting.recompute import policy
    from symmem.scenario import framework_recompute

    for name in parse_recompute(args.recompute or default_recompute(profile)):
        why = framework_recompute(profile, policy(name))
        if why is not None:
            raise SymmemError(f"--recompute = {args.recompute!r}: {name} with --profile {profile}: {why}")


def _fsdp_only(args, profile: str) -> None:
    """The torchtitan profiles model FSDP (and HSDP), and torchtitan 0.3.0's TP with sequence parallelism and its
    pipelining (`--profile torchtitan`), or 9dec370's CP (`torchtitan-2412`; e7c0cae's `torchtitan-2506` FSDP
    alone): their sweeps keep CP, EP and ETP at 1
    unless given, and refuse other values given where the profile does not model them (in one line, as `symmem
    memory` does); TP and PP are swept over their default values where the profile models them, else kept at 1."""
    from symmem.profiles import TORCHTITAN_9DEC370, TORCHTITAN_COMMITS

    tp_modelled = profile not in TORCHTITAN_COMMITS  # 0.3.0's TP and PP (profiles._torchtitan_check)
    cp_modelled = profile == TORCHTITAN_9DEC370  # 9dec370's CP (profiles._torchtitan_cp_check)
    from symmem.cli.args import typed

    for axis in _SWEEP_AXES:
        if axis in ("tp", "pp") and tp_modelled:
            continue
        given = getattr(args, axis)
        if not typed(given):  # (a default; the same text typed is the user's and checked below)
            setattr(args, axis, "1")
        elif axis == "cp" and cp_modelled:
            continue  # (the values given: each configuration checked as symmem memory checks it)
        elif any(v != 1 for v in _array(given, f"--{axis}", maximum=num.MAX_PARALLEL).tolist()):
            held, more = (("CP and EP stay", ", TP and PP") if tp_modelled
                          else ("TP, PP and EP stay", " and CP") if cp_modelled else ("TP, PP, CP and EP stay", ""))
            raise SymmemError(f"--{axis} = {given!r}: profile {profile} models FSDP (and HSDP){more}; {held} 1 "
                              "(leave the flag out)")


def _global_batch(args, scn, gpus: int, axes: dict) -> int | None:
    """--global-batch-size, or under --rank-by time its default, the GPU count (stated in the header: times of
    layouts that train on different global batches are not comparable); None when ranking by headroom without
    one."""
    from symmem.hardware import has_speeds

    timed = scn.gpu_name is not None and has_speeds(scn.gpu_name)
    rank_time = (args.rank_by or ("time" if timed else "headroom")) == "time"
    given_m = str(args.microbatches).strip() != "pp"
    if args.global_batch is not None:
        if given_m:
            raise SymmemError(f"--global-batch-size = {args.global_batch}: sets each layout's M (global batch / "
                              "(micro-batch x DP)); drop --microbatches")
        return _positive(args.global_batch, "--global-batch-size", num.MAX_B * num.MAX_MICROBATCHES)
    if not rank_time:
        return None
    if given_m:
        raise SymmemError("--rank-by time with --microbatches: the global batch (micro-batch x M x DP) then differs "
                          "from layout to layout, so their iteration times are not comparable; give "
                          "--global-batch-size instead")
    args.global_batch_default = True
    return gpus


# ------------------------------------------------------------------------------------------------ progress
class Progress:
    """A progress bar on stderr, redrawn at most ten times a second; unless `eager`, only once the sweep has
    run for half a second (short sweeps print nothing)."""

    def __init__(self, total: int, stream=None, eager: bool = False) -> None:
        self.total, self.done, self.stream = max(total, 1), 0, stream or sys.stderr
        self.t0 = self.last = time.perf_counter()
        self.eager, self.shown = eager, False

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if not self.eager and now - self.t0 < 0.5:
            return
        if not self.shown or now - self.last >= 0.1 or self.done >= self.total:
            self.last, self.shown = now, True
            self.draw(now)

    def draw(self, now: float) -> None:
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(30 * frac)
        self.stream.write(f"\rsweep [{bar:<30}] {frac:6.1%} {self.done:,}/{self.total:,} configurations "
                          f"{now - self.t0:.1f} s")
        self.stream.flush()

    def close(self) -> None:
        if not (self.shown or self.eager):
            return
        self.draw(time.perf_counter())
        self.stream.write("\n")
        self.stream.flush()


# ------------------------------------------------------------------------------------------------- output
COLUMNS = ("rank", "tp", "cp", "pp", "ep", "etp", "dp", "edp", "layout", "recompute", "schedule", "microbatches",
           "zero",
           "b", "s", "stage", "binding", "event", "weights", "gradients", "optimizer", "dynamic", "peak_allocated",
           "low", "high", "headroom", "verdict")
REJECT_COLUMNS = ("rule", "tp", "cp", "pp", "ep", "etp", "schedule", "microbatches", "reason", "configurations")


def _settings(space) -> dict:
    base = space.base
    par = base.parallel
    return {"model": base.model.name, "gpus": space.gpus, "gpu_memory": space.capacity,
            "scenario": base.name, "convention": base.convention, "precision": base.precision.name,
            "rules": base.rules.name, "profile": base.profile.name, "activation_bytes": base.act_bytes,
            "dataflow": "hf" if base.flow_impl is not None else "paper",
            "routing": base.routing_label, "mtp": base.mtp, "compiled": base.compiled,
            "sequence_parallel": par.sequence_parallel, "moe_sequence_parallel": par.moe_sp,
            "fragmentation": list(base.fragmentation), "comm_buffers": list(base.comm_buffers),
            "axes": {"tp": list(space.tp), "cp": list(space.cp), "pp": list(space.pp), "ep": list(space.ep),
                     "etp": list(space.etp),
                     "recompute": list(space.recompute),
                     "schedule": [x.spelled for x in space.schedule],
                     "zero": list(space.zero),
                     "microbatches": ["pp" if m is None else m for m in space.microbatches],
                     "s": _compact(space.s), "b": _compact(space.b)}}


def _compact(values: tuple[int, ...]) -> list[int] | str:
    if len(values) > 16:
        return f"{len(values)} values from {values[0]} to {values[-1]}"
    return list(values)


def _counts(summary) -> dict:
    return {"configurations": summary.total, "valid": summary.valid, "rejected": summary.rejected,
            "fit": summary.fits, "fit_only_at_low_end": summary.marginal, "do_not_fit": summary.does_not_fit,
            "structural_cases": summary.cases, "untimed": len(getattr(summary, "untimed", ()))}


# what a ranked row carries beyond COLUMNS when the sweep times or replays it: the ranking key (time_s) and what
# goes with it, and the replayed reserved bytes
TIMED = ("time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "global_batch_size", "reserved",
         "reserved_stage", "reserved_why")


def _ranked(summary) -> list[dict]:
    return [{"rank": i + 1, **{k: r[k] for k in COLUMNS[1:]}, **{k: r[k] for k in TIMED if k in r}}
            for i, r in enumerate(summary.ranked)]


def ranked_columns(rows: list[dict]) -> tuple[str, ...]:
    """The CSV's columns: COLUMNS, then each TIMED key some row carries (a time-ranked CSV carries its key)."""
    return COLUMNS + tuple(k for k in TIMED if any(k in r for r in rows))


def _rejections(summary) -> list[dict]:
    return [r.as_dict() for r in summary.rejections]


def _csv(rows: list[dict], columns: tuple[str, ...]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("pp" if k == "microbatches" and r.get(k, "") is None else r.get(k, "")) for k in columns})
    return buf.getvalue()


def _text(summary, top: int, rejected: bool) -> str:
    from symmem.sweep.exact import exact_reason

    sp = summary.space
    base = sp.base
    par = base.parallel
    sp_text = "SP on" if par.sequence_parallel else "SP off"
    if par.sequence_parallel and base.model.family.routed_experts is not None:  # a dense model has no MoE block
        sp_text += ", MoE sequence-sharded" if par.moe_sp else ", MoE not sequence-sharded"
    # MTP is said only of a model that has MTP modules (a dense Llama has none to turn on)
    mtp = f", MTP {'on' if base.mtp else 'off'}" if base.model.n_mtp else ""
    lines = [
        f"sweep: {base.model.name} on {sp.gpus:,} GPUs of {sp.capacity:,} bytes ({fmt_gb(sp.capacity)} GB, "
        f"{fmt_gib(sp.capacity)} GiB); profile {base.profile.name}, precision {base.precision.name}, convention "
        f"{base.convention}, rules "
        f"{base.rules.name}, routing {base.routing.kind}, {sp_text}{mtp}; "
        f"fragmentation {base.fragmentation[0]:.0%}-{base.fragmentation[1]:.0%}, communication buffers "
        f"{base.comm_buffers[0] / GB:.2f}-{base.comm_buffers[1] / GB:.2f} GB",
        *([f"global batch {sp.global_batch:,} sequences per iteration"
           + (" (the default under --rank-by time: the GPU count; --global-batch-size sets it)"
              if getattr(summary, "global_batch_default", False) else " (--global-batch-size)")
           + "; each layout's M = global batch / (micro-batch x DP)"] if sp.global_batch is not None else []),
        f"{summary.total:,} configurations: {summary.valid:,} valid, {summary.rejected:,} rejected"
        + ("" if rejected or not summary.rejected else " (--rejected says why)")
        + f"; {summary.fits:,} fit, {summary.marginal:,} fit only at the low end of overheads, "
          f"{summary.does_not_fit:,} do not fit",
        (f"evaluated one by one as symmem memory does ({exact_reason(sp)}); "
         if summary.exact else
         f"compiled: {summary.cases} structural case(s) derived once ({summary.derive_seconds:.2f} s); ")
        + f"sweep {summary.seconds:.2f} s ({summary.valid / max(summary.seconds, 1e-9):,.0f} configurations/s)",
        *([f"{len(summary.untimed):,} that fit left untimed (not ranked): {summary.untimed[0]}"]
          if getattr(summary, "untimed", None) else []),
    ]
    if summary.ranked:
        what = "fit or fit at the low end" if any(r["verdict"] != "fits" for r in summary.ranked) else "fit"
        by = ("estimated iteration time (symmem/steptime/ on " + str(sp.base.gpu_name) + ")"
              if getattr(summary, "rank_by", "headroom") == "time"
              else "headroom (capacity - high estimate of what is reserved at the peak)")
        if getattr(summary, "rank_by", "headroom") == "time" and sp.base.compiled:
            by += " (the eager step's: torch.compile's fused kernels are not modelled in time)"
        lines.append(f"{'all' if not top else 'top ' + str(len(summary.ranked))} that {what}, ranked by {by}; "
                     "sizes in GiB = 2^30 bytes; the stage with the highest peak, its largest component (dynamic: "
                     "what the step adds at the peak event) and the event that binds:")
        rw = max([10, *(len(r["recompute"]) for r in summary.ranked)])  # selective-op, custom:... are longer
        head = (f"{'rank':>4} {'TP':>3} {'CP':>3} {'PP':>3} {'EP':>4} {'ETP':>3} {'DP':>5} {'EDP':>5} "
                f"{'recompute':<{rw}} "
                f"{'schedule':<13} {'M':>4} {'ZeRO':>4} {'b':>4} {'s':>7} {'stage':>5} {'binding':<11} "
                f"{'low-high GiB':>15} {'headroom':>8} {'reserved':>8} {'time s':>7} {'tok/s/GPU':>9} {'MFU':>5}  "
                "peak event")
        lines.append(head)
        for r in _ranked(summary):
            lines.append(
                f"{r['rank']:>4} {r['tp']:>3} {r['cp']:>3} {r['pp']:>3} {r['ep']:>4} {r['etp']:>3} {r['dp']:>5} "
                f"{r['edp']:>5} "
                f"{r['recompute']:<{rw}} {r['schedule']:<13} {r['microbatches']:>4} {r['zero']:>4} {r['b']:>4} "
                f"{r['s']:>7} {r['stage']:>5} {r['binding']:<11} "
                f"{fmt_gib(r['low']) + '-' + fmt_gib(r['high']):>15} {r['headroom'] / GIB:>8.2f} "
                f"{(fmt_gib(r['reserved']) if r.get('reserved') is not None else '-'):>8} "
                f"{(format(r['time_s'], '.3f') if 'time_s' in r else '-'):>7} "
                f"{(format(r['tokens_per_s_per_gpu'], ',.0f') if 'time_s' in r else '-'):>9} "
                f"{(format(r['mfu'], '.1%') if 'time_s' in r else '-'):>5}  {r['event']}")
        why: dict[str, list[int]] = {}
        for r in _ranked(summary):
            if r.get("reserved_why"):
                why.setdefault(r["reserved_why"], []).append(r["rank"])
        for reason, ranks in why.items():  # a "-" under reserved says why
            lines.append(f"reserved '-' (rank {', '.join(map(str, ranks))}): {reason}")
    else:
        lines.append("no configuration fits")
    from symmem.hardware import has_speeds, no_speeds_note

    if base.gpu_name is not None and not has_speeds(base.gpu_name):
        lines.append(no_speeds_note(base.gpu_name).replace("memory uses", "ranked by headroom, with"))
    if rejected:
        lines.append(f"rejected: {summary.rejected:,} configurations, by the first rule they fail "
                     "(world size, pipeline layout, parallel sizes, schedule, global batch):")
        for r in summary.rejections:
            where = " ".join(f"{k}={'pp' if v is None else v}" for k, v in r.where)
            lines.append(f"  {r.rule:<8} {where}: {r.reason} ({r.count:,} configurations)")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from symmem.sweep.plot import plot_format, write_region
    from symmem.sweep.space import sweep

    space = space_from_args(args)
    top = _positive(args.top, "--top", 10**9) if str(args.top).strip() != "0" else 0
    chunk = num.int_text(args.chunk, "--chunk", 1 << 10, 1 << 24)  # tiles: 1 would loop per configuration
    if args.plot:
        plot_format(args.plot)
    bar = Progress(space.size, eager=args.progress) if (args.progress or sys.stderr.isatty()) else None
    from symmem.hardware import has_speeds
    from symmem.sweep.timing import check_timed

    timed = space.base.gpu_name is not None and has_speeds(space.base.gpu_name)
    rank_by = args.rank_by or ("time" if timed else "headroom")
    if rank_by == "time":
        check_timed(space)  # a GPU with speed figures, before any work
    from symmem.sweep.exact import exact_reason, needs_exact, sweep_exact

    # checked before any work; by default the listed rows' (issue 45: the reserved column of every listed row)
    replay = (num.int_text(args.replay, "--replay", 0, 1000) if args.replay is not None
              else min(top or REPLAY_DEFAULT_MAX, REPLAY_DEFAULT_MAX))

    exact = needs_exact(space.base, space.schedule)
    if exact and args.plot:
        raise SymmemError(f"--plot: not with {exact_reason(space)}, whose configurations are evaluated one by one "
                          "(symmem/sweep/exact.py); sweep without --plot")
    try:
        if exact:  # an FP8/FP4 recipe with quantized copies: one by one, as symmem memory evaluates it
            summary = sweep_exact(space, top=0 if rank_by == "time" else top, marginal=args.marginal, progress=bar)
        else:  # by time: timed on the tiles' arrays, the fastest kept (symmem/sweep/timetable.py)
            summary = sweep(space, top=top, marginal=args.marginal, region=bool(args.plot), chunk=chunk,
                            progress=bar, lazy_events=rank_by == "time", rank_by=rank_by)
    finally:
        if bar:
            bar.close()
    if rank_by == "time":
        from symmem.sweep.evaluate import finish_events
        from symmem.sweep.timing import rank_by_time

        if exact:
            summary.ranked = rank_by_time(space, summary.ranked, top, summary.untimed)
        summary.ranked = finish_events(summary.ranked)
        if summary.untimed and not summary.ranked:
            raise SymmemError(f"--gpu {space.base.gpu_name}: none of the {len(summary.untimed):,} configurations "
                              f"that fit can be timed with it: {summary.untimed[0]}")
    summary.rank_by = rank_by
    summary.global_batch_default = getattr(args, "global_batch_default", False)
    from symmem.sweep.replayed import with_reserved

    summary.ranked = with_reserved(space, summary.ranked, replay)
    if summary.total and not summary.valid:
        # the user's own flags (or the model) rule out every layout: an input error, as symmem memory says it,
        # not "no configuration fits" (that is for valid layouts that do not fit in memory)
        by_reason: dict[tuple[str, str], int] = {}
        for r in summary.rejections:
            by_reason[(r.rule, r.reason)] = by_reason.get((r.rule, r.reason), 0) + r.count
        (rule, reason), n = max(by_reason.items(), key=lambda kv: kv[1])
        error = SymmemError(f"no valid configuration: all {summary.total:,} are rejected; the most common reason "
                            f"({n:,}): {rule}: {reason} (--rejected lists every reason)")
        if not args.rejected:
            raise error
        sys.stdout.write(_text(summary, top, args.rejected))
        print(f"symmem: error: {error}", file=sys.stderr)
        return 2
    if args.plot:
        write_region(summary, args.plot)
    if args.json:
        out = {**_settings(space), "unit": "bytes", "counts": _counts(summary), "ranked": _ranked(summary),
               "rank_by": summary.rank_by}
        if args.rejected:
            out["rejected"] = _rejections(summary)
        sys.stdout.write(json.dumps(out, indent=2, sort_keys=True) + "\n")
    elif args.csv:
        rows = _ranked(summary)
        sys.stdout.write(_csv(_rejections(summary), REJECT_COLUMNS) if args.rejected
                         else _csv(rows, ranked_columns(rows)))
    else:
        sys.stdout.write(_text(summary, top, args.rejected))
    return 0


COMMAND = ("sweep parallel configurations on G GPUs: what fits, ranked by headroom, and why the rest do not",
           add_args, run)
