"""The step-time model as data the page evaluates (`symmem.steptime.forms`: each stage's costs of one micro-batch
as forms in b and s, checked at a point they were not read from); everything else of the model (the tiled FLOPs in
waves over the SMs, the slowest stage, the bubble, the data-parallel traffic, the optimizer step, the CP ring's
overlap, the five constants) is computed by the page's script as `symmem.steptime.model` computes it. Where a GPU's
measured kernels time the step (`symmem.steptime.measured`), the page also carries the kernel profile
(`kernel_profiles`) and each stage's attentions and collectives by kind (`kernel_templates`), and its script times
them as `steptime.measured` does."""

from __future__ import annotations

from symmem.errors import SymmemError
from symmem.steptime.forms import model_flops, stage_templates


def template(scn) -> dict:
    """What the page needs of `scn`'s step time at any b and s (and M, DP, ZeRO, GPU, which it computes itself)."""
    if scn.precision.low_precision is not None:
        raise SymmemError(f"precision {scn.precision.name}: its low-precision GEMMs are not on the page")
    from symmem.steptime.measured import KERNEL_CONSTANTS, scenario_reason

    # where `symmem memory` times the step by a GPU's measured kernels (`steptime.measured.applies`), so does the
    # page's script: the GPUs whose scenario-wide test passes (the arrangement's is the script's), with the costs
    # the kernels need beyond the fitted model's (`kernel_templates`)
    # (ZeRO is the page reader's: the script tests ZeRO-3 itself, `measuredKernels`)
    measured = [name for name in KERNEL_CONSTANTS if scenario_reason(scn, name, zero=False) is None]
    out = {"S": scn.s, "stages": stage_templates(scn), "flops": model_flops(scn), "moe":
           scn.model.family.routed_experts is not None, "measured": measured,
           "cp_a2a": scn.parallel.cp_comm_type == "a2a"}
    if measured and (scn.parallel.cp <= 1 or out["cp_a2a"]):
        try:
            out["kernels"] = kernel_templates(scn)
        except SymmemError as e:  # the fitted model's time stays on the page; the measured GPUs' says why not
            out["kernels_note"] = f"step time not on the page here: {e}"
    return out


def kernel_templates(scn) -> list[dict]:
    """What the measured-kernels model (`steptime.measured`) reads of each stage beyond `stage_templates`, at any
    b and s: the fused attentions, each (b, s) a fixed multiple of the step's, with their heads, head dims, copies
    and recomputation; each (axis, kind) of collective as its bytes' form (`forms._fit`), its calls and its group's
    GPUs. The page's script times them from the GPU's kernel profile as `steptime.measured` does."""
    from symmem.steptime.costs import group_size, stage_costs
    from symmem.steptime.forms import POINTS, _fit
    from symmem.steptime.measured import stage_collectives

    at = [scn.replace(b=b, s=k * scn.s) for b, k in POINTS]
    out = []
    for j in range(len(scn.stages)):
        atts = [stage_costs(p, p.stages[j]).attentions for p in at]
        attentions = []
        for i, (b1, s1, *shape, copies, again) in enumerate(atts[0]):
            for (b, k), a in zip(POINTS, atts, strict=True):
                b2, s2, *shape2, copies2, again2 = a[i]
                if (shape2, copies2, again2) != (shape, copies, again) or b2 != b1 * b or s2 != s1 * k:
                    raise SymmemError(f"stage {j}: an attention's shape is not (b, s) times its own")
            attentions.append([b1, s1 / scn.s, *shape, copies, bool(again)])
        colls = [stage_collectives(p, p.stages[j]) for p in at]
        if any(set(c) != set(colls[0]) or any(c[key][1] != colls[0][key][1] for key in c) for c in colls):
            raise SymmemError(f"stage {j}: its collectives' calls depend on b or s")
        out.append({"attentions": attentions, "colls": [
            [axis, kind, _fit([c[(axis, kind)][0] for c in colls], f"stage {j}: the {axis} {kind} bytes"),
             colls[0][(axis, kind)][1], group_size(scn, axis)] for axis, kind in sorted(colls[0])]})
    return out


def gpus() -> dict:
    """The speed figures of `symmem.hardware.GPUS` and the model's constants, for the page: the named GPUs' and a
    measured profile's registered by `--gpu FILE` (its own constants, its measured latency per ring step, and null
    for a link it did not measure, which the page's script then refuses to time, as `symmem memory` does)."""
    import math

    from symmem.hardware import GPUS
    from symmem.steptime import CONSTANTS
    from symmem.steptime.costs import GPUS_PER_NODE
    from symmem.steptime.model import DEVICE_CONSTANTS

    def link(x: float) -> float | None:
        return None if math.isinf(x) else x

    speeds = {name: {"bf16": g.bf16, "hbm": g.hbm, "nvlink": link(g.nvlink), "network": link(g.network),
                     "sms": g.sms, "step_latency": g.step_latency, "group": g.measured_group}
              for name, g in GPUS.items()}
    return {"node": GPUS_PER_NODE, "names": list(GPUS), "gpus": speeds, "constants": CONSTANTS.as_dict(),
            "gpu_constants": {name: k.as_dict() for name, k in DEVICE_CONSTANTS.items() if name in GPUS},
            "kernels": kernel_profiles()}


def kernel_profiles() -> dict:
    """Each GPU's kernel profile and the measured-kernels model's constants (`steptime.measured`), as the page's
    script reads them: the measured points already in log space (the profile's own floats), NEAREST and TIE."""
    import math

    from symmem.steptime.kernels import NEAREST, TIE, profile
    from symmem.steptime.measured import KERNEL_CONSTANTS, fitted_sequences

    out = {}
    for name, k in KERNEL_CONSTANTS.items():
        p = profile(name)
        if p is None:
            continue
        # (a calibrated device without collectives measured: no link, null; the script refuses its traffic first)
        out[name] = {"peak": p.peak, "gemm": p.gemm, "grouped": p.grouped, "attention": p.attention,
                     "attention_floor": p.attention_floor,
                     "memory_bound": p.memory_bound, "collectives": p.collectives,
                     "link_gib": None if math.isinf(p.link_gib) else p.link_gib,
                     "nearest": NEAREST, "tie": TIE, "constants": k.as_dict(),
                     "fitted_sequences": list(fitted_sequences())}
    return out
