"""The paper's rule set and the torch-eager rule set side by side at DeepSeek-V3's size: one GPU of stages 1-14 of
the paper scenario (four MoE layers, TP 2 with sequence parallelism, EP 8), one micro-batch, BF16.

Four columns separate what changes: the rule set alone (torch-eager on the paper's dataflow), then Hugging
Face's dataflow with its attention and experts implementations (sdpa takes its math backend: d_qk = 192 is not
d_v = 128). Only torch-eager on the hf dataflow is measured (exact on tiny configs, tests/validate).
"""

from __future__ import annotations

from symmem.accounting.analysis import stage_activation_bytes, stage_activation_expr
from symmem.render.latex import latex, plain
from symmem.render.tables import Math, Table
from symmem.units import fmt_gib

from ._common import main, scenario

BLOCKS = (("mla", "MLA (attention block)"), ("moe", "MoE block"), ("rope", "rotary tables (once per stage)"))


def columns(b: int = 1):
    """(label, scenario) of each column: the paper, then torch-eager on the paper's and on HF's dataflows."""
    base = scenario("paper").replace(b=b)
    te = base.replace(rules_name="torch-eager")
    return (("paper rules", base),
            ("torch-eager, paper dataflow", te.replace(dataflow="paper")),
            ("torch-eager, HF eager attention + eager experts", te),
            ("torch-eager, HF sdpa (math) + grouped_mm experts", te.replace(attn_impl="sdpa",
                                                                           experts_impl="grouped_mm")))


def side_by_side(b: int = 1) -> list[tuple[str, list[int]]]:
    """Bytes per block and in total, one value per column."""
    cols = columns(b)
    rows = []
    for block, label in BLOCKS:
        rows.append((label, [stage_activation_bytes(scn, scn.stages[1], block) for _, scn in cols]))
    rows.append(("total", [sum(r[1][i] for r in rows) for i in range(len(cols))]))
    return rows


def tables() -> list[Table]:
    cols = columns()
    header = ["block"]
    for label, _ in cols:
        header += [f"{label} (bytes)", "GiB"]
    body = []
    for label, vals in side_by_side():
        row: list = [label]
        for v in vals:
            row += [v, fmt_gib(v)]
        body.append(tuple(row))
    formulas = []
    for block, label in BLOCKS[:2]:
        row = [label]
        for _, scn in cols:
            e = stage_activation_expr(scn, scn.stages[1], block)
            row.append(Math(latex(e), plain(e)))
        formulas.append(tuple(row))
    total_b2 = side_by_side(2)[-1][1]
    row = ["total at b = 2 (the value's reshape is a copy)"]
    for v in total_b2:
        row += [v, fmt_gib(v)]
    body.append(tuple(row))
    return [
        Table("rules_comparison",
              "Activations of one GPU of stages 1-14 under the paper's and the torch-eager rule sets "
              "(DeepSeek-V3, b = 1, s = 4096, BF16, one micro-batch)",
              tuple(header), tuple(body),
              ("Paper scenario: DP 32, TP 2 (sequence parallel), PP 16, EP 8, the MoE block not sequence-sharded, "
               "E_tok = b s N_r / N. torch-eager columns: what PyTorch eager autograd keeps (see "
               "docs/rule_sets.md); the last two follow Hugging Face's DeepSeek-V3 code, measured exact on tiny "
               "configs. The rotary tables are one tensor for every layer of the stage.",
               "At b = 1 the attention value's reshape (b, n_h, s, d_v) -> (b n_h, s, d_v) is a view that keeps "
               "all of kv_b_proj's output alive (HF eager attention; sdpa's math backend copies v to FP32 in "
               "BF16 anyway); at b = 2 it is a copy of the d_v columns."),
              align="l" + "rr" * len(cols)),
        Table("rules_comparison_formulas",
              "The same stage as formulas (bytes per micro-batch; parallel sizes substituted: t = 2, EP = 8)",
              ("block",) + tuple(label for label, _ in cols), tuple(formulas),
              ("b = 1 regime for the HF columns (see the note of rules_comparison).",),
              align="l" + "l" * len(cols)),
    ]


if __name__ == "__main__":
    main(tables)
