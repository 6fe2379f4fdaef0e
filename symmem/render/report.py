"""LaTeX export: every derived formula in the paper's notation, and a standalone report that compiles."""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from symmem.render.latex import latex
from symmem.render.tables import _env, tex_escape

POLICIES = ("none", "selective", "deepseek", "full")


@dataclass(frozen=True)
class Formula:
    """A derived expression with its name; shows as LaTeX in Jupyter."""

    label: str
    expr: sympy.Expr
    unit: str = "bytes"

    @property
    def latex(self) -> str:
        return latex(self.expr)

    def _repr_latex_(self) -> str:
        return f"${self.latex}$"


def scenario_formulas(scn) -> list[tuple[str, list[Formula]]]:
    """Sections of formulas for one scenario: activations per block and policy, parameters and states per GPU."""
    from symmem.accounting.analysis import stage_activation_expr, stage_terms
    from symmem.check.quantities import derive
    from symmem.model import stage_parts

    distinct = []
    seen = set()
    for st in scn.stages:
        key = stage_parts(scn.model, st, scn.convention)
        if key not in seen:
            seen.add(key)
            distinct.append(st)
    sections = []
    for st in distinct:
        items = []
        blocks = sorted({t.block for t in stage_terms(scn, st)})
        for policy in POLICIES:
            s2 = scn.replace(recompute_name=policy)
            for blk in blocks:
                items.append(Formula(f"activations, {blk}, recompute {policy}", stage_activation_expr(s2, st, blk)))
            items.append(Formula(f"activations, whole stage, recompute {policy}", stage_activation_expr(s2, st)))
        for q in ("gpu.params.dense", "gpu.params.moe", "gpu.states"):
            items.append(Formula(q, derive(q, scn, st.index)[0], "bytes" if q == "gpu.states" else "parameters"))
        same = [s.index for s in scn.stages if stage_parts(scn.model, s, scn.convention) ==
                stage_parts(scn.model, st, scn.convention)]
        label = f"stage {st.index}" if len(same) == 1 else f"stages {same[0]}-{same[-1]}"
        sections.append((label, items))
    return sections


def split_terms(tex: str, per_line: int = 4) -> list[str]:
    """Break a long sum at its top-level ` + ` / ` - ` into lines of `per_line` terms."""
    pieces, depth, cur, i = [], 0, "", 0
    while i < len(tex):
        ch = tex[i]
        depth += ch in "({" and 1 or 0
        depth -= ch in ")}" and 1 or 0
        if depth == 0 and tex.startswith((" + ", " - "), i):
            pieces.append(cur)
            cur = tex[i + 1:i + 3]
            i += 3
            continue
        cur += ch
        i += 1
    pieces.append(cur)
    return [" ".join(pieces[k:k + per_line]) for k in range(0, len(pieces), per_line)]


def formulas_tex(sections: list[tuple[str, list[Formula]]], scenario_line: str) -> str:
    return _env(tex=True).get_template("formulas.tex.j2").render(
        sections=[(tex_escape(name), [(tex_escape(f.label), f.unit, split_terms(f.latex)) for f in items])
                  for name, items in sections],
        scenario=tex_escape(scenario_line))


def report_tex(title: str, intro: str, tables: list[str], figures: list[tuple[str, str]], formulas: str | None,
               sources: dict[str, str] | None = None, bibliography: str | None = None) -> str:
    """A standalone document: \\input of each table file, the formulas, the figures (PDF files).

    `sources`: per figure path, LaTeX its caption adds (profile, assumptions, \\cite); `bibliography`: a
    thebibliography environment those citations (and the tables') resolve to."""
    sources = sources or {}
    return _env(tex=True).get_template("report.tex.j2").render(
        title=tex_escape(title), intro=tex_escape(intro), tables=tables,
        figures=[(path, tex_escape(caption) + (f". {sources[path]}" if sources.get(path) else ""))
                 for path, caption in figures], formulas=formulas, bibliography=bibliography)
