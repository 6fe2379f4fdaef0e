"""Flags the user gave that change nothing in the scenario they describe, each with why (issue 45, item 3: a flag
changes the answer, is refused naming it, or is named in a note as not applying; nothing is silently ignored).

Each rule below is a case where the flag is accepted (it is not wrong, and a sweep or a scenario file may carry it
everywhere) but the arrangement leaves it nothing to act on: sequence parallelism at TP 1, a pipeline schedule at
PP 1, and so on. tests/test_flag_property.py runs every flag under every profile and holds these notes to it: a
flag whose answer is unchanged must be named here, and one named here must leave the answer unchanged."""

from __future__ import annotations

import argparse


def _given(args: argparse.Namespace, field: str) -> bool:
    return getattr(args, field, None) is not None


def _flag(args: argparse.Namespace, field: str, name: str | None = None) -> str:
    """The flag as the user typed it (`_flag_names.typed`); `name` where it is not `--field`."""
    from symmem.cli._flag_names import typed

    return typed(args, field, name or "--" + field.replace("_", "-"))


def notes(args: argparse.Namespace, scn) -> list[str]:
    """`note: FLAG changes nothing here: WHY` for each given flag that this scenario leaves nothing to act on."""
    par, model = scn.parallel, scn.model
    moe = model.family.routed_experts is not None
    out: list[tuple[str, str]] = []
    if _given(args, "cp_comm_type") and par.cp == 1:
        out.append((_flag(args, "cp_comm_type"), "at CP 1 there is no context parallelism (--cp)"))
    if _given(args, "sequence_parallel") and par.tp == 1:
        out.append((_flag(args, "sequence_parallel"), "at TP 1 there are no tensor-parallel regions to shard the "
                                                      "sequence outside of (--tp)"))
    if _given(args, "moe_sequence_parallel"):
        if not moe:
            out.append((_flag(args, "moe_sequence_parallel"), f"{model.name} has no routed experts"))
        elif par.tp == 1:
            out.append((_flag(args, "moe_sequence_parallel"), "at TP 1 the MoE block has no tensor-parallel "
                                                              "region (--tp)"))
    if _given(args, "convention"):
        arch = model.option("arch")
        if len(model.family.conventions) < 2:
            out.append((_flag(args, "convention"), f"{model.name} (family {model.family.name}) has one "
                                                   "convention"))
        elif arch is None and par.tp == 1:  # DeepSeek's MLA: where W_QR sits under TP
            out.append((_flag(args, "convention"), "it places MLA's W_QR under TP; at TP 1 nothing is split"))
        elif arch is not None and not arch.shared and par.dense_shard == par.expert_dp:
            # a decoder family's MoE (symmem.blocks.decoder.moe): the router's states in the dense group or the
            # experts', which shard alike here
            out.append((_flag(args, "convention"), "it puts the router's states in the dense group (megatron) or "
                                                   "the experts' (paper), and DP·CP = EDP here: they shard alike"))
    if _given(args, "mtp") and not model.n_mtp:
        out.append((_flag(args, "mtp"), f"{model.name} has no MTP modules modelled (symmem models DeepSeek's, "
                                        "num_nextn_predict_layers of them)"))
    if par.pp == 1:
        for field, name in (("first", "--first-stage-layers"), ("last", "--last-stage-layers"),
                            ("schedule", None), ("chunks", None)):
            if _given(args, field):
                out.append((_flag(args, field, name), "at PP 1 there is no pipeline (--pp)"))
    if _given(args, "zero") and scn.profile_name is not None and scn.profile.name.startswith("megatron") \
            and int(scn.zero) <= 1 and par.dense_shard == 1 and (not moe or par.expert_dp == 1):
        out.append((_flag(args, "zero"), "Megatron's distributed optimizer has no data-parallel group to shard "
                                         "over at DP·CP 1 (--dp)"))
    routing = next((f for f in ("routing", "histogram") if _given(args, f)), None)
    if routing is not None and moe and par.ep == 1 and scn.routing.kind in ("paper", "dispatch", "histogram"):
        out.append((_flag(args, routing), "at EP 1 every expert is local: the GPU dispatches its own b·s·N_r "
                                          "slots, however they spread over the experts (--ep)"))
    if _given(args, "routing") and not moe:
        out.append((_flag(args, "routing"), f"{model.name} has no routed experts"))
    from symmem.accounting.recompute import Recompute

    if _given(args, "recompute") and scn.policy.kind is Recompute.SELECTIVE_LAYER \
            and not any(scn.policy.checkpoints_layer(i) for i in range(model.value("L"))):
        out.append((_flag(args, "recompute"), f"torchtitan checkpoints every {scn.policy.every}-th block and "
                                              f"{model.name} has {model.value('L')}: no block is checkpointed, "
                                              "as under --recompute none"))
    if _given(args, "experts_impl") and not moe and scn.flow_impl is not None:
        out.append((_flag(args, "experts_impl"), f"{model.name} has no routed experts"))
    if scn.ddp.overlap_grad_reduce and par.dense_shard == 1 and par.expert_dp == 1:
        from symmem.parallel.ddp_buckets import DDP
        from symmem.profiles import ddp_layouts

        def sizes(s):
            return [lay.numel for _g, lay in ddp_layouts(s, s.stages[0])]

        if sizes(scn) == sizes(scn.replace(ddp=DDP())):
            for field in ("overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_size"):
                if getattr(args, field, None):
                    out.append((_flag(args, field), "at DP·CP 1 there is no gradient reduction to overlap (--dp), "
                                                    "and the buckets' ends add no padding to these parameters"))
    if _given(args, "flops_convention"):
        out.append((_flag(args, "flops_convention"), "it counts FLOPs for `symmem check` (its model_flops and "
                                                     "layer_flops quantities); the step time's MFU counts "
                                                     "Megatron's model FLOPs"))
    return [f"note: {flag} changes nothing here: {why}" for flag, why in out]
