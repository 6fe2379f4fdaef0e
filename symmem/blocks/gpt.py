"""GPT (GPT-2/GPT-3, Megatron-LM's GPT): the transformer layer Korthikanti et al. (2022), "Reducing Activation
Recomputation in Large Transformer Models" (arXiv 2205.05198) analyse, as a dataflow.

One layer (Section 4.1, Figure 2): LayerNorm, multi-head self-attention with `a` heads of width h/a (QKV
projection with bias, QKᵀ, softmax, dropout of the attention probabilities, ·V, output projection with bias,
dropout), residual; LayerNorm, MLP h → 4h (bias) → GeLU → 4h → h (bias), dropout, residual.

Parallel annotations follow Section 4.2 (Figures 4 and 5, Megatron-LM's tensor parallelism with sequence
parallelism): the heads and the MLP's 4h are split over `tp` (column-parallel QKV and first linear, row-parallel
output projection and second linear; the row-parallel biases are replicated); LayerNorms, dropouts and residuals
live in the sequence-parallel region (`sp`, s/t under sequence parallelism). The inputs of the column-parallel
linears are the sequence-sharded LayerNorm outputs, as Section 4.2.2 keeps them (the all-gathered copy is not
stored; it is gathered again in backward). Ops tagged `core_attention` (QKᵀ, softmax, dropout, ·V) are what
selective recomputation recomputes (Section 5).

Weight names are Hugging Face's GPT-2 names (`transformers` GPT2LMHeadModel: `transformer.h.N.attn.c_attn`, ...,
here without the `transformer.h.N.` prefix).
"""

from __future__ import annotations

from symmem.blocks._dims import S_FULL, S_SP, B, H, seq
from symmem.blocks.symbols import V, h
from symmem.graph import FP32, INT64, D, DataflowBuilder, Dim, Weight
from symmem.symbols import declare

#: attention heads, as Korthikanti et al. write them (the heads dimension of the attention scores)
a = declare("a", "a", "attention heads (Korthikanti)")
#: learned position embeddings (GPT-2's n_positions)
n_pos = declare("n_pos", "n_{pos}", "position embeddings (GPT-2's n_positions)")

HEADS = D(a, "tp")  # attention heads, split over tensor parallelism
HEAD_DIM = D(h / a)  # per-head width h/a


def layernorm(fb: DataflowBuilder, name: str, x: str, out: str) -> str:
    """LayerNorm with weight and bias over the hidden dimension (a sequence-parallel region op)."""
    dims = fb.tensors[x].dims
    (y,) = fb.op("layernorm", name, [x], [(out, dims)], [Weight(f"{name}.weight", (H,)), Weight(f"{name}.bias", (H,))])
    return y


def attention(fb: DataflowBuilder, x_in: str, *, attn_dropout: bool = True, resid_dropout: bool = True) -> str:
    """Append the attention block (pre-LayerNorm, residual) to `fb`; return the residual stream after it."""
    fb.block = "attn"
    (x,) = fb.op("region", "attn_enter", [x_in], [("attn.x", (B, S_SP, H))])
    xn = layernorm(fb, "ln_1", x, "attn.x_norm")
    # Column-parallel QKV projection: one GEMM of width 3h (HF's Conv1D c_attn), split into q, k, v per head.
    q, k, v = fb.op("linear", "attn.c_attn", [xn],
                    [(f"attn.{n}", (B, S_FULL, HEADS, HEAD_DIM)) for n in ("q", "k", "v")],
                    [Weight("attn.c_attn.weight", (H, D(3), HEADS, HEAD_DIM)),
                     Weight("attn.c_attn.bias", (D(3), HEADS, HEAD_DIM))])
    core = ["core_attention"]
    (sc,) = fb.op("matmul", "attn.qk", [q, k], [("attn.scores", (B, HEADS, S_FULL, S_FULL))], tags=core)
    (p,) = fb.op("softmax", "attn.softmax", [sc], [("attn.probs", (B, HEADS, S_FULL, S_FULL))], tags=core)
    if attn_dropout:
        (p,) = fb.op("dropout", "attn.attn_dropout", [p], [("attn.probs_dropped", (B, HEADS, S_FULL, S_FULL))],
                     tags=core)
    (ctx,) = fb.op("matmul", "attn.pv", [p, v], [("attn.context", (B, S_FULL, HEADS, HEAD_DIM))], tags=core)
    # Row-parallel output projection: its output is reduced (reduce-scattered under sequence parallelism);
    # the bias is added after the reduction, so it is replicated.
    (o,) = fb.op("linear", "attn.c_proj", [ctx], [("attn.out", (B, S_SP, H))],
                 [Weight("attn.c_proj.weight", (HEADS, HEAD_DIM, H)), Weight("attn.c_proj.bias", (H,))])
    if resid_dropout:
        (o,) = fb.op("dropout", "attn.resid_dropout", [o], [("attn.out_dropped", (B, S_SP, H))])
    (oe,) = fb.op("region", "attn_exit", [o], [("attn.out_resid", (B, seq("sp"), H))])
    (y,) = fb.op("add", "attn_residual", [x_in, oe], [("attn.y", (B, seq("sp"), H))])
    return y


def mlp(fb: DataflowBuilder, x_in: str, *, width: Dim, resid_dropout: bool = True) -> str:
    """Append the MLP block (pre-LayerNorm, h → width → h with GeLU, dropout, residual); return its output.
    `width` is 4h in GPT-2/3 (n_inner unset), split over tensor parallelism."""
    fb.block = "mlp"
    (x,) = fb.op("region", "mlp_enter", [x_in], [("mlp.x", (B, S_SP, H))])
    xn = layernorm(fb, "ln_2", x, "mlp.x_norm")
    (u,) = fb.op("linear", "mlp.c_fc", [xn], [("mlp.fc", (B, S_FULL, width))],
                 [Weight("mlp.c_fc.weight", (H, width)), Weight("mlp.c_fc.bias", (width,))])
    (g,) = fb.op("gelu", "mlp.act", [u], [("mlp.act", (B, S_FULL, width))])
    (o,) = fb.op("linear", "mlp.c_proj", [g], [("mlp.out", (B, S_SP, H))],
                 [Weight("mlp.c_proj.weight", (width, H)), Weight("mlp.c_proj.bias", (H,))])
    if resid_dropout:
        (o,) = fb.op("dropout", "mlp.dropout", [o], [("mlp.out_dropped", (B, S_SP, H))])
    (oe,) = fb.op("region", "mlp_exit", [o], [("mlp.out_resid", (B, seq("sp"), H))])
    (y,) = fb.op("add", "mlp_residual", [x_in, oe], [("mlp.y", (B, seq("sp"), H))])
    return y


def embedding(fb: DataflowBuilder, *, dropout: bool = True) -> str:
    """Token embeddings (`wte`, vocabulary-parallel) plus learned position embeddings (`wpe`, replicated), then
    the embedding dropout (Section 4.3: its mask is the input layer's only stored activation)."""
    fb.block = "embedding"
    ids = fb.input("input_ids", (B, Dim(S_FULL.size)), INT64)
    pos = fb.input("position_ids", (Dim(S_FULL.size),), INT64)
    (te,) = fb.op("embedding", "wte", [ids], [("wte.out", (B, S_SP, H))], [Weight("wte.weight", (D(V, "tp"), H))])
    (pe,) = fb.op("embedding", "wpe", [pos], [("wpe.out", (S_SP, H))], [Weight("wpe.weight", (D(n_pos), H))])
    (x,) = fb.op("add", "embed_add", [te, pe], [("embed.sum", (B, S_SP, H))])
    if dropout:
        (x,) = fb.op("dropout", "drop", [x], [("embed.out", (B, S_SP, H))])
    return x


def head(fb: DataflowBuilder, x_in: str, *, tied: bool = True) -> str:
    """Final LayerNorm (`ln_f`), the vocabulary-parallel output projection (tied to `wte` in GPT-2) and the
    cross-entropy loss."""
    fb.block = "head"
    (x,) = fb.op("region", "head_enter", [x_in], [("head.x", (B, S_SP, H))])
    xn = layernorm(fb, "ln_f", x, "head.x_norm")
    (logits,) = fb.op("linear", "lm_head", [xn], [("head.logits", (B, S_FULL, D(V, "tp")))],
                      [Weight("lm_head.weight", (H, D(V, "tp")), "dense", "wte.weight" if tied else None)])
    (loss,) = fb.op("cross_entropy", "loss", [logits], [("head.loss", (), FP32)])
    return loss
