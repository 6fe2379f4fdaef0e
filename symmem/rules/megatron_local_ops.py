"""Megatron-Core 0.16.1's local (non-TransformerEngine) layer spec as an engine rule set (`megatron-local`): what
each op of symmem's Llama dataflow keeps for backward as the local spec runs it, without sequence parallelism.

The same facts as `symmem.rules.megatron_local.layer_saved` (each cited there, measured to the byte by `symmem
measure --framework megatron-core`), said op kind by op kind so that the engine (`symmem memory --profile
megatron-local`) derives them:

* torch's RMSNorm (`transformer/torch_norm.py:51`): its FP32 input (the input itself in FP32 runs), FP32 rstd per
  row and FP32 normalised input; its output is kept by the linear that reads it (`tensor_parallel/layers.py:465`).
* unfused RoPE (`models/common/embeddings/rope_utils.py:122-125`): a cos and a sin table [s, d] at the run's dtype
  made on each call, kept by the products with them; the rotated q and k are kept by the attention.
* core attention (`transformer/dot_product_attention.py`): key and value repeated to n heads when g < n (`:170`,
  `:173`: new storages); without repetition the value is a view of linear_qkv's output, whose whole storage
  [s, b, (n + 2g) d] it keeps; the causal mask [s, s] bool (`transformer/utils.py:35`) and the FP32 softmax output
  (`fusions/fused_softmax.py:314`), with a copy at the run's dtype in 16-bit runs.
* SwiGLU (`transformer/mlp.py:219-226`): fc1's whole output (gate and up, one storage), silu's output and
  `x_linear + glu_linear_offset` (a new storage); linear_fc2 keeps the product.
* the embedding keeps the token ids; the vocab-parallel cross-entropy keeps its FP32 softmax (the logits' storage
  in FP32 runs), the target mask (bool) and the masked targets (int64) (`tensor_parallel/cross_entropy.py:187`).

Checked for the dense Llama dataflow (the profile refuses other families). Every other op kind keeps what
PyTorch eager autograd keeps (the `torch-eager` rule set, measured on transformers' layers), as the local spec is
plain PyTorch; that is not checked against Megatron. Selective and full recomputation are the engine's policies,
not checked against Megatron's here.
"""

from __future__ import annotations

import sympy

from symmem.errors import SymmemError
from symmem.graph import BOOL, FP32, INT64, Dataflow, Dim, Op, Tensor
from symmem.rules import torch_eager as _eager
from symmem.rules._base import RuleSet, Saved, inputs, nothing


def _rmsnorm(op: Op, flow: Dataflow) -> list[Saved]:
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    rows = y.dims[:-1] + (Dim(sympy.Integer(1)),)
    return [Saved(Tensor(f"{y.name}.input_fp32", x.dims, FP32, cast_of=x.name), f"FP32 input of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.rstd", rows, FP32), f"FP32 rstd of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.normed_fp32", y.dims, FP32), f"FP32 normalised input of rmsnorm {op.name}")]


def _rope(op: Op, flow: Dataflow) -> list[Saved]:
    x = flow.tensors[op.inputs[0]]
    table = (x.dims[1], x.dims[-1])  # [s, d]: not split by TP
    return [Saved(Tensor(f"{op.name}.{t}", table), f"{t} table of unfused RoPE {op.name}") for t in ("cos", "sin")]


def _qkv_outputs(flow: Dataflow) -> list[Tensor]:
    out = [flow.tensors[o.outputs[0]] for o in flow.ops if "module:linear_qkv" in o.tags]
    if len(out) != 3:
        raise SymmemError(f"{flow.name}: rule set 'megatron-local' models the Llama attention (q, k and v from "
                          "linear_qkv) only")
    return out


def _matmul(op: Op, flow: Dataflow) -> list[Saved]:
    """qk (baddbmm: q and the repeated k, new storages) and pv (bmm: the probabilities and v)."""
    a, b = (flow.tensors[t] for t in op.inputs)
    _qkv_outputs(flow)  # the Llama attention, or a one-line refusal
    if op.name == "qk":
        return [Saved(a, f"q of {op.name}"), Saved(Tensor(f"{b.name}.repeated", b.dims), f"k of {op.name}")]
    if op.name != "pv":
        raise SymmemError(f"matmul {op.name!r}: rule set 'megatron-local' knows the attention's qk and pv only")
    q, k, v = _qkv_outputs(flow)
    n, g = q.dims[2].size, k.dims[2].size
    heads = n + 2 * g * sympy.floor(g / n)  # n + 2g when g = n (floor(g/n) = 1), else n (g divides n, g < n)
    value = Tensor(f"{b.name}.storage", b.dims[:2] + (Dim(heads, b.dims[2].axes),) + b.dims[3:])
    return [Saved(a, f"probabilities of {op.name}"),
            Saved(value, f"v of {op.name} (repeated to n heads, or linear_qkv's whole output when g = n)")]


def _softmax(op: Op, flow: Dataflow) -> list[Saved]:
    probs, scores = flow.tensors[op.outputs[0]], flow.tensors[op.inputs[0]]
    return [Saved(Tensor(f"{probs.name}.fp32", probs.dims, FP32, cast_of=probs.name), f"FP32 output of {op.name}"),
            Saved(Tensor(f"{op.name}.causal_mask", scores.dims[-2:], BOOL), f"causal mask of {op.name}")]


def _silu(op: Op, flow: Dataflow) -> list[Saved]:
    fc1 = [flow.tensors[o.outputs[0]] for o in flow.ops if "module:mlp.linear_fc1" in o.tags]
    return [Saved(t, f"linear_fc1 output (gate and up, one storage) kept by {op.name}") for t in fc1]


def _glu_mul(op: Op, flow: Dataflow) -> list[Saved]:
    act, up = (flow.tensors[t] for t in op.inputs)
    return [Saved(act, f"silu output kept by {op.name}"),
            Saved(Tensor(f"{up.name}.plus_offset", up.dims), f"x_linear + glu_linear_offset of {op.name}")]


def _cross_entropy(op: Op, flow: Dataflow) -> list[Saved]:
    logits = flow.tensors[op.inputs[0]]
    rows = logits.dims[:-1]
    return [Saved(Tensor(f"{logits.name}.softmax_fp32", logits.dims, FP32, cast_of=logits.name),
                  f"FP32 softmax of {op.name}"),
            Saved(Tensor(f"{logits.name}.target_mask", rows, BOOL), f"target mask of {op.name}"),
            Saved(Tensor(f"{logits.name}.masked_target", rows, INT64), f"masked targets of {op.name}")]


RULES = RuleSet(
    "megatron-local",
    "Megatron-Core 0.16.1, local (non-TE) spec, torch 2.13, no sequence parallelism: measured on the CPU",
    {
        **_eager.RULES.rules,
        "rmsnorm": _rmsnorm,
        "linear": inputs(0),
        "rope": _rope,
        "expand": nothing,  # the repetition's copies are charged to the attention's products
        "matmul": _matmul,
        "softmax": _softmax,
        "silu": _silu,
        "mul": _glu_mul,
        "embedding": inputs(0),
        "cross_entropy": _cross_entropy,
        "add": nothing,
        "region": nothing,
    },
    context_parallel=False,
)
