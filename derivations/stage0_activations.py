"""What the paper misses (2): stage 0 (embedding, three dense FFN layers, one MoE layer), block by block."""

from __future__ import annotations

import sympy

from symmem.accounting.analysis import stage_terms, to_int, values
from symmem.render.latex import latex, plain
from symmem.render.tables import Math, Table
from symmem.units import fmt_gib

from ._common import main, scenario


def tables() -> list[Table]:
    base = scenario("paper")
    rows = []
    for stage_index in (0, 1):
        st = base.stages[stage_index]
        terms = stage_terms(base, st)
        groups: dict[tuple[str, str], sympy.Expr] = {}
        for t in terms:
            groups[(t.part, t.block)] = groups.get((t.part, t.block), 0) + t.total
        for (part, block), expr in groups.items():
            expr = sympy.expand(expr)
            n = to_int(expr, values(base))
            rows.append((stage_index, part, block, Math(latex(expr), plain(expr)), n, fmt_gib(n)))
        total = sum(to_int(e, values(base)) for e in groups.values())
        rows.append((stage_index, "total", "", "", total, fmt_gib(total)))
    return [Table("stage0_activations",
                  "Stage 0 against stage 1: activations per micro-batch by part and block (no recomputation)",
                  ("stage", "part", "block", "bytes (symbolic, one stage)", "bytes at b=1, s=4096", "GiB"),
                  tuple(rows),
                  ("The dense SwiGLU FFN keeps 8bsh_F/t of intermediates per layer (split over TP 2), plus its "
                   "norm input and output and dropout mask; stage 0 is never analysed in the paper.",
                   "The embedding keeps the int64 token ids its lookup needs in backward (8bs) and the 1-byte "
                   "mask of its dropout on the sequence-sharded output (bsh/t), as Megatron-Core's "
                   "LanguageModelEmbedding does.",),
                  align="rlllrr")]


if __name__ == "__main__":
    main(tables)
