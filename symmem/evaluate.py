"""Exact, fast evaluation of derived expressions: compiled once to (coefficient, powers) pairs, then evaluated
with Python integers and fractions. Sympy's `subs` is exact but slow; this is exact and about 100 times faster.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import sympy


def as_expr(x) -> sympy.Expr:
    """Engine values to sympy without `sympify` (which would also evaluate strings: never used on user text)."""
    if isinstance(x, sympy.Basic):
        return x
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, Fraction):
        return sympy.Rational(x.numerator, x.denominator)
    raise TypeError(f"not an engine expression: {type(x).__name__}")


Compiled = tuple[tuple[Fraction, tuple[tuple[sympy.Symbol, int], ...]], ...]


@lru_cache(maxsize=8192)
def compile_expr(expr: sympy.Expr) -> Compiled:
    out = []
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, mono = term.as_coeff_Mul()
        if not coeff.is_Rational:
            raise ValueError(f"non-rational coefficient {coeff} in {expr}")
        powers = []
        for base, exp in mono.as_powers_dict().items():
            if base == 1:
                continue
            if not (base.is_Symbol and exp.is_Integer):
                raise ValueError(f"cannot compile factor {base}**{exp} of {expr}")
            powers.append((base, int(exp)))
        out.append((Fraction(int(coeff.p), int(coeff.q)), tuple(sorted(powers, key=lambda p: p[0].name))))
    return tuple(out)


def evaluate(expr: sympy.Expr, values: dict) -> Fraction:
    """The exact value of `expr` with every symbol given in `values`."""
    total = Fraction(0)
    for coeff, powers in compile_expr(as_expr(expr)):
        term = coeff
        for sym, e in powers:
            try:
                v = values[sym]
            except KeyError:
                raise ValueError(f"no value for symbol {sym}") from None
            term *= Fraction(v) ** e
        total += term
    return total


def ceil_int(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)
