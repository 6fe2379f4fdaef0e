"""How the `megatron` TP convention differs from the paper's, per weight and per GPU of stages 1-14."""

from __future__ import annotations

from symmem.accounting.analysis import stage_params
from symmem.accounting.evaluate import evaluate
from symmem.graph import local_size
from symmem.model import layer_flow
from symmem.render.latex import latex
from symmem.render.tables import Math, Table

from ._common import main, scenario


def tables() -> list[Table]:
    paper = scenario("paper")
    meg = paper.replace(convention="megatron")
    axes = paper.parallel.axis_sizes()
    axes_sym = paper.parallel.axis_sizes(symbolic=True)
    subs = paper.model.substitutions()
    st = paper.stages[1]
    layers = sum(paper.model.layer_kinds()[i] == "moe" for i in st.layers)
    wp = {w.name: w for _, w in layer_flow(paper.model, "moe", "paper").weights()}
    wm = {w.name: w for _, w in layer_flow(paper.model, "moe", "megatron").weights()}
    rows = []
    for name in wp:
        a, b = local_size(wp[name].dims, axes), local_size(wm[name].dims, axes)
        if a != b:
            na, nb = int(evaluate(a, subs)), int(evaluate(b, subs))
            rows.append((name, Math(latex(local_size(wp[name].dims, axes_sym)), ""),
                         Math(latex(local_size(wm[name].dims, axes_sym)), ""), na, nb, na - nb, layers,
                         layers * (na - nb)))
    sp, sm = stage_params(paper, st), stage_params(meg, st)
    # a per-GPU total: its difference goes in the per-GPU column only (it is no per-layer figure)
    rows.append(("total per GPU, stages 1-14", "", "", sp.total, sm.total, "", "", sp.total - sm.total))
    return [Table("convention_difference",
                  "TP conventions: the paper's (W_QR replicated) against Megatron-Core's (W_QR split with W_UQ)",
                  ("weight", "per GPU, paper", "per GPU, megatron", "paper (t = 2)", "megatron (t = 2)",
                   "difference per layer", "layers", "difference per GPU"), tuple(rows),
                  ("Megatron-Core's linear_q_up_proj produces n_h(d_h + d_hr) per token and splits it over TP, so "
                   "the query's rope part W_QR is split with W_UQ; the paper keeps W_QR replicated, and only that "
                   "reproduces its 107,429,888 non-MoE parameters per layer.",),
                  align="lllrrrrr")]


if __name__ == "__main__":
    main(tables)
