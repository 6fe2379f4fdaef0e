"""Exact, fast evaluation of derived expressions: turned once into a polynomial over symbols and step atoms
(floor, Min, ...) with integer coefficients over one denominator, then evaluated with Python integers and
fractions. Sympy's `subs` is exact but slow; this is exact and about 100 times faster. `compile_expr` gives the
(coefficient, powers) pairs of sympy's own expansion, in its term order, for printers, the checker and the sweep.
"""

from __future__ import annotations

import math
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


Coeff = int | Fraction  # a polynomial's coefficient: an int whenever it is one
Compiled = tuple[tuple[Fraction, tuple[tuple[sympy.Symbol, int], ...]], ...]


def _is_monomial(term: sympy.Expr) -> bool:
    for f in sympy.Mul.make_args(term):
        if not (f.is_Rational or f.is_Symbol or (f.is_Pow and f.base.is_Symbol and f.exp.is_Integer)):
            return False
    return True


def expanded(expr: sympy.Expr) -> sympy.Expr:
    """sympy.expand(expr), skipped when `expr` already is a sum of monomials (which expand returns unchanged):
    the engine's formulas mostly are, and expanding one again walks and rebuilds every term."""
    if all(_is_monomial(t) for t in sympy.Add.make_args(expr)):
        return expr
    return sympy.expand(expr)


@lru_cache(maxsize=8192)
def compile_expr(expr: sympy.Expr) -> Compiled:
    out = []
    for term in sympy.Add.make_args(expanded(expr)):
        coeff, mono = term.as_coeff_Mul()
        if not coeff.is_Rational:
            raise ValueError(f"non-rational coefficient {coeff}")
        powers = []
        for base, exp in mono.as_powers_dict().items():
            if base == 1:
                continue
            if not (base.is_Symbol and exp.is_Integer):
                raise ValueError(f"cannot compile factor {base}**{exp}")
            powers.append((base, int(exp)))
        out.append((Fraction(int(coeff.p), int(coeff.q)), tuple(sorted(powers, key=lambda p: p[0].name))))
    return tuple(out)


@lru_cache(maxsize=8192)
def _with_atoms(expr: sympy.Expr):
    """Sizes that depend on the sequence through `floor` (compressed lengths) or `Min` (a top-k over fewer
    candidates than k) are not polynomials: each such atom becomes a placeholder symbol, the rest is evaluated as
    usual, and the atoms are evaluated exactly, one by one, by substitution."""
    atoms = sorted(expr.atoms(sympy.floor, sympy.ceiling, sympy.Min, sympy.Max), key=sympy.default_sort_key)
    # xreplace works from the top: an atom nested in another is replaced with it, and on its own where it stands
    dummies = {a: sympy.Symbol(f"_atom{i}", positive=True, integer=True) for i, a in enumerate(atoms)}
    replaced = expr.xreplace(dummies)
    if _fast_form(replaced) is None:
        compile_expr(replaced)  # raises ValueError when it is no sum of monomials either
    return replaced, tuple((d, a) for a, d in dummies.items())


def _atom_value(atom: sympy.Expr, values: dict) -> int:
    """floor, ceiling, Min or Max of exactly evaluated arguments (nested atoms included)."""
    args = [evaluate(a, values) for a in atom.args]
    if isinstance(atom, sympy.floor):
        value = Fraction(math.floor(args[0]))
    elif isinstance(atom, sympy.ceiling):
        value = Fraction(math.ceil(args[0]))
    elif isinstance(atom, sympy.Min):
        value = min(args)
    else:
        value = max(args)
    if value.denominator != 1:
        raise ValueError(f"{atom} does not evaluate to an integer")
    return value.numerator


def _evaluate_sympy(expr: sympy.Expr, values: dict) -> Fraction:
    replaced, atoms = _with_atoms(expr)
    vals = dict(values)
    for dummy, atom in atoms:
        vals[dummy] = _atom_value(atom, values)
    return evaluate(replaced, vals)


class _NotPolynomial(Exception):
    pass


_STEPS = (sympy.floor, sympy.ceiling, sympy.Min, sympy.Max)
_FACTOR_KEY: dict = {}  # factor -> its sort key (a symbol's name; a step atom's text), computed once


def _factor_key(pair) -> str:
    x = pair[0]
    key = _FACTOR_KEY.get(x)
    if key is None:
        key = _FACTOR_KEY[x] = x.name if x.is_Symbol else f"~{x}"
    return key


def _rational(p: int, q: int) -> Coeff:
    """A coefficient: a Python int when it is one (int arithmetic is several times faster than Fraction's, and
    most of the engine's coefficients are integers), else an exact Fraction."""
    return p if q == 1 else Fraction(p, q)


def _poly(expr: sympy.Expr, memo: dict) -> dict[tuple, Coeff]:
    """`expr` as {monomial: coefficient}, a monomial a tuple of (factor, exponent) sorted by name, a factor a
    symbol or a step atom (`floor(s/m_C)`, `Min(k_I, s)`: evaluated whole), exponents possibly negative: what
    `sympy.expand` would give, built with dictionaries (several times faster; the engine's sums of tensor sizes
    share most of their subexpressions, memoised in `memo`)."""
    hit = memo.get(expr)
    if hit is not None:
        return hit
    if expr.is_Rational:
        out = {(): _rational(int(expr.p), int(expr.q))} if expr != 0 else {}
    elif expr.is_Symbol or isinstance(expr, _STEPS):
        out = {((expr, 1),): 1}
    elif expr.is_Add:
        out = {}
        for arg in expr.args:
            _accumulate(out, _poly(arg, memo), 1)
    elif expr.is_Mul:
        out = {(): 1}
        for arg in expr.args:
            out = _times(out, _poly(arg, memo))
    elif expr.is_Pow and expr.exp.is_Integer:
        n = int(expr.exp)
        if expr.base.is_Symbol:
            out = {((expr.base, n),): 1} if n else {(): 1}
        elif n >= 0:
            base, out = _poly(expr.base, memo), {(): 1}
            for _ in range(n):
                out = _times(out, base)
        elif expr.base.is_Rational:
            out = {(): _rational(int(expr.base.q), int(expr.base.p)) ** -n}
        else:
            raise _NotPolynomial  # a sum (or a step atom) in a denominator: the general path
    else:
        raise _NotPolynomial
    memo[expr] = out
    return out


def _times(p: dict, q: dict) -> dict:
    out: dict[tuple, Coeff] = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            if not m1:
                mono = m2
            elif not m2:
                mono = m1
            else:
                powers = dict(m1)
                for x, e in m2:
                    powers[x] = powers.get(x, 0) + e
                mono = tuple(sorted(((x, e) for x, e in powers.items() if e), key=_factor_key))
            _add_term(out, mono, c1 * c2)
    return out


def _add_term(acc: dict, mono: tuple, c: Coeff) -> None:
    c += acc.get(mono, 0)
    if c:
        acc[mono] = c
    else:
        acc.pop(mono, None)  # terms that cancel leave no zero coefficient behind


def _accumulate(acc: dict, poly: dict, weight) -> None:
    for mono, c in poly.items():
        _add_term(acc, mono, weight * c)


_POLY_MEMO: dict = {}


def _polynomial(expr: sympy.Expr) -> dict[tuple, Coeff] | None:
    if len(_POLY_MEMO) > 200_000:  # bounded: the memo only speeds up expressions that share subexpressions
        _POLY_MEMO.clear()
    try:
        return _poly(expr, _POLY_MEMO)
    except _NotPolynomial:
        return None


Form = tuple[int, tuple[tuple[int, tuple], ...], tuple[sympy.Expr, ...]]


def _form_of(poly: dict[tuple, Coeff]) -> Form:
    """(denominator, ((integer coefficient, powers), ...), step atoms): integer coefficients over one common
    denominator, so that evaluation multiplies Python integers (a negative power divides, exactly)."""
    den = math.lcm(*(c.denominator for c in poly.values())) if poly else 1
    atoms = tuple(dict.fromkeys(x for mono in poly for x, _ in mono if not x.is_Symbol))
    return den, tuple((int(c * den), mono) for mono, c in poly.items()), atoms


@lru_cache(maxsize=16384)
def _fast_form(expr: sympy.Expr) -> Form | None:
    """The integer form of `expr` (None: a sum or a step atom in a denominator: the general path)."""
    poly = _polynomial(expr)
    return None if poly is None else _form_of(poly)


@lru_cache(maxsize=4096)
def _weighted_poly(weighted: tuple[tuple[int, sympy.Expr], ...]) -> dict[tuple, Coeff] | None:
    """sum(weight · expr) as one dictionary polynomial; None when a term has no such form."""
    acc: dict[tuple, Coeff] = {}
    for w, expr in weighted:
        poly = _polynomial(as_expr(expr))
        if poly is None:
            return None
        _accumulate(acc, poly, w)
    return acc


@lru_cache(maxsize=4096)
def sum_form(weighted: tuple[tuple[int, sympy.Expr], ...]) -> Form | None:
    """The integer form of sum(weight · expr), built without a sympy sum (what the engine adds up per stage);
    `weighted` is a tuple (a cache key: every stage of every scenario variant adds the same sums again)."""
    poly = _weighted_poly(weighted)
    return None if poly is None else _form_of(poly)


@lru_cache(maxsize=4096)
def expanded_sum(weighted: tuple[tuple[int, sympy.Expr], ...]) -> sympy.Expr | None:
    """sympy.expand(sum(weight · expr)), built from the dictionary polynomial (several times faster than sympy's
    expand on a sum of products); None when a term holds a step atom or a sum in a denominator (sympy.expand also
    rewrites inside atoms: the caller expands those)."""
    acc = _weighted_poly(weighted)
    if acc is None or any(not x.is_Symbol for mono in acc for x, _ in mono):
        return None
    return sympy.Add(*[sympy.Mul(sympy.Rational(c.numerator, c.denominator), *[x**e for x, e in mono])
                       for mono, c in acc.items()])


def expand_sum(weighted) -> sympy.Expr:
    """sympy.expand(sum(weight · expr)) for (weight, expr) pairs: `expanded_sum` where it applies."""
    weighted = tuple(weighted)
    fast = expanded_sum(weighted)
    return fast if fast is not None else sympy.expand(sympy.Add(*[w * as_expr(e) for w, e in weighted]))


def evaluate_form(form: Form, values: dict) -> Fraction:
    """The exact value of an integer form with every symbol given in `values`."""
    den, terms, atoms = form
    if atoms:
        values = dict(values)
        for atom in atoms:
            values[atom] = _atom_value(atom, values)
    total = 0
    try:
        for c, powers in terms:
            for x, e in powers:
                c = c * values[x] ** e if e > 0 else c / Fraction(values[x]) ** -e
            total += c
    except KeyError as e:
        raise ValueError(f"no value for symbol {e.args[0]}") from None
    return Fraction(total, den)


def evaluate(expr: sympy.Expr, values: dict) -> Fraction:
    """The exact value of `expr` with every symbol given in `values`."""
    expr = as_expr(expr)
    form = _fast_form(expr)
    if form is not None:
        return evaluate_form(form, values)
    return _evaluate_sympy(expr, values)


def ceil_int(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)
