"""Table 2: every weight of a DeepSeek-V3 layer, its symbolic shape, size and how it splits."""

from __future__ import annotations

from symmem.accounting.evaluate import evaluate
from symmem.blocks.symbols import d_h, d_hr, d_v, n_h
from symmem.graph import global_size, local_size
from symmem.model import embedding_flow, head_flow, layer_flow
from symmem.render.latex import latex
from symmem.render.tables import Math, Table

from ._common import main, scenario

_PER_HEAD = {d_h, d_v, d_hr, d_h + d_hr}


def shape_latex(dims) -> str:
    """`d_{cq} \\times n_hd_h`: a head count merges with the per-head size that follows it."""
    parts, i = [], 0
    while i < len(dims):
        size = dims[i].size
        if size == n_h and i + 1 < len(dims) and dims[i + 1].size in _PER_HEAD:
            parts.append(latex(size * dims[i + 1].size) if dims[i + 1].size != d_h + d_hr
                         else r"n_h(d_h+d_{hr})")
            i += 2
            continue
        parts.append(latex(size))
        i += 1
    return r" \times ".join(parts)


def split_text(dims, group: str) -> str:
    axes = {a for d in dims for a in d.axes}
    if "ep" in axes:
        return "experts over EP" + (", width over ETP" if "etp" in axes else "")
    if "tp" in axes:
        return "split over TP"
    return "replicated"


def tables() -> list[Table]:
    scn = scenario("paper")
    model = scn.model
    flows = [("embedding", embedding_flow(model)), ("dense layer", layer_flow(model, "dense", "paper")),
             ("MoE layer", layer_flow(model, "moe", "paper")), ("head", head_flow(model))]
    # the megatron convention's split of every weight, per layer kind (it differs from the paper's for W_QR in
    # every MLA, the dense layers' included)
    meg_split = {(kind, op.block, w.name): split_text(w.dims, w.group)
                 for kind in ("dense", "moe") for op, w in layer_flow(model, kind, "megatron").weights()}
    kinds = {"dense layer": "dense", "MoE layer": "moe"}
    axes = scn.parallel.axis_sizes()
    subs = model.substitutions()
    rows = []
    seen = set()
    for where, flow in flows:
        for op, w in flow.weights():
            key = (op.block, w.name)
            if key in seen:
                continue
            seen.add(key)
            n = global_size(w.dims)
            per_gpu = int(evaluate(local_size(w.dims, axes), subs))
            rows.append((where, op.block, w.name, Math(shape_latex(w.dims), str(w.dims and [str(d.size) for d in
                                                                                            w.dims])),
                         Math(latex(n), str(n)), int(evaluate(n, subs)),
                         split_text(w.dims, w.group),
                         meg_split[(kinds[where], op.block, w.name)] if where in kinds else split_text(w.dims, w.group),
                         per_gpu, w.group))
    return [Table("table2_weight_shapes",
                  "Table 2: weight shapes of DeepSeek-V3 (symbolic), their size, and how they split",
                  ("in", "block", "weight", "shape", "parameters", "DeepSeek-V3", "paper TP convention",
                   "megatron TP convention", "per GPU (paper case)", "ZeRO group"),
                  tuple(rows),
                  ("Per GPU: the paper's case (TP 2, EP 8, ETP 1); a routed-expert row counts the N/EP = 32 local "
                   "experts of one layer.",
                   "ZeRO group: dense shards over DP; router, routed_expert and shared_expert (the paper's 'MoE') "
                   "over EDP."),
                  align="lllllrllrl")]


if __name__ == "__main__":
    main(tables)
