"""What the paper misses (1): activations per GPU under 1F1B for every stage, micro-batches in flight included."""

from __future__ import annotations

from symmem.accounting.analysis import memory
from symmem.render.tables import Table
from symmem.units import fmt_gib

from ._common import main, scenario, stage_label


def tables() -> list[Table]:
    base = scenario("paper")
    rows = []
    none, full = memory(base), memory(base.replace(recompute_name="full"))
    for a, f in zip(none, full, strict=True):
        rows.append((a.stage.index, stage_label(a.stage), a.activation_per_microbatch, str(a.in_flight),
                     a.activations, fmt_gib(a.activations), f.activation_per_microbatch, f.activations,
                     fmt_gib(f.activations)))
    return [Table("activations_per_stage",
                  f"Activations per GPU of every stage under {base.schedule.label}, M = {base.m} micro-batches "
                  f"(b = {base.b}, s = {base.s})",
                  ("stage", "layers", "per micro-batch (none)", "in flight", "per GPU bytes (none)",
                   "per GPU GiB (none)", "per micro-batch (full)", "per GPU bytes (full)", "per GPU GiB (full)"),
                  tuple(rows),
                  ("1F1B: stage i holds min(M, PP - i) micro-batches of activations at its peak; stage 0 holds "
                   "all 16. The paper's Table 10 is the per-micro-batch column.",
                   "Stage 0 holds the embedding, three dense layers (h_F = 18432) and one MoE layer; stage 15 "
                   "holds layer 60, the final norm and the head, whose FP32 logits (4bsV/t) dominate."),
                  align="rlrrrrrrr")]


if __name__ == "__main__":
    main(tables)
