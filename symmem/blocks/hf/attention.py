"""HF's MLA (DeepseekV3Attention / DeepseekV2Attention) and its attention core: eager, or sdpa's CPU backends.

The projections are HF's: `q_a_proj` + `q_a_layernorm` + `q_b_proj` (or one `q_proj` without a query latent),
`kv_a_proj_with_mqa` giving the key/value latent and the shared rope key together, `kv_b_proj` giving each
head's k_nope and value together; the splits of their outputs are views.
"""

from __future__ import annotations

from symmem.blocks._dims import S_FULL, S_SP, B, H, seq
from symmem.blocks.hf._ops import cast, linear, rmsnorm, views
from symmem.blocks.hf.impl import HFImpl, sdpa_backend
from symmem.blocks.indexer import v32_indexer
from symmem.blocks.mla import d_v_symbol, q_latent
from symmem.blocks.symbols import d_c, d_cq, d_h, d_hr, n_h
from symmem.config import ModelConfig
from symmem.graph import ACT, FP32, D, DataflowBuilder

PREP = ("attention_prep",)  # rope, concatenation: what DeepSeek-V3's recomputation redoes with the up-projections
CORE = ("core_attention",)


def mla(fb: DataflowBuilder, x_in: str, *, model: ModelConfig, impl: HFImpl, resid_axis: str) -> str:
    fb.block = "mla"
    heads, S, d_v = D(n_h, "tp"), S_FULL, d_v_symbol(model)
    d_qk = d_h + d_hr
    (x,) = fb.op("region", "attn_enter", [x_in], [("attn.x", (B, S_SP, H))])
    xn = rmsnorm(fb, "input_layernorm", x, "attn.x_norm", (B, S_SP, H))
    if q_latent(model):
        cq = linear(fb, "self_attn.q_a_proj", xn, ("attn.q_a", (B, S_SP, D(d_cq))), (H, D(d_cq)))
        cqn = rmsnorm(fb, "self_attn.q_a_layernorm", cq, "attn.q_a_norm", (B, S_SP, D(d_cq)))
        if model.has("n_I"):
            # DeepSeek-V3.2's lightning indexer runs under @torch.no_grad() (modeling_deepseek_v32.py:178): no
            # autograd node, nothing saved, no gradient. Its indices only build a boolean mask that is folded into
            # the dense attention mask (:447-458), so eager attention saves the full [b, n_h, s, s] softmax
            # whatever index_topk is (min(index_topk, s) keys are selected, the rest masked).
            v32_indexer(fb, xn, cqn)
            fb.block = "mla"
        q = linear(fb, "self_attn.q_b_proj", cqn, ("attn.q", (B, S, heads, D(d_qk))), (D(d_cq), heads, D(d_qk)),
                   tags=["up_projection"])
    else:
        q = linear(fb, "self_attn.q_proj", xn, ("attn.q", (B, S, heads, D(d_qk))), (H, heads, D(d_qk)))
    q_pass, q_rot = views(fb, "split", "q_split", q, [("attn.q_pass", (B, heads, S, D(d_h))),
                                                      ("attn.q_rot", (B, heads, S, D(d_hr)))], tags=PREP)
    ckv = linear(fb, "self_attn.kv_a_proj_with_mqa", xn, ("attn.kv_a", (B, S_SP, D(d_c + d_hr))),
                 (H, D(d_c + d_hr)))
    # kv_nope is a view of kv_a's output: in an FP32 model the norm's FP32 "copy" is that view, and keeps all of
    # kv_a (d_c + d_hr columns) alive; in BF16 the upcast copies d_c columns.
    kv_nope, k_rot = views(fb, "split", "kv_a_split", ckv, [("attn.kv_nope", (B, S_SP, D(d_c))),
                                                            ("attn.k_rot", (B, S_SP, D(d_hr)))])
    kvn = rmsnorm(fb, "self_attn.kv_a_layernorm", kv_nope, "attn.kv_norm", (B, S_SP, D(d_c)))
    q_rot_r, k_rot_r = fb.op("rope", "rope", [q_rot, k_rot], [("attn.q_rot_r", (B, heads, S, D(d_hr))),
                                                              ("attn.k_rot_r", (B, S_SP, D(d_hr)))], tags=PREP)
    (query,) = fb.op("concat", "query_cat", [q_pass, q_rot_r], [("attn.query", (B, heads, S, D(d_qk)))], tags=PREP)
    kvb = linear(fb, "self_attn.kv_b_proj", kvn, ("attn.kv_b", (B, S, heads, D(d_h + d_v))),
                 (D(d_c), heads, D(d_h + d_v)), tags=["up_projection"])
    k_nope, value = views(fb, "split", "kv_b_split", kvb, [("attn.k_nope", (B, heads, S, D(d_h))),
                                                           ("attn.value", (B, heads, S, D(d_v)))], tags=PREP)
    # HF's expand_kv: key_states = new_empty(...), then copy_ of k_nope and the broadcast rope key: a new tensor.
    (key,) = fb.op("concat", "key_cat", [k_nope, k_rot_r], [("attn.key", (B, heads, S, D(d_qk)))], tags=PREP)
    ctx = core(fb, query, key, value, model=model, impl=impl)
    # transpose(1, 2).contiguous(): a new (b, s, n_h, d_v) tensor, the input o_proj keeps.
    (ctx_c,) = fb.op("contiguous", "attn_output", [ctx], [("attn.context", (B, S, heads, D(d_v)))])
    if impl.output_view:
        fb.alias(ctx_c, view_of=ctx)
    o = linear(fb, "self_attn.o_proj", ctx_c, ("attn.out", (B, S_SP, H)), (heads, D(d_v), H))
    (oe,) = fb.op("region", "attn_exit", [o], [("attn.out_resid", (B, seq(resid_axis), H))])
    (y,) = fb.op("add", "attn_residual", [x_in, oe], [("attn.y", (B, seq(resid_axis), H))])
    return y


def core(fb: DataflowBuilder, query: str, key: str, value: str, *, model: ModelConfig, impl: HFImpl) -> str:
    """softmax(q kᵀ · scale + mask) v: returns the (b, n_h, s, d_v) output (dropout is 0 in HF's configs)."""
    heads, S, d_v = D(n_h, "tp"), S_FULL, d_v_symbol(model)
    scores_dims, ctx_dims = (B, heads, S, S), (B, heads, S, D(d_v))
    if impl.attn == "sdpa" and sdpa_backend(model) == "flash":
        # flash-attention-for-CPU keeps q, k, v (a view of kv_b's output), its output and an FP32 logsumexp.
        ctx, _lse = fb.op("sdpa_flash", "sdpa", [query, key, value], [("attn.ctx", ctx_dims),
                                                                     ("attn.logsumexp", (B, heads, S), FP32)],
                          tags=CORE)
        return ctx
    if impl.attn == "sdpa":
        # sdpa's math backend computes in FP32 (a copy in BF16, the tensor itself in FP32), scaling q and kᵀ by
        # √scale each: the matmul keeps those two new FP32 tensors.
        q32 = cast(fb, "sdpa.q_fp32", query, "attn.query_fp32", (B, heads, S, D(d_h + d_hr)), FP32, CORE)
        k32 = cast(fb, "sdpa.k_fp32", key, "attn.key_fp32", (B, heads, S, D(d_h + d_hr)), FP32, CORE)
        (qs,) = fb.op("scale", "sdpa.q_scale", [q32], [("attn.q_scaled", (B, heads, S, D(d_h + d_hr)), FP32)],
                      tags=CORE)
        (ks,) = fb.op("scale", "sdpa.k_scale", [k32], [("attn.kT_scaled", (B, heads, D(d_h + d_hr), S), FP32)],
                      tags=CORE)
        (sc,) = fb.op("matmul", "qk", [qs, ks], [("attn.scores", scores_dims, FP32)], tags=CORE)
        (p,) = fb.op("softmax", "attn_softmax", [sc], [("attn.probs", scores_dims, FP32)], tags=CORE)
        v = cast(fb, "sdpa.v_fp32", value, "attn.value_fp32", ctx_dims, FP32, CORE)
        probs, dtype = p, FP32
    else:
        (sc,) = fb.op("matmul", "qk", [query, key], [("attn.scores", scores_dims)], tags=CORE)
        (p,) = fb.op("softmax", "attn_softmax", [sc], [("attn.probs", scores_dims, FP32)], tags=CORE)  # dtype=fp32
        probs = cast(fb, "attn_probs_cast", p, "attn.probs_dt", scores_dims, tags=CORE)  # .to(query.dtype)
        v, dtype = value, ACT
    # matmul flattens (b, n_h) of v: a copy, or a view when b = 1 or s = 1. (A view of sdpa's BF16→FP32 copy of v
    # is as large as a copy, so declaring it a copy there changes no byte.)
    (v_flat,) = fb.op("reshape", "value_flatten", [v], [("attn.value_flat", ctx_dims, dtype)], tags=CORE)
    if impl.flat_view:
        fb.alias(v_flat, view_of=v)
    (ctx,) = fb.op("matmul", "pv", [probs, v_flat], [("attn.ctx_out", ctx_dims, dtype)], tags=CORE)
    # sdpa returns its FP32 result converted back to the model dtype (the same tensor in FP32)
    return cast(fb, "attn_out_cast", ctx, "attn.ctx", ctx_dims, tags=CORE) if dtype is FP32 else ctx
