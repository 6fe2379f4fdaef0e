"""Table 10: activations of one stage of stages 1-14 per micro-batch: b = 1, 2, 4, without and with full
recomputation, in bytes, GiB and GB (the paper's units are unclear)."""

from __future__ import annotations

from symmem.accounting.analysis import stage_activation_expr, to_int, values
from symmem.render.tables import Table
from symmem.units import fmt_gb, fmt_gib

from . import _paper
from ._common import main, scenario


def tables() -> list[Table]:
    base = scenario("paper")
    st = base.stages[1]
    rows = []
    for policy in ("none", "full"):
        scn = base.replace(recompute_name=policy)
        mla = stage_activation_expr(scn, st, "mla")
        moe = stage_activation_expr(scn, st, "moe")
        for b in (1, 2, 4):
            vals = values(scn, b_value=b)
            m1, m2 = to_int(mla, vals), to_int(moe, vals)
            total = m1 + m2
            stated = _paper.TABLE10_B1[policy] if b == 1 else None
            rows.append((policy, b, m1, m2, total, fmt_gib(total), fmt_gb(total),
                         "" if stated is None else f"{stated:,} ({'equal' if stated == total else 'DIFFERENT'})"))
    return [Table("table10_activations",
                  "Table 10: activations per GPU of stages 1-14, per micro-batch (s = 4096)",
                  ("recomputation", "b", "MLA bytes", "MoE bytes", "total bytes", "GiB", "GB",
                   "the paper (b = 1)"), tuple(rows),
                  ("Per micro-batch, as the paper counts: a GPU of stage i holds several micro-batches under a "
                   "pipeline schedule (see activations_per_stage). 24,671,158,272 bytes are 22.98 GiB = 24.67 GB.",
                   "Paper conventions: rule set paper, MoE block not sequence-sharded, E_tok = b s N_r / N."),
                  align="lrrrrrrl")]


if __name__ == "__main__":
    main(tables)
