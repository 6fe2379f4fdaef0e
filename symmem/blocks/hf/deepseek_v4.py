"""Hugging Face's `DeepseekV4DecoderLayer` (transformers 5.24.0, models/deepseek_v4/modeling_deepseek_v4.py, "M4"
below) as a torch-eager dataflow: mHC around the attention and around the MoE block, shared-KV attention with
sinks (sliding, CSA or HCA), hash-routed or sqrt-softplus-routed MoE with clamped SwiGLU experts.

What autograd keeps (measured, /work/notes/v4/saved.md, and tests/validate/test_v4_exact.py):
* mHC (`DeepseekV4HyperConnection`, M4:952-996) runs in FP32 whatever the model dtype: the streams flattened to FP32
  (a view in an FP32 model, a copy in BF16), an unweighted RMSNorm (keeps its FP32 input and rsqrt; its
  normalized output is `fn`'s input), the mixes (kept whole by the three `· scale` multiplications of its slices),
  two sigmoids, one softmax, 2·iters − 1 Sinkhorn divisions (numerator and denominator each), and the collapse
  Σ_k pre_k X_k (pre + eps and the model-dtype streams). After the block: post (cast), the block output, comb
  (cast) and the streams again (M4:1191-1193).
* V4's RMSNorm (`DeepseekV4RMSNorm`, M4:55-61) has an FP32 weight: FP32 input, rsqrt, and the FP32 normalized
  tensor the weight multiplies; the cast result is what the next projection keeps. The unweighted norm
  (M4:67-73, q_b_norm, mHC's input_norm) keeps its FP32 input, rsqrt, the input and rsqrt cast to the input dtype.
* Partial RoPE (M4:353-370) builds fresh cos/sin `repeat_interleave` tables per call: [b, 1, s, r] in the model
  dtype, kept by the two multiplications; the layer owns them (nothing is shared across layers).
* Attention (M4:727-755, eager only): one KV head used as K and V (expanded, stride 0 over heads); QKᵀ and PV keep
  q, the key and the value flattened over (b, n_h) (a view of kv when b = 1, a copy otherwise), the int64 max
  indices of the overflow guard, the FP32 softmax over [scores | sink] (T + 1 columns) and its probabilities
  without the sink column cast to the model dtype (a view in FP32).
* Output: inverse RoPE (cos, −sin), `o_a_proj` bmm over [g, b·s, h·d/g] (a copy), `o_b_proj` on [b·s, g·r_o].
* MoE (M4:1077-1146, grouped_mm experts, integrations/moe.py:424-537): router input, softplus input, sqrt output
  (also gather's self), int64 indices (the hash table lookup or top-k), normalization numerator and denominator,
  two int64 index vectors, int32 offsets, gathered tokens, gate_up output (both clamps' input), clamped gate and
  up, silu output, product, routing weights (model dtype), down output, inverse permutation; the shared expert
  keeps gate and up outputs (clamp), clamped gate and up, silu output, product.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from symmem.blocks._dims import S_FULL, S_SP, B, H
from symmem.blocks.hf._ops import cast, linear, views
from symmem.blocks.indexer import v4_indexer
from symmem.blocks.symbols import N, N_r, d_cq, d_hr, d_k, d_o, h, h_E, m_C, m_H, n_g, n_h, n_hc
from symmem.errors import SymmemError
from symmem.graph import ACT, FP32, INT32, INT64, D, DataflowBuilder, Dim, DType, Weight
from symmem.symbols import E_tok, s

CORE = ("core_attention",)
PREP = ("attention_prep",)
ROUTING = ("routing",)


@dataclass(frozen=True)
class V4Impl:
    attn: str = "eager"
    experts: str = "grouped_mm"
    unit_batch: bool = False  # b = 1: flattening the expanded KV head over (b, n_h) is a view
    unit_seq: bool = False

    def __post_init__(self) -> None:
        if self.attn != "eager":
            raise SymmemError(f"attn_impl = {self.attn!r}: transformers' DeepSeek-V4 runs eager attention only "
                              "(_supports_sdpa = False, M4:1224-1226)")
        if self.experts not in ("grouped_mm", "eager"):
            raise SymmemError(f"experts_impl = {self.experts!r}: unknown; known: grouped_mm, eager")


def compressed_entries(kind: str) -> sympy.Expr:
    """Entries a compressor produces without a cache: usable = (s // rate) · rate (M4:419, 534, 649), so
    W = floor(s / rate); the trailing s mod rate tokens form no entry, and s < rate gives none."""
    if kind == "sliding":
        return sympy.Integer(0)
    return sympy.floor(s / (m_C if kind == "csa" else m_H))


def _rows() -> tuple[Dim, ...]:
    return (B, S_SP)


def _streams() -> tuple[Dim, ...]:
    return (B, S_SP, D(n_hc), H)


def rms_fp32w(fb: DataflowBuilder, name: str, x: str, out: str, dims: tuple[Dim, ...], weight: bool = True) -> str:
    """DeepseekV4RMSNorm (M4:55-61): x.float(); rsqrt(mean(x²) + eps); weight (FP32) · (x · rsqrt); .to(dtype)."""
    x32 = cast(fb, f"{name}.to_fp32", x, f"{out}.x_fp32", dims, FP32)
    (r,) = fb.op("rms_rsqrt", f"{name}.rsqrt", [x32], [(f"{out}.rsqrt", dims[:-1] + (D(1),), FP32)])
    (n,) = fb.op("mul", f"{name}.normalize", [x32, r], [(f"{out}.normed_fp32", dims, FP32)])
    (w,) = fb.op("param_mul", f"{name}.weight_mul", [n], [(f"{out}.weighted_fp32", dims, FP32)],
                 [Weight(f"{name}.weight", (dims[-1],))])
    return cast(fb, f"{name}.to_dtype", w, out, dims)


def rms_unweighted(fb: DataflowBuilder, name: str, x: str, out: str, dims: tuple[Dim, ...], dtype: DType = ACT
                   ) -> str:
    """DeepseekV4UnweightedRMSNorm (M4:67-73): x · rsqrt(mean(x.float()²) + eps).to(x.dtype); `dtype` is x's."""
    x32 = cast(fb, f"{name}.to_fp32", x, f"{out}.x_fp32", dims, FP32)
    (r,) = fb.op("rms_rsqrt", f"{name}.rsqrt", [x32], [(f"{out}.rsqrt", dims[:-1] + (D(1),), FP32)])
    rd = cast(fb, f"{name}.rsqrt_cast", r, f"{out}.rsqrt_dt", dims[:-1] + (D(1),), dtype)
    (y,) = fb.op("mul", f"{name}.normalize", [x, rd], [(out, dims, dtype)])
    return y


def rope(fb: DataflowBuilder, name: str, x: str, out: str, dims: tuple[Dim, ...], positions: Dim,
         batch: Dim | None = None) -> str:
    """apply_rotary_pos_emb on the last d_hr dims (M4:353-370): fresh cos/sin [1, 1, positions, d_hr]
    (position_ids have batch 1) in the model dtype (repeat_interleave), kept by the two multiplications; the
    result is a new tensor (cat [nope | rope])."""
    table = (batch or D(1), D(1), positions, D(d_hr))
    y, _cos, _sin = fb.op("rope_tables_mul", name, [x], [(out, dims), (f"{out}.cos", table), (f"{out}.sin", table)],
                          tags=PREP)
    return y


def hc_pre(fb: DataflowBuilder, name: str, x: str, iters: int) -> tuple[str, str, str]:
    """DeepseekV4HyperConnection.forward (M4:963-996): returns (post, comb, collapsed)."""
    rows, n = _rows(), D(n_hc)
    flat_dims = rows + (D(n_hc * h),)
    # X.view(b, s, n·h).float(): the streams themselves in an FP32 model (a view), an FP32 copy in BF16
    flat = cast(fb, f"{name}.flatten", x, f"{name}.flat", flat_dims, FP32)
    nrm = rms_unweighted(fb, f"{name}.input_norm", flat, f"{name}.flat_norm", flat_dims, FP32)
    mixes = linear(fb, f"{name}.fn", nrm, (f"{name}.mixes", rows + (D((2 + n_hc) * n_hc),), FP32),
                   (D((2 + n_hc) * n_hc), D(n_hc * h)), weight=f"{name}.fn")
    # pre/post/comb slices of mixes times the learned `scale` scalars: each MulBackward0 keeps its slice (a view:
    # all of mixes) and the parameter
    (pl, ql, cl) = fb.op("param_mul", f"{name}.scale", [mixes],
                         [(f"{name}.pre_logits", rows + (n,), FP32), (f"{name}.post_logits", rows + (n,), FP32),
                          (f"{name}.comb_logits", rows + (n, n), FP32)],
                         [Weight(f"{name}.scale", (D(3),)), Weight(f"{name}.base", (D((2 + n_hc) * n_hc),))])
    (pre,) = fb.op("sigmoid", f"{name}.pre_sigmoid", [pl], [(f"{name}.pre_sig", rows + (n,), FP32)])
    (pre_e,) = fb.op("add", f"{name}.pre_eps", [pre], [(f"{name}.pre", rows + (n, D(1)), FP32)])
    (post,) = fb.op("sigmoid", f"{name}.post_sigmoid", [ql], [(f"{name}.post_sig", rows + (n,), FP32)])
    (post2,) = fb.op("scale", f"{name}.post_double", [post], [(f"{name}.post", rows + (n, D(1)), FP32)])
    (cs,) = fb.op("softmax", f"{name}.comb_softmax", [cl], [(f"{name}.comb_softmax", rows + (n, n), FP32)])
    (comb,) = fb.op("add", f"{name}.comb_eps", [cs], [(f"{name}.comb0", rows + (n, n), FP32)])
    # Sinkhorn (M4:988-991): a column normalization, then iters - 1 (row, column) pairs: comb / (sum + eps)
    for i in range(2 * iters - 1):
        den_dims = rows + ((D(1), n) if i % 2 == 0 else (n, D(1)))
        (den,) = fb.op("sum", f"{name}.sinkhorn{i}.sum", [comb], [(f"{name}.sinkhorn{i}.den", den_dims, FP32)])
        (comb,) = fb.op("div", f"{name}.sinkhorn{i}.div", [comb, den],
                        [(f"{name}.sinkhorn{i}.comb", rows + (n, n), FP32)])
    (prod,) = fb.op("mul", f"{name}.collapse_mul", [pre_e, x], [(f"{name}.weighted", _streams(), FP32)])
    (col32,) = fb.op("sum", f"{name}.collapse", [prod], [(f"{name}.collapsed_fp32", rows + (H,), FP32)])
    col = cast(fb, f"{name}.collapse_cast", col32, f"{name}.collapsed", rows + (H,))
    return post2, comb, col


def hc_post(fb: DataflowBuilder, name: str, x: str, y: str, post: str, comb: str) -> str:
    """X' = post.to(dtype)[..., None] · y[:, :, None] + comb.to(dtype)ᵀ @ X (M4:1191-1193, 1197-1199)."""
    rows, n = _rows(), D(n_hc)
    pd = cast(fb, f"{name}.post_cast", post, f"{name}.post_dt", rows + (n, D(1)))
    (py,) = fb.op("mul", f"{name}.post_mul", [pd, y], [(f"{name}.post_out", _streams())])
    cd = cast(fb, f"{name}.comb_cast", comb, f"{name}.comb_dt", rows + (n, n))
    (cx,) = fb.op("matmul", f"{name}.comb_mix", [cd, x], [(f"{name}.comb_out", _streams())])
    (out,) = fb.op("add", f"{name}.residual", [py, cx], [(f"{name}.streams", _streams())])
    return out


def attention(fb: DataflowBuilder, x: str, kind: str, impl: V4Impl) -> str:
    """input_layernorm + DeepseekV4Attention.forward (M4:821-882) on the collapsed stream; returns [b, s, h]."""
    fb.block = "attn"
    rows, S = _rows(), S_FULL
    heads = D(n_h, "tp")
    xn = rms_fp32w(fb, "input_layernorm", x, "attn.x_norm", rows + (H,))
    qa = linear(fb, "self_attn.q_a_proj", xn, ("attn.q_a", rows + (D(d_cq),)), (H, D(d_cq)))
    qr = rms_fp32w(fb, "self_attn.q_a_norm", qa, "attn.q_residual", rows + (D(d_cq),))
    q = linear(fb, "self_attn.q_b_proj", qr, ("attn.q", (B, S, heads, D(d_k))), (D(d_cq), heads, D(d_k)))
    (qt,) = views(fb, "view", "attn.q_transpose", q, [("attn.q_t", (B, heads, S, D(d_k)))])
    qn = rms_unweighted(fb, "self_attn.q_b_norm", qt, "attn.q_norm", (B, heads, S, D(d_k)))
    query = rope(fb, "attn.q_rope", qn, "attn.query", (B, heads, S, D(d_k)), S)
    kv = linear(fb, "self_attn.kv_proj", xn, ("attn.kv", rows + (D(d_k),)), (H, D(d_k)))
    kvn = rms_fp32w(fb, "self_attn.kv_norm", kv, "attn.kv_norm", rows + (D(d_k),))
    kvr = rope(fb, "attn.kv_rope", kvn, "attn.kv_rot", (B, D(1), S, D(d_k)), S)
    W = compressed_entries(kind)
    T = D(s + W)
    if kind == "sliding":
        kv_all = kvr
    else:
        ckv = hca_compressor(fb, xn, W) if kind == "hca" else csa_compressor(fb, xn, qr, W)
        fb.block = "attn"
        # torch.cat([kv, compressed_kv], 2): a new [b, 1, s + W, d] tensor (also when W = 0)
        (kv_all,) = fb.op("concat", "attn.kv_cat", [kvr, ckv], [("attn.kv_all", (B, D(1), T, D(d_k)))], tags=PREP)
    # repeat_kv: one head expanded over n_h (stride 0); matmul flattens (b, n_h): a view when b = 1, else a copy
    key_flat, val_flat = (("attn.key_flat", (B, heads, D(d_k), T)), ("attn.value_flat", (B, heads, T, D(d_k))))
    (kf,) = fb.op("reshape", "attn.key_flatten", [kv_all], [key_flat], tags=CORE)
    (vf,) = fb.op("reshape", "attn.value_flatten", [kv_all], [val_flat], tags=CORE)
    if impl.unit_batch:
        fb.alias(kf, view_of=kv_all)
        fb.alias(vf, view_of=kv_all)
    scores = (B, heads, S, T)
    (sc,) = fb.op("matmul", "attn.qk", [query, kf], [("attn.scores", scores)], tags=CORE)
    # cat([scores, sinks]) promotes to FP32 (the sinks are FP32 parameters, M4:743-744)
    (sk,) = fb.op("concat", "attn.sink_cat", [sc], [("attn.logits", (B, heads, S, D(T.size + 1)), FP32)],
                  [Weight("self_attn.sinks", (heads,))], tags=CORE)
    (mx,) = fb.op("max", "attn.row_max", [sk], [("attn.row_max_idx", (B, heads, S, D(1)), INT64)], tags=CORE)
    (p,) = fb.op("softmax", "attn.softmax", [sk, mx], [("attn.probs_sink", (B, heads, S, D(T.size + 1)), FP32)],
                 tags=CORE)
    (pv,) = views(fb, "view", "attn.drop_sink", p, [("attn.probs_fp32", scores + (), FP32)])
    pd = cast(fb, "attn.probs_cast", pv, "attn.probs", scores)
    (ctx,) = fb.op("matmul", "attn.pv", [pd, vf], [("attn.ctx", (B, heads, S, D(d_k)))], tags=CORE)
    (ct,) = views(fb, "view", "attn.ctx_transpose", ctx, [("attn.ctx_t", (B, S, heads, D(d_k)))])
    cr = rope(fb, "attn.o_rope_inverse", ct, "attn.ctx_rot", (B, S, heads, D(d_k)), S)
    groups = D(n_g, "tp")
    (ga,) = fb.op("contiguous", "attn.group_major", [cr], [("attn.o_a_in", (groups, B, S, D(n_h * d_k / n_g)))])
    oa = linear(fb, "self_attn.o_a_proj", ga, ("attn.o_a", (groups, B, S, D(d_o))),
                (groups, D(d_o), D(n_h * d_k / n_g)))
    (ob_in,) = fb.op("contiguous", "attn.token_major", [oa], [("attn.o_b_in", rows + (groups, D(d_o)))])
    return linear(fb, "self_attn.o_b_proj", ob_in, ("attn.out", rows + (H,)), (groups, D(d_o), H))


def hca_compressor(fb: DataflowBuilder, xn: str, W: sympy.Expr) -> str:
    """DeepseekV4HCACompressor.forward without a cache (M4:414-445): kv, gate = kv_proj(x), gate_proj(x) [b, s, d];
    the first usable = W·m_H tokens (W = floor(s / m_H)) viewed as [b, W, m_H, d]; gate + position_bias (FP32:
    promotes); softmax over the m_H slots in FP32, cast to the model dtype; Σ kv · weights; kv_norm; RoPE at the
    windows' first positions (cos/sin of batch b: the positions are expanded over the batch). The kv window view
    keeps kv_proj's whole output alive. W = 0 (s < m_H) returns an empty entry list: every term below is 0."""
    fb.block = "compressor"
    p = "self_attn.compressor"
    Wd, m = D(W), D(m_H)
    # The windows' view keeps kv_proj's output [b, s, d] alive only when there is a window (chunk_kv.shape[1] > 0,
    # M4:424): its rows are declared min(W, 1) · s, i.e. s when W >= 1 and 0 when s < m_H.
    kv_rows = D(sympy.Min(W, 1) * s, "cp", "sp")
    kv = linear(fb, f"{p}.kv_proj", xn, ("compressor.kv", (B, kv_rows, D(d_k))), (H, D(d_k)))
    gate = linear(fb, f"{p}.gate_proj", xn, ("compressor.gate", _rows() + (D(d_k),)), (H, D(d_k)))
    (kw,) = views(fb, "view", "compressor.kv_windows", kv, [("compressor.kv_win", (B, Wd, m, D(d_k)))])
    (gw,) = fb.op("add", "compressor.position_bias", [gate], [("compressor.gate_win", (B, Wd, m, D(d_k)), FP32)],
                  [Weight(f"{p}.position_bias", (m, D(d_k)))])
    (sm,) = fb.op("softmax", "compressor.softmax", [gw], [("compressor.weights_fp32", (B, Wd, m, D(d_k)), FP32)])
    sd = cast(fb, "compressor.weights_cast", sm, "compressor.weights", (B, Wd, m, D(d_k)))
    (pk,) = fb.op("mul", "compressor.pool_mul", [kw, sd], [("compressor.weighted", (B, Wd, m, D(d_k)))])
    (pooled,) = fb.op("sum", "compressor.pool", [pk], [("compressor.pooled", (B, Wd, D(d_k)))])
    cn = rms_fp32w(fb, f"{p}.kv_norm", pooled, "compressor.normed", (B, Wd, D(d_k)))
    return rope(fb, "compressor.rope", cn, "compressor.entries", (B, D(1), Wd, D(d_k)), Wd, batch=B)


def csa_compressor(fb: DataflowBuilder, xn: str, qr: str, W: sympy.Expr) -> str:
    """DeepseekV4CSACompressor.forward without a cache (M4:643-712): kv, gate = kv_proj(x), gate_proj(x) [b, s, 2d];
    W = floor(s / m_C) windows; new_kv / new_gate [b, W, 2 m_C, d] are new tensors (new_zeros / new_full, then
    slice copies of the two series: kv_proj's output is not kept); softmax over the 2 m_C slots in FP32, cast;
    Σ new_kv · weights; kv_norm; RoPE (cos/sin of batch b). W = 0 (s < m_C): no entry, every term below is 0.
    The lightning indexer (M4:520-597) then picks min(index_topk, W) entries per query: its product is integer
    indices that only build the block bias (a −inf / 0 mask, no grad), so nothing it computes reaches the loss and
    nothing it saves outlives the forward (its weights get no gradient); the attention stays dense over all s + W
    keys, so the saved sizes depend on W, not on index_topk."""
    fb.block = "compressor"
    p = "self_attn.compressor"
    Wd, slots = D(W), D(2 * m_C)
    kv = linear(fb, f"{p}.kv_proj", xn, ("compressor.kv", _rows() + (D(2 * d_k),)), (H, D(2 * d_k)))
    gate = linear(fb, f"{p}.gate_proj", xn, ("compressor.gate", _rows() + (D(2 * d_k),)), (H, D(2 * d_k)))
    (nkv,) = fb.op("concat", "compressor.kv_overlap", [kv], [("compressor.kv_win", (B, Wd, slots, D(d_k)))])
    (ngate,) = fb.op("concat", "compressor.gate_overlap", [gate], [("compressor.gate_win", (B, Wd, slots, D(d_k)),
                                                                    FP32)],
                     [Weight(f"{p}.position_bias", (D(m_C), D(2 * d_k)))])
    (sm,) = fb.op("softmax", "compressor.softmax", [ngate], [("compressor.weights_fp32", (B, Wd, slots, D(d_k)),
                                                              FP32)])
    sd = cast(fb, "compressor.weights_cast", sm, "compressor.weights", (B, Wd, slots, D(d_k)))
    (pk,) = fb.op("mul", "compressor.pool_mul", [nkv, sd], [("compressor.weighted", (B, Wd, slots, D(d_k)))])
    (pooled,) = fb.op("sum", "compressor.pool", [pk], [("compressor.pooled", (B, Wd, D(d_k)))])
    cn = rms_fp32w(fb, f"{p}.kv_norm", pooled, "compressor.normed", (B, Wd, D(d_k)))
    entries = rope(fb, "compressor.rope", cn, "compressor.entries", (B, D(1), Wd, D(d_k)), Wd, batch=B)
    v4_indexer(fb, xn, qr)
    return entries


def _clamped_swiglu_tail(fb: DataflowBuilder, name: str, g: str, u: str, rows: tuple[Dim, ...], width: Dim) -> str:
    (gc,) = fb.op("clamp", f"{name}.gate_clamp", [g], [(f"{name}.gate_clamped", rows + (width,))])
    (uc,) = fb.op("clamp", f"{name}.up_clamp", [u], [(f"{name}.up_clamped", rows + (width,))])
    (a,) = fb.op("silu", f"{name}.act_fn", [gc], [(f"{name}.act", rows + (width,))])
    (p,) = fb.op("mul", f"{name}.mul", [a, uc], [(f"{name}.prod", rows + (width,))])
    return p


def moe(fb: DataflowBuilder, x: str, hashed: bool, impl: V4Impl) -> str:
    """post_attention_layernorm + DeepseekV4SparseMoeBlock (M4:1129-1146) on the collapsed stream."""
    fb.block = "moe"
    rows = _rows()
    xn = rms_fp32w(fb, "post_attention_layernorm", x, "moe.x_norm", rows + (H,))
    logits = linear(fb, "mlp.gate", xn, ("moe.router_logits", rows + (D(N),)), (D(N), H), "router", ROUTING)
    (sp,) = fb.op("softplus", "gate.softplus", [logits], [("moe.router_softplus", rows + (D(N),))], tags=ROUTING)
    (sc,) = fb.op("sqrt", "gate.sqrt", [sp], [("moe.router_scores", rows + (D(N),))], tags=ROUTING)
    if hashed:  # tid2eid[input_ids]: a buffer lookup, a new int64 tensor (M4:1118-1126)
        (idx,) = fb.op("no_grad", "gate.tid2eid", [], [("moe.topk_indices", rows + (D(N_r),), INT64)], tags=ROUTING)
    else:  # topk(scores + e_score_correction_bias).indices: only indices leave it (M4:1088-1095)
        (idx,) = fb.op("argtopk", "gate.topk", [sc], [("moe.topk_indices", rows + (D(N_r),), INT64)], tags=ROUTING)
    (w,) = fb.op("gather", "gate.gather", [sc, idx], [("moe.topk_scores", rows + (D(N_r),))], tags=ROUTING)
    (den,) = fb.op("sum", "gate.denominator", [w], [("moe.topk_den", rows + (D(1),))], tags=ROUTING)
    (wn,) = fb.op("div", "gate.normalize", [w, den], [("moe.topk_normalized", rows + (D(N_r),))], tags=ROUTING)
    (weights,) = fb.op("scale", "gate.routed_scaling", [wn], [("moe.topk_weights", rows + (D(N_r),))], tags=ROUTING)
    if impl.experts == "grouped_mm":
        yr = _experts_grouped_mm(fb, xn, weights, idx)
    else:
        yr = _experts_eager(fb, xn, weights, idx)
    sh = "mlp.shared_experts"
    sg = linear(fb, f"{sh}.gate_proj", xn, (f"{sh}.gate", rows + (D(h_E),)), (H, D(h_E)), "shared_expert")
    su = linear(fb, f"{sh}.up_proj", xn, (f"{sh}.up", rows + (D(h_E),)), (H, D(h_E)), "shared_expert")
    sp_ = _clamped_swiglu_tail(fb, sh, sg, su, rows, D(h_E))
    ys = linear(fb, f"{sh}.down_proj", sp_, (f"{sh}.out", rows + (H,)), (D(h_E), H), "shared_expert")
    (y,) = fb.op("add", "moe_sum", [yr, ys], [("moe.out", rows + (H,))])
    return y


def _experts_grouped_mm(fb: DataflowBuilder, xn: str, weights: str, idx: str) -> str:
    """grouped_mm_experts_forward (integrations/moe.py:424-537) with V4's clamped gate (`_apply_gate`)."""
    experts = D(N, "ep")
    slots, width = (experts, D(E_tok)), D(h_E, "etp")
    gw = lambda name, dims: Weight(name, dims, "routed_expert")  # noqa: E731
    ids, perm = fb.op("no_grad", "experts.sort", [idx], [("experts.sorted_ids", slots, INT64),
                                                         ("experts.perm", slots, INT64)])
    (tok,) = fb.op("no_grad", "experts.token_of_slot", [perm], [("experts.token_idx", slots, INT64)])
    (xs,) = fb.op("index", "experts.gather_tokens", [xn, tok], [("experts.x", slots + (H,))])
    (ws,) = fb.op("index", "experts.gather_weights", [weights, perm], [("experts.weights", slots + (D(1),))])
    (offs,) = fb.op("no_grad", "experts.offsets", [ids], [("experts.offsets", (experts,), INT32)])
    (gu,) = fb.op("grouped_mm", "experts.gate_up", [xs, offs], [("experts.gate_up", slots + (D(2 * h_E, "etp"),))],
                  [gw("mlp.experts.gate_up_proj", (experts, D(2 * h_E, "etp"), H))])
    g, u = views(fb, "split", "experts.chunk", gu, [("experts.gate", slots + (width,)),
                                                    ("experts.up", slots + (width,))])
    p = _clamped_swiglu_tail(fb, "experts", g, u, slots, width)
    (dn,) = fb.op("grouped_mm", "experts.down", [p, offs], [("experts.down", slots + (H,))],
                  [gw("mlp.experts.down_proj", (experts, H, width))])
    (wo,) = fb.op("mul", "experts.weigh", [dn, ws], [("experts.weighted", slots + (H,))])
    (inv,) = fb.op("no_grad", "experts.inv_perm", [perm], [("experts.inv_perm", slots, INT64)])
    (wu,) = fb.op("index", "experts.unsort", [wo, inv], [("experts.unsorted", slots + (H,))])
    (yr,) = fb.op("sum", "experts.sum_topk", [wu], [("moe.routed_out", _rows() + (H,))])
    return yr


def _experts_eager(fb: DataflowBuilder, xn: str, weights: str, idx: str) -> str:
    """DeepseekV4Experts.forward (M4:1050-1065): a loop over the experts hit; torch.where(mask[e]) gives
    (top_k_pos, token_idx), views of one int64 storage; current = _apply_gate(linear(x[token_idx])), then
    linear(down) · top_k_weights[token_idx, top_k_pos] (model dtype: V4's router weights are not FP32), and
    index_add_ of it (`.to(final.dtype)` is no copy). Per expert the rows are its token count; the sum over
    experts is b·s·N_r (as V3's eager experts, symmem.blocks.hf.ffn.experts_eager)."""
    experts = D(N, "ep")
    slots, width = (experts, D(E_tok)), D(h_E, "etp")
    (where,) = fb.op("no_grad", "experts.where", [idx], [("experts.where", (D(2),) + slots, INT64)])
    tok, pos = views(fb, "split", "experts.where_unbind", where, [("experts.token_idx", slots, INT64),
                                                                  ("experts.topk_pos", slots, INT64)])
    (xs,) = fb.op("index", "experts.gather_tokens", [xn, tok], [("experts.x", slots + (H,))])
    (gu,) = fb.op("linear", "experts.gate_up", [xs], [("experts.gate_up", slots + (D(2 * h_E, "etp"),))],
                  [Weight("mlp.experts.gate_up_proj", (experts, D(2 * h_E, "etp"), H), "routed_expert")])
    g, u = views(fb, "split", "experts.chunk", gu, [("experts.gate", slots + (width,)),
                                                    ("experts.up", slots + (width,))])
    p = _clamped_swiglu_tail(fb, "experts", g, u, slots, width)
    (dn,) = fb.op("linear", "experts.down", [p], [("experts.down", slots + (H,))],
                  [Weight("mlp.experts.down_proj", (experts, H, width), "routed_expert")])
    (ws,) = fb.op("index", "experts.gather_weights", [weights, tok, pos], [("experts.weights", slots + (D(1),))])
    (wo,) = fb.op("mul", "experts.weigh", [dn, ws], [("experts.weighted", slots + (H,))])
    (y,) = fb.op("index_add", "experts.index_add", [tok, wo], [("moe.routed_out", _rows() + (H,))])
    return y


def layer(fb: DataflowBuilder, x: str, kind: str, *, iters: int, impl: V4Impl) -> str:
    """DeepseekV4DecoderLayer.forward (M4:1175-1199) on the streams X [b, s, n_hc, h]."""
    attn, mlp = kind.split("_")
    fb.block = "mhc"
    post, comb, col = hc_pre(fb, "attn_hc", x, iters)
    a = attention(fb, col, attn, impl)
    fb.block = "mhc"
    (a4,) = views(fb, "view", "attn_hc.unsqueeze", a, [("attn.out_streams", (B, S_SP, D(1), H))])
    x1 = hc_post(fb, "attn_hc", x, a4, post, comb)
    post, comb, col = hc_pre(fb, "ffn_hc", x1, iters)
    f = moe(fb, col, mlp == "hash", impl)
    fb.block = "mhc"
    (f4,) = views(fb, "view", "ffn_hc.unsqueeze", f, [("moe.out_streams", (B, S_SP, D(1), H))])
    return hc_post(fb, "ffn_hc", x1, f4, post, comb)
