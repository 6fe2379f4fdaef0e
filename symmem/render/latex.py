"""The one LaTeX printer: the symbol table's names, terms ordered and grouped as a person writes them.

`16bsd_hn_h`, `8bs(d_{cq}+d_c)`, `10bn_hs^{2}`: coefficient first, symbols in the paper's order, powers last,
no multiplication signs; terms that differ in one symbol share their common factor.
"""

from __future__ import annotations

from functools import lru_cache

import sympy

from symmem.accounting.evaluate import as_expr, compile_expr, expanded
from symmem.symbols import SYMBOLS, latex_name, latex_names, print_rank


def _key(sym: sympy.Symbol) -> tuple[int, int]:
    # The paper's order inside a monomial (b s h d_{cq} d_c d_h d_{hr} n_h N N_r h_E ...): run sizes, model sizes
    # in the order the blocks declare them, then routing and parallel sizes.
    return print_rank(sym)


def _name(sym: sympy.Symbol) -> str:
    name = latex_name(sym)
    return name if name is not None else sympy.latex(sym)


def _monomial(powers: dict) -> str:
    first = [s for s in sorted(powers, key=_key) if powers[s] == 1]
    higher = [s for s in sorted(powers, key=_key) if powers[s] > 1]
    return "".join(_name(s) for s in first) + "".join(f"{_name(s)}^{{{powers[s]}}}" for s in higher)


def _coeff(c: sympy.Rational, body: str) -> str:
    if c == 1 and body:
        return body
    if c.is_Integer:
        return f"{c}{body}"
    return rf"\frac{{{c.p}}}{{{c.q}}}{body}"


def _term_key(powers: dict):
    return (max(powers.values(), default=0) > 1, sorted(_key(s) for s in powers))


def polynomial_latex(expr: sympy.Expr) -> str:
    expr = as_expr(expr)
    try:
        compiled = compile_expr(expr)  # cached: (coefficient, powers) per term, as the evaluator uses them
    except ValueError as e:  # floor(s/m_C), Min(k_I, s), ...: not a polynomial in the sizes (V3.2, V4)
        raise sympy.PolynomialError(str(e)) from None
    if not compiled:
        return "0"
    if any(e < 0 for _, powers in compiled for _, e in powers):
        raise sympy.PolynomialError("negative powers")
    if all(not powers for _, powers in compiled):
        return sympy.latex(expr)
    terms = [(sympy.Rational(c.numerator, c.denominator), dict(powers)) for c, powers in compiled if c]
    terms.sort(key=lambda t: _term_key(t[1]))
    pieces: list[tuple[sympy.Rational, str]] = []
    used = [False] * len(terms)
    for i, (c, p) in enumerate(terms):
        if used[i]:
            continue
        used[i] = True
        group = [p]
        split = _last_linear(p)
        if split is not None:
            for j in range(i + 1, len(terms)):
                cj, pj = terms[j]
                other = _last_linear(pj)
                if not used[j] and cj == c and other is not None and other[0] == split[0]:
                    group.append(pj)
                    used[j] = True
        if len(group) == 1:
            pieces.append((c, _monomial(p)))
        else:
            common = dict(split[0])
            inner = "+".join(_monomial(_minus(g, common)) for g in group)
            pieces.append((c, f"{_monomial(common)}({inner})"))
    out = ""
    for i, (c, body) in enumerate(pieces):
        if c < 0:
            out += ("-" if i == 0 else " - ") + _coeff(-c, body)
        else:
            out += ("" if i == 0 else " + ") + _coeff(c, body)
    return out


def _minus(powers: dict, common: dict) -> dict:
    return {k: v for k, v in powers.items() if common.get(k) != v}


def _last_linear(powers: dict):
    """(common factor, last first-degree model symbol) of a monomial with at least two symbols."""
    linear = [s for s in sorted(powers, key=_key) if powers[s] == 1 and SYMBOLS[s.name].kind == "model"]
    if not linear or len(powers) < 2:
        return None
    last = linear[-1]
    common = tuple(sorted(((k, v) for k, v in powers.items() if k != last), key=lambda kv: _key(kv[0])))
    return common, last


def latex(expr: sympy.Expr) -> str:
    """Any expression, in the paper's notation where it is a polynomial, else sympy's printer with our names."""
    return _latex(as_expr(expr), len(SYMBOLS))


@lru_cache(maxsize=4096)  # the tables print the same formula twice on average
def _latex(expr: sympy.Expr, _n_symbols: int) -> str:
    # keyed on the symbol table's size too: a symbol declared later must not meet a text printed before it
    try:
        return polynomial_latex(expr)
    except (sympy.PolynomialError, sympy.GeneratorsNeeded, sympy.CoercionFailed):
        return sympy.latex(expr, symbol_names=latex_names())


@lru_cache(maxsize=4096)  # sympy's str printer is slow, and tables print some formulas twice
def plain(expr: sympy.Expr) -> str:
    """A plain-text form (`10*b*s*h + ...`) that `symmem check` parses back."""
    # a sum of monomials is its own expansion: the (slow) expand is skipped
    expr = expanded(expr) if isinstance(expr, sympy.Expr) else sympy.expand(expr)
    return str(expr).replace("**", "^")
