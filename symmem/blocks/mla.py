"""Multi-head Latent Attention (DeepSeek-V2/V3) as a dataflow.

Weight names follow the DeepSeek-V2 paper (W_DQ, W_UQ, W_QR, W_DKV, W_KR, W_UK, W_UV, W_O); the op names
follow Hugging Face's modules (q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj) so that both can
be found. Without a query latent (DeepSeek-V2-Lite) the query comes from one projection W_Q.
"""

from __future__ import annotations

import sympy

from symmem.blocks._dims import S_FULL, S_KV, S_SP, B, H, seq
from symmem.blocks.symbols import d_c, d_cq, d_h, d_hr, d_v, n_h
from symmem.errors import SymmemError
from symmem.graph import D, DataflowBuilder, Weight


def q_latent(model) -> bool:
    """Whether the query comes through a latent (q_lora_rank); DeepSeek-V2-Lite has none (q_lora_rank null)."""
    return model.has("d_cq")


def d_v_symbol(model) -> sympy.Symbol:
    """The symbol for the value head dimension: the paper's d_h where v_head_dim equals qk_nope_head_dim."""
    return d_h if model.value("d_v") == model.value("d_h") else d_v


def mla(fb: DataflowBuilder, x_in: str, *, resid_axis: str, q_latent: bool, convention: str, d_v,
        indexer=None, keys=None) -> str:
    """Append the attention block to `fb`; return the name of its output (the residual stream after attention).

    DeepSeek-V3.2 (DeepSeek Sparse Attention) passes `indexer(fb, x_norm, c_q_norm) -> indices` (its lightning
    indexer, `symmem.blocks.indexer`) and `keys`, the keys one query attends to (min(k_I, s)); the attention core
    then scores only the selected keys, and keeps the indices. Without them every query sees all s keys.

    `convention` is how W_QR splits over tensor parallelism: "paper" replicates it (and the paper's
    per-layer count of 107,429,888 at TP 2 follows), "megatron" splits it with W_UQ over heads, as
    Megatron-Core's `linear_q_up_proj` does.
    """
    fb.block = "mla"
    heads = D(n_h, "tp")
    prep = ["attention_prep"]  # rope, broadcast and concatenation that turn projections into q and k
    (x,) = fb.op("region", "attn_enter", [x_in], [("attn.x", (B, S_SP, H))])
    (xn,) = fb.op("rmsnorm", "input_layernorm", [x], [("attn.x_norm", (B, S_SP, H))],
                  [Weight("input_layernorm.weight", (H,))])
    if q_latent:
        # The latent is computed by a replicated W_DQ on the rank's own (sequence-sharded) tokens.
        (cq,) = fb.op("linear", "q_a_proj", [xn], [("attn.c_q", (B, S_SP, D(d_cq)))],
                      [Weight("W_DQ", (H, D(d_cq)))])
        (cqn,) = fb.op("rmsnorm", "q_a_layernorm", [cq], [("attn.c_q_norm", (B, S_SP, D(d_cq)))],
                       [Weight("q_a_layernorm.weight", (D(d_cq),))])
        idx = indexer(fb, xn, cqn) if indexer is not None else None
        (q_nope,) = fb.op("linear", "q_b_proj.nope", [cqn], [("attn.q_nope", (B, S_FULL, heads, D(d_h)))],
                          [Weight("W_UQ", (D(d_cq), heads, D(d_h)))], tags=["up_projection", "module:linear_q_up_proj"])
        qr_heads = heads if convention == "megatron" else D(n_h)
        (q_pe_all,) = fb.op("linear", "q_b_proj.rope", [cqn], [("attn.q_pe_all", (B, S_FULL, qr_heads, D(d_hr)))],
                            [Weight("W_QR", (D(d_cq), qr_heads, D(d_hr)))],
                            tags=["up_projection", "module:linear_q_up_proj"])
        # A replicated W_QR computes every head's rope part; each rank keeps its own heads.
        (q_pe,) = fb.op("view", "q_pe_local_heads", [q_pe_all], [("attn.q_pe", (B, S_FULL, heads, D(d_hr)))],
                        tags=prep)
    else:
        if indexer is not None:
            raise SymmemError("the lightning indexer reads the query latent: it needs q_lora_rank")
        (q_all,) = fb.op("linear", "q_proj", [xn], [("attn.q", (B, S_FULL, heads, D(d_h + d_hr)))],
                         [Weight("W_Q", (H, heads, D(d_h + d_hr)))])
        q_nope, q_pe = fb.op("view", "q_split", [q_all], [("attn.q_nope", (B, S_FULL, heads, D(d_h))),
                                                          ("attn.q_pe", (B, S_FULL, heads, D(d_hr)))], tags=prep)
    (ckv,) = fb.op("linear", "kv_a_proj", [xn], [("attn.c_kv", (B, S_SP, D(d_c)))], [Weight("W_DKV", (H, D(d_c)))],
                     tags=["module:linear_kv_down_proj"])
    (kpe,) = fb.op("linear", "kv_a_proj.rope", [xn], [("attn.k_pe", (B, S_SP, D(d_hr)))],
                   [Weight("W_KR", (H, D(d_hr)))], tags=["module:linear_kv_down_proj"])
    # "kv_cache": what inference keeps per token across decoding steps (the latent and the rope key)
    (ckvn,) = fb.op("rmsnorm", "kv_a_layernorm", [ckv], [("attn.c_kv_norm", (B, S_SP, D(d_c)))],
                    [Weight("kv_a_layernorm.weight", (D(d_c),))], tags=["kv_cache"])
    (k_nope,) = fb.op("linear", "kv_b_proj.k", [ckvn], [("attn.k_nope", (B, S_FULL, heads, D(d_h)))],
                      [Weight("W_UK", (D(d_c), heads, D(d_h)))], tags=["up_projection", "module:linear_kv_up_proj"])
    (v,) = fb.op("linear", "kv_b_proj.v", [ckvn], [("attn.v", (B, S_FULL, heads, D(d_v)))],
                 [Weight("W_UV", (D(d_c), heads, D(d_v)))], tags=["up_projection", "module:linear_kv_up_proj"])
    (q_pe_r,) = fb.op("rope", "q_rope", [q_pe], [("attn.q_pe_rot", (B, S_FULL, heads, D(d_hr)))], tags=prep)
    (k_pe_r,) = fb.op("rope", "k_rope", [kpe], [("attn.k_pe_rot", (B, S_SP, D(d_hr)))], tags=prep + ["kv_cache"])
    # W_KR's output is shared by all heads: gathered over the sequence and broadcast to the local heads.
    (k_pe_h,) = fb.op("expand", "k_pe_heads", [k_pe_r], [("attn.k_pe_heads", (B, S_FULL, heads, D(d_hr)))], tags=prep)
    (q,) = fb.op("concat", "q_cat", [q_nope, q_pe_r], [("attn.query", (B, S_FULL, heads, D(d_h + d_hr)))], tags=prep)
    (k,) = fb.op("concat", "k_cat", [k_nope, k_pe_h], [("attn.key", (B, S_FULL, heads, D(d_h + d_hr)))], tags=prep)
    core = ["core_attention"]
    kk = S_KV if keys is None else keys
    if indexer is not None:
        # the sparse kernel reads the selected keys through the indices (and keeps them to redo it in backward)
        fb.op("select", "sparse_select", [k, idx], [("attn.key_selected", (B, S_FULL, heads, kk, D(d_h + d_hr)))],
              tags=core)
    (sc,) = fb.op("matmul", "qk", [q, k], [("attn.scores", (B, heads, S_FULL, kk))], tags=core)
    (p,) = fb.op("softmax", "attn_softmax", [sc], [("attn.probs", (B, heads, S_FULL, kk))], tags=core)
    (pd,) = fb.op("dropout", "attn_dropout", [p], [("attn.probs_dropped", (B, heads, S_FULL, kk))], tags=core)
    (ctx,) = fb.op("matmul", "pv", [pd, v], [("attn.context", (B, S_FULL, heads, D(d_v)))], tags=core)
    # W_O is row-parallel: its output is reduce-scattered back to the sequence-sharded region.
    (o,) = fb.op("linear", "o_proj", [ctx], [("attn.out", (B, S_SP, H))], [Weight("W_O", (heads, D(d_v), H))])
    (od,) = fb.op("dropout", "attn_out_dropout", [o], [("attn.out_dropped", (B, S_SP, H))])
    (oe,) = fb.op("region", "attn_exit", [od], [("attn.out_resid", (B, seq(resid_axis), H))])
    (y,) = fb.op("add", "attn_residual", [x_in, oe], [("attn.y", (B, seq(resid_axis), H))])
    return y
