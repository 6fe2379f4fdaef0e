"""The `muon` optimizer recipe: Muon for the hidden weight matrices, AdamW for every other parameter.

Which parameters go where: Muon "should only be used for hidden weight layers. The input embedding, final output
layer, and any internal gains or biases should be optimized using a standard method such as AdamW" (K. Jordan,
"Muon: An optimizer for hidden layers in neural networks", 2024, and the Muon README); DeepSeek-V4 trains with
Muon on the same split (the issue's statement: Muon for the hidden weight matrices, AdamW for the embedding, the
head and every other parameter). Here a weight is a Muon matrix when it has at least two dimensions (an expert's
[2 h_E, h] slice, q_b_proj's [d_cq, n_h d_k], mHC's `fn`, a router) and is neither the embedding, nor in the
head (lm_head, the final norm, hc_head), nor a bias (`position_bias`, mHC's `base` and `scale`, `sinks`).

Bytes per parameter (mixed precision as Megatron keeps it):
* Muon matrices: BF16 weight 2 + FP32 gradient 4 + FP32 master 4 + one FP32 momentum buffer 4 = 14 B
  (Muon keeps a single momentum; Newton-Schulz iterations are transient);
* AdamW parameters: 2 + 4 + 4 + two FP32 moments 8 = 18 B (the `megatron` recipe).
ZeRO shards both groups as for any recipe (dense over DP, MoE over EDP).
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem.accounting.analysis import to_int
from symmem.accounting.params import weight_uses
from symmem.accounting.states import Precision, StateBytes, recipe, state_bytes
from symmem.graph import local_size
from symmem.model import stage_parts

MUON_MATRIX = Precision("muon", 2, 4, 4, 4)
ADAMW = recipe("megatron")
BIAS_NAMES = ("position_bias", ".base", ".scale", "sinks", "hc_base", "hc_scale")


@dataclass(frozen=True)
class SplitStates:
    muon_params: int
    adamw_params: int
    states: StateBytes

    @property
    def total(self) -> int:
        return self.states.total


def is_muon(part_kind: str, op_kind: str, weight) -> bool:
    if op_kind == "embedding" or part_kind == "head" or len(weight.dims) < 2:
        return False
    return not any(weight.name.endswith(b) or b in weight.name for b in BIAS_NAMES)


def stage_states(scn, stage) -> SplitStates:
    """Model-state bytes on one GPU of `stage` under the muon recipe (the scenario's ZeRO stage); under DualPipe
    those of both stages the GPU holds (`Schedule.held_stages`)."""
    held = scn.schedule.held_stages(stage.index, scn.parallel.pp)
    if len(held) > 1:
        one = [_one_stage_states(scn, scn.stages[i]) for i in held]
        return SplitStates(sum(x.muon_params for x in one), sum(x.adamw_params for x in one),
                           StateBytes(*(sum(getattr(x.states, f) for x in one)
                                        for f in ("weights", "gradients", "optimizer"))))
    return _one_stage_states(scn, stage)


def _one_stage_states(scn, stage) -> SplitStates:
    parts = stage_parts(scn.model, stage, scn.convention)
    axes = scn.parallel.axis_sizes()
    subs = scn.model.substitutions()
    kinds = {p.name: p.kind for p in parts}
    op_kinds = _op_kinds(parts)
    counts = {(m, g): 0 for m in (True, False) for g in ("dense", "moe")}
    for u in weight_uses(parts):
        n = u.count * to_int(local_size(u.weight.dims, axes), subs)
        group = "dense" if u.weight.group == "dense" else "moe"
        counts[(is_muon(kinds[u.part], op_kinds.get((u.part, u.op), ""), u.weight), group)] += n
    dp, edp, zero = scn.parallel.dp, scn.parallel.expert_dp, scn.zero
    a = state_bytes(counts[(True, "dense")], counts[(True, "moe")], dp, edp, MUON_MATRIX, zero)
    b = state_bytes(counts[(False, "dense")], counts[(False, "moe")], dp, edp, ADAMW, zero)
    states = StateBytes(a.weights + b.weights, a.gradients + b.gradients, a.optimizer + b.optimizer)
    return SplitStates(counts[(True, "dense")] + counts[(True, "moe")],
                       counts[(False, "dense")] + counts[(False, "moe")], states)


def _op_kinds(parts) -> dict[tuple[str, str], str]:
    """(part name, op name) -> op kind; the first op of a name in a part, as a search would find it."""
    out: dict[tuple[str, str], str] = {}
    for p in parts:
        for op in p.flow.ops:
            out.setdefault((p.name, op.name), op.kind)
    return out
