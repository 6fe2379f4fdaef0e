"""Notes on a default of symmem's that differs from the framework's own, where the user did not set the value: the
answer is for symmem's default, and the note says which flag gives the framework's."""

from __future__ import annotations

import argparse


def default_notes(args: argparse.Namespace, scn) -> list[str]:
    par = scn.parallel
    out = []
    # Megatron-LM sets --expert-tensor-parallel-size to the TP size when it is not given
    # (megatron/training/arguments.py:395-396 at core_v0.14.0); symmem's default is 1 (the paper's case, DeepSeek's
    # practice), which keeps every routed expert whole on each TP rank
    # (a bare --model: a scenario file's ETP is the file's, not a default)
    if (getattr(args, "etp", None) is None and getattr(args, "scenario", None) is None and scn.profile_name is not None
            and scn.profile.name.startswith("megatron") and scn.model.family.routed_experts is not None
            and par.tp > 1 and par.etp == 1):
        out.append(f"note: ETP 1 (symmem's default): each routed expert is whole on every one of the TP {par.tp} "
                   "ranks; Megatron's own default for --expert-tensor-parallel-size is the TP size (megatron/"
                   f"training/arguments.py), which --etp {par.tp} gives")
    return out
