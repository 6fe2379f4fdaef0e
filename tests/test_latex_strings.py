"""Every LaTeX string symmem exports is well formed: no `**`, no stray caret, balanced braces.

The strings come from the one LaTeX printer (symmem.render.latex.latex): drawn by hypothesis from the engine's own
quantities (the paper scenario's derived formulas, the derivations' formula cells) and from random expressions over
the registered symbols; the committed paper_tables/*.tex are scanned as they are.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symmem.render.latex import latex
from symmem.symbols import SYMBOLS, sym

GOLDEN = Path(__file__).resolve().parent.parent / "paper_tables"

# a caret must raise one character (a letter, a digit) or a command (\prime) or a {...} group
_STRAY_CARET = re.compile(r"(?<!\\)\^(?![A-Za-z0-9{\\])")


def latex_problems(tex: str) -> list[str]:
    """What is wrong with a LaTeX string (math or a whole file without its % comments); [] if nothing."""
    problems = []
    if "**" in tex:
        problems.append("'**' (Python power)")
    for m in _STRAY_CARET.finditer(tex):
        problems.append(f"stray caret at {m.start()}: {tex[max(0, m.start() - 10):m.start() + 10]!r}")
    depth, i = 0, 0
    while i < len(tex):
        ch = tex[i]
        if ch == "\\":  # \{ \} \\ and any command: the next character is not a group delimiter
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                problems.append(f"unmatched '}}' at {i}")
                depth = 0
        i += 1
    if depth:
        problems.append(f"{depth} unclosed '{{'")
    return problems


def _without_comments(tex: str) -> str:
    return "\n".join(re.sub(r"(?<!\\)%.*$", "", line) for line in tex.splitlines())


# ---- the checker itself catches the breakage it is meant for
@pytest.mark.parametrize("bad", ["10b**2s", "bs^", "n_h^}", "b^ s", "s^{2", "d_{c}}", "2^^3", "h^+1"])
def test_checker_rejects_broken_strings(bad):
    assert latex_problems(bad)


@pytest.mark.parametrize("good", [r"10bn_hs^{2}", r"8bs(d_{cq}+d_c)", r"\frac{1}{2}bsh", r"s^2", r"x^\prime",
                                  r"\{a\}", r"\textasciicircum{}", r"\left\lfloor \frac{s}{m_{C}} \right\rfloor"])
def test_checker_accepts_wellformed_strings(good):
    assert latex_problems(good) == []


# ---- the engine's own formulas
@lru_cache(maxsize=1)
def _scenario_formulas() -> tuple[tuple[str, sympy.Expr], ...]:
    from symmem.render.report import scenario_formulas
    from symmem.scenario import load_scenario

    return tuple((f.label, f.expr) for _, items in scenario_formulas(load_scenario("paper")) for f in items)


@lru_cache(maxsize=1)
def _table_formula_cells() -> tuple[tuple[str, str], ...]:
    from symmem.render.paper import collect
    from symmem.render.tables import Math

    return tuple((t.id, v.latex) for t in collect() for r in t.rows for v in r if isinstance(v, Math))


_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.data())
def test_scenario_formulas_print_wellformed(data):
    label, expr = data.draw(st.sampled_from(_scenario_formulas()))
    tex = latex(expr)
    assert latex_problems(tex) == [], (label, tex)
    # a multiple, a sum and a power of a derived formula print well formed too
    k = data.draw(st.integers(-5, 7).filter(bool))
    for e in (k * expr, expr + expr.subs({}), sympy.expand(expr * sym("b"))):
        assert latex_problems(latex(e)) == [], (label, latex(e))


def test_table_formula_cells_are_wellformed():
    cells = _table_formula_cells()
    assert len(cells) > 20
    for tid, tex in cells:
        assert latex_problems(tex) == [], (tid, tex)


_NAMES = sorted(SYMBOLS)


@st.composite
def _polynomials(draw):
    """A random polynomial over the registered symbols: rational coefficients, powers up to 4."""
    terms = []
    for _ in range(draw(st.integers(1, 6))):
        coeff = sympy.Rational(draw(st.integers(-64, 64).filter(bool)), draw(st.sampled_from((1, 1, 1, 2, 3, 8))))
        mono = sympy.Integer(1)
        for name in draw(st.lists(st.sampled_from(_NAMES), min_size=0, max_size=4)):
            mono *= sym(name) ** draw(st.integers(1, 4))
        terms.append(coeff * mono)
    return sympy.Add(*terms)


@st.composite
def _expressions(draw):
    """A polynomial, or one with the non-polynomial pieces the dataflows use (floor, Min, Max, a quotient)."""
    p = draw(_polynomials())
    a, b = (sym(draw(st.sampled_from(_NAMES))) for _ in range(2))
    wrap = draw(st.sampled_from(("none", "floor", "min", "max", "quotient", "power")))
    if wrap == "floor":
        return p + sympy.floor(a / b)
    if wrap == "min":
        return p * sympy.Min(a, b)
    if wrap == "max":
        return sympy.Max(p, a)
    if wrap == "quotient":
        return p / (a + 1)
    if wrap == "power":
        return p ** draw(st.integers(2, 3))
    return p


@_SETTINGS
@given(_expressions())
def test_random_expressions_over_registered_symbols_print_wellformed(expr):
    tex = latex(expr)
    assert latex_problems(tex) == [], (expr, tex)


# ---- the committed files
@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.tex")), ids=lambda p: p.name)
def test_committed_tex_is_wellformed(path):
    tex = _without_comments(path.read_text())
    assert latex_problems(tex) == [], path.name
    # every math span $...$ of a table is well formed on its own
    for span in re.findall(r"(?<!\\)\$(.+?)(?<!\\)\$", tex):
        assert latex_problems(span) == [], (path.name, span)
