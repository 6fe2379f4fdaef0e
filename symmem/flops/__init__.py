"""FLOPs, derived from the same dataflows as memory: a rule per op kind says what one op computes.

Conventions are rule sets, named and cited. Implemented:

* `paper`: matrix multiplications only, as Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
  GPU Clusters", arXiv 2104.04473, Section 5.1) and Korthikanti et al. 2022 (arXiv 2205.05198, Section 6, the
  "model FLOPs" and "hardware FLOPs" of Table 4) count them: a product of an (m x k) and a (k x n) operand costs
  2mnk in the forward pass and twice that in the backward (the input's and the weight's gradients); the attention
  scores and their product with the values over the whole s x s matrix (no causal halving); norms, softmax,
  activations, dropout and lookups are not counted.

Not yet: `exact` (every op) and `megatron` (Megatron-LM's `num_floating_point_operations`). Asking for them is a
one-line error naming what is implemented.

Sizes are global (the whole model, unsharded): `model.flops` is one micro-batch through the whole model, forward
and backward; `model.flops_hardware` adds what recomputation computes again (the forward of the recomputed ops:
whole decoder layers under full recomputation, the attention core under selective). The tokens of each routed
expert are the balanced count b·s·N_r/N.
"""

from __future__ import annotations

import sympy

from symmem.errors import SymmemError
from symmem.graph import Dataflow, Op, global_size
from symmem.symbols import E_tok, b, s, sym

CONVENTIONS = ("paper",)
ROWS = {b, s, E_tok}  # a dimension whose size holds one of these is a row (a token) of the product


def check_convention(name: str) -> str:
    if name not in CONVENTIONS:
        raise SymmemError(f"flops-convention = {name!r}: not implemented; implemented: {', '.join(CONVENTIONS)} "
                          "(exact and megatron are not yet)")
    return name


def _rows(dims) -> sympy.Expr:
    size = sympy.Integer(1)
    for d in dims:
        if d.size.free_symbols & ROWS:
            size *= d.size
    return size


def op_forward_flops(op: Op, flow: Dataflow) -> sympy.Expr:
    """The `paper` convention's forward FLOPs of one op (global sizes): 2·rows·(weight elements) for a product with
    a weight (the rows of its output: the tokens, per expert for an expert's weight), 2·(output elements)·k for a
    product of two activations (k: the last dimension of the first operand, the contracted one); else 0."""
    if op.kind == "linear":
        out, x = flow.tensors[op.outputs[0]], flow.tensors[op.inputs[0]]
        # the weights the input is multiplied with: those with the input's (last, contracted) feature dimension;
        # a bias has none
        k = x.dims[-1].size
        return 2 * _rows(out.dims) * sum((global_size(w.dims) for w in op.weights
                                          if any(d.size == k for d in w.dims)), sympy.Integer(0))
    if op.kind == "matmul" and not op.weights:
        first, out = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
        return 2 * global_size(out.dims) * first.dims[-1].size
    return sympy.Integer(0)


def model_flops(scn, hardware: bool = False, convention: str = "paper"
                ) -> tuple[sympy.Expr, dict[sympy.Expr, list[str]]]:
    """FLOPs of one micro-batch through the whole model, forward and backward (3x the forward of every product),
    with `hardware` the recomputed ops' forward again; in the model's symbols, b and s (the layer count as L where
    one kind of layer makes the whole model), with each monomial's sources."""
    from symmem.check.compare import monomials
    from symmem.model import model_parts

    check_convention(convention)
    model = scn.model
    n_layers = model.value("L")
    fraction = model.family.moe_fraction(model)
    tokens = b * s * fraction if fraction is not None else sympy.Integer(0)
    total = sympy.Integer(0)
    sources: dict[sympy.Expr, list[str]] = {}
    for part in model_parts(model, scn.convention):
        count = sym("L") if part.is_layers and part.count == n_layers else sympy.Integer(part.count)
        for op in part.flow.ops:
            fwd = op_forward_flops(op, part.flow).xreplace({E_tok: tokens})
            if fwd == 0:
                continue
            times = 3 + (1 if hardware and part.is_layers and scn.policy.recomputed(op) else 0)
            term = sympy.expand(count * times * fwd)
            total += term
            for mono in monomials(term):
                sources.setdefault(mono, []).append(f"{part.name}: {op.kind} {op.name}")
    return sympy.expand(total), sources
