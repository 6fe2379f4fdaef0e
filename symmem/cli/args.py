"""The one mapping from command-line flags to a Scenario, shared by every command: `--scenario` gives the defaults,
each flag (Megatron's argument names where it has one) overrides one field."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from symmem import _numbers as num
from symmem.errors import SymmemError

MAX_HISTOGRAM = 1 << 20  # loads in a --histogram file (one per routed expert)


def int_arg(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in ASCII digits within [low, high], the bounds named when it is not."""

    def parse(text: str) -> int:
        try:
            return num.int_text(text, "value", low, high)
        except SymmemError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("value = ")) from None

    parse.__name__ = "int"
    return parse


def _bool_flag(p: argparse.ArgumentParser, name: str, help: str) -> None:
    p.add_argument(f"--{name}", dest=name.replace("-", "_"), action=argparse.BooleanOptionalAction, default=None,
                   help=help)


# What `symmem sweep` enumerates: these flags take lists there, and a sweep's fixed settings are everything else.
SWEPT = frozenset({"tp", "pp", "ep", "etp", "dp", "edp", "cp", "zero", "b", "s", "recompute",
                   "schedule", "chunks", "microbatches", "layers_per_stage", "first", "last", "global_batch"})


def _shipped(package: str, suffix: str) -> list[str]:
    """Names of the files a package ships (presets, scenarios), read without importing the engine (sympy)."""
    from importlib import resources

    return sorted(f.name[: -len(suffix)] for f in resources.files(package).iterdir() if f.name.endswith(suffix))


def add_scenario_args(p: argparse.ArgumentParser, activations: bool = True, swept: bool = False,
                      title: str = "scenario (a built-in name or a TOML file; flags override its fields)") -> None:
    """The flags that set a Scenario's fields. With `swept` (symmem sweep), only the fixed ones: the sweep's
    own flags take lists for the fields in SWEPT."""
    g = p.add_argument_group(title)
    scenarios = _shipped("symmem.scenarios", ".toml")
    first = [n for n in ("paper", "paper-megatron", "korthikanti") if n in scenarios]
    g.add_argument("--scenario",
                   help=f"built-in: {', '.join(first + [n for n in scenarios if n not in first])}; or a TOML path "
                        "(default: paper; with --model alone, that model on one GPU)")
    g.add_argument("--model", help=f"preset ({', '.join(_shipped('symmem.presets', '.json'))}) or a config.json path")
    if not swept:
        for short, long in (("tp", "tensor-model-parallel-size"), ("pp", "pipeline-model-parallel-size"),
                            ("ep", "expert-model-parallel-size"), ("etp", "expert-tensor-parallel-size"),
                            ("dp", "data-parallel-size"), ("edp", "expert-data-parallel-size"),
                            ("cp", "context-parallel-size")):
            g.add_argument(f"--{short}", f"--{long}", dest=short,
                           type=int_arg(1, num.MAX_PP if short == "pp" else num.MAX_PARALLEL))
    g.add_argument("--cp-comm-type", dest="cp_comm_type", help="context parallelism: p2p (ring) or a2a (all-to-all)")
    g.add_argument("--hsdp-replicate", dest="hsdp_replicate", type=int_arg(1, num.MAX_PARALLEL),
                   help="HSDP: replicas of the FSDP shard group (the torchtitan profile shards states over "
                        "DP / this; default 1, plain FSDP)")
    _bool_flag(g, "sequence-parallel", "sequence parallelism (activations split over s outside TP regions)")
    _bool_flag(g, "moe-sequence-parallel", "run the MoE block sequence-sharded too (Megatron) or not (paper)")
    g.add_argument("--convention", help="TP split of W_QR: paper (replicated) or megatron (with W_UQ)")
    from symmem.precision import RECIPE_NAMES

    g.add_argument("--precision", help="precision recipe: paper (BF16 2+4+8 B), megatron (2+4+4+8 B), or FP8/FP4: "
                                       + ", ".join(RECIPE_NAMES[2:]) + " (symmem.precision)")
    if not swept:
        g.add_argument("--zero", help="ZeRO stage 0-3")
    _bool_flag(g, "mtp", "place the config's MTP modules on the last stage")
    g.add_argument("--enable-fsdp-float8-all-gather", dest="fsdp_float8_all_gather", action="store_true",
                   help="FSDP2 gathers the Float8 linears' weights in float8 (torchao's Float8LinearConfig option; "
                        "torchtitan profiles, --precision torchao-float8-tensorwise)")
    if not swept:
        g.add_argument("--layers-per-stage", help="explicit pipeline layout, e.g. 4,4,4,...,1")
        g.add_argument("--first-stage-layers", "--decoder-first-pipeline-num-layers", dest="first",
                       type=int_arg(0, num.MAX_LAYERS))
        g.add_argument("--last-stage-layers", "--decoder-last-pipeline-num-layers", dest="last",
                       type=int_arg(0, num.MAX_LAYERS))
    if activations:
        if not swept:
            g.add_argument("-b", "--micro-batch-size", dest="b", type=int_arg(1, num.MAX_B))
            g.add_argument("-s", "--seq-length", dest="s", type=int_arg(1, num.MAX_S))
        g.add_argument("--rules", help="saved-tensor rule set: paper (or torch-eager where available)")
        g.add_argument("--profile", help="implementation profile: paper, torch-eager, megatron-te, megatron-local, "
                                         "torchtitan, torchtitan-cpu, torchtitan-2412, torchtitan-2506 (its rules, "
                                         "state layout and framework buffers; --precision/--zero override)")
        # Megatron's DDP settings (megatron profiles, which only these commands take)
        g.add_argument("--overlap-grad-reduce", dest="overlap_grad_reduce", action="store_true",
                       help="Megatron's DDP: buckets on the first stage, each reduced while the backward goes on "
                            "(megatron profiles)")
        g.add_argument("--overlap-param-gather", dest="overlap_param_gather", action="store_true",
                       help="Megatron's distributed optimizer gathers each bucket's parameters beside the next forward "
                            "(with --overlap-grad-reduce)")
        g.add_argument("--ddp-bucket-size", dest="ddp_bucket_size", type=int_arg(1, 2**40),
                       help="parameters per DDP bucket (default max(40M, 1M x DP); with --overlap-grad-reduce)")
        g.add_argument("--compile", dest="compiled", action="store_true",
                       help="torchtitan's torch.compile: each decoder layer (and the loss, but at 9dec370) "
                            "compiled, what they keep decided by the partitioner's cut (torchtitan profiles; BF16 or "
                            "torchao's tensorwise Float8)")
        if not swept:
            g.add_argument("--recompute", help="none, full, selective, deepseek, selective-op (torchtitan's per-op "
                                                "SAC), selective-layer:N (every N-th layer full) or custom:OPS")
            g.add_argument("--schedule", help="gpipe, 1f1b, zb1p, interleaved, dualpipe (interleaved:V; torchtitan "
                                              "profiles: interleaved-zb:V, zbv and dualpipev, torch's "
                                              "InterleavedZeroBubble, ZBVZeroBubble and DualPipeV)")
            g.add_argument("--chunks", type=int_arg(2, num.MAX_CHUNKS),
                           help="virtual stages per GPU for interleaved 1F1B")
            g.add_argument("--microbatches", type=int_arg(1, num.MAX_MICROBATCHES),
                           help="micro-batches per step M (default: PP)")
            g.add_argument("--global-batch-size", dest="global_batch",
                           type=int_arg(1, num.MAX_B * num.MAX_MICROBATCHES),
                           help="sequences per iteration (Megatron's): M = global batch / (micro-batch x DP), "
                                "which must divide it")
        add_routing_and_dataflow_args(g)
        g.add_argument("--activation-dtype", help="bf16 (2 bytes, default) or fp32 (4 bytes)")
        g.add_argument("--flops-convention", dest="flops_convention",
                       help="how FLOPs are counted: paper (matrix products only, as Narayanan et al. 2021 and "
                            "Korthikanti et al. 2022 count them), megatron (Megatron-LM's "
                            "num_floating_point_operations at 23e00ed0), exact (every op; symmem/flops/exact.py)")
        g.add_argument("--gpu-memory", help="GPU capacity: 80GB, 141GB, 80GiB, or a name: H800, H100, H200, B200")
        g.add_argument("--gpu", help="the GPU by name (H800, H100, H200, B200, A100, ...): its memory capacity, "
                                     "unless --gpu-memory gives one")


def add_routing_and_dataflow_args(g) -> None:
    """The flags that set the experts' routing and the dataflow a step is read from (symmem memory's, and symmem
    calibrate --model's: both change a kernel's shape)."""
    g.add_argument("--routing", help="paper, dispatch, capacity, dynamic, histogram")
    g.add_argument("--capacity-factor", help="static per-expert buffers of this factor × balanced load")
    g.add_argument("--rank-load", help="dynamic allocation: busiest rank's load over the balanced load")
    g.add_argument("--histogram", help="a file of per-expert loads (numbers separated by spaces, commas or lines)")
    g.add_argument("--dataflow", help="paper (symmem's blocks) or hf (Hugging Face's; default with torch-eager)")
    g.add_argument("--attn-impl", help="hf dataflow: eager or sdpa")
    g.add_argument("--experts-impl", help="hf dataflow: eager or grouped_mm")


class Default(str):
    """A swept flag's default as argparse fills it in: a str, told apart from the same text typed (`typed`)."""


def typed(value: object) -> bool:
    """Whether a swept flag's value was given on the command line (not its `Default`)."""
    return value is not None and not isinstance(value, Default)


def add_swept_args(p: argparse.ArgumentParser) -> None:
    """`symmem sweep`'s lists of values for the fields in SWEPT: the same names (Megatron's where it has one) as
    the single values every other command takes, each a list or range here."""
    a = p.add_argument_group("what is swept (lists 1,2,4; ranges 1-64, 1024-8192:1024, 1-256:x2)")
    a.add_argument("--tp", "--tensor-model-parallel-size", dest="tp", default=Default("1,2,4,8"),
                   help="tensor-parallel sizes (default 1,2,4,8)")
    a.add_argument("--cp", "--context-parallel-size", dest="cp", default=Default("1"),
                   help="context-parallel sizes (default 1; each must divide every s)")
    a.add_argument("--pp", "--pipeline-model-parallel-size", dest="pp",
                   help="pipeline sizes (default: divisors of G up to the layer count)")
    a.add_argument("--ep", "--expert-model-parallel-size", dest="ep",
                   help="expert-parallel sizes (default: powers of two dividing the expert count)")
    a.add_argument("--etp", "--expert-tensor-parallel-size", dest="etp", default=Default("1"),
                   help="expert tensor-parallel sizes (default 1)")
    a.add_argument("-b", "--micro-batch-size", dest="b", default="1,2,4,8", help="default 1,2,4,8")
    a.add_argument("-s", "--seq-length", dest="s", help="default: the scenario's")
    a.add_argument("--recompute",
                   help="none, full, selective, deepseek, selective-op, custom:OPS (default none,selective,full; "
                        "under the torchtitan profiles torchtitan's modes, none,selective-op,full)")
    a.add_argument("--schedule", help="gpipe, 1f1b, zb1p, interleaved[:V], dualpipe (default: scenario's)")
    a.add_argument("--chunks", default="2", help="virtual stages V for a bare `interleaved` (default 2)")
    a.add_argument("--zero", help="ZeRO stages (default 0,1,2,3; a profile's own, e.g. megatron-te's 1)")
    a.add_argument("--microbatches", default="pp", help="M per step; `pp` means M = PP (the default)")
    a.add_argument("--global-batch-size", dest="global_batch",
                   help="sequences per iteration, fixed across layouts (Megatron's): each layout's M = global batch "
                        "/ (micro-batch x DP), and a layout whose micro-batch x DP does not divide it is skipped "
                        "(counted under the rule 'global batch'); default with --rank-by time: the GPU count")


def scenario_from_args(args: argparse.Namespace, skip: frozenset = frozenset()):
    """The Scenario the flags describe: `--scenario` with each given flag's field replaced (the flags named in
    `skip` are left out: `symmem sweep` enumerates those)."""
    import dataclasses

    if skip:
        args = argparse.Namespace(**{**vars(args), **dict.fromkeys(skip)})

    from symmem.accounting.states import recipe, zero_stage
    from symmem.cli._flag_rules import routing_parameter, schedule_spelling
    from symmem.config import load_model
    from symmem.parallel.layout import LayoutSpec
    from symmem.parallel.routing import Routing
    from symmem.parallel.schedule import TORCH_ZERO_BUBBLES, Schedule
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import load_scenario, model_scenario
    from symmem.units import parse_size

    if args.layers_per_stage is not None and (args.first is not None or args.last is not None):
        raise SymmemError("--layers-per-stage: conflicts with --first-stage-layers/--last-stage-layers; give one "
                          "layout, either the layers of every stage or Megatron's first and last counts")
    ch: dict = {}
    if args.model:
        ch["model"] = load_model(args.model)
    if args.scenario is None and "model" in ch:  # a bare --model: that model on one GPU, not the paper's case
        scn = model_scenario(ch["model"])
    else:
        scn = load_scenario(args.scenario or "paper")
    if skip & {"tp", "pp"}:  # swept: start from one GPU per model replica (the sweep sets TP, PP and the layout)
        seq, moe = scn.parallel.sequence_parallel, scn.parallel.moe_sequence_parallel
        scn = scn.replace(parallel=Parallel(sequence_parallel=seq, moe_sequence_parallel=moe), layout=LayoutSpec())
    par = dataclasses.asdict(scn.parallel)
    if "model" in ch and ch["model"].family.routed_experts is None and args.ep is None and args.etp is None:
        par.update(ep=1, etp=1, edp=None)  # a model without routed experts has no expert parallelism to keep
    par_changes = {k: getattr(args, k) for k in ("tp", "pp", "ep", "etp", "dp", "edp", "cp", "cp_comm_type",
                                                 "hsdp_replicate",
                                                 "sequence_parallel", "moe_sequence_parallel")
                   if getattr(args, k) is not None}
    if getattr(args, "profile", None) and args.sequence_parallel is not False:
        from symmem.profiles import profile

        # the framework's own default (megatron-te: on, MoE too); --sequence-parallel restates it, MoE included
        if profile(args.profile).sequence_parallel:
            par_changes["sequence_parallel"] = True
            if args.moe_sequence_parallel is None:
                par_changes["moe_sequence_parallel"] = True
    if par_changes:
        par.update(par_changes)
        if "edp" not in par_changes:
            par["edp"] = None
        if any(k in par_changes for k in ("tp", "pp", "dp", "cp")):
            par["world"] = _world_kept(scn.parallel, par, par_changes)
        if par.get("moe_sequence_parallel") and not par.get("sequence_parallel"):
            par["moe_sequence_parallel"] = None if "moe_sequence_parallel" not in par_changes else True
    _torchtitan_experts(args, scn, ch, par, skip)
    ch["parallel"] = Parallel(**par)
    if par.get("edp") is not None and Parallel(**{**par, "edp": None}).expert_dp == par["edp"]:
        ch["parallel"] = Parallel(**{**par, "edp": None})  # the EDP the other sizes give, restated
    if args.convention:
        ch["convention"] = args.convention
    if args.precision:
        ch["precision"] = recipe(args.precision)
    if args.zero is not None:
        ch["zero"] = zero_stage(args.zero)
    if args.mtp is not None:
        ch["mtp"] = args.mtp
    if args.layers_per_stage is not None:
        items = args.layers_per_stage.split(",")
        if len(items) > num.MAX_PP:
            raise SymmemError(f"--layers-per-stage: {len(items):,} stages, more than the limit of "
                              f"{num.MAX_PP:,} pipeline stages")
        try:
            counts = tuple(num.int_text(x, "--layers-per-stage entry", 0, num.MAX_LAYERS) for x in items)
        except SymmemError:
            raise SymmemError(f"--layers-per-stage = {args.layers_per_stage[:60]!r}: must be integers separated by "
                              f"commas, each from 0 to {num.MAX_LAYERS:,} (ASCII digits)") from None
        ch["layout"] = LayoutSpec("explicit", counts)
    elif args.first is not None or args.last is not None:
        ch["layout"] = LayoutSpec("megatron", first=args.first, last=args.last)
    if hasattr(args, "b"):
        for k in ("b", "s", "microbatches"):
            if getattr(args, k) is not None:
                ch[k] = getattr(args, k)
        if args.rules:
            ch["rules_name"] = args.rules
        if args.profile:
            from symmem.profiles import profile

            prof = profile(args.profile)
            _framework_flags(prof, args)
            if args.rules is None:
                ch.pop("rules_name", None)  # the profile's own rule set, restated
            ch["profile_name"] = prof.name
            if prof.precision and not args.precision:
                ch["precision"] = recipe(prof.precision)
            if prof.zero is not None and args.zero is None:
                ch["zero"] = zero_stage(prof.zero)
            if prof.modules is not None and args.mtp is None:
                ch["mtp"] = False  # torchtitan trains without MTP unless asked (num_mtp_layers = 0)
            model = ch.get("model", scn.model)
            if prof.convention in model.family.conventions and not args.convention:
                ch["convention"] = prof.convention
        if args.recompute:
            ch["recompute_name"] = args.recompute
        args = schedule_spelling(args)  # interleaved:V, as sweep spells it
        if args.schedule in ("zbv", "dualpipev") and args.chunks not in (None, 2):  # the "v" style
            raise SymmemError(f"--chunks = {args.chunks}: {args.schedule} runs two stages per GPU")
        name = "interleaved" if args.schedule in TORCH_ZERO_BUBBLES else args.schedule  # torch's zero bubbles
        if args.chunks is not None and (name or scn.schedule.name) != "interleaved":
            raise SymmemError(f"--chunks = {args.chunks}: applies to --schedule interleaved (or interleaved-zb) only")
        if args.schedule:
            ch["schedule"] = Schedule.named(args.schedule, args.chunks)
        elif args.chunks is not None:
            ch["schedule"] = dataclasses.replace(scn.schedule, chunks=args.chunks)
        if args.routing is not None or args.capacity_factor is not None or args.rank_load is not None \
                or args.histogram is not None:
            kind = args.routing or ("capacity" if args.capacity_factor is not None else "dynamic"
                                    if args.rank_load is not None else "histogram" if args.histogram is not None
                                    else scn.routing.kind)
            routing_parameter(args, kind, scn.routing)
            hist: tuple = ()
            if args.histogram is not None:
                from symmem._files import read_text_file

                text = read_text_file(args.histogram, "--histogram")
                hist = tuple(x for x in text.replace(",", " ").split())
                if len(hist) > MAX_HISTOGRAM:
                    raise SymmemError(f"--histogram = {args.histogram!r}: {len(hist):,} loads, more than the "
                                      f"limit of {MAX_HISTOGRAM:,} (one per routed expert)")
            ch["routing"] = Routing(kind, args.capacity_factor, args.rank_load, hist)
        if args.gpu is not None:
            from symmem.hardware_profile import is_profile_path, register
            from symmem.units import gpu_capacity

            # a measured profile (`symmem calibrate -o FILE`) is registered as a GPU of this process first
            name = register(args.gpu) if is_profile_path(args.gpu) else args.gpu
            ch["gpu_memory"] = gpu_capacity(name, "--gpu")
            ch["gpu_name"] = name.strip().upper()
        if args.gpu_memory is not None:
            ch["gpu_memory"] = parse_size(args.gpu_memory, "--gpu-memory")
            if args.gpu is None:
                from symmem.scenario import _gpu_name

                ch["gpu_name"] = _gpu_name(args.gpu_memory)
        for flag in ("dataflow", "attn_impl", "experts_impl"):
            if getattr(args, flag):
                ch[flag] = getattr(args, flag)
        if args.flops_convention:
            ch["flops_convention"] = args.flops_convention
        if args.activation_dtype:
            from symmem.scenario import ACT_DTYPES as dtypes

            if args.activation_dtype not in dtypes:
                raise SymmemError(f"--activation-dtype = {args.activation_dtype!r}: must be one of "
                                  f"{', '.join(dtypes)}")
            ch["act_bytes"] = dtypes[args.activation_dtype]
    scn = scn.replace(**ch)
    if scn.dataflow is not None:  # the default dataflow, restated: the scenario without it
        try:
            plain = scn.replace(dataflow=None)
        except SymmemError:  # (not the default: without it, --attn-impl sdpa has no hf dataflow to act on)
            plain = None
        if plain is not None and plain.flow_impl == scn.flow_impl:
            scn = plain
    ddp = (getattr(args, "overlap_grad_reduce", False), getattr(args, "overlap_param_gather", False),
           getattr(args, "ddp_bucket_size", None))
    if ddp != (False, False, None):
        from symmem.parallel.ddp_buckets import DDP

        scn = scn.replace(ddp=DDP(*ddp))
    if getattr(args, "compiled", False):
        scn = scn.replace(compiled=True)
    if getattr(args, "fsdp_float8_all_gather", False):
        from symmem.profiles import with_fsdp_float8_all_gather

        scn = with_fsdp_float8_all_gather(scn)
    if getattr(args, "global_batch", None) is not None and "global_batch" not in skip:
        from symmem.scenario import with_global_batch

        scn = with_global_batch(scn, args.global_batch, "--global-batch-size", args.microbatches, "--microbatches")
    return scn


def _world_kept(old, par: dict, changes: dict) -> int | None:
    """The GPU count after flags change TP, PP or DP (README, "Scenarios").

    A scenario that states its `world` keeps it: without --dp, DP is re-derived as world / (TP·PP), and refused
    when that does not divide; with --dp the flags name the whole arrangement and the world is DP·TP·PP."""
    if old.world is None or "dp" in changes:
        return None
    tp_pp = par["tp"] * par["pp"] * par["cp"]
    if old.world % tp_pp:
        raise SymmemError(f"--tp/--cp/--pp = {par['tp']}/{par['cp']}/{par['pp']}: the scenario's world of "
                          f"{old.world:,} GPUs is not divisible by TP·CP·PP = {tp_pp:,}; choose sizes that divide it, "
                          "or give --dp to set the GPU count to DP·TP·CP·PP")
    par["dp"] = old.world // tp_pp
    return old.world


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


# What a framework's profile can take of --precision and --zero: torchtitan's model states are FSDP2's own (FP32
# shards, ZeRO-3 by construction) and its low precision is torchao's Float8; Megatron's FP8/FP4 is
# TransformerEngine's or DeepSeek's. A flag outside these would change nothing (the profile lays out its own states)
# or describe a stack that does not exist: refused in one line, never silently ignored.
TORCHAO = ("torchao-float8-tensorwise", "torchao-float8-rowwise", "torchao-float8-rowwise-gw-hp")


def _profile_names() -> tuple[str, ...]:
    from symmem.profiles import PROFILES

    return tuple(PROFILES)


def _profile_fixes(prof) -> dict[str, str | None]:
    """What a profile fixes whatever the flags say: its rule set; with the framework's own modules (torchtitan's)
    their dataflow, attention and experts too (None: no Hugging Face implementation to choose); with Megatron-Core's
    local layer spec, symmem's dataflow."""
    fixed: dict[str, str | None] = {"rules": prof.rules}
    if prof.modules is not None:
        fixed.update(dataflow=prof.dataflow, attn_impl=prof.attn_impl, experts_impl=None)
    elif prof.name == "megatron-local":
        fixed["dataflow"] = "paper"
    return fixed


def _torchtitan_experts(args, scn, ch: dict, par: dict, skip: frozenset) -> None:
    """Under a torchtitan profile the routed experts are laid out as torchtitan lays them: sharded over EP when EP
    is on, else over the TP mesh with the dense layers (torchtitan/models/common/moe_sharding.py
    `expert_param_placement_sparse` / `expert_param_placement_dense`, torchtitan 0.3.0): ETP is TP at EP 1 and 1
    otherwise, which the profile's states already are; a typed --etp that differs, and --convention (the profile's
    modules fix MLA's W_QR), are refused."""
    name = getattr(args, "profile", None) or scn.profile_name
    model = ch.get("model") or scn.model
    if not name or not name.startswith("torchtitan") or model.family.routed_experts is None or "etp" in skip:
        return
    want = par["tp"] if par["ep"] == 1 else 1
    if args.etp is not None and int(args.etp) != want:
        raise SymmemError(f"--etp {args.etp}: profile {name} shards the routed experts as torchtitan does, over TP at "
                          f"EP 1 and over EP otherwise (ETP {want} here); drop --etp")
    if getattr(args, "convention", None):
        raise SymmemError(f"--convention {args.convention}: profile {name} runs torchtitan's own modules, which fix "
                          "where MLA's W_QR sits; drop --convention")
    par["etp"] = want


def _framework_flags(prof, args) -> None:
    from symmem.profiles import TORCHTITAN_COMMITS

    if prof.name in TORCHTITAN_COMMITS and getattr(args, "schedule", None):
        raise SymmemError(f"--schedule {args.schedule}: profile {prof.name} (torchtitan "
                          f"{TORCHTITAN_COMMITS[prof.name]}, the code of published runs) models no pipelining; "
                          "torch's schedules run under --profile torchtitan")
    for field, own in _profile_fixes(prof).items():
        given = getattr(args, field, None)
        if given is None:
            continue
        if given != own:
            flag = "--" + field.replace("_", "-")
            fix = ("choose the profile whose rules they are (--profile " + given + ")"
                   if field == "rules" and given in _profile_names() else
                   "drop --profile" if field == "rules" and prof.modules is None and prof.name != "megatron-local"
                   else "use Hugging Face's modules (--profile torch-eager)")
            raise SymmemError(f"{flag} {given}: profile {prof.name} fixes it ({own or 'its own modules'}), whatever "
                              f"{flag} says; drop {flag}, or {fix}")
        setattr(args, field, None)  # the profile's own, restated
    if prof.name.startswith("torchtitan"):
        if args.zero is not None and str(args.zero).strip() != "3":
            raise SymmemError(f"--zero = {args.zero}: profile {prof.name} shards parameters, gradients and optimizer "
                              "states with FSDP2 (ZeRO-3) by construction; use --zero 3 or drop it (HSDP: "
                              "--hsdp-replicate)")
        if args.precision is not None and args.precision not in ("fp32", *TORCHAO):
            raise SymmemError(f"--precision = {args.precision!r}: profile {prof.name} keeps FSDP2's FP32 shards and "
                              f"computes in BF16; its low precision is torchao's ({', '.join(TORCHAO)}); drop "
                              "--precision or name one of those")
    elif prof.name.startswith("megatron") and args.precision in TORCHAO:
        raise SymmemError(f"--precision = {args.precision!r}: torchao's Float8 is torchtitan's (--profile "
                          f"torchtitan); profile {prof.name} takes TransformerEngine's or DeepSeek's recipes (te-*, "
                          "deepseek-v3-fp8)")
