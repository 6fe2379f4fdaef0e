"""Korthikanti et al. 2022 (arXiv 2205.05198), Table 2: activation bytes per transformer layer, derived from the GPT
dataflow (`symmem.blocks.gpt`) under the `paper` rule set, row by row, beside the paper's formulas.

Each row is built from its `symmem check` flags through the CLI's own flag-to-scenario mapping, and compared as
`symmem check --scenario korthikanti --quantity layer.activations FLAGS FORMULA` compares (the row's TP size
substituted for t). A second comparison keeps t symbolic: the dataflow derived with the parallel sizes as symbols
against the paper's formula as printed.
"""

from __future__ import annotations

import sympy

from symmem.accounting.analysis import stage_terms, to_int, values
from symmem.accounting.evaluate import expand_sum
from symmem.check import parse_formula
from symmem.check.compare import EQUAL, compare, term_sources
from symmem.check.quantities import derive
from symmem.parallel.layout import Stage
from symmem.render.latex import latex, plain
from symmem.render.tables import Math, Table
from symmem.symbols import t as T_SYM
from symmem.units import fmt_gib

from . import _korthikanti
from ._common import main

QUANTITY = "layer.activations"
STAGE = 1  # `symmem check`'s default stage; the korthikanti scenario has PP 8 (Table 3), stage 1 holds layers 12-23


def _parser():
    from symmem.cli.main import build_parser

    return build_parser()  # the program's own (built once per process: every command's flags cost 20 ms)


def _scenario(flags: tuple[str, ...], formula: str):
    """The scenario `symmem check --scenario korthikanti --quantity layer.activations FLAGS FORMULA` runs on."""
    from symmem.cli.args import scenario_from_args
    from symmem.cli.check import _claimed

    args = _parser().parse_args(["check", "--scenario", "korthikanti", "--quantity", QUANTITY, *flags, formula])
    scn = scenario_from_args(args)
    return scn, _claimed(formula, scn)


def _symbolic(scn) -> tuple[sympy.Expr, list]:
    """One decoder layer's bytes with the parallel sizes kept as symbols (t for TP, and for SP when it is on)."""
    layer = scn.stages[STAGE].layers[0]
    terms = [x for x in stage_terms(scn, Stage(STAGE, (layer,), False, False, 0), symbolic_parallel=True)]
    return expand_sum((x.count, x.nbytes) for x in terms), terms


def comparisons():
    """(label, flags, paper formula text, scenario, derived, claimed, cmp, derived in t, paper in t, cmp in t)."""
    out = []
    for label, flags, formula, _tex in _korthikanti.TABLE2:
        scn, claimed = _scenario(flags, formula)
        derived, sources = derive(QUANTITY, scn, STAGE)
        cmp = compare(derived, claimed, values(scn), sources)
        sym_derived, terms = _symbolic(scn)
        sym_paper = sympy.expand(parse_formula(formula))
        sym_cmp = compare(sym_derived, sym_paper, {**values(scn), T_SYM: scn.parallel.tp}, term_sources(terms))
        out.append((label, flags, formula, scn, derived, claimed, cmp, sym_derived, sym_paper, sym_cmp))
    return out


def _in_t(expr: sympy.Expr) -> str:
    """LaTeX of a formula in 1/t: the project's printer for each power of 1/t (`10bsh + \\frac{24bsh}{t}`)."""
    powers: dict[int, sympy.Expr] = {}
    for term in sympy.Add.make_args(sympy.expand(expr)):
        k = -int(term.as_powers_dict().get(T_SYM, 0))
        powers[k] = powers.get(k, sympy.Integer(0)) + sympy.expand(term * T_SYM**k)
    pieces = []
    for k in sorted(powers):
        body = latex(powers[k])
        pieces.append(body if k == 0 else rf"\frac{{{body}}}{{{'t' if k == 1 else f't^{{{k}}}'}}}")
    return " + ".join(pieces)


def _verdict(cmp) -> str:
    if cmp.verdict == EQUAL:
        return EQUAL
    cond = ", ".join(f"{k} = {v}" for k, v in cmp.condition)
    return f"{cmp.verdict} (equal when {cond})" if cond else f"{cmp.verdict} by {plain(cmp.difference)}"


def tables() -> list[Table]:
    rows = []
    tex = {row[2]: row[3] for row in _korthikanti.TABLE2}
    for label, flags, formula, scn, derived, _claimed, cmp, sym_derived, _sym_paper, sym_cmp in comparisons():
        nbytes = to_int(derived, values(scn))
        rows.append((label, " ".join(flags), Math(tex[formula], formula), Math(latex(derived), plain(derived)),
                     _verdict(cmp), Math(_in_t(sym_derived), plain(sym_derived)), _verdict(sym_cmp), nbytes,
                     fmt_gib(nbytes)))
    return [Table(
        "korthikanti_table2",
        "Korthikanti et al. 2022, Table 2: activation bytes per transformer layer (GPT-3 175B)",
        ("configuration", "symmem check flags", "the paper", "derived (t = the row's TP)", "verdict (symmem check)",
         "derived (t symbolic)", "verdict (t symbolic)", "bytes at b=1, s=2048", "GiB"),
        tuple(rows),
        ("Derived from the GPT dataflow (symmem/blocks/gpt.py) under the paper rule set: one decoder layer, one "
         "micro-batch, one GPU (quantity layer.activations of stage 1 of the built-in scenario korthikanti). "
         "Model sizes (s, b, h, a) stay symbolic.",
         "verdict (symmem check): as `symmem check --scenario korthikanti --quantity layer.activations FLAGS "
         "FORMULA` decides it, the row's TP size substituted for t in both formulas.",
         "verdict (t symbolic): the dataflow derived with TP (and SP) sizes as the symbol t, against the paper's "
         "formula as printed. The first row is the paper's t = 1 case, so in t it equals the second row's formula "
         "and the paper's first row only when t = 1.",
         "Bytes evaluated for GPT-3 175B (h = 12288, a = 96) at b = 1, s = 2048; GiB = 2^30 bytes."),
        align="llllllllr")]


if __name__ == "__main__":
    main(tables)
