"""DeepSeek-V4's attention as a paper-style dataflow: shared-KV multi-query attention with a query latent, partial
RoPE, attention sinks, a sliding window, the grouped low-rank output projection, and per layer either nothing more
(sliding), a CSA compressor with the lightning indexer (compressed sparse attention, rate m_C = 4) or an HCA
compressor (heavily compressed attention, rate m_H = 128).

Weight names are transformers 5.24's (`DeepseekV4Attention`, modeling_deepseek_v4.py:780-809, and its
compressors, :395-403, :623-632). The core is counted as the attention DeepSeek trains with, not as transformers'
eager fallback (which scores all s + W keys densely and masks): each query scores
  sliding: min(s_w, s) window keys;
  HCA:     min(s_w, s) + floor(s/m_H) keys (the window and every compressed entry);
  CSA:     min(s_w, s) + min(k_I, floor(s/m_C)) keys (the window and the entries its indexer selects);
plus one learned sink logit per head (`sinks`), in the Korthikanti manner: QKᵀ keeps both operands, the softmax
its output, ·V both operands. K and V are one tensor (one KV head, head dimension d_k, K = V). Compressed lengths
round down: the trailing s mod m tokens form no entry (`usable = (s // rate) * rate`, :419, :649). V4 trains
without dropout (attention_dropout = 0): no masks.

Parallelism: query heads, the output groups and the sinks split over TP; the single KV head, the compressors and
the indexer are replicated (computed on the full sequence after the all-gather).
"""

from __future__ import annotations

from functools import cache

import sympy

from symmem.blocks._dims import S_FULL, S_SP, B, H
from symmem.blocks.indexer import csa_entries, v4_indexer, v4_keys
from symmem.blocks.symbols import d_cq, d_k, d_o, m_C, m_H, n_g, n_h, s_w
from symmem.graph import D, DataflowBuilder, Weight
from symmem.symbols import s

ATTN_TYPES = ("sliding", "csa", "hca")
PREP = ("attention_prep",)
CORE = ("core_attention",)


@cache  # sympy's Min and floor query assumptions each time they are built
def window_keys() -> sympy.Expr:
    return sympy.Min(s_w, s)


@cache  # sympy's Min and floor query assumptions each time they are built
def hca_entries() -> sympy.Expr:
    return sympy.floor(s / m_H)


@cache  # sympy's Min and floor query assumptions each time they are built
def keys_per_query(kind: str) -> sympy.Expr:
    """Keys one query scores (sink excluded), by attention type."""
    if kind == "sliding":
        return window_keys()
    if kind == "hca":
        return window_keys() + hca_entries()
    return window_keys() + v4_keys().size


def v4_attention(fb: DataflowBuilder, x: str, kind: str) -> str:
    """input_layernorm + attention on the collapsed stream `x` [b, s, h]; returns the block output [b, s, h]."""
    fb.block = "attn"
    heads = D(n_h, "tp")
    (xn,) = fb.op("rmsnorm", "input_layernorm", [x], [("attn.x_norm", (B, S_SP, H))],
                  [Weight("input_layernorm.weight", (H,))])
    (cq,) = fb.op("linear", "q_a_proj", [xn], [("attn.q_a", (B, S_SP, D(d_cq)))],
                  [Weight("self_attn.q_a_proj.weight", (H, D(d_cq)))])
    (cqn,) = fb.op("rmsnorm", "q_a_norm", [cq], [("attn.q_residual", (B, S_SP, D(d_cq)))],
                   [Weight("self_attn.q_a_norm.weight", (D(d_cq),))])
    (q,) = fb.op("linear", "q_b_proj", [cqn], [("attn.q", (B, S_FULL, heads, D(d_k)))],
                 [Weight("self_attn.q_b_proj.weight", (D(d_cq), heads, D(d_k)))], tags=["up_projection"])
    (qn,) = fb.op("rmsnorm", "q_b_norm", [q], [("attn.q_norm", (B, S_FULL, heads, D(d_k)))])  # unweighted
    (query,) = fb.op("rope", "q_rope", [qn], [("attn.query", (B, S_FULL, heads, D(d_k)))], tags=PREP)
    (kv,) = fb.op("linear", "kv_proj", [xn], [("attn.kv", (B, S_SP, D(d_k)))],
                  [Weight("self_attn.kv_proj.weight", (H, D(d_k)))])
    (kvn,) = fb.op("rmsnorm", "kv_norm", [kv], [("attn.kv_norm", (B, S_SP, D(d_k)))],
                   [Weight("self_attn.kv_norm.weight", (D(d_k),))])
    # inference keeps the last s_w of these (the sliding window): "kv_cache_window"
    (kvr,) = fb.op("rope", "kv_rope", [kvn], [("attn.kv_rot", (B, S_SP, D(d_k)))], tags=PREP + ("kv_cache_window",))
    (kv_full,) = fb.op("region", "kv_gather", [kvr], [("attn.kv_full", (B, S_FULL, D(d_k)))])
    n_keys = D(keys_per_query(kind))
    if kind == "sliding":
        kv_all = kv_full
    else:
        (xf,) = fb.op("region", "compressor_gather", [xn], [("attn.x_norm_full", (B, S_FULL, H))])
        ckv = compressor(fb, xf, kind)
        entries = csa_entries() if kind == "csa" else hca_entries()
        (kv_all,) = fb.op("concat", "kv_cat", [kv_full, ckv], [("attn.kv_all", (B, D(s + entries), D(d_k)))],
                          tags=PREP)
        if kind == "csa":
            (cqf,) = fb.op("region", "indexer_gather", [cqn], [("attn.q_residual_full", (B, S_FULL, D(d_cq)))])
            idx = v4_indexer(fb, xf, cqf)
            fb.block = "attn"
            fb.op("select", "sparse_select", [kv_all, idx], [("attn.kv_selected", (B, S_FULL, n_keys, D(d_k)))],
                  tags=CORE)
    if kind == "sliding":
        # the window is a band of the sequence: a kernel reads it by position, no index tensor
        pass
    (sc,) = fb.op("matmul", "qk", [query, kv_all], [("attn.scores", (B, heads, S_FULL, n_keys))], tags=CORE)
    (sk,) = fb.op("concat", "sink_cat", [sc], [("attn.scores_sink", (B, heads, S_FULL, D(n_keys.size + 1)))],
                  [Weight("self_attn.sinks", (heads,))], tags=CORE)
    (p,) = fb.op("softmax", "attn_softmax", [sk], [("attn.probs", (B, heads, S_FULL, D(n_keys.size + 1)))],
                 tags=CORE)
    (ctx,) = fb.op("matmul", "pv", [p, kv_all], [("attn.context", (B, S_FULL, heads, D(d_k)))], tags=CORE)
    # V carried RoPE: the output's rope slice is rotated back at the query position (:877)
    (ctx_r,) = fb.op("rope", "o_rope_inverse", [ctx], [("attn.context_rot", (B, S_FULL, heads, D(d_k)))], tags=PREP)
    groups = D(n_g, "tp")
    (oa,) = fb.op("linear", "o_a_proj", [ctx_r], [("attn.o_a", (B, S_FULL, groups, D(d_o)))],
                  [Weight("self_attn.o_a_proj.weight", (groups, D(d_o), D(n_h * d_k / n_g)))])
    (o,) = fb.op("linear", "o_b_proj", [oa], [("attn.out", (B, S_SP, H))],
                 [Weight("self_attn.o_b_proj.weight", (H, groups, D(d_o)))])
    return o


def compressor(fb: DataflowBuilder, xf: str, kind: str) -> str:
    """A KV compressor on the full-sequence normed input: per window of m tokens, softmax-gated pooling (a learned
    position bias over the slots), kv_norm, RoPE; one entry of d_k per window. CSA: two series of width 2 d_k and
    overlapping windows of 2 m_C slots (stride m_C); HCA: one series of d_k, disjoint windows of m_H."""
    p = "self_attn.compressor."
    if kind == "csa":
        width, slots, series, entries = D(2 * d_k), D(2 * m_C), D(m_C), csa_entries()
    else:
        width, slots, series, entries = D(d_k), D(m_H), D(m_H), hca_entries()
    W = D(entries)
    (ckv,) = fb.op("linear", "compressor.kv_proj", [xf], [("compressor.kv", (B, S_FULL, width))],
                   [Weight(f"{p}kv_proj.weight", (H, width))])
    (cg,) = fb.op("linear", "compressor.gate_proj", [xf], [("compressor.gate", (B, S_FULL, width))],
                  [Weight(f"{p}gate_proj.weight", (H, width))])
    (gb,) = fb.op("add", "compressor.position_bias", [cg], [("compressor.gate_biased", (B, S_FULL, width))],
                  [Weight(f"{p}position_bias", (series, width))])
    # CSA lays the two series out as 2 m_C overlapping slots per entry (new tensors); HCA views its windows
    (kw,) = fb.op("concat", "compressor.kv_windows", [ckv], [("compressor.kv_windows", (B, W, slots, D(d_k)))])
    (gw,) = fb.op("concat", "compressor.gate_windows", [gb], [("compressor.gate_windows", (B, W, slots, D(d_k)))])
    if kind == "hca":
        fb.alias(kw, view_of=ckv)
    (pw,) = fb.op("softmax", "compressor.softmax", [gw], [("compressor.weights", (B, W, slots, D(d_k)))])
    (pk,) = fb.op("mul", "compressor.pool_mul", [kw, pw], [("compressor.weighted", (B, W, slots, D(d_k)))])
    (pooled,) = fb.op("sum", "compressor.pool", [pk], [("compressor.pooled", (B, W, D(d_k)))])
    (pn,) = fb.op("rmsnorm", "compressor.kv_norm", [pooled], [("compressor.kv_norm", (B, W, D(d_k)))],
                  [Weight(f"{p}kv_norm.weight", (D(d_k),))])
    (out,) = fb.op("rope", "compressor.rope", [pn], [("compressor.entries", (B, W, D(d_k)))],
                   tags=PREP + ("kv_cache",))
    return out



