"""How much work a parsed formula is, estimated from its tree before anything is expanded.

`sympy.expand` is unbounded: `(b+s+h+...)^{16}` (62 characters) has 300 million terms, and `(b+s+h)` written
1,400 times (which sympy folds into one power) nearly a million. The estimate here walks the unexpanded tree
and bounds, without building them,

* the terms of the expansion (a sum adds its terms' counts, a product multiplies them, a power of a k-term sum
  to the n has at most C(k+n-1, n) terms; a denominator is expanded too, and counted),
* the degree of a term (a memory formula is a polynomial of low degree in b, s and the model's sizes),
* the digits of a coefficient,

and refuses a formula above any limit with one line. The limits keep `symmem check` within seconds and every
value it prints within a float's range.
"""

from __future__ import annotations

import math

import sympy

from symmem.errors import SymmemError

MAX_TERMS = 2_000  # terms of the expanded formula (or of any expansion on the way): about a second of sympy
MAX_DEGREE = 24  # the degree of one term
MAX_COEFF_DIGITS = 1_000  # digits of one coefficient (numerator and denominator together); str() refuses 4,300


def _power_terms(k: int, n: int) -> int:
    """Terms of (a k-term sum)^n: C(k+n-1, n), capped just above the limit (no huge integer is built)."""
    if k <= 1 or n <= 1:
        return k if n >= 1 else 1
    if n > MAX_TERMS or k > MAX_TERMS:
        return MAX_TERMS + 1
    return min(math.comb(k + n - 1, n), MAX_TERMS + 1)


def _digits(r: sympy.Rational) -> float:
    return math.log10(abs(int(r.p)) + 1) + math.log10(int(r.q) + 1)


class _Estimate:
    def __init__(self) -> None:
        self.work = 0  # the largest expansion met on the way

    def visit(self, e: sympy.Expr) -> tuple[int, int, float]:
        """(terms, degree, coefficient digits) upper bounds of expand(e)."""
        if e.is_Rational:
            return 1, 0, _digits(e)
        if e.is_Symbol:
            return 1, 1, 0.0
        if e.is_Add:
            parts = [self.visit(a) for a in e.args]
            terms = min(sum(p[0] for p in parts), MAX_TERMS + 1)
            out = terms, max(p[1] for p in parts), max(p[2] for p in parts) + math.log10(len(parts))
        elif e.is_Mul:
            terms, degree, digits = 1, 0, 0.0
            for a in e.args:
                t, d, g = self.visit(a)
                terms, degree, digits = min(terms * t, MAX_TERMS + 1), degree + d, digits + g
                # a product of sums is expanded into its terms' products, like terms merged after
            out = terms, degree, digits + math.log10(max(terms, 1))
        elif e.is_Pow and e.exp.is_Integer:
            n = int(e.exp)
            t, d, g = self.visit(e.base)
            expanded = _power_terms(t, abs(n))
            # the multinomial coefficients of a k-term sum to the n are at most k^n
            digits = abs(n) * (g + math.log10(max(t, 1)))
            if n >= 0:
                out = expanded, n * d, digits
            else:  # a denominator: expanded (counted as work), one term outside
                self.work = max(self.work, expanded)
                if abs(n) * d > MAX_DEGREE or digits > MAX_COEFF_DIGITS:
                    raise SymmemError("formula: a denominator expands beyond the limits of the checker "
                                      f"(degree {MAX_DEGREE}, {MAX_COEFF_DIGITS}-digit coefficients)")
                out = 1, 0, digits
        else:
            raise SymmemError(f"formula: {type(e).__name__} is no part of a memory formula")
        self.work = max(self.work, out[0])
        return out


def check_size(expr: sympy.Expr) -> None:
    """Refuse `expr` (unexpanded, as parsed) when its expansion would exceed the checker's limits."""
    est = _Estimate()
    terms, degree, digits = est.visit(expr)
    work = max(terms, est.work)
    if work > MAX_TERMS:
        raise SymmemError(f"formula: expanding it gives more than {MAX_TERMS:,} terms, the limit; "
                          "a memory formula has a few dozen terms (expand it yourself, or check it in parts)")
    if degree > MAX_DEGREE:
        raise SymmemError(f"formula: a term of degree {degree}, above the limit of {MAX_DEGREE} (b·s·h is degree 3)")
    if digits > MAX_COEFF_DIGITS:
        raise SymmemError(f"formula: a coefficient of about {math.ceil(digits)} digits, above the limit of "
                          f"{MAX_COEFF_DIGITS}")
