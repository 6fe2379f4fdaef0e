"""The symbol registry: every dimension symbol is declared once, with its name, LaTeX form and meaning.

The engine declares its own sizes here (b, s and the parallel sizes, with Megatron's names); the blocks declare the
model sizes they are written in (`symmem.blocks.symbols`), and a model family maps its config keys onto them
(`symmem.families`). Sizes are positive integers so that sympy simplifies soundly. The checker's lexer, the LaTeX
printer and the config loaders all read `SYMBOLS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sympy

from symmem.errors import SymmemError

KINDS = ("run", "model", "routing", "parallel")  # printed in this order inside a monomial


@dataclass(frozen=True)
class SymbolSpec:
    """One named size."""

    name: str  # the name used in plain formulas and in Python (`d_cq`)
    latex: str  # how it is printed (`d_{cq}`)
    meaning: str
    kind: str  # one of KINDS

    @property
    def symbol(self) -> sympy.Symbol:
        return _SYMBOL_OBJECTS[self.name]


#: name -> spec, in declaration order (filled as the engine, the blocks and the families declare their symbols)
SYMBOLS: dict[str, SymbolSpec] = {}
_SYMBOL_OBJECTS: dict[str, sympy.Symbol] = {}


def declare(name: str, latex: str, meaning: str, kind: str = "model") -> sympy.Symbol:
    """Declare a size symbol (once; declaring the same name again with the same LaTeX returns the same Symbol)."""
    if kind not in KINDS:
        raise SymmemError(f"symbol {name!r}: kind = {kind!r}; known: {', '.join(KINDS)}")
    old = SYMBOLS.get(name)
    if old is not None:
        if (old.latex, old.kind) != (latex, kind):
            raise SymmemError(f"symbol {name!r} declared twice: as {old.latex!r} ({old.kind}) and {latex!r} ({kind})")
        return old.symbol
    SYMBOLS[name] = SymbolSpec(name, latex, meaning, kind)
    _SYMBOL_OBJECTS[name] = sympy.Symbol(name, positive=True, integer=True)
    return _SYMBOL_OBJECTS[name]


def sym(name: str) -> sympy.Symbol:
    """The Symbol called `name` (a KeyError names the unknown symbol)."""
    return _SYMBOL_OBJECTS[name]


def latex_names() -> dict[sympy.Symbol, str]:
    """The `symbol_names` mapping for sympy's LaTeX printer (a copy: the caller may extend it)."""
    return dict(_latex_names(len(SYMBOLS)))


def latex_name(symbol: sympy.Symbol) -> str | None:
    """The symbol's LaTeX name, None for a symbol nobody declared."""
    return _latex_names(len(SYMBOLS)).get(symbol)


@cache
def _latex_names(_declared: int) -> dict[sympy.Symbol, str]:
    # keyed by how many symbols are declared: declarations only add, so the count says when to rebuild
    return {spec.symbol: spec.latex for spec in SYMBOLS.values()}


def print_rank(symbol: sympy.Symbol) -> tuple[int, int]:
    """Where a symbol stands inside a printed monomial: run sizes, model sizes (in declaration order), routing,
    then parallel sizes."""
    return _print_rank(symbol.name, len(SYMBOLS))


@cache
def _print_rank(name: str, _declared: int) -> tuple[int, int]:
    spec = SYMBOLS.get(name)
    if spec is None:
        return (len(KINDS), 0)
    return (KINDS.index(spec.kind), list(SYMBOLS).index(spec.name))


# The engine's own sizes.
b = declare("b", "b", "micro-batch size", "run")
s = declare("s", "s", "sequence length", "run")
E_tok = declare("E_tok", "E_{tok}", "tokens per routed expert", "routing")
t = declare("t", "t", "tensor-parallel size (TP)", "parallel")
pp = declare("pp", r"\mathrm{PP}", "pipeline-parallel size", "parallel")
ep = declare("ep", r"\mathrm{EP}", "expert-parallel size", "parallel")
etp = declare("etp", r"\mathrm{ETP}", "expert tensor-parallel size", "parallel")
dp = declare("dp", r"\mathrm{DP}", "data-parallel size", "parallel")
edp = declare("edp", r"\mathrm{EDP}", "expert data-parallel size", "parallel")
cp = declare("cp", r"\mathrm{CP}", "context-parallel size", "parallel")
