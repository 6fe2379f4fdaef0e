"""The step-time model as data the page evaluates (`symmem.steptime.forms`: each stage's costs of one micro-batch
as forms in b and s, checked at a point they were not read from); everything else of the model (the tiled FLOPs in
waves over the SMs, the slowest stage, the bubble, the data-parallel traffic, the optimizer step, the CP ring's
overlap, the five constants) is computed by the page's script as `symmem.steptime.model` computes it."""

from __future__ import annotations

from symmem.errors import SymmemError
from symmem.steptime.forms import model_flops, stage_templates


def template(scn) -> dict:
    """What the page needs of `scn`'s step time at any b and s (and M, DP, ZeRO, GPU, which it computes itself)."""
    if scn.precision.low_precision is not None:
        raise SymmemError(f"precision {scn.precision.name}: its low-precision GEMMs are not on the page")
    from symmem.steptime.measured import KERNEL_CONSTANTS, scenario_reason

    # where `symmem memory` times the step by a GPU's measured kernels (`steptime.measured.applies`), which the
    # page does not evaluate: the GPUs whose scenario-wide test passes (the arrangement's is the script's)
    measured = [name for name in KERNEL_CONSTANTS if scenario_reason(scn, name) is None]
    return {"S": scn.s, "stages": stage_templates(scn), "flops": model_flops(scn), "moe":
            scn.model.family.routed_experts is not None, "measured": measured,
            "cp_a2a": scn.parallel.cp_comm_type == "a2a"}


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
            "gpu_constants": {name: k.as_dict() for name, k in DEVICE_CONSTANTS.items() if name in GPUS}}
