"""Compare a hand derivation with a derived quantity, monomial by monomial, with provenance.

Equality is decided symbolically (model dimensions kept as symbols). Where the two agree only once some model
constants take the scenario's values (the paper's MoE formula hard-codes N/EP = 32), the verdict is
"equal at this scenario" and names the smallest set of such constants.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import sympy

from symmem.accounting.evaluate import as_expr, ceil_int, compile_expr, evaluate, expanded
from symmem.errors import SymmemError
from symmem.symbols import b as B_SYM
from symmem.symbols import s as S_SYM

EQUAL = "EQUAL"
EQUAL_AT_SCENARIO = "EQUAL AT THIS SCENARIO, NOT IN GENERAL"
DIFFERENT = "DIFFERENT"


def monomials(expr: sympy.Expr) -> dict[sympy.Expr, sympy.Expr]:
    """expr = Σ coefficient · monomial, the monomials free of numbers (1/N allowed)."""
    out: dict[sympy.Expr, sympy.Expr] = {}
    for term in sympy.Add.make_args(expanded(expr)):
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
        if self.derived.is_Rational and self.claimed.is_Rational:  # the usual case: no expansion needed
            return self.derived != self.claimed
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


def check_denominators(expr: sympy.Expr, constants: dict, where: str = "the scenario's values") -> None:
    """Refuse a formula with a denominator that is 0 at the scenario's constants (`1/(s - 4096)` at s = 4096):
    its value, and so the comparison's worth, is undefined."""
    for p in sympy.preorder_traversal(expr):
        if p.is_Pow and p.exp.is_negative and p.base.free_symbols and p.base.xreplace(constants) == 0:
            at = ", ".join(f"{x} = {constants[x]}" for x in sorted(p.base.free_symbols, key=str) if x in constants)
            raise SymmemError(f"formula: the denominator {str(p.base)[:80]} is 0 at {where} ({at}); a formula "
                              "may not divide by zero there")


def _value(expr: sympy.Expr, constants: dict) -> int:
    """The value of `expr` at the scenario's constants, rounded up; 0 when a symbol has no value."""
    expr = as_expr(expr)
    try:
        compile_expr(expr)
    except ValueError:  # not a sum of monomials (a sum in a denominator): sympy's own substitution
        v = expr.subs(constants)
        if v.is_number and not v.is_finite:  # a denominator that vanishes only once the terms are combined
            raise SymmemError("formula: undefined at the scenario's values (a division by zero)") from None
        return int(sympy.ceiling(v)) if v.is_number else 0
    if not expr.free_symbols <= set(constants):
        return 0
    return ceil_int(evaluate(expr, constants))


def _row_value(coeff: sympy.Expr, mono: sympy.Expr, constants: dict) -> int:
    """coeff · mono at the scenario's constants, without expanding anything (a row of the comparison)."""
    if coeff == 0:
        return 0
    value = Fraction(int(coeff.p), int(coeff.q)) if coeff.is_Rational else None
    if value is None:
        return _value(coeff * mono, constants)
    for base, e in mono.as_powers_dict().items():
        if base == 1:
            continue
        if not (base.is_Symbol and e.is_Integer):
            return _value(coeff * mono, constants)
        if base not in constants:
            return 0
        value *= Fraction(constants[base]) ** int(e)
    return ceil_int(value)


def compare(derived: sympy.Expr, claimed: sympy.Expr, constants: dict,
            sources: dict[sympy.Expr, list[str]] | None = None) -> Comparison:
    """`constants` hold every symbol's scenario value (model sizes, b, s)."""
    check_denominators(claimed, constants)
    diff = sympy.expand(derived - claimed)
    md, mc = monomials(derived), monomials(claimed)
    rows = []
    for mono in sorted(set(md) | set(mc), key=sympy.default_sort_key):
        d, c = md.get(mono, sympy.Integer(0)), mc.get(mono, sympy.Integer(0))
        rows.append(Row(mono, d, c, tuple((sources or {}).get(mono, ())), _row_value(d - c, mono, constants)))
    if diff == 0:
        return Comparison(EQUAL, (), tuple(rows), diff, 0)
    worth = _value(diff, constants)
    condition = _condition(diff, constants)
    verdict = EQUAL_AT_SCENARIO if condition is not None else DIFFERENT
    return Comparison(verdict, condition or (), tuple(rows), diff, worth)


# How many term evaluations the search for a condition may spend (about a second): the subsets of the free
# constants are 2^k, so the search is cut off rather than left exponential; past it the verdict is DIFFERENT.
CONDITION_BUDGET = 400_000


def _condition(diff: sympy.Expr, constants: dict) -> tuple[tuple[str, int], ...] | None:
    """The smallest set of model constants (b and s stay free) whose scenario values make `diff` vanish.

    Each candidate set is first tried numerically, exactly: its constants at the scenario's values and every
    other symbol at a distinct large prime; a nonzero value rules it out. Only a zero is confirmed symbolically.
    """
    free = sorted((x for x in diff.free_symbols if x not in (B_SYM, S_SYM) and x in constants), key=str)
    try:
        compiled = compile_expr(diff)
    except ValueError:
        compiled = None
    symbols = diff.free_symbols
    probe = dict(zip(sorted(symbols, key=str), _PRIMES, strict=False))
    probing = len(probe) == len(symbols)
    budget = CONDITION_BUDGET
    for k in range(1, len(free) + 1):
        for subset in combinations(free, k):
            budget -= len(compiled) if compiled is not None else 1000
            if budget < 0:
                return None
            fixed = {x: constants[x] for x in subset}
            if probing and _probe(diff, compiled, {**probe, **fixed}) != 0:
                continue
            if sympy.cancel(diff.subs(fixed)) == 0:
                return tuple((str(x), int(constants[x])) for x in subset)
    return None


def _probe(diff: sympy.Expr, compiled, values: dict):
    """`diff` at these integer values, exactly: by the compiled evaluator, else by replacing the symbols."""
    if compiled is not None:
        return evaluate(diff, values)
    return diff.xreplace({k: sympy.Integer(v) for k, v in values.items()})


_PRIMES = (1_000_003, 1_000_033, 1_000_037, 1_000_039, 1_000_081, 1_000_099, 1_000_117, 1_000_121, 1_000_133,
           1_000_151, 1_000_159, 1_000_171, 1_000_183, 1_000_187, 1_000_193, 1_000_199, 1_000_211, 1_000_213,
           1_000_231, 1_000_249, 1_000_253, 1_000_273, 1_000_289, 1_000_291, 1_000_303, 1_000_313, 1_000_333,
           1_000_357, 1_000_367, 1_000_381)


def term_sources(terms: Iterable) -> dict[sympy.Expr, list[str]]:
    """monomial -> the kept tensors (with their op and block) that contribute to it."""
    out: dict[sympy.Expr, list[str]] = {}
    for t in terms:
        for mono in monomials(t.total):
            out.setdefault(mono, []).append(f"{t.part}/{t.block}: {t.op} keeps {t.tensor} ({t.dtype})")
    return out
