"""Section 5: the per-stage activation formulas, derived from the dataflow and checked against the paper's."""

from __future__ import annotations

from symmem.accounting.analysis import stage_activation_expr, stage_terms, values
from symmem.check import parse_formula
from symmem.check.compare import compare, term_sources
from symmem.render.latex import latex, plain
from symmem.render.tables import Math, Table

from . import _paper
from ._common import main, scenario


def comparisons():
    """(label, derived, paper, comparison) for MLA, MoE and full recomputation, stage 1 of the paper's case."""
    scn = scenario("paper")
    full = scn.replace(recompute_name="full")
    st = scn.stages[1]
    out = []
    for label, s, block, key in (("MLA, no recomputation", scn, "mla", "mla"),
                                 ("MoE, no recomputation", scn, "moe", "moe"),
                                 ("whole stage, full recomputation", full, None, "full")):
        derived = stage_activation_expr(s, st, block)
        terms = [t for t in stage_terms(s, st) if block is None or t.block == block]
        paper = parse_formula(_paper.SECTION5[key])
        out.append((label, derived, paper, compare(derived, paper, values(s), term_sources(terms))))
    return out


def tables() -> list[Table]:
    rows = []
    for label, derived, paper, cmp in comparisons():
        cond = ", ".join(f"{k} = {v}" for k, v in cmp.condition) or "-"
        rows.append((label, Math(latex(derived), plain(derived)), Math(latex(paper), plain(paper)), cmp.verdict,
                     cond, cmp.worth))
    return [Table("section5_formulas",
                  "Section 5: activation bytes of one four-layer stage (stages 1-14), one micro-batch",
                  ("quantity", "derived from the dataflow", "the paper", "verdict", "equal when", "difference at "
                   "b=1, s=4096 (bytes)"), tuple(rows),
                  ("Derived under the paper scenario and rule set, parallel sizes substituted (t = 2, EP = 8), "
                   "model sizes symbolic. The paper's MoE term hard-codes N/EP = 32 local experts (96 = 3 x 32, "
                   "256 = 8 x 32) and one shared expert, so it equals the derived term only at N = 256, N_s = 1.",
                   "d_h stands for both qk_nope_head_dim and v_head_dim, equal (128) in DeepSeek-V3."),
                  align="llllll")]


if __name__ == "__main__":
    main(tables)
