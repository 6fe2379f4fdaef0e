"""Every dimension symbol, declared once: its name, LaTeX form, meaning and Hugging Face config key.

Sizes are positive integers so that sympy simplifies soundly. Model dimensions use the paper's names
(arXiv 2502.07846); parallel sizes use Megatron's argument names. This module is the single place to look a
symbol up: the checker's lexer, the LaTeX printer and the config loader all read `SYMBOLS`.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy


@dataclass(frozen=True)
class SymbolSpec:
    """One named size."""

    name: str  # the name used in plain formulas and in Python (`d_cq`)
    latex: str  # how the paper prints it (`d_{cq}`)
    meaning: str
    config_key: str | None  # HF config.json key it is read from; None for run-time or parallel sizes
    kind: str  # "model", "run" (batch, sequence), "routing" or "parallel"

    @property
    def symbol(self) -> sympy.Symbol:
        return _SYMBOL_OBJECTS[self.name]


_SPECS: tuple[SymbolSpec, ...] = (
    # run-time sizes
    SymbolSpec("b", "b", "micro-batch size", None, "run"),
    SymbolSpec("s", "s", "sequence length", None, "run"),
    # model sizes (the paper's Table 1)
    SymbolSpec("h", "h", "hidden size", "hidden_size", "model"),
    SymbolSpec("d_cq", "d_{cq}", "query latent (LoRA) rank", "q_lora_rank", "model"),
    SymbolSpec("d_c", "d_c", "key/value latent rank", "kv_lora_rank", "model"),
    SymbolSpec("n_h", "n_h", "attention heads", "num_attention_heads", "model"),
    SymbolSpec("d_h", "d_h", "per-head q/k dimension without rope", "qk_nope_head_dim", "model"),
    SymbolSpec("d_v", "d_v", "per-head value dimension (the paper's d_h where equal)", "v_head_dim", "model"),
    SymbolSpec("d_hr", "d_{hr}", "per-head rope dimension", "qk_rope_head_dim", "model"),
    SymbolSpec("h_E", "h_E", "expert FFN width", "moe_intermediate_size", "model"),
    SymbolSpec("h_F", "h_F", "dense FFN width", "intermediate_size", "model"),
    SymbolSpec("N", "N", "routed experts", "n_routed_experts", "model"),
    SymbolSpec("N_r", "N_r", "routed experts per token", "num_experts_per_tok", "model"),
    SymbolSpec("N_s", "N_s", "shared experts", "n_shared_experts", "model"),
    SymbolSpec("V", "V", "vocabulary size", "vocab_size", "model"),
    SymbolSpec("L", "L", "decoder layers", "num_hidden_layers", "model"),
    # routing: tokens one routed expert processes (a routing model gives its value)
    SymbolSpec("E_tok", "E_{tok}", "tokens per routed expert", None, "routing"),
    # parallel sizes (Megatron's names)
    SymbolSpec("t", "t", "tensor-parallel size (TP)", None, "parallel"),
    SymbolSpec("pp", r"\mathrm{PP}", "pipeline-parallel size", None, "parallel"),
    SymbolSpec("ep", r"\mathrm{EP}", "expert-parallel size", None, "parallel"),
    SymbolSpec("etp", r"\mathrm{ETP}", "expert tensor-parallel size", None, "parallel"),
    SymbolSpec("dp", r"\mathrm{DP}", "data-parallel size", None, "parallel"),
    SymbolSpec("edp", r"\mathrm{EDP}", "expert data-parallel size", None, "parallel"),
)

_SYMBOL_OBJECTS: dict[str, sympy.Symbol] = {
    spec.name: sympy.Symbol(spec.name, positive=True, integer=True) for spec in _SPECS
}

#: name -> spec, in declaration order
SYMBOLS: dict[str, SymbolSpec] = {spec.name: spec for spec in _SPECS}

#: sympy Symbol -> spec
BY_SYMBOL: dict[sympy.Symbol, SymbolSpec] = {spec.symbol: spec for spec in _SPECS}


def sym(name: str) -> sympy.Symbol:
    """The Symbol called `name` (a KeyError names the unknown symbol)."""
    return _SYMBOL_OBJECTS[name]


def latex_names() -> dict[sympy.Symbol, str]:
    """The `symbol_names` mapping for sympy's LaTeX printer."""
    return {spec.symbol: spec.latex for spec in _SPECS}


# Module-level handles, so that block definitions read like the paper.
b, s, h = sym("b"), sym("s"), sym("h")
d_cq, d_c, n_h, d_h, d_v, d_hr = sym("d_cq"), sym("d_c"), sym("n_h"), sym("d_h"), sym("d_v"), sym("d_hr")
h_E, h_F, N, N_r, N_s, V, L = sym("h_E"), sym("h_F"), sym("N"), sym("N_r"), sym("N_s"), sym("V"), sym("L")
E_tok = sym("E_tok")
t, pp, ep, etp, dp, edp = sym("t"), sym("pp"), sym("ep"), sym("etp"), sym("dp"), sym("edp")
