"""The paper's accounting (Korthikanti et al. 2022, as arXiv 2502.07846 applies it to MLA and MoE).

Activations are kept in the run's activation dtype (BF16, 2 bytes); a dropout mask costs 1 byte per element.
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198), Section 4.1
("Activations Memory Per Transformer Layer") is the source of the rules for the ops of its GPT layer: a linear keeps
its input (QKV 2sbh, output projection 2sbh, MLP 2sbh and 8sbh), QKᵀ keeps q and k (4sbh), softmax its output
(2as²b), dropout a 1-byte mask (as²b, sbh), softmax·V both operands (2as²b + 2sbh), GeLU its input (8sbh), each
LayerNorm its input (2sbh); in all sbh(34 + 5as/h) per layer, the first row of its Table 2. Beyond the layer
(its Section 4.3) the input embedding keeps its dropout mask (sbh/t under sequence parallelism), and here also the
token ids its lookup needs in backward (rule `embedding`, below).
"""

from __future__ import annotations

from symmem.graph import FP32, MASK, Dataflow, Op, Tensor
from symmem.rules._base import RuleSet, Saved, as_dtype, combine, inputs, nothing, outputs


def _dropout_mask(op: Op, flow: Dataflow) -> list[Saved]:
    out = flow.tensors[op.outputs[0]]
    return [Saved(as_dtype(out, MASK, "mask"), f"mask of dropout {op.name}")]


def _logits_fp32(op: Op, flow: Dataflow) -> list[Saved]:
    # Megatron's vocabulary-parallel cross-entropy keeps the logits in FP32 (Korthikanti: 4sbv/t).
    logits = flow.tensors[op.inputs[0]]
    return [Saved(as_dtype(logits, FP32, "fp32"), f"FP32 logits of cross-entropy {op.name}")]


def _clamp_mask(op: Op, flow: Dataflow) -> list[Saved]:
    # A clamp's backward passes the gradient where the input was inside the limits: a 1-byte mask, as for dropout.
    out = flow.tensors[op.outputs[0]]
    return [Saved(Tensor(f"{out.name}.clamp_mask", out.dims, MASK), f"mask of clamp {op.name}")]


RULES = RuleSet(
    "paper",
    "Korthikanti-style accounting, as the paper counts its terms",
    {
        "linear": inputs(0),  # the weight gradient needs the input
        "rmsnorm": inputs(0),  # the paper counts the norm input
        # Korthikanti Section 4.1, LayerNorm: each layer norm stores its input, 2sbh (the per-row mean and
        # variance, O(sb), are not counted).
        "layernorm": inputs(0),
        # Korthikanti Section 4.1, MLP: the GeLU non-linearity keeps its input, 8sbh (its output is kept by the
        # second linear, as that linear's input, another 8sbh).
        "gelu": inputs(0),
        "matmul": inputs(0, 1),  # both operands (QK^T, and softmax·V)
        "softmax": outputs(0),  # softmax's backward needs its output
        "dropout": _dropout_mask,
        "silu": inputs(0),
        "mul": inputs(0, 1),
        # The paper counts the router's logits and its probabilities (4bsN per layer): the score function
        # is charged both, since its backward (and the auxiliary balance loss) reads them.
        "router_score": combine(inputs(0, why="logits"), outputs(0, why="probabilities")),
        # The routing weights are kept to weight the experts' outputs on the way back (2bsN_r per layer).
        "combine": inputs(1, why="routing weights"),
        "cross_entropy": _logits_fp32,
        # Ops whose backward needs nothing kept: data movement, additions, rotations, top-k selection.
        "region": nothing,
        "view": nothing,
        "concat": nothing,
        "expand": nothing,
        "add": nothing,
        "rope": nothing,  # the rotation's backward needs only cos/sin, which are constants
        "topk": nothing,
        "dispatch": nothing,
        # The lookup's backward scatters the gradient rows by token id, so it keeps the ids: int64, b·s per rank (the
        # whole sequence: every TP rank looks up all tokens). Megatron-LM 23e00ed0, tensor_parallel/layers.py:281
        # (`F.embedding(masked_input, self.weight)`; at TP > 1 `masked_input` is a shifted copy of the ids,
        # 268-273, the same size). Korthikanti et al. 2022 (Section 4.3) leave them out as not sizable; they are
        # kept all the same, as torch-eager and megatron-te count them. Not modelled: at TP > 1 the bool mask of
        # ids outside the rank's vocabulary shard (layers.py:270, 284), b·s bytes more.
        "embedding": inputs(0, why="token ids"),
        # DeepSeek-V3.2 / V4 (symmem.blocks.indexer, v4_attention, mhc, hash_moe):
        "no_grad": nothing,  # no autograd node (the lightning indexer: transformers runs it under no_grad)
        "select": inputs(1, why="selected indices"),  # a sparse-attention kernel keeps its int32 key indices
        "tanh": outputs(0),  # tanh's backward needs its output (Gemma 2's soft-capping)
        "scale": nothing,  # multiplying by a constant (Gemma's sqrt(h) embedding scale, soft-capping's 1/cap)
        "sigmoid": outputs(0),  # sigmoid's backward needs its output (mHC's pre and post gates)
        "div": inputs(0, 1),  # numerator and denominator (each Sinkhorn normalization)
        "affine": inputs(0),  # x * scale + bias with a learned scale: the scale's gradient needs x (mHC)
        "clamp": _clamp_mask,  # V4's SwiGLU clamps at swiglu_limit
        "cast": nothing,
        "sum": nothing,
        "gather": nothing,  # the hash router's lookup (an index read, like topk)
    },
)
