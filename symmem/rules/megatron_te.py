"""Megatron-Core with TransformerEngine 2.11 (BF16, no FP8): what its modules keep for backward, and what they
allocate while they run.

Sources, read at Megatron-LM commit 23e00ed0963c35382dfe8a5a94fb3cda4d21e133 (MLM) and TransformerEngine
c188b533 (TE, the 2.11.0 build); file:line at those revisions.

* RMSNorm fused into the next linear (TE LayerNormLinear) or TE's RMSNorm module keeps its input and an FP32
  rstdev per row (TE pytorch/module/layernorm_linear.py:466-476; pytorch/ops/basic/rmsnorm.py:202); the linear
  keeps the normalised output, local (s/t rows) under sequence parallelism (layernorm_linear.py:378-383).
* A TE Linear keeps its input, the same storage as whoever produced it (TE pytorch/module/linear.py:402-404, 439);
  grouped expert GEMMs likewise keep the dispatched tokens (TE pytorch/module/grouped_linear.py).
* Fused attention (cuDNN, TE attention/dot_product_attention/backends.py:1267-1301, 1323-1332) keeps q, k, v, its
  output and FP32 softmax statistics [b, heads, s, 1]; the s×s scores are never materialised. GQA keys and values
  stay at the key/value heads (no repeat). Ops tagged `core_attention` run as one fused op.
* Megatron's fused SwiGLU (MLM megatron/core/fusions/fused_bias_swiglu.py:100-120) keeps its input (gate and up);
  its backward is one kernel that writes only the input gradient. Ops tagged `swiglu` run as one fused op.
* TE fused cross-entropy (TE pytorch/cross_entropy.py:53-64, triton/cross_entropy.py:26-131) keeps the BF16
  logits shard and writes the gradient into it in place: no FP32 copy, no new gradient.
* RoPE (fused, MLM megatron/core/models/common/embeddings/rotary_pos_embedding.py:150-151) keeps only the shared
  frequency table; dropouts run at p = 0 in the measured runs (--attention-dropout 0.0 --hidden-dropout 0.0) and
  keep nothing.
* The softmax router (MLM megatron/core/transformer/moe/router.py) keeps FP32 logits and probabilities [s, E];
  the routing map (bool) and TE's permute row-id map (int32) [s, E] and the FP32 top-k probabilities are kept by
  the top-k; the fused permute keeps only that map (MLM megatron/core/transformer/moe/token_dispatcher.py:551-808).
* Under sequence parallelism a column-parallel linear all-gathers its input (a transient s×in buffer, again in
  backward for the weight gradient) and computes its input gradient at full length before the reduce-scatter; a
  row-parallel linear produces its output at full length before the reduce-scatter and all-gathers the output
  gradient in backward (layernorm_linear.py:151, 378-383; MLM megatron/core/tensor_parallel/layers.py:474-549).
* GPT (Korthikanti et al.'s layer): TE LayerNormLinear with LayerNorm keeps its input and FP32 mean and rstdev per
  row (TE layernorm_linear.py:466-476: inputmat, mu, rsigma); Megatron's fused bias-GeLU keeps its input (MLM
  megatron/core/fusions/fused_bias_gelu.py:39-40, `ctx.save_for_backward(input, bias)`; the bias is a weight).
* Blocks Megatron-Core does not implement at 23e00ed0 (no DSA indexer, no mHC, no hash router, no compressed or
  sliding attention: DeepSeek-V3.2 and V4) run as the PyTorch ops they are: each such op kind keeps what eager
  autograd keeps, the rule of the `torch-eager` rule set (symmem/rules/torch_eager.py, tools/autograd/
  derivatives.yaml; measured to the byte on transformers' layers), named per kind in `GENERIC_EAGER` below. The
  sparse attention's key selection is charged to the fused attention kernel and keeps its int32 indices (as a
  sparse-attention kernel needs them again in backward). Ops with no autograd node (`no_grad`: the lightning
  indexer) keep nothing.
* Under context parallelism (ring exchange, `--cp-comm-type p2p`) the attention backward also holds TE's two
  K/V communication buffers with their gradients and one step's dq_, dk_, dv_ (context_parallel.py:2205-2210,
  2392-2403 at c188b533).
* Under all-to-all context parallelism (`--cp-comm-type a2a`, TE AttnFuncWithCPAndQKVOA2A) TE >= 2.8 saves the
  attention's output *before* the post-attention all-to-all (`out_part = out_`, context_parallel.py:3485/3517,
  saved at :3569-3582 of TE v2.11), while the all-to-all returns a new tensor (:3520-3530) that the output
  projection keeps as its input: one more BF16 tensor of the output's local size, [b, s/CP, heads/TP, d_v], per
  layer (`RULES_CP_A2A`; TE 2.7 saved the post-all-to-all output, the same storage as the projection's input,
  context_parallel.py:3400-3453 at v2.7). Its backward exchanges the output gradient (:3691) and dq, dk, dv
  (:3810) by all-to-all into new tensors: transients of the attention backward.
* The embedding's backward computes the dense [V/TP, h] weight gradient (F.embedding, MLM
  megatron/core/tensor_parallel/layers.py:281), which DDP's hook adds into main_grad and frees
  (distributed_data_parallel.py:503-524): a transient of the embedding's backward.
* cuDNN's fused-attention backward keeps FP32 accumulators of dQ, dK and dV (at the query heads) while it runs.
  This is a hypothesis: no source readable here states cuDNN's workspace; FlashAttention-2's backward allocates an
  FP32 dq_accum of this shape (and dk/dv accumulators for grouped heads). It is named in every breakdown.
"""

from __future__ import annotations

from symmem.graph import BOOL, FP32, INT32, AxisSizes, D, Dataflow, Dim, Op, Tensor
from symmem.rules import megatron_local_ops as _local
from symmem.rules._base import RuleSet, Saved, as_dtype, inputs, nothing

CUDNN_ACCUMULATORS = "cuDNN fused-attention backward FP32 dQ/dK/dV accumulators (hypothesis)"


def _root_of_expand(name: str, flow: Dataflow) -> Tensor:
    """The tensor before a GQA repeat (`expand`): fused attention reads the key/value heads as they are."""
    op = flow.producer(name)
    if op is not None and op.kind == "expand":
        return flow.tensors[op.inputs[0]]
    return flow.tensors[name]


def _rows(t: Tensor) -> tuple[Dim, ...]:
    return t.dims[:-1]


def _norm(op: Op, flow: Dataflow) -> list[Saved]:
    x = flow.tensors[op.inputs[0]]
    return [Saved(x, f"input of {op.name}"),
            Saved(Tensor(f"{x.name}.rstd", _rows(x), FP32), f"FP32 rstdev of {op.name}")]


def _layernorm(op: Op, flow: Dataflow) -> list[Saved]:
    """TE LayerNormLinear (LayerNorm): the input, and FP32 mean and rstdev per row (layernorm_linear.py:466-476)."""
    x = flow.tensors[op.inputs[0]]
    return _norm(op, flow) + [Saved(Tensor(f"{x.name}.mu", _rows(x), FP32), f"FP32 mean of {op.name}")]


def _attention(op: Op, flow: Dataflow) -> list[Saved]:
    """The fused attention's saves, charged to the two matmuls that stand for it."""
    if op.name.endswith("qk"):
        return [Saved(flow.tensors[op.inputs[0]], "q of fused attention"),
                Saved(_root_of_expand(op.inputs[1], flow), "k of fused attention")]
    out = flow.tensors[op.outputs[0]]  # the context, (b, s, heads, d_v)
    stats = Tensor(f"{out.name}.softmax_stats", (out.dims[0], out.dims[2], out.dims[1], D(1)), FP32)
    return [Saved(_root_of_expand(op.inputs[1], flow), "v of fused attention"),
            Saved(out, "output of fused attention"),
            Saved(stats, "FP32 softmax statistics of fused attention")]


def _matmul(op: Op, flow: Dataflow) -> list[Saved]:
    if "core_attention" in op.tags:
        return _attention(op, flow)
    return inputs(0, 1)(op, flow)


def _router(op: Op, flow: Dataflow) -> list[Saved]:
    logits, probs = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    return [Saved(as_dtype(logits, FP32, "fp32"), "FP32 router logits"),
            Saved(as_dtype(probs, FP32, "fp32"), "FP32 router probabilities")]


def _topk(op: Op, flow: Dataflow) -> list[Saved]:
    scores = flow.tensors[op.inputs[0]]
    return [Saved(as_dtype(scores, BOOL, "routing_map"), "routing map (bool)"),
            Saved(as_dtype(scores, INT32, "row_id_map"), "TE permute row-id map (int32)"),
            Saved(as_dtype(scores, FP32, "topk_probs"), "FP32 routing probabilities")]


def _full_rows(t: Tensor) -> tuple[Dim, ...]:
    """`t`'s dims with the sequence-parallel split undone (the all-gathered, full-length tensor)."""
    return tuple(Dim(d.size, tuple(a for a in d.axes if a not in ("sp", "sp_moe"))) for d in t.dims)


def _sp_split(t: Tensor) -> bool:
    return any(a in ("sp", "sp_moe") for d in t.dims for a in d.axes)


def _linear_workspace(op: Op, flow: Dataflow, phase: str, axes: AxisSizes) -> list[Saved]:
    """Sequence-parallel all-gather and pre-reduce-scatter buffers of a column- or row-parallel linear."""
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    if axes.of("sp") == 1 or _sp_split(x) == _sp_split(y):
        return []
    if _sp_split(x):  # column-parallel: gathered input; in backward again, plus the full-length input gradient
        gathered = Tensor(f"{x.name}.gathered", _full_rows(x), x.dtype)
        if phase == "forward":
            return [Saved(gathered, f"all-gathered input of {op.name}")]
        return [Saved(gathered, f"all-gathered input of {op.name} (weight gradient)"),
                Saved(Tensor(f"{x.name}.grad_full", _full_rows(x), x.dtype),
                      f"full-length input gradient of {op.name}")]
    full = Tensor(f"{y.name}.full", _full_rows(y), y.dtype)  # row-parallel
    return [Saved(full, f"full-length output of {op.name} before the reduce-scatter" if phase == "forward"
                  else f"all-gathered output gradient of {op.name}")]


def _attention_backward(op: Op, flow: Dataflow, phase: str, axes: AxisSizes, cp_exchange) -> list[Saved]:
    """The fused attention backward's workspace: cuDNN's accumulators and, under context parallelism,
    `cp_exchange(q, k, v, out)`'s buffers (k and v at the key/value heads)."""
    if phase != "backward" or "core_attention" not in op.tags or not op.name.endswith("qk"):
        return []
    q, k = flow.tensors[op.inputs[0]], flow.tensors[op.inputs[1]]  # k at the query heads (after any repeat)
    pv = next(o for o in flow.ops if "core_attention" in o.tags and o.name.endswith("pv") and o.block == op.block)
    v = flow.tensors[pv.inputs[1]]
    out = [Saved(Tensor(f"{t.name}.grad_accum", t.dims, FP32), CUDNN_ACCUMULATORS) for t in (q, k, v)]
    if axes.of("cp") != 1:
        out += cp_exchange(q, _root_of_expand(op.inputs[1], flow), _root_of_expand(pv.inputs[1], flow),
                           flow.tensors[pv.outputs[0]])
    return out


def _attention_workspace(op: Op, flow: Dataflow, phase: str, axes: AxisSizes) -> list[Saved]:
    return _attention_backward(op, flow, phase, axes, lambda q, k, v, _out: _cp_ring_buffers(q, k, v))


def _cp_ring_buffers(q: Tensor, k: Tensor, v: Tensor) -> list[Saved]:
    """Context parallelism's ring attention backward (TE AttnFuncWithCPAndKVP2P.backward, BF16;
    attention/dot_product_attention/context_parallel.py:2205-2210 at c188b533): two communication buffers of
    shape (2, *kv), each the K/V of one step and their gradient, k and v at the key/value heads (4·(k + v)); and
    each step's kernel outputs dq_, dk_, dv_ before they are added into the running gradients (2392-2403): one
    step's q + k + v. dq itself is `dq_buffer` (empty_like(q), 2205), the gradient the timeline already holds."""
    return [Saved(Tensor(f"{t.name}.cp_ring_{i}", t.dims), "CP ring K/V and dK/dV buffers (TE P2P backward)")
            for t in (k, v) for i in range(4)] + [
        Saved(Tensor(f"{t.name}.cp_step_grad", t.dims), "CP step's dq_, dk_, dv_ (TE P2P backward)") for t in (q, k, v)]


def _attention_a2a(op: Op, flow: Dataflow) -> list[Saved]:
    """Fused attention under all-to-all CP (TE >= 2.8): the output saved before the post-attention all-to-all is
    a storage of its own (context_parallel.py:3485/3517, 3569-3582 at TE v2.11), the size of the local output."""
    saved = _attention(op, flow)
    if op.name.endswith("pv"):
        out = flow.tensors[op.outputs[0]]
        saved.append(Saved(Tensor(f"{out.name}.pre_post_a2a", out.dims),
                           "attention output before the post-all-to-all (TE >= 2.8 CP a2a)"))
    return saved


def _matmul_cp_a2a(op: Op, flow: Dataflow) -> list[Saved]:
    if "core_attention" in op.tags:
        return _attention_a2a(op, flow)
    return inputs(0, 1)(op, flow)


def _cp_a2a_buffers(q: Tensor, k: Tensor, v: Tensor, out: Tensor) -> list[Saved]:
    """The attention backward under all-to-all CP: the output gradient exchanged into a new tensor
    (context_parallel.py:3691 at TE v2.11) and dq, dk, dv exchanged back into new tensors (:3810) while the
    kernel's own are alive; no ring buffers."""
    return [Saved(Tensor(f"{out.name}.grad_a2a", out.dims), "output gradient after the all-to-all (TE CP a2a)")] + [
        Saved(Tensor(f"{t.name}.grad_a2a", t.dims), "dq/dk/dv after the all-to-all (TE CP a2a)") for t in (q, k, v)]


def _attention_workspace_a2a(op: Op, flow: Dataflow, phase: str, axes: AxisSizes) -> list[Saved]:
    return _attention_backward(op, flow, phase, axes, _cp_a2a_buffers)


def _embedding_workspace(op: Op, flow: Dataflow, phase: str, axes: AxisSizes) -> list[Saved]:
    """The lookup's backward: F.embedding (MLM megatron/core/tensor_parallel/layers.py:281) has a dense weight
    gradient, the whole [V/TP, h] table in the weight's dtype, which DDP's hook adds into the FP32 main_grad and
    then frees (distributed_data_parallel.py:503-524): a transient of every micro-batch's embedding backward."""
    if phase != "backward" or not op.weights:
        return []
    w = op.weights[0]
    return [Saved(Tensor(f"{w.name}.grad", w.dims), f"dense weight gradient of {op.name} (freed by DDP's hook)")]


# PyTorch ops with no Megatron-Core module at 23e00ed0 (V3.2's indexer, V4's mHC and hash router): eager autograd's
# saves, as the torch-eager rule set has them. sigmoid: its output; div: numerator and denominator; affine (a tensor
# times a learned scale): the tensor; clamp: its input; gather: the int64 index; cast and sum: nothing; no_grad: no
# autograd node at all.
GENERIC_EAGER = ("sigmoid", "div", "affine", "clamp", "cast", "sum", "gather", "no_grad")

# What TransformerEngine and Megatron-Core's TE spec change on top of the local spec (`megatron-local`,
# symmem/rules/megatron_local_ops.py, measured to the byte on the CPU): every op kind not named here keeps what the
# local spec keeps (the linears' and the lookup's inputs, nothing for layout ops and residual adds, and eager
# autograd's saves for the PyTorch ops neither spec has a module for: GENERIC_EAGER). Each entry cites its source
# in the module docstring above. Op kinds only Hugging Face's dataflows have (sdpa_flash, grouped_mm, rotary_emb,
# masked_fill, index, softplus, ...: `--dataflow hf`, not megatron-te's default) keep the local spec's or eager
# autograd's rule here: not checked against TransformerEngine.
TE_CHANGES = {
    "rmsnorm": _norm,  # TE LayerNormLinear / RMSNorm: input and FP32 rstdev (torch's norm: FP32 copies)
    "layernorm": _layernorm,  # TE LayerNormLinear with LayerNorm: input, FP32 mean and rstdev
    "matmul": _matmul,  # fused attention: q, k, v, output, FP32 softmax statistics; no s x s scores
    "softmax": nothing,  # inside fused attention
    "dropout": nothing,  # p = 0 in the measured runs
    "silu": inputs(0),  # fused SwiGLU keeps its input: gate ...
    "mul": inputs(1),  # ... and up (the activation itself is not kept)
    "gelu": inputs(0, why="input (fused bias-GeLU, fused_bias_gelu.py:39-40)"),
    "rope": nothing,  # fused RoPE keeps only the shared frequency table
    "router_score": _router,  # the softmax router's FP32 logits and probabilities
    "topk": _topk,  # routing map, permute row-id map, FP32 top-k probabilities
    "dispatch": nothing,  # the fused permute keeps only the top-k's map
    "combine": nothing,  # unpermute: the probabilities are kept by the top-k
    "cross_entropy": inputs(0, why="BF16 logits (the gradient is written into them)"),  # TE fused cross-entropy
    "embedding": inputs(0, why="token ids"),
    "select": inputs(1, why="int32 selected-key indices (sparse attention)"),
}

RULES = RuleSet(
    "megatron-te",
    "Megatron-Core + TransformerEngine 2.11 (BF16): fused attention, fused SwiGLU, TE norms and linears, "
    "fused cross-entropy, all-to-all MoE dispatch",
    {**_local.RULES.rules, **TE_CHANGES},
    workspaces={"linear": _linear_workspace, "matmul": _attention_workspace, "embedding": _embedding_workspace},
    grad_in_place=frozenset({"cross_entropy"}),
    fused_tags=("core_attention", "swiglu"),
)

# All-to-all context parallelism (`--cp-comm-type a2a`): the same table with the attention's saves and backward
# workspace of TE's AttnFuncWithCPAndQKVOA2A (above); `Scenario.rules` chooses it when CP > 1 and the comm type is
# a2a.
RULES_CP_A2A = RuleSet(
    "megatron-te+cp-a2a",
    RULES.description + "; all-to-all context parallelism (TE >= 2.8 keeps the pre-all-to-all attention output)",
    {**RULES.rules, "matmul": _matmul_cp_a2a},
    workspaces={**RULES.workspaces, "matmul": _attention_workspace_a2a},
    grad_in_place=RULES.grad_in_place,
    fused_tags=RULES.fused_tags,
)
