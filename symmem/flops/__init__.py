"""FLOPs, derived from the same dataflows as memory: a rule per op kind says what one op computes.

Conventions are rule sets, named and cited. Implemented:

* `paper`: matrix multiplications only, as Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
  GPU Clusters", arXiv 2104.04473, Section 5.1) and Korthikanti et al. 2022 (arXiv 2205.05198, Section 6, the
  "model FLOPs" and "hardware FLOPs" of Table 4) count them: a product of an (m x k) and a (k x n) operand costs
  2mnk in the forward pass and twice that in the backward (the input's and the weight's gradients); the attention
  scores and their product with the values over the whole s x s matrix (no causal halving); norms, softmax,
  activations, dropout and lookups are not counted.

* `megatron`: what Megatron-LM's `num_floating_point_operations` counts (megatron/training/training.py:145-420 at
  commit 23e00ed0, the measured runs' commit), as rules over the same ops: the products as above but the router's
  (training.py leaves it out), the attention's two products halved (causal: its `seq_length / 2` terms), MLA's two
  latent norms at 2 FLOPs an element (its `q_lora_rank * (... + 1)` and `kv_lora_rank * (... + 1)` terms), the MTP
  module's two input norms and its final norm likewise and its `eh_proj` (its `3 * hidden + 2 * hidden^2` term), no
  other norm, and the vocabulary as the scenario allocates it (Megatron's padded vocabulary under `megatron-te`).

* `exact`: every op that does arithmetic (symmem/flops/exact.py: products as `paper` counts them, the router's
  included and nothing halved for causality; every other op at a FLOP count per element, forward and backward,
  each shown with the formula it comes from).

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

CONVENTIONS = ("paper", "megatron", "exact")
ROWS = {b, s, E_tok}  # a dimension whose size holds one of these is a row (a token) of the product


def check_convention(name: str) -> str:
    if name not in CONVENTIONS:
        raise SymmemError(f"flops-convention = {str(name)[:40]!r}: unknown; known: {', '.join(CONVENTIONS)}")
    return name


def _rows(dims) -> sympy.Expr:
    size = sympy.Integer(1)
    for d in dims:
        if d.size.free_symbols & ROWS:
            size *= d.size
    return size


def _megatron_norm(op: Op, part_kind: str) -> bool:
    """The norms Megatron's function counts: MLA's latent norms, the MTP module's two input norms and its final
    norm (training.py: `q_lora_rank * (... + 1)`, `kv_lora_rank * (... + 1)`, `3 * args.hidden_size`)."""
    if op.name.endswith(("q_a_layernorm", "kv_a_layernorm")):
        return True
    # the MTP module's own norms carry its prefix (mtp0.enorm, mtp0.hnorm, mtp0.shared_head.norm); its decoder
    # layer's are a layer's and are not counted
    return part_kind == "mtp" and op.name.startswith("mtp")


def op_forward_flops_megatron(op: Op, flow: Dataflow, part_kind: str) -> sympy.Expr:
    """The `megatron` convention's forward FLOPs of one op (global sizes)."""
    if op.kind == "linear" and "routing" in op.tags:
        return sympy.Integer(0)  # Megatron's function has no router term
    if op.kind == "rmsnorm":
        return 2 * global_size(flow.tensors[op.outputs[0]].dims) if _megatron_norm(op, part_kind) else sympy.Integer(0)
    fwd = op_forward_flops(op, flow)
    if op.kind == "matmul" and "core_attention" in op.tags:
        return fwd / 2  # causal: training.py's seq_length / 2
    return fwd


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


def op_forward_backward_exact(op: Op, flow: Dataflow) -> tuple[sympy.Expr, sympy.Expr]:
    """The `exact` convention's (forward, backward) FLOPs of one op (global sizes)."""
    from symmem.flops.exact import ELEMENTWISE, element_flops

    if op.kind == "sdpa_flash":  # fused attention: its two products and its softmax over the whole score matrix
        q, k, v = (flow.tensors[t] for t in op.inputs[:3])
        scores = global_size(q.dims[:-1]) * k.dims[-2].size
        products = 2 * scores * q.dims[-1].size + 2 * scores * v.dims[-1].size
        soft = ELEMENTWISE["softmax"]
        return products + soft.forward * scores, 2 * products + soft.backward * scores
    if op.kind in ("linear", "matmul") or (op.kind == "grouped_mm" and op.weights):
        fwd = op_forward_flops(op if op.kind != "grouped_mm" else Op("linear", op.name, op.block, op.inputs,
                                                                    op.outputs, op.weights, op.tags), flow)
        return fwd, 2 * fwd
    return element_flops(op, flow)


def op_flops(scn, parts, hardware: bool = False, convention: str = "paper"):
    """(part, op, forward, total) of every op of `parts` that computes, under `convention`: its forward FLOPs
    and its forward plus backward (3x the forward of a product; under `exact` an element op's own backward),
    with `hardware` a recomputed op's forward once more; the routed experts' tokens balanced (b·s·N_r/N) and the
    vocabulary as the scenario allocates it. Global sizes, one micro-batch."""
    from symmem.accounting.activations import runs_again

    check_convention(convention)
    model = scn.model
    sizes = {k: v for k, v in scn.size_values().items() if k.name == "V" and v != model.value("V")}
    fraction = model.family.moe_fraction(model)
    tokens = b * s * fraction if fraction is not None else sympy.Integer(0)
    at = {E_tok: tokens, **sizes}
    for part in parts:
        for op in part.flow.ops:
            if convention == "exact":
                fwd, bwd = (x.xreplace(at) for x in op_forward_backward_exact(op, part.flow))
            else:
                fwd = (op_forward_flops_megatron(op, part.flow, part.kind) if convention == "megatron"
                       else op_forward_flops(op, part.flow)).xreplace(at)
                bwd = 2 * fwd
            if fwd == 0 and bwd == 0:
                continue
            again = fwd if hardware and part.is_layers and runs_again(op, part.flow, scn.rules, scn.policy) else 0
            yield part, op, fwd, fwd + bwd + again


def model_flops(scn, hardware: bool = False, convention: str = "paper"
                ) -> tuple[sympy.Expr, dict[sympy.Expr, list[str]]]:
    """FLOPs of one micro-batch through the whole model, forward and backward (3x the forward of every product),
    with `hardware` the recomputed ops' forward again; in the model's symbols, b and s (the layer count as L where
    one kind of layer makes the whole model), with each monomial's sources."""
    from symmem.check.compare import monomials
    from symmem.model import model_parts

    check_convention(convention)
    n_layers = scn.model.value("L")
    total = sympy.Integer(0)
    sources: dict[sympy.Expr, list[str]] = {}
    for part, op, _fwd, op_total in op_flops(scn, model_parts(scn.model, scn.convention, with_mtp=scn.mtp),
                                             hardware, convention):
        count = sym("L") if part.is_layers and part.count == n_layers else sympy.Integer(part.count)
        term = sympy.expand(count * op_total)
        total += term
        for mono in monomials(term):
            sources.setdefault(mono, []).append(f"{part.name}: {op.kind} {op.name}")
    return sympy.expand(total), sources


def layer_flops(scn, layer: int, hardware: bool = False, convention: str = "paper"
                ) -> tuple[sympy.Expr, dict[sympy.Expr, list[str]]]:
    """FLOPs of decoder layer `layer` for one micro-batch, forward and backward (with `hardware` its recomputed
    forward again); global sizes, with each monomial's sources."""
    from symmem.check.compare import monomials
    from symmem.model import stage_parts
    from symmem.parallel.layout import Stage

    total = sympy.Integer(0)
    sources: dict[sympy.Expr, list[str]] = {}
    one = Stage(0, (layer,), False, False, 0)
    for part, op, _fwd, op_total in op_flops(scn, stage_parts(scn.model, one, scn.convention), hardware, convention):
        term = sympy.expand(part.count * op_total)
        total += term
        for mono in monomials(term):
            sources.setdefault(mono, []).append(f"{part.name}: {op.kind} {op.name}")
    return sympy.expand(total), sources
