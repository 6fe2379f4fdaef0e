"""Checking hand-written memory formulas: a safe parser from plain or LaTeX text to sympy.

`parse_formula` never evaluates user text as Python; see `lexer.py` and `parse.py`, and
`docs/formula_syntax.md` for the accepted syntax and limits.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from symmem.check.bound import check_size
from symmem.check.lexer import name_table, tokenize
from symmem.check.parse import Parser
from symmem.errors import SymmemError

__all__ = ["parse_formula"]


def parse_formula(text: str, symbols: Mapping[str, sympy.Symbol] | None = None) -> sympy.Expr:
    """Parse `text` (e.g. `10bsh + 8bs(d_{cq}+d_c)`) into a sympy expression.

    Every symbol of `symmem.symbols.SYMBOLS` is known by its plain name and its LaTeX spelling;
    `symbols` adds (or overrides) names, e.g. `{"E_tok": Symbol("E_tok", positive=True)}`, which is then
    also reachable as `E_{tok}`. Raises `SymmemError` (one line, with column and token) on bad input.
    """
    tokens = tokenize(text, name_table(symbols))
    try:
        expr = Parser(tokens).parse()
        check_size(expr)  # before anyone expands it: the size of the expansion is bounded from the tree
    except RecursionError:  # a safety net only: the lexer's depth limit keeps the parser shallow
        raise SymmemError("formula: nested too deeply for the parser's stack; flatten the brackets") from None
    return expr
