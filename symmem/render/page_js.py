"""A printer from the sweep's compiled polynomials (`symmem.sweep.compile.Poly`) to JavaScript and to plain term data.

`Poly.integer_form` writes a polynomial with rational coefficients and negative powers of the parallel sizes as
sum(n · prod v^e) / (d · prod v^shift) with integers only; the printer emits that as a JavaScript arrow function
over BigInt values, `v => [numerator, denominator]`, so the page evaluates the exact rational value and rounds it
up as the engine does (`analysis.to_int`: a fractional byte or parameter rounds up). sympy's own JavaScript printer
(`sympy.printing.jscode`) writes floating-point `Math.pow` expressions, which lose bytes past 2^53; BigInt keeps
every integer exact.

`terms` is the same polynomial as data (numerator, denominator and powers of each term) from which the page
writes the formula a reader sees, in LaTeX and in MathML.
"""

from __future__ import annotations

import re

from symmem.sweep.compile import Poly

JS_NAME = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


def _factor(name: str, e: int) -> str:
    if not JS_NAME.match(name):  # names come from the engine's VARIABLES, never from a user
        raise ValueError(f"not a variable name: {name!r}")
    return f"v.{name}" if e == 1 else f"v.{name}**{e}n"


def js_function(poly: Poly) -> str:
    """JavaScript source of `v => [numerator, denominator]`, BigInt, the denominator positive."""
    terms, shifts, d = poly.integer_form()
    parts = []
    for n, powers in terms:
        factors = [_factor(name, e) for name, e in powers]
        coeff = f"{n}n" if n >= 0 else f"(-{-n}n)"
        if n == 1 and factors:
            parts.append("*".join(factors))
        else:
            parts.append("*".join([coeff, *factors]))
    num = "+".join(parts) if parts else "0n"
    den = "*".join([f"{d}n", *(_factor(name, sh) for name, sh in sorted(shifts.items()) if sh)])
    return f"v=>[{num},{den}]"


def terms(poly: Poly) -> list:
    """[[numerator, denominator, [[variable, exponent], ...]], ...] with the integers as decimal strings (JSON
    numbers lose digits past 2^53)."""
    return [[str(c.numerator), str(c.denominator), [[name, e] for name, e in powers]] for c, powers in poly.terms]
