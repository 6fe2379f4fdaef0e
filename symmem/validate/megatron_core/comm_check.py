"""symmem.comm's communication volume held against the collectives Megatron-Core 0.16.1 issues (CPU, gloo).

`predicted(settings, pp_rank)` builds the Scenario of the measured run (the HF config, TP/PP/DP, M, b, s, dtype,
no sequence parallelism: the local spec cannot run it on the CPU) and gives the bytes one GPU sends per
iteration, by group: `tp` and `pp` from `stage_comm_bytes` x M, `dp` from `dp_bytes`. `measured(records)` turns
a rank's recorded collectives (`collectives.Recorder`) into the same convention: symmem.comm's ring bytes sent by
one GPU (`collectives.wire`: all-reduce 2(n-1)/n of the tensor, reduce-scatter (n-1)/n of its full input,
all-gather n-1 input shards, a pipeline send its tensor; receives are the peer's sends). Groups of one rank move
nothing and are left out.

The scenario is the `megatron-local` profile (the harness's own: the HF vocabulary unpadded, as runner.py gives it
to GPTModel; Megatron's DDP padding; the distributed optimizer as ZeRO-1), with the `fp32` precision recipe (FP32
parameters, no main copy) or, in BF16, `megatron` (BF16 parameters, FP32 gradients and main copy).

Outside the model (measured, named, not predicted): the gradient-norm all-reduce, one FP32 scalar on the
distributed optimizer's instance group (the whole world here): optimizer/optimizer.py:607 -> :210 ->
optimizer/clip_grads.py:130, group set at optimizer/__init__.py:459.
"""

from __future__ import annotations

import json
import os
import tempfile
from fractions import Fraction

from symmem.validate.megatron_core.collectives import wire

GROUPS = {"tp": "tp", "pp": "pp", "dp": "dp", "dp-cp": "dp"}  # Megatron group label -> symmem.comm's axis
OUTSIDE = {("distopt-instance", "all-reduce", "optimizer step"):
           "gradient-norm all-reduce, one FP32 scalar (megatron/core/optimizer/clip_grads.py:130)"}


def scenario(st):
    """The symmem Scenario of the measured run `st` (runner.Settings): the model on one GPU (`model_scenario`) with
    the run's sizes, the `megatron-local` profile, its precision and ZeRO stage, no sequence parallelism. Built
    from the library alone (what `symmem memory --model ... --profile megatron-local --no-sequence-parallel ...`
    gives, the steps of symmem.cli.args.scenario_from_args for those flags): the library does not import the CLI."""
    import dataclasses

    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.profiles import profile
    from symmem.scenario import ACT_DTYPES, model_scenario

    fd, path = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(st.raw, f)
        model = load_model(path)  # the checks a config.json file gets
    finally:
        os.unlink(path)
    scn = model_scenario(model)
    par = dataclasses.asdict(scn.parallel)
    if model.family.routed_experts is None:
        par.update(ep=1, etp=1)  # a model without routed experts has no expert parallelism
    # TP, PP and DP name the whole arrangement: EDP and the world re-derived; no sequence parallelism, MoE's neither
    par.update(tp=st.tp, pp=st.pp, dp=st.dp, edp=None, world=None, sequence_parallel=False)
    if par.get("moe_sequence_parallel"):
        par["moe_sequence_parallel"] = None
    prof = profile("megatron-local")
    changes = dict(parallel=Parallel(**par), precision=recipe("fp32" if st.dtype == "fp32" else "megatron"),
                   zero=zero_stage(1 if st.distributed_optimizer else 0), b=st.b, s=st.s,
                   microbatches=st.microbatches, profile_name=prof.name, recompute_name=st.recompute,
                   act_bytes=ACT_DTYPES[st.dtype])
    if prof.convention in model.family.conventions:
        changes["convention"] = prof.convention
    if st.overlap_grad_reduce:  # (--overlap-grad-reduce, --overlap-param-gather, --ddp-bucket-size)
        from symmem.parallel.ddp_buckets import DDP

        changes["ddp"] = DDP(st.overlap_grad_reduce, st.overlap_param_gather, st.bucket_size)
    return scn.replace(**changes)


def predicted(st, pp_rank: int) -> dict[str, int]:
    """Bytes one GPU of pipeline stage `pp_rank` sends in the iteration, per group (symmem.comm)."""
    import sympy

    from symmem.comm import dp_bytes, stage_comm_bytes
    from symmem.symbols import b, s

    scn = scenario(st)
    stage = scn.stages[pp_rank]
    at = {**scn.size_values(), b: scn.b, s: scn.s}
    out = {}
    for axis, expr in stage_comm_bytes(scn, stage).items():
        out[axis] = Fraction(str(sympy.nsimplify(sympy.sympify(expr).subs(at)))) * scn.m
    dp = dp_bytes(scn, stage)  # exact
    if dp:
        out["dp"] = dp
    return {k: _int(v, k) for k, v in out.items() if v}


def measured(records: list[dict]) -> tuple[dict[str, int], dict[str, int], list[dict]]:
    """(bytes sent per group in symmem.comm's convention, the same per (group, kind), the collectives outside
    the model or on a group symmem does not name)."""
    per_group: dict[str, Fraction] = {}
    per_kind: dict[str, Fraction] = {}
    other = []
    for r in records:
        if r["size"] <= 1 or r["kind"] == "recv":
            continue
        axis = GROUPS.get(r["group"])
        if axis is None or r["kind"] not in ("all-gather", "reduce-scatter", "all-reduce", "send"):
            other.append({**r, "why": OUTSIDE.get((r["group"], r["kind"], r["phase"]), "not named")})
            continue
        w = wire(r["kind"], r["nbytes"], r["size"])
        per_group[axis] = per_group.get(axis, Fraction(0)) + w
        key = f"{axis} {r['kind']} ({r['phase']})"
        per_kind[key] = per_kind.get(key, Fraction(0)) + w
    return ({k: _int(v, k) for k, v in per_group.items()}, {k: _int(v, k) for k, v in per_kind.items()}, other)


def _int(v: Fraction, what: str) -> int:
    if v.denominator != 1:
        raise ValueError(f"{what}: {v} bytes is not a whole number")
    return int(v)
