"""Table 4: parameters of every pipeline stage: the whole stage and one GPU of it."""

from __future__ import annotations

from symmem.accounting.analysis import stage_params
from symmem.render.tables import Table
from symmem.units import fmt_gib

from ._common import main, scenario, stage_label


def contents(scn, stage) -> str:
    kinds = scn.model.layer_kinds()
    parts = []
    if stage.embedding:
        parts.append("embedding")
    dense = sum(kinds[i] == "dense" for i in stage.layers)
    moe = sum(kinds[i] == "moe" for i in stage.layers)
    if dense:
        parts.append(f"{dense} dense")
    if moe:
        parts.append(f"{moe} MoE")
    if stage.head:
        parts.append("norm + head")
    if stage.mtp:
        parts.append(f"{stage.mtp} MTP")
    return ", ".join(parts)


def tables() -> list[Table]:
    scn = scenario("paper")
    rows = []
    for st in scn.stages:
        sp = stage_params(scn, st)
        nbytes = sp.total * scn.precision.weight_bytes
        rows.append((st.index, stage_label(st), contents(scn, st), sp.whole_total, sp.dense, sp.moe, sp.total,
                     nbytes, fmt_gib(nbytes)))
    return [Table("table4_stage_params", "Table 4: parameters per pipeline stage (DeepSeek-V3, PP 16)",
                  ("stage", "layers", "contents", "whole stage", "per GPU non-MoE", "per GPU MoE", "per GPU total",
                   "BF16 weight bytes per GPU", "BF16 weight GiB per GPU"), tuple(rows),
                  (f"Scenario {scn.name}: {scn.parallel.describe()}. Whole stage: every distinct parameter of the "
                   "stage over all its TP and EP ranks. GiB = 2^30 bytes.",
                   "Stages 1-14 hold the most parameters per GPU; which stage holds the most memory is decided by "
                   "activations too: by the paper's sum and by symmem's timeline peak (see peak_stage)."),
                  align="rllrrrrrr")]


if __name__ == "__main__":
    main(tables)
