"""Parallel sizes (Megatron's argument names) and the checks that tie them to a model.

EDP (expert data parallelism) is derived as DP·TP/(EP·ETP) unless given, and checked when given.
Constraints raise only when provably false; every message names the field, the value and the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from symmem._cache import hash_once
from symmem.config import ModelConfig
from symmem.errors import SymmemError
from symmem.graph import AxisSizes
from symmem.symbols import cp as CP_SYM
from symmem.symbols import ep as EP_SYM
from symmem.symbols import etp as ETP_SYM
from symmem.symbols import t as TP_SYM

CP_COMM_TYPES = ("p2p", "a2a")


def _check_size(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SymmemError(f"{field} = {value!r}: must be a positive integer")
    if value <= 0:
        raise SymmemError(f"{field} = {value!r}: must be a positive integer")
    return value


@hash_once
@dataclass(frozen=True)
class Parallel:
    """How the GPUs are arranged. World size = DP × TP × CP × PP (Megatron's order tp-cp-ep-dp-pp); the expert
    layers regroup the DP × TP × CP GPUs of a stage as EDP × EP × ETP.

    The defaults are one GPU, sequence parallelism off, and the MoE block not sequence-sharded even when
    sequence parallelism is on (the paper's accounting, which the built-in scenarios and the CLI default to);
    pass `moe_sequence_parallel=True` for Megatron-Core's sequence-sharded MoE block.

    >>> par = Parallel(dp=32, tp=2, pp=16, ep=8, sequence_parallel=True)
    >>> par.world_size, par.expert_dp, par.moe_sp
    (1024, 8, False)
    """

    tp: int = 1  # tensor-parallel size (--tensor-model-parallel-size)
    pp: int = 1  # pipeline-parallel size (--pipeline-model-parallel-size)
    ep: int = 1  # expert-parallel size (--expert-model-parallel-size)
    etp: int = 1  # expert tensor-parallel size (--expert-tensor-parallel-size)
    dp: int = 1  # data-parallel size
    edp: int | None = None  # expert data-parallel size; derived when None
    sequence_parallel: bool = False  # --sequence-parallel: activations outside TP regions split over s
    # is the MoE block sequence-sharded too? False (the default, as the paper and the built-in `paper` scenario
    # count it, and as the CLI runs unless --moe-sequence-parallel is given); True (Megatron-Core; needs
    # sequence_parallel); None: as sequence_parallel
    moe_sequence_parallel: bool | None = False
    world: int | None = None  # total GPUs, checked against DP·TP·CP·PP when given
    cp: int = 1  # context-parallel size (--context-parallel-size): every activation split over the sequence
    cp_comm_type: str = "p2p"  # --cp-comm-type: p2p (ring exchange of K/V) or a2a (all-to-all over heads)
    # HSDP (FSDP2's 2-D mesh, replicate x shard): DP's replicas; a profile that shards states itself (torchtitan)
    # shards over DP / hsdp_replicate. 1: plain FSDP
    hsdp_replicate: int = 1

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "ep", "etp", "dp", "cp"):
            _check_size(f, getattr(self, f))
        _check_size("hsdp_replicate", self.hsdp_replicate)
        if self.dp % self.hsdp_replicate:
            raise SymmemError(f"hsdp_replicate = {self.hsdp_replicate}: must divide DP = {self.dp} (HSDP's mesh is "
                              "replicate x shard)")
        if self.cp_comm_type not in CP_COMM_TYPES:
            raise SymmemError(f"cp_comm_type = {self.cp_comm_type!r}: must be one of {', '.join(CP_COMM_TYPES)}")
        if self.edp is not None:
            _check_size("edp", self.edp)
        if not isinstance(self.sequence_parallel, bool):
            raise SymmemError(f"sequence_parallel = {self.sequence_parallel!r}: must be true or false")
        if self.moe_sequence_parallel is not None and not isinstance(self.moe_sequence_parallel, bool):
            raise SymmemError(f"moe_sequence_parallel = {self.moe_sequence_parallel!r}: must be true or false")
        if self.world is not None:
            _check_size("world", self.world)
            if self.world != self.world_size:
                raise SymmemError(
                    f"world = {self.world}: must equal DP·TP·CP·PP = {self.dp}·{self.tp}·{self.cp}·{self.pp} = "
                    f"{self.world_size}")
        if self.moe_sequence_parallel and not self.sequence_parallel:
            raise SymmemError("moe_sequence_parallel = True: needs sequence_parallel = True")
        stage_gpus = self.dp * self.tp * self.cp
        if stage_gpus % (self.ep * self.etp):
            raise SymmemError(
                f"ep·etp = {self.ep}·{self.etp}: must divide DP·TP·CP = {stage_gpus} (the expert layers "
                f"regroup the DP·TP·CP GPUs of a stage as EDP·EP·ETP)")
        if self.edp is not None and self.edp != self.expert_dp:
            raise SymmemError(
                f"edp = {self.edp}: inconsistent with DP·TP·CP/(EP·ETP) = {self.dp}·{self.tp}·{self.cp}/"
                f"({self.ep}·{self.etp}) = {self.expert_dp}")

    @property
    def expert_dp(self) -> int:
        return self.dp * self.tp * self.cp // (self.ep * self.etp)

    @property
    def dense_shard(self) -> int:
        """The group dense optimizer states (and ZeRO shards) split over: DP × CP (Megatron's distributed
        optimizer shards over the data-parallel-with-context-parallel group)."""
        return self.dp * self.cp

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.cp * self.pp

    @property
    def moe_sp(self) -> bool:
        return self.sequence_parallel if self.moe_sequence_parallel is None else self.moe_sequence_parallel

    def axis_sizes(self, symbolic: bool | str = False) -> AxisSizes:
        """Sizes of the parallel axes on one rank: symbols (t, EP, ETP; with `symbolic = "sweep"`, CP too, as the
        compiled sweep keeps it) or this configuration's numbers."""
        tp = TP_SYM if symbolic else sympy.Integer(self.tp)
        one = sympy.Integer(1)
        return AxisSizes({
            "tp": tp,
            "sp": tp if self.sequence_parallel else one,
            "sp_moe": tp if self.moe_sp else one,
            "ep": EP_SYM if symbolic else sympy.Integer(self.ep),
            "etp": ETP_SYM if symbolic else sympy.Integer(self.etp),
            "cp": CP_SYM if symbolic == "sweep" else sympy.Integer(self.cp),
        })

    def validate_for(self, model: ModelConfig) -> None:
        """Divisibility rules between this arrangement and a model's sizes."""
        fam = model.family
        for field, name in fam.divisibility:
            size = getattr(self, field)
            if model.has(name) and model.value(name) % size:
                raise SymmemError(f"{field} = {size}: must divide {fam.config_keys[name]} = {model.value(name)}")
        if self.cp > 1 and self.cp_comm_type == "a2a":
            # TransformerEngine's all-to-all CP gives each rank 1/CP of the heads a TP rank holds: it asserts
            # num_heads % cp_size == 0 for Q and for K, V (transformer_engine/pytorch/attention/dot_product_attention/
            # context_parallel.py, AttnFuncWithCPAndQKVOA2A.forward, line 4246 at TE d0067d0)
            for name in ("n_h", "a", "n_kv"):
                if model.has(name) and (model.value(name) // self.tp) % self.cp:
                    raise SymmemError(
                        f"cp = {self.cp} (--cp-comm-type a2a): must divide the heads a TP rank holds, "
                        f"{fam.config_keys.get(name, name)} / TP = {model.value(name)} / {self.tp} = "
                        f"{model.value(name) // self.tp} (all-to-all CP splits the heads over CP; "
                        "TransformerEngine's AttnFuncWithCPAndQKVOA2A)")
            if fam.fixed_kv_heads is not None and fam.fixed_kv_heads % self.cp:
                raise SymmemError(f"cp = {self.cp} (--cp-comm-type a2a): must divide the key-value heads, "
                                  f"{fam.fixed_kv_heads} in {model.name}'s architecture (all-to-all CP splits the "
                                  "heads over CP; TransformerEngine's AttnFuncWithCPAndQKVOA2A)")
        if fam.routed_experts is None and (self.ep, self.etp) != (1, 1):
            raise SymmemError(f"ep·etp = {self.ep}·{self.etp}: {model.name} has no routed experts; expert "
                              "parallel sizes must be 1")

    def describe(self, moe: bool = True) -> str:
        """One line of the arrangement; `moe`: whether the model has routed experts (a dense one's line does not
        say how a MoE block would be sharded)."""
        sp = "SP on" if self.sequence_parallel else "SP off"
        if self.sequence_parallel and moe:
            sp += ", MoE sequence-sharded" if self.moe_sp else ", MoE not sequence-sharded"
        cp = f", CP {self.cp} ({self.cp_comm_type})" if self.cp > 1 else ""
        return (f"DP {self.dp}, TP {self.tp}{cp}, PP {self.pp}, EP {self.ep}, ETP {self.etp}, EDP {self.expert_dp} "
                f"({self.world_size} GPUs; {sp})")
