"""Per-layer parameter counts by block: whole (unsplit) and on one GPU of the paper's case, with expressions."""

from __future__ import annotations

from symmem.accounting.evaluate import evaluate
from symmem.graph import global_size, local_size
from symmem.model import layer_flow
from symmem.render.latex import latex
from symmem.render.tables import Math, Table

from ._common import main, scenario


def tables() -> list[Table]:
    scn = scenario("paper")
    model, subs = scn.model, scn.model.substitutions()
    axes_num = scn.parallel.axis_sizes()
    axes_sym = scn.parallel.axis_sizes(symbolic=True)
    rows = []
    for kind in ("dense", "moe"):
        flow = layer_flow(model, kind, scn.convention)
        by: dict[tuple[str, str], list] = {}
        for op, w in flow.weights():
            group = "dense" if w.group == "dense" else "MoE"
            key = (op.block, group)
            acc = by.setdefault(key, [0, 0, 0])
            acc[0] += global_size(w.dims)
            acc[1] += local_size(w.dims, axes_sym)
            acc[2] += local_size(w.dims, axes_num)
        for (block, group), (whole, sym_local, local) in by.items():
            rows.append((f"{kind} layer", block, group, Math(latex(whole), str(whole)), int(evaluate(whole, subs)),
                         Math(latex(sym_local), str(sym_local)), int(evaluate(local, subs))))
    return [Table("layer_params", "Parameters of one decoder layer, by block (DeepSeek-V3)",
                  ("layer", "block", "paper group", "whole layer", "DeepSeek-V3", "per GPU (symbolic)",
                   "per GPU (paper case)"), tuple(rows),
                  ("Per GPU: TP = t, EP; the paper's case substitutes t = 2, EP = 8, ETP = 1. Non-MoE per MoE "
                   "layer: 107,429,888 = the mla row plus the FFN norm.",), align="lllrrlr")]


if __name__ == "__main__":
    main(tables)
