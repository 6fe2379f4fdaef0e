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

__all__ = ["check_formula", "parse_formula", "scenario_formula"]


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


def scenario_formula(text: str, scn) -> sympy.Expr:
    """Parse `text` and give it the scenario's parallel sizes (t, pp, ep, etp, dp, edp, cp) and the model family's
    aliases (DeepSeek: d_v is written d_h), expanded: the claimed side of `symmem check`."""
    from symmem.symbols import sym

    expr = parse_formula(text)
    par = scn.parallel
    subs = {sym("t"): par.tp, sym("pp"): par.pp, sym("ep"): par.ep, sym("etp"): par.etp, sym("dp"): par.dp,
            sym("edp"): par.expert_dp, sym("cp"): par.cp}
    subs.update(scn.model.family.formula_aliases(scn.model))
    if scn.model.family.moe_fraction(scn.model) is not None:  # E_tok as the header defines it (the routing's)
        from symmem.accounting.analysis import _tokens_per_expert

        subs[sym("E_tok")] = _tokens_per_expert(scn.activation_key, par.axis_sizes())
    from symmem.check.compare import check_denominators

    check_denominators(expr, subs, "the scenario's parallel sizes and symbol aliases")
    # xreplace: symbols for numbers and symbols, none of them a key again (what subs does, without its search)
    return sympy.expand(expr.xreplace({k: sympy.Integer(v) if isinstance(v, int) else v for k, v in subs.items()}))


def check_formula(text: str, scn, quantity: str = "stage.activations", stage: int = 1, layer: int | None = None):
    """`symmem check` in Python: compare the formula `text` with the derived `quantity` of `stage` (and `layer`)
    of the scenario `scn`, term by term. Returns a `symmem.check.compare.Comparison` (`verdict`, `difference`,
    `worth` in bytes or parameters at the scenario's sizes, `differing` rows with their sources)."""
    from symmem.accounting.analysis import values
    from symmem.check.compare import compare
    from symmem.check.quantities import derive
    from symmem.check.quantities import quantity as find

    q = find(quantity, scn)
    derived, sources = derive(q.name, scn, stage, layer)
    claimed, constants = scenario_formula(text, scn), values(scn)
    check_valued(derived, claimed, constants, scn)
    return compare(derived, claimed, constants, sources)


def check_valued(derived: sympy.Expr, claimed: sympy.Expr, constants: Mapping, scn) -> None:
    """A claimed formula's symbols must have values in the scenario (or be the derived side's own): else the
    difference's worth in bytes is unknown, which a comparison must not print as 0."""
    loose = sorted(str(x) for x in claimed.free_symbols - set(constants) - derived.free_symbols)
    if loose:
        raise SymmemError(f"formula: {loose[0]!r} has no value in this scenario ({scn.model.name}): a symbol of "
                          "another model or of no setting of this one")
