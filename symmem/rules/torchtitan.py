"""torchtitan 0.3.0's Llama 3 (torch 2.13.0): what its modules keep for backward, read from its model code and
measured on the CPU (`symmem measure --framework fsdp2`, tests/validate/test_fsdp2.py).

Its ops are PyTorch eager ops, so the rule set is the `torch-eager` one (symmem/rules/torch_eager.py, measured on
transformers' Llama layers) over the same Hugging Face dataflow with SDPA attention, where torchtitan's code differs:

* **RMSNorm** is `nn.RMSNorm` (torchtitan/models/common/nn_modules.py:134), i.e. `F.rms_norm`. On a GPU it runs
  ATen's fused kernel `_fused_rms_norm` (a CUDA dispatch), whose backward keeps the input and the FP32 rstd per
  row (torch/_decomp/decompositions.py:1946-2001, `_fused_rms_norm` and its backward); the input is the block's
  input or residual, a storage already alive. On the CPU `rms_norm` is the composite of
  aten/src/ATen/native/layer_norm.cpp (`rms_norm_symint`: upcast to FP32, rsqrt(mean(x^2) + eps), multiply, then
  by the weight in FP32, cast back), which keeps the FP32 copy of the input, the FP32 rstd and the FP32
  normalized input (the weight's multiplication happens in FP32: measured, MulBackward0 saves an FP32 self), where
  Hugging Face's LlamaRMSNorm keeps the normalized input in the model's dtype.
* **RoPE** multiplies the complex view of an FP32 copy of q and k by the cached complex table
  (torchtitan/models/common/rope.py:255-265); the table needs no gradient, so the multiplication keeps only the
  table, a model buffer sized by the maximum sequence length (a framework buffer of the profile, not an
  activation): the `rotary_emb` op keeps nothing here.
* **Attention** is `F.scaled_dot_product_attention` with `enable_gqa` (torchtitan/models/common/attention.py:
  414-445, GQAttention :978-1010): q, k and v at their own heads, the output and the FP32 logsumexp, as
  torch-eager's `sdpa_flash` rule has them (CPU flash kernel; on a GPU cuDNN's and FlashAttention's SDPA keep the
  same tensors, and FlexAttention, torchtitan's default on GPUs, keeps q, k, v, the output and the FP32 logsumexp
  too, torch/_higher_order_ops/flex_attention.py: the block mask is shared, not per layer).
* **SwiGLU** `w2(F.silu(w1(x)) * w3(x))` (models/common/feed_forward.py:53-54) and the linears (`wqkv` fused: one
  matrix product keeps its input once, as three products of the same input do) are torch-eager's.
* **The loss**: `cross_entropy_loss` (torchtitan/components/loss.py:32-60): the logits flattened and cast to FP32,
  `F.cross_entropy(..., reduction="sum")`: log_softmax keeps its FP32 output, nll_loss the int64 targets and its
  FP32 `total_weight` scalar (tools/autograd/derivatives.yaml, nll_loss_forward: target, total_weight; measured:
  4 bytes).

  Its transients (the op's workspaces, beside the BF16 logits and the saved FP32 log-probabilities): in the forward
  the FP32 copy of the logits `.float()` makes, which `log_softmax` reads; in the backward `nll_loss_backward`'s
  FP32 gradient of the log-probabilities (a zeros tensor of the logits' shape, aten/src/ATen/native/LossNLL.cpp
  `nll_loss_backward_out_cpu_template` / its CUDA twin) alive while `_log_softmax_backward_data` writes the FP32
  gradient of the FP32 logits (tools/autograd/derivatives.yaml, _log_softmax: grad_input from grad and the saved
  output). Only then does the `.float()`'s backward cast that gradient to the BF16 gradient of the logits, when the
  first of the two and the saved log-probabilities are released: so the BF16 gradient is not alive beside them
  (`grad_in_place`, which keeps it out of the loss's own backward event), and 3 FP32 logits-sized tensors are the
  most the loss ever holds.

`torchtitan` is the GPU's rule set (fused RMSNorm); `torchtitan-cpu` is what runs on the CPU, where the
measurements are made: they differ only in the RMSNorm rule. `torchtitan-2412` is the code torchtitan's published
GPU benchmarks ran (torchtitan 9dec370, 2024-12-26; its benchmarks/llama3_h100_202412_torchtitan.md): q, k and v
three matrix products (torchtitan/models/llama/model.py at that commit, `Attention.forward`: `self.wq(x),
self.wk(x), self.wv(x)`), so its per-op checkpointing keeps the 1st, 3rd, 5th and 7th (wq, wv, w1, w2); and its
own `RMSNorm` (torchtitan/models/norms.py at that commit, `norm_type = "rmsnorm"` in train_configs/llama3_8b.toml:
`self._norm(x.float()).type_as(x) * self.weight`, `_norm` = `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) +
eps)`), the same ops as Hugging Face's LlamaRMSNorm, so torch-eager's rule (measured on it); and its attention repeats
k and v to n_h heads (`repeat_kv`, models/llama/model.py:116-131, :201-209 at that commit: expand, then reshape, a
copy) before a plain `scaled_dot_product_attention`, which keeps them at n_h heads (`Profile.repeat_kv`).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from symmem.graph import FP32, Dataflow, Dim, Op, Tensor, unsplit
from symmem.rules import torch_eager
from symmem.rules._base import RuleSet, Saved, inputs, nothing, outputs


def _rows(y: Tensor) -> tuple[Dim, ...]:
    return y.dims[:-1] + (Dim(1),)


def _rms_norm_fused(op: Op, flow: Dataflow) -> list[Saved]:
    """`_fused_rms_norm` (CUDA): the input and the FP32 rstd per row."""
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    return [Saved(x, f"input of rmsnorm {op.name} (fused rms_norm)"),
            Saved(Tensor(f"{y.name}.rstd", _rows(y), FP32), f"FP32 rstd of rmsnorm {op.name}")]


def _rms_norm_composite(op: Op, flow: Dataflow) -> list[Saved]:
    """ATen's composite `rms_norm` (CPU): FP32 input copy, FP32 rstd, FP32 normalized input."""
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    return [Saved(Tensor(f"{y.name}.input_fp32", x.dims, FP32, cast_of=x.name), f"FP32 input of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.rstd", _rows(y), FP32), f"FP32 rstd of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.normed_fp32", y.dims, FP32), f"FP32 normalized input of rmsnorm {op.name}")]


def _cross_entropy(op: Op, flow: Dataflow) -> list[Saved]:
    logits = flow.tensors[op.inputs[0]]
    return [*torch_eager._cross_entropy(op, flow),
            Saved(Tensor(f"{logits.name}.total_weight", (), FP32), f"nll_loss's FP32 total_weight of {op.name}")]


def _loss_workspace(op: Op, flow: Dataflow, phase: str, axes) -> list[Saved]:
    """The loss's FP32 transients (module docstring): the `.float()` copy in the forward; in the backward the FP32
    gradient of the log-probabilities and the FP32 gradient of the logits, together."""
    logits = flow.tensors[op.inputs[0]]
    if phase == "forward":
        return [Saved(Tensor(f"{logits.name}.fp32", logits.dims, FP32), f"FP32 copy of the logits ({op.name})")]
    return [Saved(Tensor(f"{logits.name}.grad_log_softmax", logits.dims, FP32),
                  f"nll_loss_backward's FP32 gradient of the log-probabilities ({op.name})"),
            Saved(Tensor(f"{logits.name}.grad_fp32", logits.dims, FP32),
                  f"_log_softmax_backward_data's FP32 gradient of the logits ({op.name})")]


def _flash_backward_workspace(op: Op, flow: Dataflow, phase: str, axes) -> list[Saved]:
    """FlashAttention-2's backward (PyTorch's CUDA `_flash_attention_backward`, the vendored flash_api.cpp `mha_bwd`)
    accumulates dq in FP32: `dq_accum`, [b, s_q rounded up to 128, heads, head_dim rounded], beside the FP32
    `softmax_d` [b, heads, s_q]; the rounding is left out (none at s a multiple of 128 and head_dim 128)."""
    if phase != "backward":
        return []
    q, lse = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[1]]
    return [Saved(Tensor(f"{q.name}.dq_accum", q.dims, FP32), f"FlashAttention's FP32 dq accumulator ({op.name})"),
            Saved(Tensor(f"{lse.name}.softmax_d", lse.dims, FP32), f"FlashAttention's FP32 softmax_d ({op.name})")]


def _ring_attention_workspace(op: Op, flow: Dataflow, phase: str, axes) -> list[Saved]:
    """torch's context-parallel SDPA under CP (`context_parallel` as torchtitan 9dec370 enters it, train.py:269-279:
    its default rotate method "allgather", load balancing on), derived from torch's source
    (torch/distributed/tensor/experimental/_attention.py, `_templated_ring_attention` and its backward; read at
    pytorch commit 0123248, the run's torch of 2024-12-23 not being at hand), not measured: it runs on CUDA only.
    What the autograd graph saves is the local q, k, v and the merged output and logsumexp, as without CP (the
    flash rule, on s/CP rows); these are the transients around the kernels. Forward: the contiguous copies of k and
    v (they arrive as transposed views), their concatenation for the exchange, the all-gather's output (every
    rank's k and v), and `_SDPAMerger`'s FP32 merged output beside a block's FP32 output and one FP32 temporary of
    the merge. Backward: the FP32 accumulators of dq, dk and dv, the copies, concatenation and all-gather of k and v
    again, and the FP32 dk and dv concatenated for the all-to-all that passes them on, beside its output."""
    if axes.of("cp") == 1:
        return []
    q, k, v = (flow.tensors[t] for t in op.inputs[:3])
    out = flow.tensors[op.outputs[0]]
    kv = [Saved(Tensor(f"{t.name}.cp_contiguous", t.dims, t.dtype), f"CP: contiguous copy of {t.name} ({op.name})")
          for t in (k, v)]
    kv += [Saved(Tensor(f"{t.name}.cp_cat", t.dims, t.dtype), f"CP: {t.name} concatenated for the exchange "
                 f"({op.name})") for t in (k, v)]
    kv += [Saved(Tensor(f"{t.name}.cp_gathered", unsplit(t.dims, "cp"), t.dtype),
                 f"CP: all-gathered {t.name} ({op.name})") for t in (k, v)]
    if phase == "forward":
        return [*kv, *(Saved(Tensor(f"{out.name}.cp_{n}", out.dims, FP32), f"CP: the merge's FP32 {n} ({op.name})")
                       for n in ("merged", "block", "temporary"))]
    acc = [Saved(Tensor(f"{t.name}.cp_grad_fp32", t.dims, FP32), f"CP: FP32 accumulator of d{t.name} ({op.name})")
           for t in (q, k, v)]
    passed = [Saved(Tensor(f"{t.name}.cp_grad_{n}", t.dims, FP32), f"CP: FP32 d{t.name} {what} ({op.name})")
              for t in (k, v) for n, what in (("sent", "concatenated to pass on"), ("received", "received"))]
    return [*acc, *kv, *passed]


def _flash_workspace_2412(op: Op, flow: Dataflow, phase: str, axes) -> list[Saved]:
    """9dec370's flash SDPA: FlashAttention's backward workspace, and under CP the ring's transients."""
    return [*_flash_backward_workspace(op, flow, phase, axes), *_ring_attention_workspace(op, flow, phase, axes)]


# the RoPE table is a model buffer (the profile's), kept by no op. Two op kinds of torchtitan's DeepSeek-V3
# (symmem.blocks.torchtitan): its `deterministic_scatter_add` keeps the index only (torchtitan/ops/scatter_add.py:28-43,
# `ctx.save_for_backward(index)`), and the FP32 copy CUDA's FP32 autocast makes of the router gate's BF16 weight is
# kept by the mm (MmBackward0 keeps mat2; torch/amp/autocast_mode.py, models/common/moe.py:297-299). Its MoE
# block's reduce-scatter of the routed experts' partial output (under TP; an identity without) keeps nothing
_CHANGES = {"rotary_emb": nothing, "cross_entropy": _cross_entropy, "scatter_add": inputs(0),
            "autocast_weight": outputs(0), "reduce_scatter": nothing}

# torchtitan's Llama 3 runs q, k and v as one matrix product (wqkv, models/llama3's fuse_qkv): one mm for the
# per-op AC's every-other-mm count (`activations.sac_kept`)
WQKV = frozenset({"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"})


def _rule_set(name: str, where: str, rmsnorm, sac_saved_kinds: frozenset[str],
              gemm_groups: tuple = (WQKV,), version: str = "torchtitan 0.3.0's Llama 3", torch: str = "2.13",
              workspaces: dict | None = None, context_parallel: bool = False) -> RuleSet:
    return RuleSet(name, f"{version} on {where} (torch {torch}): torch-eager's rules with this RMSNorm, "
                   "the RoPE table as a buffer and nll_loss's total_weight",
                   {**torch_eager.RULES.rules, **_CHANGES, "rmsnorm": rmsnorm}, context_parallel=context_parallel,
                   workspaces={"cross_entropy": _loss_workspace, **(workspaces or {})},
                   grad_in_place=frozenset({"cross_entropy"}),
                   sac_saved_kinds=sac_saved_kinds, gemm_groups=gemm_groups,
                   # torchtitan's full and per-layer AC are torch.utils.checkpoint (non-reentrant): a block keeps its
                   # input and routes again (DeepSeek-V3's MoE block under full AC keeps its input alone: measured)
                   pins_routing=False)


# Per-op AC's save list (torchtitan/distributed/activation_checkpoint.py:31-94) holds the GPU's SDPA kernels
# (`_scaled_dot_product_flash_attention`, `_efficient_attention`, cuDNN's; FlexAttention) but not the CPU's
# `_scaled_dot_product_flash_attention_for_cpu`: on the CPU the attention is recomputed (measured)
RULES = _rule_set("torchtitan", "a GPU (fused rms_norm)", _rms_norm_fused, frozenset({"sdpa_flash"}))
# SDPA's math path (the CPU's when q/k and v head sizes differ: DeepSeek-V3) runs two aten.bmm, compute-intensive
# ops on the save list (torch/_functorch/partitioners.py get_default_op_list): their FP32 outputs, the scores and
# the probabilities times v, are cached (measured)
RULES_CPU = _rule_set("torchtitan-cpu", "the CPU (ATen's composite rms_norm; measured by symmem measure --framework "
                      "fsdp2)", _rms_norm_composite, frozenset({"matmul"}))
# torchtitan 9dec370 (2024-12-26), the code of its published H100 benchmarks: three q, k, v products, its RMSNorm
# (module docstring); its per-op save list (torchtitan/parallelisms/parallelize_llama.py at that commit, `_save_list`:
# mm, the efficient and flash SDPA kernels, reduce_scatter_tensor, abs and max) keeps the GPU's SDPA outputs
# Under CP (torch's `context_parallel`: every activation's sequence sharded, the attention by the ring above) each rank
# keeps what one device keeps of its s/CP rows: the dataflows' split is what 9dec370 keeps. torchtitan 0.3.0's CP
# (FlexAttention's all-gathered k and v, kept for backward) is another set, not modelled
RULES_2412 = _rule_set("torchtitan-2412", "a GPU (its own RMSNorm)", torch_eager.RULES.rules["rmsnorm"],
                       frozenset({"sdpa_flash", "sdpa_efficient"}), gemm_groups=(),
                       version="torchtitan 9dec370's Llama 3 (2024-12-26)", torch="of 2024-12-23",
                       workspaces={"sdpa_flash": _flash_workspace_2412}, context_parallel=True)

# torchtitan e7c0cae (2025-06-11), the code of Trainy's published H200 runs, with their torch (2.8.0a0+5228986c39 of
# 2025-05-29): 9dec370's Llama 3 (three q, k, v products, k and v repeated to the query heads before SDPA) with
# torch's nn.RMSNorm (torchtitan/models/llama3/model.py:341-342, :416 there), which torch 2.8 runs as ATen's composite
# rms_norm on a GPU too (the fused CUDA kernel, `_fused_rms_norm`, came after: pytorch PR 153666), so as the CPU rule
# above; its per-op save list is 9dec370's without `abs` (torchtitan/models/llama3/parallelize_llama.py:218-227)
RULES_2506 = _rule_set("torchtitan-2506", "a GPU (nn.RMSNorm: ATen's composite rms_norm)", _rms_norm_composite,
                       frozenset({"sdpa_flash", "sdpa_efficient"}), gemm_groups=(),
                       version="torchtitan e7c0cae's Llama 3 (2025-06-11)", torch="2.8.0a0+5228986c39",
                       workspaces={"sdpa_flash": _flash_backward_workspace})

# ----------------------------------------------------------------------------------------------- under TP
# torchtitan 0.3.0's tensor parallelism with sequence parallelism (torchtitan/models/llama3/sharding.py:25-74 over
# models/common/decoder_sharding.py), measured on the CPU (FSDP 1 x TP 2 and FSDP 2 x TP 2, tests/validate/
# test_fsdp2.py). What differs from one device, beyond the dims' own "tp"/"sp" splits:
#
# * a column-parallel linear (wqkv, w1, w3, lm_head) reads its module's input redistributed from Shard(1) to
#   Replicate (decoder_sharding.py:189-200, :285-292; the final norm's output :119-139): an all-gather whose
#   full-sequence output the matrix product keeps for its weight's gradient (DTensor saves what the local mm reads),
#   where Megatron keeps the s/t shard and gathers again in backward. One gathered copy per source tensor, shared
#   by the products that read it (wq, wk, wv; w1, w3);
# * the embedding is vocabulary-parallel (:320-327; models/common/embedding.py:64-80): besides the ids it keeps the
#   mask of the ids in this rank's rows, `mask.unsqueeze(-1).to(out.dtype)`, [b, s, 1] in the activation dtype
#   (MulBackward0 of `out * mask`);
# * the loss is always loss-parallel (lm_head outputs Shard(-1); components/loss.py:32-50 dispatches to
#   `_LossParallelCrossEntropy`, :113-190): it keeps the FP32 log-probabilities of its vocabulary shard and the
#   labels (`ctx.save_for_backward(log_probs, labels_1d)`, :181), no `total_weight`.
def _sp_free(x: Tensor) -> tuple[Dim, ...]:
    return unsplit(x.dims, "sp")


def _split_over_sp(x: Tensor) -> bool:
    return any("sp" in d.axes for d in x.dims)


def _linear_tp(op: Op, flow: Dataflow) -> list[Saved]:
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    if _split_over_sp(x) and not _split_over_sp(y):  # column-parallel: its input all-gathered, kept whole
        return [Saved(Tensor(f"{x.name}.gathered", _sp_free(x), x.dtype),
                      f"all-gathered input of column-parallel {op.name} (DTensor TP keeps it whole)")]
    return torch_eager.RULES.rules["linear"](op, flow)


# The suffixes of the tensors an all-gather at micro-batch 1 leaves alive beside the gathered input, held until the
# backward by the autograd graph though no op saves them for backward (no saved-tensor hook sees them): the
# prediction's "saved" leaves them out, the memory keeps them (`symmem.validate.fsdp2.predict.held_per_block`)
GATHER_HELD = (".gather_output", ".gather_wrapped")
HELD_NOT_SAVED = (*GATHER_HELD,
                  # under FSDP2's float8 all-gather, a Float8 weight's FP32 scale: the gathered parameter FSDP2 keeps
                  # (a Float8TrainingTensor whose data the reshard frees) still holds it, whatever the checkpointing
                  # (symmem.precision.recipes.weight_scale)
                  ".float8_weight_scale")


def _linear_tp_b1(op: Op, flow: Dataflow) -> list[Saved]:
    """`_linear_tp` at micro-batch 1, where the all-gather of a column-parallel linear's input holds two more copies
    of the full-sequence input until the backward.

    DTensor's redistribution Shard(1) -> Replicate calls `funcol.all_gather_tensor(..., gather_dim=1)`
    (torch/distributed/_functional_collectives.py:207-223): `all_gather_into_tensor` gathers along dim 0 into a
    [T*b, s/T, h] buffer, `_maybe_wrap_tensor` wraps it through the `_wrap_tensor_autograd` custom op (:1324-1343)
    and `_maybe_view_chunk_cat` turns it into [b, s, h]. With b = 1 the buffer's first dim is T and the result is a
    view of it (the view optimization, :213-221; torch/_utils.py `_maybe_view_chunk_cat`), so the autograd graph of
    the view chain holds the gather's output and the custom op's output, two storages of the gathered input's size
    besides the one the matrix product saves. With b >= 2 the chunks are concatenated (`torch.cat`) into a fresh
    tensor and the two are freed. Measured on the CPU (torch 2.13.0, FSDP 1 x TP 2 and FSDP 2 x TP 2, b = 1: 16,384
    bytes per block beyond the saved bytes, at dim 64, s 32, BF16: two gathers, wqkv's and w1/w3's, two copies each;
    none at b = 2, none under full or per-op AC, whose forward keeps no graph; tests/validate/test_fsdp2.py)."""
    kept = _linear_tp(op, flow)
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    if not (_split_over_sp(x) and not _split_over_sp(y)):
        return kept
    return [*kept, *(Saved(Tensor(f"{x.name}{suffix}", _sp_free(x), x.dtype),
                           f"{what} of the all-gather of {op.name}'s input, held by the autograd graph at b = 1")
                     for suffix, what in zip(GATHER_HELD, ("the output", "the custom op's copy"), strict=True))]


def _embedding_tp(op: Op, flow: Dataflow) -> list[Saved]:
    ids = flow.tensors[op.inputs[0]]
    return [*torch_eager.RULES.rules["embedding"](op, flow),
            Saved(Tensor(f"{ids.name}.vocab_mask", (*ids.dims, Dim(1))),
                  f"mask of the ids in this rank's vocabulary rows ({op.name}, activation dtype)")]


def _sac_cached_tp(op: Op, flow: Dataflow, whole: bool, why: str) -> list[Saved]:
    """Per-op AC's cache under TP (torchtitan/distributed/activation_checkpoint.py:60-93: the save list holds
    `_c10d_functional.reduce_scatter_tensor` beside the compute-intensive ops). A row-parallel product (wo, w2: its
    output split over the sequence) is a local mm of the full sequence, a partial sum, then a reduce-scatter to s/T
    rows: when the mm is counted odd its full-sequence partial output is cached, and the reduce-scatter's output is
    cached whatever the count (measured: FSDP 1 x TP 2, tests/validate/test_fsdp2.py)."""
    outs = [flow.tensors[t] for t in op.outputs]
    if op.kind == "linear" and not _split_over_sp(flow.tensors[op.inputs[0]]) and _split_over_sp(outs[0]):
        y = outs[0]
        partial = [Saved(Tensor(f"{y.name}.partial", _sp_free(y), y.dtype),
                         f"{why}: the local mm's full-sequence partial sum")] if whole else []
        return [*partial, Saved(y, f"per-op AC: reduce-scatter output of row-parallel {op.name}, on the save list")]
    return [Saved(t, why) for t in outs] if whole else []


def _loss_parallel_workspace(op: Op, flow: Dataflow, phase: str, axes) -> list[Saved]:
    """`_LossParallelCrossEntropy`'s FP32 transients of the local logits' size (components/loss.py:128-158, :196-213):
    in the forward `logits_2d = .float()` and `shifted` beside the saved log-probabilities; in the backward
    `grad_input`, `exp(log_probs)` and their sum, alive together before the product."""
    logits = flow.tensors[op.inputs[0]]
    names = ("fp32", "shifted") if phase == "forward" else ("grad_input", "exp", "grad_sum")
    return [Saved(Tensor(f"{logits.name}.{n}", logits.dims, FP32), f"loss-parallel FP32 {n} ({op.name})")
            for n in names]


@lru_cache(maxsize=8)
def under_tp(base: RuleSet, one_sequence: bool = False) -> RuleSet:
    """`base` (a torchtitan 0.3.0 rule set) under TP with sequence parallelism (above); `one_sequence`: at
    micro-batch 1, where each all-gather holds two more copies (`_linear_tp_b1`)."""
    name, linear, more = (f"{base.name}+tp-b1", _linear_tp_b1, "; at micro-batch 1") if one_sequence else (
        f"{base.name}+tp", _linear_tp, "")
    return dataclasses.replace(
        base, name=name, description=base.description + "; under TP with sequence parallelism" + more,
        rules={**base.rules, "linear": linear, "embedding": _embedding_tp,
               "cross_entropy": torch_eager._cross_entropy},
        workspaces={**base.workspaces, "cross_entropy": _loss_parallel_workspace}, sac_cached=_sac_cached_tp,
        # the save list's `_c10d_functional.reduce_scatter_tensor` (activation_checkpoint.py:60-62): DeepSeek-V3's
        # reduce-scatter of the routed experts' output is cached (measured)
        sac_saved_kinds=base.sac_saved_kinds | {"reduce_scatter"})
