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

`torchtitan` is the GPU's rule set (fused RMSNorm); `torchtitan-cpu` is what runs on the CPU, where the
measurements are made: they differ only in the RMSNorm rule.
"""

from __future__ import annotations

from symmem.graph import FP32, Dataflow, Dim, Op, Tensor
from symmem.rules import torch_eager
from symmem.rules._base import RuleSet, Saved, nothing


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


# the RoPE table is a model buffer (the profile's), kept by no op
_CHANGES = {"rotary_emb": nothing, "cross_entropy": _cross_entropy}

# torchtitan's Llama 3 runs q, k and v as one matrix product (wqkv, models/llama3's fuse_qkv): one mm for the
# per-op AC's every-other-mm count (`activations.sac_kept`)
WQKV = frozenset({"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"})


def _rule_set(name: str, where: str, rmsnorm, sac_saved_kinds: frozenset[str]) -> RuleSet:
    return RuleSet(name, f"torchtitan 0.3.0's Llama 3 on {where} (torch 2.13): torch-eager's rules with this RMSNorm, "
                   "the RoPE table as a buffer and nll_loss's total_weight",
                   {**torch_eager.RULES.rules, **_CHANGES, "rmsnorm": rmsnorm}, context_parallel=False,
                   sac_saved_kinds=sac_saved_kinds, gemm_groups=(WQKV,))


# Per-op AC's save list (torchtitan/distributed/activation_checkpoint.py:31-94) holds the GPU's SDPA kernels
# (`_scaled_dot_product_flash_attention`, `_efficient_attention`, cuDNN's; FlexAttention) but not the CPU's
# `_scaled_dot_product_flash_attention_for_cpu`: on the CPU the attention is recomputed (measured)
RULES = _rule_set("torchtitan", "a GPU (fused rms_norm)", _rms_norm_fused, frozenset({"sdpa_flash"}))
RULES_CPU = _rule_set("torchtitan-cpu", "the CPU (ATen's composite rms_norm; measured by symmem measure --framework "
                      "fsdp2)", _rms_norm_composite, frozenset())
