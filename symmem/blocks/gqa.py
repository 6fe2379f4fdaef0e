"""Grouped-query attention (Llama 2/3): n_h query heads share n_kv key/value heads, RoPE on q and k.

Weight and op names are Hugging Face's (`LlamaAttention`: q_proj, k_proj, v_proj, o_proj, no biases). The attention
core is written as the unfused computation that Korthikanti et al. (2022) account for: key and value are first
repeated to the n_h query heads (Megatron-LM's unfused `DotProductAttention` does the same,
megatron/core/transformer/dot_product_attention.py: `key.repeat_interleave(num_attention_heads_per_partition //
num_query_groups_per_partition, dim=2)`), then QKᵀ, softmax, optional dropout, ·V.
"""

from __future__ import annotations

from symmem.blocks._dims import S_FULL, S_KV, S_SP, B, H, seq
from symmem.blocks.symbols import d_h, n_h
from symmem.graph import D, DataflowBuilder, Weight
from symmem.symbols import declare

n_kv = declare("n_kv", "n_{kv}", "key/value heads (grouped-query attention)")


def gqa(fb: DataflowBuilder, x_in: str, *, resid_axis: str = "sp", attention_dropout: bool = False) -> str:
    """Append the attention block (pre-norm, residual) to `fb`; return the residual stream after it."""
    fb.block = "attn"
    heads, kv_heads = D(n_h, "tp"), D(n_kv, "tp")
    prep = ["attention_prep"]
    qkv = ["module:linear_qkv"]  # Megatron-Core computes q, k, v with one fused linear_qkv
    (x,) = fb.op("region", "attn_enter", [x_in], [("attn.x", (B, S_SP, H))])
    (xn,) = fb.op("rmsnorm", "input_layernorm", [x], [("attn.x_norm", (B, S_SP, H))],
                  [Weight("input_layernorm.weight", (H,))])
    (q,) = fb.op("linear", "q_proj", [xn], [("attn.q", (B, S_FULL, heads, D(d_h)))],
                 [Weight("self_attn.q_proj.weight", (H, heads, D(d_h)))], tags=qkv)
    (k,) = fb.op("linear", "k_proj", [xn], [("attn.k", (B, S_FULL, kv_heads, D(d_h)))],
                 [Weight("self_attn.k_proj.weight", (H, kv_heads, D(d_h)))], tags=qkv)
    (v,) = fb.op("linear", "v_proj", [xn], [("attn.v", (B, S_FULL, kv_heads, D(d_h)))],
                 [Weight("self_attn.v_proj.weight", (H, kv_heads, D(d_h)))], tags=qkv)
    (qr,) = fb.op("rope", "q_rope", [q], [("attn.query", (B, S_FULL, heads, D(d_h)))], tags=prep)
    (kr,) = fb.op("rope", "k_rope", [k], [("attn.key", (B, S_FULL, kv_heads, D(d_h)))], tags=prep)
    core = ["core_attention"]
    (ke,) = fb.op("expand", "repeat_kv.key", [kr], [("attn.key_heads", (B, S_FULL, heads, D(d_h)))], tags=core)
    (ve,) = fb.op("expand", "repeat_kv.value", [v], [("attn.value_heads", (B, S_FULL, heads, D(d_h)))], tags=core)
    (sc,) = fb.op("matmul", "qk", [qr, ke], [("attn.scores", (B, heads, S_FULL, S_KV))], tags=core)
    (p,) = fb.op("softmax", "attn_softmax", [sc], [("attn.probs", (B, heads, S_FULL, S_KV))], tags=core)
    if attention_dropout:
        (p,) = fb.op("dropout", "attn_dropout", [p], [("attn.probs_dropped", (B, heads, S_FULL, S_KV))],
                     tags=core)
    (ctx,) = fb.op("matmul", "pv", [p, ve], [("attn.context", (B, S_FULL, heads, D(d_h)))], tags=core)
    # o_proj is row-parallel: its output is reduce-scattered back to the sequence-sharded region.
    (o,) = fb.op("linear", "o_proj", [ctx], [("attn.out", (B, S_SP, H))],
                 [Weight("self_attn.o_proj.weight", (heads, D(d_h), H))])
    (oe,) = fb.op("region", "attn_exit", [o], [("attn.out_resid", (B, seq(resid_axis), H))])
    (y,) = fb.op("add", "attn_residual", [x_in, oe], [("attn.y", (B, seq(resid_axis), H))])
    return y
