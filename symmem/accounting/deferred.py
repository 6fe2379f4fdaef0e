"""What a backward split in two keeps from its B until its W: the weight-gradient GEMMs' operands.

Zero-bubble schedules (ZB-H1, DualPipe) run a backward's input gradients (B) first and its weight gradients (W)
later. Between the two, each deferred GEMM keeps its input and the gradient of its output: sail-sg's and
DeepSeek's WeightGradStore hold (input, grad_output, weight) per linear layer until W pops it (github.com/
sail-sg/zero-bubble-pipeline-parallelism, branch zb-h1-quick-start, WeightGradStore.put; deepseek-ai/DualPipe,
dualpipe/utils.py). Counted here: the storages of the inputs of every weighted linear or grouped GEMM of a part,
each once, and the gradients of their outputs. Other weighted ops (norms) finish their weight gradients in B.
"""

from __future__ import annotations

import sympy

from symmem.accounting.activations import storage_of, tensor_bytes
from symmem.graph import AxisSizes, Dataflow

DEFERRED_KINDS = ("linear", "grouped_mm")


def weight_grad_stash(flow: Dataflow, axes: AxisSizes, act_bytes: int, e_tok: sympy.Expr) -> sympy.Expr:
    """Bytes one copy of `flow` keeps for one micro-batch from its B until its W."""
    inputs: dict[str, sympy.Expr] = {}
    grads: dict[str, sympy.Expr] = {}
    for op in flow.ops:
        if op.kind not in DEFERRED_KINDS or not op.weights:
            continue
        for t in op.inputs:
            root = storage_of(flow.tensors[t], flow, act_bytes)
            inputs.setdefault(root.name, tensor_bytes(root, axes, act_bytes, e_tok))
        for t in op.outputs:
            grads.setdefault(t, tensor_bytes(flow.tensors[t], axes, act_bytes, e_tok))
    return sympy.Add(*inputs.values(), *grads.values())
