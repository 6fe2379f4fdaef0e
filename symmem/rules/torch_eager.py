"""What PyTorch eager autograd keeps for backward (torch 2.13), op kind by op kind.

Measured on Hugging Face's DeepSeek-V3/V2 and Llama decoder layers (docs/torch_eager_saved_tensors.md, section 8
for Llama) and exact on them with the `hf` dataflows (`symmem.blocks.hf`): tests/validate compares both to the
byte. Three things the paper's
accounting does not model, and this rule set does:

* dtypes: RMSNorm computes in FP32 and keeps an FP32 copy of its input and an FP32 rsqrt; softmax with
  dtype=float32, the router and sdpa's math backend are FP32 in a BF16 model; indices are int64;
* storage: a saved view keeps its whole base alive, a conversion to the dtype a tensor already has is that
  tensor (the dataflow declares views and conversions; `accounting.activations.storage_of` resolves them, after the
  activation dtype is known);
* what is not kept: no dropout at p = 0, nothing for additions, scalings, concatenations, index bookkeeping,
  and nothing from branches whose outputs are dropped (V3's group-limited expert choice).

Weights are parameters, never activations: an op keeping its weight keeps nothing more here.
On the paper's dataflows (`dataflow = "paper"`) the rules for the paper's abstract ops (router_score,
dispatch, combine, dropout with p > 0) are PyTorch's nearest equivalents; they are not measured.
"""

from __future__ import annotations

from symmem.graph import BOOL, FP32, INT64, Dataflow, Dim, Op, Tensor
from symmem.rules._base import RuleSet, Saved, combine, inputs, nothing, outputs


def _rmsnorm(op: Op, flow: Dataflow) -> list[Saved]:
    """HF's RMSNorm: x.to(fp32) (pow, mul), rsqrt(mean(x²)+eps) of shape (..., 1) (rsqrt, mul), and
    (x·rsqrt).to(dtype) (the weight's mul). Its output is kept by the op that reads it, if any."""
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    rows = y.dims[:-1] + (Dim(1),)
    return [Saved(Tensor(f"{y.name}.input_fp32", x.dims, FP32, cast_of=x.name), f"FP32 input of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.rsqrt", rows, FP32), f"FP32 rsqrt of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.normed", y.dims), f"normalized input (model dtype) of rmsnorm {op.name}")]


def _rmsnorm_offset(op: Op, flow: Dataflow) -> list[Saved]:
    """Gemma's RMSNorm: normalises x.float(), then scales by (1.0 + weight.float()) and returns .type_as(x): it keeps
    the FP32 input and rsqrt as HF's RMSNorm does, its normalised input in FP32 (the model dtype's copy comes only
    after the scaling), and the (1 + weight) it makes on every call, FP32 of the weight's size (measured)."""
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    rows = y.dims[:-1] + (Dim(1),)
    return [Saved(Tensor(f"{y.name}.input_fp32", x.dims, FP32, cast_of=x.name), f"FP32 input of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.rsqrt", rows, FP32), f"FP32 rsqrt of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.normed_fp32", y.dims, FP32), f"FP32 normalized input of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.one_plus_weight", op.weights[0].dims, FP32),
                  f"FP32 (1 + weight) of rmsnorm {op.name}")]


def _rmsnorm_fp32_weight(op: Op, flow: Dataflow) -> list[Saved]:
    """OLMo 2's and gpt-oss's RMSNorm: (weight · normalised).to(dtype): the weight multiplies in FP32, so the
    normalised input it keeps is FP32 (Llama's, multiplied after the cast, is in the model dtype)."""
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    rows = y.dims[:-1] + (Dim(1),)
    return [Saved(Tensor(f"{y.name}.input_fp32", x.dims, FP32, cast_of=x.name), f"FP32 input of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.rsqrt", rows, FP32), f"FP32 rsqrt of rmsnorm {op.name}"),
            Saved(Tensor(f"{y.name}.normed_fp32", y.dims, FP32), f"FP32 normalized input of rmsnorm {op.name}")]


def _l2norm(op: Op, flow: Dataflow) -> list[Saved]:
    """Llama 4's weightless L2 norm (Llama4TextL2Norm: x.float() * rsqrt(mean(x^2) + eps), then type_as): its FP32
    input and FP32 rsqrt per row, as an RMSNorm's without the weight's product (measured)."""
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    rows = y.dims[:-1] + (Dim(1),)
    return [Saved(Tensor(f"{y.name}.input_fp32", x.dims, FP32, cast_of=x.name), f"FP32 input of l2norm {op.name}"),
            Saved(Tensor(f"{y.name}.rsqrt", rows, FP32), f"FP32 rsqrt of l2norm {op.name}")]


def _temperature(op: Op, flow: Dataflow) -> list[Saved]:
    """Llama 4's attention temperature on NoPE layers: q times FP32 scales (1, s, 1, 1) made on every call; the
    product keeps the scales (q is not kept: the scales need no gradient)."""
    x = flow.tensors[op.inputs[0]]
    return [Saved(Tensor(f"{op.name}.scales", (Dim(1), x.dims[1]), FP32), f"FP32 per-position scales of {op.name}")]


def _sdpa_flash(op: Op, flow: Dataflow) -> list[Saved]:
    """ScaledDotProductFlashAttentionForCpuBackward0: q, k, v as passed (and the attention mask, when given one:
    a sliding layer's), its output and FP32 logsumexp."""
    return [*(Saved(flow.tensors[t], f"input of sdpa {op.name}") for t in op.inputs),
            *outputs(0, 1)(op, flow)]


def _dropout_noise(op: Op, flow: Dataflow) -> list[Saved]:
    """F.dropout(p > 0) on the CPU (ATen's _dropout_impl, aten/src/ATen/native/Dropout.cpp: input * noise, the
    noise a Bernoulli tensor in the input's dtype scaled by 1/(1 - p)): MulBackward0 keeps the noise (measured on
    Seed-OSS's attention). CUDA's fused native_dropout keeps a bool mask instead (`dropout`)."""
    out = flow.tensors[op.outputs[0]]
    return [Saved(Tensor(f"{out.name}.noise", out.dims, out.dtype), f"dropout noise of {op.name}")]


def _layernorm(op: Op, flow: Dataflow) -> list[Saved]:
    """F.layer_norm (NativeLayerNormBackward0): the input, and the per-row mean and rstd of shape (..., 1); its
    weight and bias are parameters. On the CPU (torch 2.13, measured) mean and rstd have the input's dtype; on CUDA
    they are FP32 (the accumulation type): O(sb) bytes either way. Reached only by the GPT family's paper dataflow
    (`--rules torch-eager --dataflow paper`): not validated against a Hugging Face layer."""
    x, y = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]]
    rows = y.dims[:-1] + (Dim(1),)
    return [Saved(x, f"input of layernorm {op.name}"),
            Saved(Tensor(f"{y.name}.mean", rows), f"per-row mean of layernorm {op.name}"),
            Saved(Tensor(f"{y.name}.rstd", rows), f"per-row rstd of layernorm {op.name}")]


def _indices(op: Op, flow: Dataflow) -> list[Saved]:
    # IndexBackward0 keeps the index tensors (not the indexed tensor: only its shape)
    return [Saved(flow.tensors[t], f"index of {op.kind} {op.name}") for t in op.inputs[1:]]


def _fp32(side: str, position: int, why: str):
    """Input or output `position`, kept as computed in FP32: a copy in a BF16 model, the tensor in an FP32 one."""
    def rule(op: Op, flow: Dataflow) -> list[Saved]:
        t = flow.tensors[(op.inputs if side == "input" else op.outputs)[position]]
        return [Saved(Tensor(f"{t.name}.fp32", t.dims, FP32, cast_of=t.name), f"{why} of {op.kind} {op.name}")]

    return rule


def _all_outputs(op: Op, flow: Dataflow) -> list[Saved]:
    return [Saved(flow.tensors[t], f"output of {op.kind} {op.name}, kept by every layer") for t in op.outputs]


def _dropout_mask(op: Op, flow: Dataflow) -> list[Saved]:
    # native_dropout keeps a bool mask for p > 0 (HF's DeepSeek configs have p = 0: no dropout op at all)
    out = flow.tensors[op.outputs[0]]
    return [Saved(Tensor(f"{out.name}.mask", out.dims, BOOL), f"bool mask of dropout {op.name}")]


def _cross_entropy(op: Op, flow: Dataflow) -> list[Saved]:
    # HF's loss: logits.float(), log_softmax (keeps its FP32 result), nll_loss (keeps the int64 targets).
    # Not measured by tests/validate (the harness measures decoder layers).
    logits = flow.tensors[op.inputs[0]]
    return [Saved(Tensor(f"{logits.name}.log_softmax", logits.dims, FP32), f"FP32 log-probabilities of {op.name}"),
            Saved(Tensor(f"{logits.name}.targets", logits.dims[:-1], INT64), f"int64 targets of {op.name}")]


RULES = RuleSet(
    "torch-eager",
    "PyTorch eager autograd (torch 2.13) as Hugging Face transformers 5.24.0 runs DeepSeek-V4/V3.2/V3/V2 and Llama: "
    "measured",
    {
        "linear": inputs(0),  # MmBackward0 / AddmmBackward0: the input (and the weight, a parameter)
        "grouped_mm": inputs(0, 1),  # GroupedMmBackward0: the input and the int32 offsets
        "rmsnorm": _rmsnorm,
        "rmsnorm_offset": _rmsnorm_offset,
        "rmsnorm_fp32_weight": _rmsnorm_fp32_weight,
        "dropout_noise": _dropout_noise,
        "l2norm": _l2norm,
        "temperature": _temperature,
        "matmul": inputs(0, 1),  # BmmBackward0: both operands (as flattened: views or copies)
        "softmax": outputs(0),  # SoftmaxBackward0 / SafeSoftmaxBackward0: the output
        "sigmoid": outputs(0),  # SigmoidBackward0: the output
        "silu": inputs(0),
        "layernorm": _layernorm,
        # F.gelu, exact or tanh (GeluBackward0 keeps its input; measured). Hugging Face's GPT-2 "gelu_new" is a
        # Python composition of tanh and products that keeps more; GPT has no Hugging Face dataflow here.
        "gelu": inputs(0),
        "mul": inputs(0, 1),  # MulBackward0 of two tensors that need grad (or one needs the other)
        "div": inputs(0, 1),  # DivBackward0: numerator and denominator
        "gather": inputs(1),  # GatherBackward0: the int64 index
        "index": _indices,
        # the paper dataflows' sparse-attention key selection (V3.2, V4): an index read, IndexBackward0 keeps the
        # (int32) indices; unmeasured (the hf dataflows gather by index ops of their own)
        "select": _indices,
        "index_add": inputs(0, 1),  # IndexAddBackward0: the index and the source
        "masked_fill": inputs(1),  # MaskedFillBackward0: the bool mask
        "topk": outputs(1),  # TopkBackward0: the int64 indices
        "argtopk": nothing,
        # DeepSeek-V4 (transformers 5.24 modeling_deepseek_v4.py; symmem.blocks.hf.deepseek_v4), measured:
        # rsqrt(x.pow(2).mean(-1, keepdim=True) + eps): PowBackward0 keeps x (tools/autograd/derivatives.yaml,
        # pow.Tensor_Scalar: self), RsqrtBackward0 keeps its result (rsqrt: result)
        "rms_rsqrt": combine(inputs(0), outputs(0)),
        # a tensor times a learned parameter (RMSNorm's FP32 weight, mHC's `scale`): MulBackward0 keeps the tensor
        # (mul.Tensor: other needs self for its gradient) and the parameter (a weight, not counted here)
        "param_mul": inputs(0),
        "softplus": inputs(0),  # SoftplusBackward0 keeps self (derivatives.yaml softplus: self, beta, threshold)
        "tanh": outputs(0),  # TanhBackward0 keeps its result (derivatives.yaml tanh: result): Gemma 2's soft-capping
        "sqrt": outputs(0),  # SqrtBackward0 keeps its result (derivatives.yaml sqrt: result)
        "clamp": inputs(0),  # ClampBackward1 keeps self (clamp: self, min, max; the mask is recomputed)
        # max(dim, keepdim).values: MaxBackward0 keeps the int64 indices (derivatives.yaml max.dim: indices)
        "max": outputs(0),
        # V4's apply_rotary_pos_emb: repeat_interleave builds new cos and sin per call (outputs 1 and 2); the
        # MulBackward0 nodes keep them (other of x·cos, x·sin; cos/sin need no grad, so x is not kept)
        "rope_tables_mul": outputs(1, 2),
        # the hyper head's mixes · hc_scale + hc_base (paper-style blocks.mhc, used outside the layers): the
        # MulBackward0 by a learned parameter keeps the mixes (unmeasured: the harness measures decoder layers)
        "affine": inputs(0),  # only indices leave it: its node and what it saved die at once
        # ScaledDotProductFlashAttentionForCpuBackward0: q, k, v (as passed: Llama's k, v at n_kv heads with
        # enable_gqa), output, FP32 logsumexp
        "sdpa_flash": _sdpa_flash,
        "rotary_emb": _all_outputs,  # the tables: kept by every layer's RoPE, counted once per stage
        "embedding": inputs(0),  # EmbeddingBackward0: the int64 token ids
        "cross_entropy": _cross_entropy,
        "dropout": _dropout_mask,
        # Ops whose backward needs nothing kept: conversions, views, copies, sums, scalings by constants,
        # concatenations, additions, integer bookkeeping outside autograd, and RoPE (whose multiplications keep
        # only the shared tables, counted with rotary_emb). `reshape` covers Llama's repeat_kv (expand + reshape:
        # a copy, or a view the dataflow declares) and matmul's flattenings; dropout at p = 0 is no op at all
        # (ATen's `dropout`, aten/src/ATen/native/Dropout.cpp, returns its input when p == 0).
        "cast": nothing,
        "scale": nothing,
        "sum": nothing,
        "split": nothing,
        "reshape": nothing,
        "contiguous": nothing,
        "concat": nothing,
        "add": nothing,
        "no_grad": nothing,
        "rope": nothing,
        "region": nothing,
        "view": nothing,
        "expand": nothing,
        # The paper's abstract MoE ops, on the paper's dataflows only (nearest PyTorch equivalents, unmeasured):
        "router_score": _fp32("output", 0, "FP32 scores"),  # sigmoid/softmax computed in FP32 keep their output
        "dispatch": inputs(1),  # gathering tokens by expert keeps the int64 indices
        "combine": combine(inputs(0), _fp32("input", 1, "FP32 routing weights")),  # weighting keeps both operands
    },
    context_parallel=False,  # transformers runs one device: its HF dataflows have no CP split
)
