"""Compare a hand derivation with a derived quantity, monomial by monomial, with provenance.

Equality is decided symbolically (model dimensions kept as symbols). Where the two agree only once some model
constants take the scenario's values (the paper's MoE formula hard-codes N/EP = 32), the verdict is
"equal at this scenario" and names the smallest set of such constants.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

import sympy

from symmem.accounting.evaluate import as_expr
from symmem.symbols import b as B_SYM
from symmem.symbols import s as S_SYM

EQUAL = "EQUAL"
EQUAL_AT_SCENARIO = "EQUAL AT THIS SCENARIO, NOT IN GENERAL"
DIFFERENT = "DIFFERENT"


def monomials(expr: sympy.Expr) -> dict[sympy.Expr, sympy.Expr]:
    """expr = Σ coefficient · monomial, the monomials free of numbers (1/N allowed)."""
    out: dict[sympy.Expr, sympy.Expr] = {}
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, mono = term.as_coeff_Mul()
        out[mono] = out.get(mono, sympy.Integer(0)) + coeff
    return {m: c for m, c in out.items() if c != 0}


@dataclass(frozen=True)
class Row:
    monomial: sympy.Expr
    derived: sympy.Expr  # coefficient in the derived quantity
    claimed: sympy.Expr  # coefficient in the hand derivation
    sources: tuple[str, ...]  # which op kept which tensor, for the derived side
    worth: int  # bytes (or parameters) of the difference at the scenario's constants

    @property
    def differs(self) -> bool:
        return sympy.expand(self.derived - self.claimed) != 0


@dataclass(frozen=True)
class Comparison:
    verdict: str
    condition: tuple[tuple[str, int], ...]  # constants that must take these values for equality
    rows: tuple[Row, ...]  # every monomial of either side
    difference: sympy.Expr  # derived - claimed
    worth: int  # the whole difference at the scenario's constants

    @property
    def differing(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.differs)

    def _repr_latex_(self) -> str:
        from symmem.render.latex import latex

        if self.verdict == EQUAL:
            return r"$\text{EQUAL}$"
        cond = ", ".join(f"{k} = {v}" for k, v in self.condition)
        head = r"\text{equal only when } " + cond if self.condition else r"\text{DIFFERENT}"
        return rf"${head}:\ \text{{derived}} - \text{{yours}} = {latex(self.difference)}$"


def _value(expr: sympy.Expr, constants: dict) -> int:
    v = as_expr(expr).subs(constants)
    return int(sympy.ceiling(v)) if v.is_number else 0


def compare(derived: sympy.Expr, claimed: sympy.Expr, constants: dict,
            sources: dict[sympy.Expr, list[str]] | None = None) -> Comparison:
    """`constants` hold every symbol's scenario value (model sizes, b, s)."""
    diff = sympy.expand(derived - claimed)
    md, mc = monomials(derived), monomials(claimed)
    rows = []
    for mono in sorted(set(md) | set(mc), key=sympy.default_sort_key):
        d, c = md.get(mono, sympy.Integer(0)), mc.get(mono, sympy.Integer(0))
        rows.append(Row(mono, d, c, tuple((sources or {}).get(mono, ())), _value((d - c) * mono, constants)))
    if diff == 0:
        return Comparison(EQUAL, (), tuple(rows), diff, 0)
    worth = _value(diff, constants)
    condition = _condition(diff, constants)
    verdict = EQUAL_AT_SCENARIO if condition is not None else DIFFERENT
    return Comparison(verdict, condition or (), tuple(rows), diff, worth)


def _condition(diff: sympy.Expr, constants: dict) -> tuple[tuple[str, int], ...] | None:
    """The smallest set of model constants (b and s stay free) whose scenario values make `diff` vanish."""
    free = sorted((x for x in diff.free_symbols if x not in (B_SYM, S_SYM) and x in constants), key=str)
    for k in range(1, len(free) + 1):
        for subset in combinations(free, k):
            if sympy.cancel(diff.subs({x: constants[x] for x in subset})) == 0:
                return tuple((str(x), int(constants[x])) for x in subset)
    return None


def term_sources(terms: Iterable) -> dict[sympy.Expr, list[str]]:
    """monomial -> the kept tensors (with their op and block) that contribute to it."""
    out: dict[sympy.Expr, list[str]] = {}
    for t in terms:
        for mono in monomials(t.total):
            out.setdefault(mono, []).append(f"{t.part}/{t.block}: {t.op} keeps {t.tensor} ({t.dtype})")
    return out
