"""Scenarios: a named bundle of model, parallelism, pipeline layout, TP convention, precision recipe, ZeRO stage
and the run's activation settings. Built-in scenarios are TOML files shipped in `symmem/scenarios/`; a user's
scenario is a TOML file of the same form. Unknown keys are refused by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

from symmem import _toml
from symmem._files import read_named_or_path
from symmem.accounting.recompute import Policy, Recompute, policy
from symmem.accounting.states import Precision, ZeroStage, recipe, zero_stage
from symmem.config import ModelConfig, load_model
from symmem.errors import SymmemError
from symmem.implementations import ATTN_IMPLS, EXPERTS_IMPLS
from symmem.parallel.ddp_buckets import DDP
from symmem.parallel.layout import LayoutSpec, Stage, build_stages
from symmem.parallel.routing import Routing
from symmem.parallel.schedule import Schedule
from symmem.parallel.sizes import Parallel
from symmem.rules import RuleSet, rule_set
from symmem.symbols import sym
from symmem.units import parse_size

# the recomputation policies torchtitan runs (activation_checkpoint.mode and selective_ac_option)
TORCHTITAN_AC = (Recompute.NONE, Recompute.FULL, Recompute.SELECTIVE_OP, Recompute.SELECTIVE_LAYER)


def framework_recompute(profile_name: str, pol: Policy) -> str | None:
    """Why a framework's profile does not run a recomputation policy, or None: torchtitan's
    activation_checkpoint.mode is none, full, or selective with selective_ac_option "op" or a layer frequency N
    (Megatron's selective and DeepSeek's are not among them); those two, torchtitan's SelectiveAC and its every-Nth
    layer, are not Megatron-LM's (--recompute-granularity selective / full, --recompute-method block / uniform)."""
    if profile_name.startswith("torchtitan") and pol.kind not in TORCHTITAN_AC:
        return ("torchtitan's activation checkpointing modes are none, full, selective-op (mode selective, option op) "
                "and selective-layer:N (mode selective, option N)")
    if profile_name.startswith("megatron") and pol.kind in (Recompute.SELECTIVE_OP, Recompute.SELECTIVE_LAYER):
        return ("that is torchtitan's activation checkpointing; Megatron-LM's modelled here are none, selective (its "
                "core attention), full, deepseek and custom:OPS (its recompute modules)")
    return None


def _builtin() -> tuple[str, ...]:
    """Every TOML file shipped in symmem/scenarios/ (the paper's cases and the measured runs)."""
    from importlib import resources

    names = sorted(f.name[:-5] for f in resources.files("symmem.scenarios").iterdir() if f.name.endswith(".toml"))
    first = ("paper", "paper-megatron", "korthikanti")
    return tuple(n for n in first if n in names) + tuple(n for n in names if n not in first)


BUILTIN = _builtin()
DATAFLOWS = ("paper", "hf")
ACT_DTYPES = {"fp32": 4, "bf16": 2}


@dataclass(frozen=True)
class Scenario:
    """A whole training case: model, parallelism, layout, conventions, precision, ZeRO and activation settings.

    Fields not given take the defaults of the built-in `paper` scenario (what the CLI runs without flags),
    except `mtp`, which places the config's MTP modules on the last stage unless set False (the paper omits
    them; a TOML scenario without `mtp` keeps them too). `load_scenario` reads one; `replace` and
    `with_parallel` change fields of a copy, as the CLI's flags do."""

    name: str
    model: ModelConfig
    parallel: Parallel
    layout: LayoutSpec = LayoutSpec()
    convention: str = "paper"  # how W_QR splits over TP: "paper" (replicated) or "megatron" (with W_UQ)
    precision: Precision = recipe("paper")
    zero: ZeroStage = ZeroStage.NONE
    mtp: bool = True  # place the config's MTP modules on the last stage
    description: str = ""
    # activation settings
    b: int = 1  # micro-batch size (--micro-batch-size)
    s: int = 4096  # sequence length (--seq-length)
    rules_name: str = "paper"
    profile_name: str | None = None  # an implementation profile (symmem.profiles): framework buffers, vocabulary
    recompute_name: str = "none"
    routing: Routing = Routing()
    schedule: Schedule = Schedule()
    microbatches: int | None = None  # M; None: PP, enough to fill the pipeline
    act_bytes: int = 2  # activation dtype bytes (BF16)
    gpu_memory: int = 80 * 10**9  # bytes (H800/H100: 80 GB)
    fragmentation: tuple[float, float] = (0.05, 0.30)  # allocator overhead, fraction of allocated memory
    comm_buffers: tuple[int, int] = (800_000_000, 2_000_000_000)  # bytes per GPU
    overrides: tuple[str, ...] = field(default=())
    # which implementation the decoder layers' dataflows follow: "paper" (symmem.blocks) or "hf" (Hugging Face's,
    # symmem.blocks.hf); None: the rule set's own ("hf" for torch-eager, "paper" otherwise)
    dataflow: str | None = None
    attn_impl: str = "eager"  # hf dataflow: attn_implementation, "eager" or "sdpa"
    experts_impl: str = "eager"  # hf dataflow: experts_implementation, "eager" or "grouped_mm"
    hf_router: str | None = None  # hf dataflow: router variant; None: from the config (topk_method, norm_topk_prob)
    flops_convention: str = "paper"  # how FLOPs are counted (symmem.flops: `paper`, matmuls only)
    gpu_name: str | None = None  # the GPU by name (symmem.hardware), for the step time; None: not said
    ddp: DDP = DDP()  # Megatron's DDP bucketing and overlap (megatron profiles)
    compiled: bool = False  # torchtitan's torch.compile of each layer (0.3.0: and the loss); --compile

    def __post_init__(self) -> None:
        if self.convention not in self.model.family.conventions:
            raise SymmemError(f"convention = {self.convention!r}: unknown for {self.model.family.name} models; "
                              f"known: {', '.join(self.model.family.conventions)}")
        if self.dataflow not in (None,) + DATAFLOWS:
            raise SymmemError(f"dataflow = {self.dataflow!r}: unknown; known: {', '.join(DATAFLOWS)}")
        for f, known in (("attn_impl", ATTN_IMPLS), ("experts_impl", EXPERTS_IMPLS)):
            if getattr(self, f) not in known:
                raise SymmemError(f"{f} = {getattr(self, f)!r}: unknown; known: {', '.join(known)}")
        for f, top in (("b", 2**24), ("s", 2**31)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= top:
                raise SymmemError(f"{f} = {v!r}: must be a positive integer up to {top:,}")
        if self.act_bytes not in (1, 2, 4) or isinstance(self.act_bytes, bool):
            raise SymmemError(f"act_bytes = {self.act_bytes!r}: activation dtype bytes must be 1 (FP8), 2 (BF16) "
                              "or 4 (FP32)")
        if not isinstance(self.mtp, bool):
            raise SymmemError(f"mtp = {self.mtp!r}: must be true or false")
        self.parallel.validate_for(self.model)
        if self.s % self.parallel.cp:
            raise SymmemError(f"cp = {self.parallel.cp}: must divide the sequence length s = {self.s} (each rank "
                              "holds s/CP tokens)")
        if self.parallel.cp > 1 and not self.rules.context_parallel:
            raise SymmemError(f"cp = {self.parallel.cp}: the {self.rules.name!r} rule set has no context-parallel "
                              "rule (it models one device); use rules = 'paper' or a profile with CP")
        self.routing.check_model(self.model, self.parallel.ep)
        if self.parallel.hsdp_replicate != 1 and self.profile.states is None:
            raise SymmemError(f"hsdp_replicate = {self.parallel.hsdp_replicate}: HSDP is FSDP2's; only a profile that "
                              "lays out FSDP2's shards takes it (--profile torchtitan)")
        self.profile  # noqa: B018 - validates the names now, not at first use
        self.rules  # noqa: B018
        self.policy  # noqa: B018
        self.flow_impl  # noqa: B018
        base_rules = self.profile.rules if self.profile_name is not None else self.rules_name
        if self.flow_impl is not None and base_rules == "paper":  # else: "rule set 'paper' has no rule for ..."
            fix = ("profile = 'torch-eager' (--profile torch-eager)" if self.profile_name is not None
                   else "rules = 'torch-eager' (--rules torch-eager)")
            raise SymmemError("dataflow = 'hf': Hugging Face's dataflow needs a rule set with its ops, and the "
                              f"'paper' rule set has none; use {fix}")
        self.schedule.check(self.parallel.pp, self.m, self.schedule_runtime)
        self.ddp.check(self)
        why = framework_recompute(self.profile.name, self.policy)
        if why is not None:
            raise SymmemError(f"--recompute {self.policy.label} with --profile {self.profile.name}: {why}")
        if self.compiled:
            self._check_compiled()
        if not any(st.chunk_layers for st in self.stages):  # (torchtitan's chunks are its own split)
            self.schedule.check_layout(tuple(len(st.layers) for st in self.stages))
        if self.flow_impl is None and (self.attn_impl, self.experts_impl) != ("eager", "eager"):
            chosen = ", ".join(f"{f} = {getattr(self, f)!r}" for f in ("attn_impl", "experts_impl")
                               if getattr(self, f) != "eager")
            # the one change that makes it valid: the hf dataflow when the rules have its ops (torch-eager,
            # megatron-te), else the torch-eager rule set (whose dataflow is hf)
            # (under a profile, whose rule set --rules does not override, the profile with Hugging Face's rules)
            fix = ("use profile = 'torch-eager' with dataflow = 'hf' (--profile torch-eager --dataflow hf)"
                   if base_rules == "paper" and self.profile_name is not None else
                   "use rules = 'torch-eager' (--rules torch-eager), whose dataflow is hf" if base_rules == "paper"
                   else "use dataflow = 'hf' (--dataflow hf)")
            raise SymmemError(f"{chosen}: chooses Hugging Face's implementations, which only the hf dataflow "
                              f"follows; {fix}")
        if self.policy.ops:
            self._check_custom_recompute()
        from symmem.flops import check_convention

        check_convention(self.flops_convention)

    def _check_compiled(self) -> None:
        """--compile is torchtitan's (each decoder layer, and the loss but at 9dec370, compiled), in BF16 or torchao's
        tensorwise Float8 (weights gathered in BF16, or in float8 under per-op or full AC), under torchtitan's
        checkpointing modes; under TP, in BF16 without checkpointing (what runs and was measured)."""
        if not (self.profile_name or "").startswith("torchtitan"):
            raise SymmemError(f"--compile: torchtitan's torch.compile is modelled under the torchtitan profiles "
                              "(--profile torchtitan, torchtitan-cpu, torchtitan-2412, torchtitan-2506), not "
                              f"{self._profile_said()}")
        if self.parallel.tp != 1:
            # measured under TP: torchtitan 0.3.0's Llama 3 and DeepSeek-V3 without checkpointing, BF16 (tests/
            # validate/test_fsdp2_compile.py); with full or per-op AC torch 2.13 itself fails on the CPU (its checkpoint
            # under torch.compile saves DTensor's device mesh: "expected all tensors_saved_with_vc_check to be Tensors")
            if self.policy.kind is not Recompute.NONE:
                raise SymmemError(f"--recompute {self.policy.label} with --compile --tp {self.parallel.tp}: torch "
                                  "2.13's checkpoint fails under torch.compile with DTensor's TP (it saves the device "
                                  "mesh; measured on the CPU), so it is not modelled; use --recompute none, or --tp 1")
            if self.precision.low_precision is not None:
                raise SymmemError(f"--tp {self.parallel.tp} with --compile: modelled in BF16 (measured); Float8 under "
                                  "TP and compile is not; use --tp 1, or drop --precision")
        lp = self.precision.low_precision
        every_layer = self.policy.kind in (Recompute.FULL, Recompute.SELECTIVE_OP) or (
            self.policy.kind is Recompute.SELECTIVE_LAYER
            and all(self.policy.checkpoints_layer(i) for i in range(self.model.value("L"))))
        if self._float8_gathered and not every_layer:
            # without AC the partitioner keeps the column-major float8 weight copies of some products (measured:
            # the last two of a block) and not others, by a rule not found (symmem/accounting/compiled.py
            # `float8_linear`); with full or per-op AC it recomputes them all (measured)
            raise SymmemError(f"--enable-fsdp-float8-all-gather with --compile --recompute {self.policy.label}: "
                              "FSDP2's float8 all-gather under torch.compile is modelled where every layer is "
                              "checkpointed (--recompute selective-op or full); use one of those, or leave the flag "
                              "out (the weights gathered in BF16)")
        if lp is not None and not lp.name.startswith("torchao-float8-tensorwise"):
            raise SymmemError(f"--precision {self.precision.name} with --compile: under torch.compile Float8 is "
                              "modelled for torchao's tensorwise recipe (--precision torchao-float8-tensorwise)")

    @property
    def _float8_gathered(self) -> bool:
        lp = self.precision.low_precision
        return lp is not None and lp.fsdp_float8_all_gather is not None

    def _profile_said(self) -> str:
        return f"--profile {self.profile_name}" if self.profile_name else f"--rules {self.rules_name}"

    def _check_custom_recompute(self) -> None:
        """A custom recomputation set must name op kinds, tags or names that exist in this scenario's dataflows."""
        from symmem.model import stage_parts

        known: set[str] = set()
        kinds: set[str] = set()
        tags: set[str] = set()
        for st in self.stages:
            for part in stage_parts(self.model, st, self.convention, self.flow_impl):
                for op in part.flow.ops:
                    known |= {op.kind, op.name, *op.tags}
                    kinds.add(op.kind)
                    tags |= op.tags
        unknown = sorted(self.policy.ops - known)
        if unknown:
            raise SymmemError(f"recompute = {self.policy.label!r}: {unknown[0]!r} is no op kind, tag or name of "
                              f"this scenario's dataflows; op kinds: {', '.join(sorted(kinds))}; tags: "
                              f"{', '.join(sorted(tags))}")

    @property
    def m(self) -> int:
        return self.schedule.default_microbatches(self.parallel.pp) if self.microbatches is None else self.microbatches

    @cached_property
    def profile(self):
        """The implementation profile: the one named, or the one of the rule set's name (paper, torch-eager)."""
        from symmem.profiles import PROFILES, Profile, profile

        if self.profile_name is not None:
            return profile(self.profile_name)
        return PROFILES.get(self.rules_name, Profile(self.rules_name, self.rules_name, ""))

    @cached_property
    def rules(self) -> RuleSet:
        """The rule set, under the precision recipe's rules on saved tensors when it has any (FP8, FP4)."""
        base = rule_set(self.profile.rules if self.profile_name is not None else self.rules_name)
        if base.name == "megatron-te" and self.parallel.cp > 1 and self.parallel.cp_comm_type == "a2a":
            from symmem.rules.megatron_te import RULES_CP_A2A

            base = RULES_CP_A2A  # TE's all-to-all CP keeps one more attention output per layer
        if base.name.startswith("torchtitan") and self.parallel.tp > 1:
            from symmem.rules.torchtitan import under_tp

            # DTensor TP keeps the gathered inputs (at b = 1 two more copies each), the vocabulary mask, loss-parallel's
            # log-probabilities
            base = under_tp(base, one_sequence=self.b == 1)
        if self.compiled and base.name.startswith("torchtitan"):
            base = self._compiled_rules(base)
        if self.precision.low_precision is None:
            return base
        from symmem.precision.apply import with_precision

        return with_precision(base, self.precision)

    def _compiled_rules(self, base: RuleSet) -> RuleSet:
        """The rule set with torchtitan's compiled regions (`symmem.accounting.compiled`): the cut weighed at this
        model's sizes; on the CPU a checkpointed region keeps the CPU generator's state, on a GPU CUDA's; the loss
        compiled by torchtitan 0.3.0, not by 9dec370 (train.py:136-138 there)."""
        from symmem.accounting.compiled import CPU_RNG_STATE_BYTES, CUDA_RNG_STATE_BYTES, CompileSpec

        loss = base.name != "torchtitan-2412"  # 9dec370 compiled the blocks only
        spec = CompileSpec(tuple(sorted(self._size_values.items(), key=lambda kv: str(kv[0]))), self.act_bytes,
                           CPU_RNG_STATE_BYTES if base.name.endswith("-cpu") else CUDA_RNG_STATE_BYTES,
                           loss=loss, float8=self.precision.low_precision is not None,
                           axes=self.parallel.axis_sizes(), float8_gathered=self._float8_gathered)
        out = dataclasses.replace(base, name=f"{base.name}+compile", compile=spec,
                                  description=f"{base.description}; each decoder layer{' and the loss' if loss else ''}"
                                  " compiled (torch.compile, inductor: the partitioner's cut)")
        if loss and self.parallel.tp == 1:
            # the compiled loss's own kernels: no FP32 logits-sized transient, and the BF16 gradient of the logits
            # written while the logits it keeps are alive (the eager loss casts it after releasing them)
            from symmem.accounting.compiled import compiled_loss_workspace, compiled_loss_workspace_cpu

            ws = compiled_loss_workspace_cpu if base.name.endswith("-cpu") else compiled_loss_workspace
            out = dataclasses.replace(out, workspaces={**out.workspaces, "cross_entropy": ws},
                                      grad_in_place=out.grad_in_place - {"cross_entropy"})
        return out

    def size_values(self) -> dict:
        """The model's sizes as the implementation allocates them (Megatron pads the vocabulary); a copy."""
        return dict(self._size_values)

    @cached_property
    def _size_values(self) -> dict:
        vals = self.model.substitutions()
        pad = self.profile.padded_vocabulary
        if pad is not None and self.model.has("V"):
            vals[sym("V")] = pad(self.model.value("V"), self.parallel.tp)
        return vals

    @property
    def gather_bytes(self) -> int:
        """Bytes per parameter element ZeRO-3 all-gathers in: the profile's (FSDP2: its param dtype), else the stored
        weights'."""
        g = self.profile.gather_bytes
        return self.precision.weight_bytes if g is None else g

    @property
    def gathered(self):
        """What ZeRO-3 gathers per parameter element: `gather_bytes`, or under FSDP2's float8 all-gather a
        `timeline.Float8Gathered` (the Float8 linears' weights in float8 with their scales)."""
        lp = self.precision.low_precision
        if lp is None or lp.fsdp_float8_all_gather is None:
            return self.gather_bytes
        from symmem.accounting.timeline import Float8Gathered

        return Float8Gathered(self.gather_bytes, lp.fsdp_float8_all_gather)

    @cached_property
    def size_key(self) -> tuple:
        """`size_values` as a sorted tuple: a cache key of the derivations that depend on the sizes."""
        return tuple(sorted(self._size_values.items(), key=lambda kv: kv[0].name))

    @cached_property
    def activation_key(self) -> tuple:
        """What the activation derivations depend on, written once (not b, s, ZeRO, precision, the schedule or
        the profile's buffers): the caches of `symmem.accounting` key on it, and the sweep's structural key
        (`symmem.sweep.compile.structural_key`) is derived from it with the sizes the sweep keeps symbolic taken
        out of the parallel arrangement."""
        return (self.model, self.convention, self.rules, self.policy, self.parallel, self.routing, self.act_bytes)

    @cached_property
    def flow_impl(self) -> object | None:
        """The HF implementation the activation dataflows follow, or None for the paper's dataflows.

        It depends on b and s: at b = 1 or s = 1 some reshapes stay views (HFImpl.flat_view, output_view), so a
        torch-eager expression derived at b = 1 holds at b = 1 only, one derived at b, s > 1 only there. Evaluate
        it at the scenario's own b and s (replace them; do not override them at evaluation)."""
        prof = self.profile if self.profile_name is not None else None
        rules = prof.rules if prof is not None else self.rules_name  # (a profile's own rules, as --rules says them)
        dataflow = self.dataflow or (prof.dataflow if prof is not None else None) or (
            "hf" if rules == "torch-eager" else "paper")
        if dataflow == "paper":
            return None
        if prof is not None and prof.modules is not None:
            own = self.model.family.torchtitan_impl(self.model, prof.modules == "torchtitan-gpu",
                                                    unit_batch=self.b == 1, unit_seq=self.s == 1)
            if own is not None:
                return own
        attn = prof.attn_impl if prof is not None and prof.attn_impl else self.attn_impl
        extra = {"s": self.s} if self.model.family.hf_impl_takes_seq else {}
        impl = self.model.family.hf_impl(self.model, attn, self.experts_impl, self.hf_router,
                                         unit_batch=self.b == 1, unit_seq=self.s == 1, **extra)
        if prof is not None and prof.repeat_kv and hasattr(impl, "repeat_kv"):
            impl = dataclasses.replace(impl, repeat_kv=True)
        return impl

    @property
    def routing_label(self) -> str:
        """What the routed slots are: the routing model's, or the dataflow's own where its dispatcher keeps every
        slot whatever the routing (torchtitan's local dispatcher, symmem.blocks.torchtitan)."""
        if getattr(self.flow_impl, "fixed_slots", False):
            return "every slot kept (b s N_r per rank: torchtitan's local token dispatcher)"
        return self.routing.label

    @cached_property
    def policy(self) -> Policy:
        pol = policy(self.recompute_name)
        if pol.kind is Recompute.SELECTIVE_LAYER and self.parallel.pp > 1:
            # torchtitan counts the blocks of each pipeline rank's own model chunk; symmem's stages would count
            # the whole model's
            raise SymmemError(f"recompute = {pol.label!r} with PP = {self.parallel.pp}: per-layer checkpointing is "
                              "modelled without pipelining; set --pp 1")
        return pol

    @property
    def stage_layout(self) -> LayoutSpec:
        """The layout the stages follow: the scenario's, or its profile's framework's own split when none was
        given (torchtitan weighs the embedding and the output as a layer each)."""
        if self.layout == LayoutSpec() and self.profile.layout is not None:
            return LayoutSpec(self.profile.layout)
        return self.layout

    @cached_property
    def stages(self) -> tuple[Stage, ...]:
        return build_stages(self.stage_layout, self.model.value("L"), self.parallel.pp,
                            self.model.n_mtp if self.mtp else 0, self.schedule.chunks,
                            "v" if self.schedule.v_shape else "loop")

    @property
    def schedule_runtime(self) -> str:
        """Whose pipeline runtime orders the schedule (`Schedule.order`): torch.distributed.pipelining's under a
        profile that runs FSDP2 under it (torchtitan 0.3.0), else Megatron's."""
        return "torch" if self.profile.pipelined_fsdp else "megatron"

    def replace(self, **changes) -> Scenario:
        return dataclasses.replace(self, **changes)


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", float: "a number", list: "a list",
               dict: "a table"}


def _take(table: dict, allowed: dict[str, type | tuple], where: str) -> dict:
    """Check a TOML table: no unknown key, every value of its declared type (true/false is not an integer)."""
    if not isinstance(table, dict):
        raise SymmemError(f"{where}: must be a table")
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise SymmemError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(allowed)}")
    for key, value in table.items():
        types = allowed[key] if isinstance(allowed[key], tuple) else (allowed[key],)
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
            raise SymmemError(f"{where} {key} = {value!r}: must be {want}")
    return table


def from_toml_dict(raw: dict, source: str) -> Scenario:
    top = _take(raw, {"name": str, "description": str, "model": str, "convention": str, "mtp": bool,
                      **{k: dict for k in ("parallel", "layout", "precision", "training", "routing", "gpu",
                                           "model_overrides")}},
                source)
    if "model" not in top:
        raise SymmemError(f"{source}: missing key 'model' (a preset name or a config.json path)")
    model_ref = top["model"]
    if not Path(str(model_ref)).is_absolute() and ("/" in str(model_ref) or str(model_ref).endswith(".json")):
        model_ref = str(Path(source).parent / model_ref) if Path(source).exists() else model_ref
    overrides = top.get("model_overrides", {})
    if any(not isinstance(v, (int, float, str, bool)) for v in overrides.values()):
        raise SymmemError(f"{source} [model_overrides]: values must be numbers, strings or true/false")
    model = load_model(str(model_ref), overrides)
    par = _take(top.get("parallel", {}), {**{k: int for k in ("dp", "tp", "pp", "ep", "etp", "edp", "world", "cp")},
                                          "cp_comm_type": str,
                                          "sequence_parallel": bool, "moe_sequence_parallel": bool},
                f"{source} [parallel]")
    parallel = Parallel(**par)
    lay = _take(top.get("layout", {}), {"kind": str, "layers_per_stage": list, "first": int, "last": int},
                f"{source} [layout]")
    layout = LayoutSpec(kind=lay.get("kind", "paper"), layers_per_stage=tuple(lay.get("layers_per_stage", ())),
                        first=lay.get("first"), last=lay.get("last"))
    prec = _take(top.get("precision", {}), {"recipe": str, **{k: int for k in (
        "weight_bytes", "grad_bytes", "master_bytes", "optimizer_bytes")}}, f"{source} [precision]")
    if set(prec) - {"recipe"}:
        base = recipe(prec.get("recipe", "paper"))
        precision = Precision(prec.get("recipe", "custom") if "recipe" in prec else "custom",
                              prec.get("weight_bytes", base.weight_bytes), prec.get("grad_bytes", base.grad_bytes),
                              prec.get("master_bytes", base.master_bytes),
                              prec.get("optimizer_bytes", base.optimizer_bytes), base.low_precision)
    else:
        precision = recipe(prec.get("recipe", "paper"))
    tr = _take(top.get("training", {}), {
        **{k: int for k in ("zero", "micro_batch_size", "seq_length", "chunks", "microbatches", "activation_bytes",
                            "global_batch_size")},
        **{k: str for k in ("recompute", "rules", "schedule", "activation_dtype", "dataflow", "attn_impl",
                            "experts_impl", "hf_router", "profile")}}, f"{source} [training]")
    act_bytes = tr.get("activation_bytes", 2)
    if "activation_dtype" in tr:
        if tr["activation_dtype"] not in ACT_DTYPES:
            raise SymmemError(f"{source} [training] activation_dtype = {tr['activation_dtype']!r}: must be one of "
                              f"{', '.join(ACT_DTYPES)}")
        if "activation_bytes" in tr and tr["activation_bytes"] != ACT_DTYPES[tr["activation_dtype"]]:
            raise SymmemError(f"{source} [training] activation_bytes = {tr['activation_bytes']!r}: contradicts "
                              f"activation_dtype = {tr['activation_dtype']!r}")
        act_bytes = ACT_DTYPES[tr["activation_dtype"]]
    rt = _take(top.get("routing", {}), {"kind": str, "capacity_factor": (int, float, str),
                                        "rank_load": (int, float, str), "histogram": list}, f"{source} [routing]")
    routing = Routing(kind=rt.get("kind", "paper"), capacity_factor=rt.get("capacity_factor"),
                      rank_load=rt.get("rank_load"), histogram=tuple(rt.get("histogram", ())))
    gpu = _take(top.get("gpu", {}), {"memory": (str, int), "fragmentation": list, "comm_buffers": list},
                f"{source} [gpu]")
    frag = tuple(gpu.get("fragmentation", (0.05, 0.30)))
    if len(frag) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1
                                 for x in frag) or frag[0] > frag[1]:
        raise SymmemError(f"{source} [gpu] fragmentation = {list(frag)!r}: must be [low, high] fractions of "
                          "allocated memory, 0 <= low <= high <= 1")
    bufs = tuple(0 if x == 0 else parse_size(x, "comm_buffers")  # 0: none through the caching allocator
                 for x in gpu.get("comm_buffers", (800_000_000, 2_000_000_000)))
    if len(bufs) != 2 or bufs[0] > bufs[1]:
        raise SymmemError(f"{source} [gpu] comm_buffers = {bufs!r}: must be [low, high] sizes, low <= high")
    scn = Scenario(
        name=top.get("name", Path(source).stem),
        description=top.get("description", ""),
        model=model,
        parallel=parallel,
        layout=layout,
        convention=top.get("convention", "paper"),
        precision=precision,
        zero=zero_stage(tr.get("zero", 0)),
        mtp=top.get("mtp", True),
        b=tr.get("micro_batch_size", 1),
        s=tr.get("seq_length", 4096),
        rules_name=tr.get("rules", "paper"),
        profile_name=tr.get("profile"),
        recompute_name=tr.get("recompute", "none"),
        routing=routing,
        schedule=Schedule(tr.get("schedule", "1f1b"), tr.get("chunks", 1)),
        microbatches=tr.get("microbatches"),
        act_bytes=act_bytes,
        dataflow=tr.get("dataflow"),
        attn_impl=tr.get("attn_impl", "eager"),
        experts_impl=tr.get("experts_impl", "eager"),
        hf_router=tr.get("hf_router"),
        gpu_memory=parse_size(gpu.get("memory", "80GB"), "gpu.memory"),
        gpu_name=_gpu_name(gpu.get("memory")),
        fragmentation=(float(frag[0]), float(frag[1])),
        comm_buffers=(bufs[0], bufs[1]),
    )
    if "global_batch_size" in tr:  # Megatron's --global-batch-size: M follows from it
        return with_global_batch(scn, tr["global_batch_size"], f"{source} [training] global_batch_size",
                                 tr.get("microbatches"))
    return scn


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario name (`paper`, `paper-megatron`) or the path of a TOML file."""
    if name_or_path in BUILTIN:
        return _builtin(name_or_path)  # shipped scenarios never change: read and checked once per process
    return _load(name_or_path)


@cache
def _builtin(name: str) -> Scenario:
    return _load(name)


def _load(name_or_path: str) -> Scenario:
    text, source = read_named_or_path("scenario", name_or_path, "symmem.scenarios", ".toml", BUILTIN,
                                      "unknown; built-in scenarios")
    return from_toml_dict(_toml.loads(text, source), source)


def _gpu_name(memory: object) -> str | None:
    """The GPU a `[gpu] memory = "B200"` names (symmem.hardware's presets), else None."""
    from symmem.hardware import GPUS

    return memory.strip().upper() if isinstance(memory, str) and memory.strip().upper() in GPUS else None


MODEL_SCENARIO_S = 4096  # the sequence length of a scenario derived from a model alone, unless its context is shorter


def model_scenario(model: ModelConfig) -> Scenario:
    """One model on one GPU: what `--model` alone means (TP = PP = DP = 1, micro-batch 1, s = 4096 or the model's
    own context length when that is shorter; everything else the Scenario's defaults). Never another model's
    scenario: the paper's 1,024-GPU DeepSeek-V3 case applies only when asked for (`--scenario paper`).

    >>> scn = model_scenario(load_model("gpt2"))
    >>> scn.parallel.world_size, scn.b, scn.s
    (1, 1, 1024)
    """
    s = min(MODEL_SCENARIO_S, model.max_positions or MODEL_SCENARIO_S)
    return Scenario(model.name, model, Parallel(), s=s,
                    description=f"{model.name} on one GPU (TP = PP = DP = 1, micro-batch 1, s = {s})")


def global_batch_microbatches(global_batch: int, micro_batch: int, dp: int, flag: str = "global_batch_size") -> int:
    """M for `global_batch` sequences per iteration: global batch / (micro-batch x DP), Megatron's rule
    (megatron/core/num_microbatches_calculator.py, ConstantNumMicroBatchesCalculator: the global batch must be a
    multiple of micro-batch x data-parallel size); one line naming `flag` otherwise."""
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise SymmemError(f"{flag} = {global_batch!r}: must be a positive integer")
    if global_batch % (micro_batch * dp):
        raise SymmemError(f"{flag} = {global_batch:,}: not a multiple of micro-batch {micro_batch:,} x DP {dp:,} = "
                          f"{micro_batch * dp:,} (Megatron: global batch = micro-batch x micro-batches x DP)")
    return global_batch // (micro_batch * dp)


def with_global_batch(scn: Scenario, global_batch: int, flag: str = "global_batch_size",
                      microbatches: int | None = None, microbatches_flag: str = "microbatches") -> Scenario:
    """A copy whose M makes `global_batch` sequences per iteration at its micro-batch and DP; `microbatches`, an M
    also given (named `microbatches_flag`), must be the same.

    >>> scn = with_global_batch(load_scenario("llama3_70b_l12_tp1_pp2_dp4_mbc4_cef"), 64)
    >>> scn.m, scn.b * scn.m * scn.parallel.dp
    (16, 64)
    """
    m = global_batch_microbatches(global_batch, scn.b, scn.parallel.dp, flag)
    if microbatches is not None and microbatches != m:
        raise SymmemError(f"{flag} = {global_batch:,}: means {m:,} micro-batches at micro-batch {scn.b} and DP "
                          f"{scn.parallel.dp}, not {microbatches_flag} {microbatches:,}; give one of the two")
    return scn.replace(microbatches=m)


def with_parallel(scn: Scenario, **changes) -> Scenario:
    """A copy with some parallel sizes changed (EDP re-derived unless given; the world re-derived when DP, TP,
    CP or PP change).

    >>> scn = with_parallel(load_scenario("paper"), tp=1, pp=1, dp=8)
    >>> scn.parallel.world_size
    8
    """
    fields = dataclasses.asdict(scn.parallel)
    fields.update(changes)
    if "edp" not in changes:
        fields["edp"] = None
    if "world" not in changes and any(k in changes for k in ("dp", "tp", "pp", "cp")):
        fields["world"] = None
    return scn.replace(parallel=Parallel(**fields))
