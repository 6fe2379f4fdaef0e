"""The step-time model with a kernel profile's GEMM and attention times in place of the fitted efficiencies, the
rest of the fitted model kept (its link constants fitted): an experiment derivations/measured_step_times.py reports
(table kernel_step_times), split from `steptime.kernels` so that the profile's reader imports nothing of the
step-time package (`steptime.measured`, which `step_time` calls, reads the profile)."""

from __future__ import annotations

from symmem.steptime.kernels import KernelProfile, attention_seconds, gemm_seconds


def stage_kernel_features(c, g, p: KernelProfile):
    """One micro-batch slot of a stage (`costs.StageCosts` `c`) with its GEMMs and attention timed by the profile:
    `StepFeatures` whose GEMM and attention "FLOPs" are the profile's seconds at the GPU's dense BF16 peak (so the
    model reads them at efficiency 1), no GEMM bytes term (the measured kernels include their memory traffic), the
    memory-bound bytes at the profile's bandwidth fraction. BF16 only (the profile has no FP8 tables)."""
    import dataclasses

    from symmem.steptime import stage_features

    f = stage_features(c, None, g.sms)
    gemm = sum(n * gemm_seconds(p, m, k, nn, e, again) for m, k, nn, e, n, again, _low in c.gemms)
    attention = sum(n * attention_seconds(p, *shape, again) for *shape, n, again in c.attentions)
    if f.attention_flops and not c.attentions:  # a model whose heads the profile cannot read (no n_h)
        return None
    return dataclasses.replace(f, gemm_flops=gemm * g.bf16, gemm_low_flops=0.0, gemm_bytes=0.0,
                               attention_flops=attention * g.bf16, memory_bytes=f.memory_bytes / p.memory_bound)


def kernel_features(scn, g, p: KernelProfile):
    """`steptime.features` with the stages timed by `stage_kernel_features` (the slowest stage under link
    efficiency 1 and 10 us a call, round figures, as `steptime.NEUTRAL` chooses it), the optimizer step's bytes at
    the profile's bandwidth fraction. For the measured Megatron-LM runs (derivations/measured_step_times.py): no
    FSDP2 overlap. None when a stage's attention has no shape the profile can read."""
    import dataclasses

    from symmem.steptime import _stage_costs, features
    from symmem.steptime.model import Constants

    if any(stage_kernel_features(c, g, p) is None for c in _stage_costs(scn).values()):
        return None
    f = features(scn, g, Constants(1.0, 1.0, 1.0, 1e-05, 0.0), lambda c: stage_kernel_features(c, g, p))
    return dataclasses.replace(f, optimizer_bytes=f.optimizer_bytes / p.memory_bound, dp_floor=0.0, dp_overlap=None)


