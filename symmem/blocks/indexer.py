"""The lightning indexer of DeepSeek Sparse Attention (DeepSeek-V3.2) and its compressed variant (DeepSeek-V4 CSA),
as paper-style dataflows.

The indexer scores every (query, key) pair with a few small ReLU heads and keeps the top k_I keys per query; the
attention then runs over those keys only. Weight names are transformers 5.24's (`self_attn.indexer.*` in
`modeling_deepseek_v32.py`, `self_attn.compressor.indexer.*` in `modeling_deepseek_v4.py`).

What it keeps for backward: **nothing but the selected indices**. In transformers the V3.2 indexer runs under
`@torch.no_grad()` (modeling_deepseek_v32.py:178) and the V4 indexer yields only integer indices, so no tensor of
it reaches the loss: its ops are of kind `no_grad` (no autograd node, nothing saved), its parameters get no gradient
from the language-model loss (DeepSeek trains them with a separate, detached KL objective; as parameters they are
counted, and carry model states, like any other). Its [b, s, n_I, T] FP32 score tensor is a transient of the
forward pass, not an activation. The int32 indices are what a sparse attention kernel keeps to redo the
selection in backward (kind `select`).

Sizes that depend on the sequence: the top-k is `min(index_topk, T)` (modeling_deepseek_v32.py:241,
modeling_deepseek_v4.py:580), so a query attends to min(k_I, s) tokens (V3.2) or min(k_I, floor(s/m_C)) compressed
entries (V4), written with sympy's `Min` and `floor`.
"""

from __future__ import annotations

from functools import cache

import sympy

from symmem.blocks._dims import S_FULL, B, H
from symmem.blocks.symbols import d_cq, d_I, k_I, m_C, n_I
from symmem.graph import FP32, INT32, D, DataflowBuilder, Dim, Weight
from symmem.symbols import s

NO_GRAD = ("indexer",)


@cache  # sympy's Min and floor query assumptions each time they are built
def v32_keys() -> Dim:
    """Keys one query of DeepSeek-V3.2 attends to: min(index_topk, s) (the top-k over a shorter sequence is all)."""
    return D(sympy.Min(k_I, s))


@cache  # sympy's Min and floor query assumptions each time they are built
def csa_entries() -> sympy.Expr:
    """Compressed CSA entries of an s-token sequence: floor(s / m_C) (the trailing s mod m_C tokens make none)."""
    return sympy.floor(s / m_C)


@cache  # sympy's Min and floor query assumptions each time they are built
def v4_keys() -> Dim:
    """Compressed entries one CSA query selects: min(index_topk, floor(s / m_C))."""
    return D(sympy.Min(k_I, csa_entries()))


def v32_indexer(fb: DataflowBuilder, xn: str, cq: str, *, prefix: str = "self_attn.indexer.") -> str:
    """DeepseekV32Indexer: q from the query latent (wq_b), one key per token (wk, LayerNorm k_norm with bias, RoPE),
    per-head weights (weights_proj), ReLU scores, top-k. Returns the int32 indices [b, s, min(k_I, s)]."""
    heads = (D(n_I), D(d_I))
    (q,) = fb.op("no_grad", "indexer.wq_b", [cq], [("indexer.q", (B, S_FULL) + heads)],
                 [Weight(f"{prefix}wq_b.weight", (D(d_cq), D(n_I), D(d_I)))], tags=NO_GRAD)
    (k,) = fb.op("no_grad", "indexer.wk", [xn], [("indexer.k", (B, S_FULL, D(d_I)))],
                 [Weight(f"{prefix}wk.weight", (H, D(d_I)))], tags=NO_GRAD)
    (kn,) = fb.op("no_grad", "indexer.k_norm", [k], [("indexer.k_norm", (B, S_FULL, D(d_I)))],
                  [Weight(f"{prefix}k_norm.weight", (D(d_I),)), Weight(f"{prefix}k_norm.bias", (D(d_I),))],
                  tags=NO_GRAD + ("kv_cache",))
    (w,) = fb.op("no_grad", "indexer.weights_proj", [xn], [("indexer.head_weights", (B, S_FULL, D(n_I)), FP32)],
                 [Weight(f"{prefix}weights_proj.weight", (H, D(n_I)))], tags=NO_GRAD)
    (sc,) = fb.op("no_grad", "indexer.scores", [q, kn, w], [("indexer.scores", (B, S_FULL, D(s)), FP32)],
                  tags=NO_GRAD)
    (idx,) = fb.op("no_grad", "indexer.topk", [sc], [("indexer.topk_indices", (B, S_FULL, v32_keys()), INT32)],
                   tags=NO_GRAD)
    return idx


def v4_indexer(fb: DataflowBuilder, xn: str, cq: str, *, prefix: str = "self_attn.compressor.indexer.") -> str:
    """DeepseekV4Indexer: its own overlapping compressor at width d_I (kv_proj, gate_proj of 2 d_I, a learned
    position bias over the 2 m_C slots, kv_norm, RoPE) gives one key per m_C tokens; q from the query latent
    (q_b_proj), per-head weights (scorer.weights_proj), ReLU scores, top-k over the compressed entries.
    Returns the int32 indices [b, s, min(k_I, floor(s/m_C))]."""
    entries = D(csa_entries())
    (kv,) = fb.op("no_grad", "indexer.kv_proj", [xn], [("indexer.kv", (B, S_FULL, D(2 * d_I)))],
                  [Weight(f"{prefix}kv_proj.weight", (H, D(2 * d_I)))], tags=NO_GRAD)
    (gate,) = fb.op("no_grad", "indexer.gate_proj", [xn], [("indexer.gate", (B, S_FULL, D(2 * d_I)))],
                    [Weight(f"{prefix}gate_proj.weight", (H, D(2 * d_I))),
                     Weight(f"{prefix}position_bias", (D(m_C), D(2 * d_I)))], tags=NO_GRAD)
    (k,) = fb.op("no_grad", "indexer.compress", [kv, gate], [("indexer.k", (B, entries, D(d_I)))],
                 [Weight(f"{prefix}kv_norm.weight", (D(d_I),))], tags=NO_GRAD + ("kv_cache",))
    (q,) = fb.op("no_grad", "indexer.q_b_proj", [cq], [("indexer.q", (B, S_FULL, D(n_I), D(d_I)))],
                 [Weight(f"{prefix}q_b_proj.weight", (D(d_cq), D(n_I), D(d_I)))], tags=NO_GRAD)
    (w,) = fb.op("no_grad", "indexer.weights_proj", [xn], [("indexer.head_weights", (B, S_FULL, D(n_I)), FP32)],
                 [Weight(f"{prefix}scorer.weights_proj.weight", (H, D(n_I)))], tags=NO_GRAD)
    (sc,) = fb.op("no_grad", "indexer.scores", [q, k, w], [("indexer.scores", (B, S_FULL, entries), FP32)],
                  tags=NO_GRAD)
    (idx,) = fb.op("no_grad", "indexer.topk", [sc], [("indexer.topk_indices", (B, S_FULL, v4_keys()), INT32)],
                   tags=NO_GRAD)
    return idx
