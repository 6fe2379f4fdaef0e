"""Hugging Face's eager modules (transformers 5.24.0) of the declared decoder families (`symmem.families._decoder`)
as dataflows: Llama's layer (`symmem.blocks.hf.llama`) with the features an `Arch` names, for the torch-eager rule
set. What each feature adds to what autograd keeps, as measured on the CPU (`symmem measure --framework
transformers`, tests/validate/test_open_families_exact.py):

* biases: none (AddmmBackward0 keeps the same input as MmBackward0);
* q/k RMSNorm (Qwen3, Gemma 3, GLM-4.5 per head; OLMo 2 over the projection): an RMSNorm's FP32 input, FP32
  rsqrt and normalised output, as every HF RMSNorm;
* Gemma's RMSNorm scales by (1 + weight): it keeps its normalised input in FP32 (not the model dtype) and the FP32
  (1 + weight) of size h it makes on every call (op kind `rmsnorm_offset`);
* soft-capping (Gemma 2): the tanh's output, s x s per head (TanhBackward0; the divisions and multiplications by
  the cap keep nothing);
* a sliding window is a mask in eager attention: the same s x s scores (and sdpa's CPU flash kernel takes no
  mask here: transformers passes it only where it is needed, and sdpa then runs; see `attention`);
* norms after attention and MLP (Gemma 2/3's sandwich, OLMo 2): an RMSNorm each, of the block's output;
* fused qkv_proj and gate_up_proj (Phi-3, GLM-4): q, k, v, gate and up are views of one output; the gate's SiLU
  and the product keep views of it (as the experts' chunked gate_up);
* GELU-tanh: GeluBackward0 keeps its input (as SiLU);
* attention dropout (Seed-OSS's default 0.1): the bool mask and the dropped probabilities;
* MoE by softmax top-k (Qwen-MoE, OLMoE, Mixtral): FP32 softmax output, int64 top-k indices, the renormalisation's
  numerator and denominator (norm_topk_prob; Mixtral always), cast back to the model dtype by Qwen and OLMoE and
  left in FP32 by Mixtral (so the experts' weighting is promoted to FP32 there); GLM-4.5's router and experts are
  DeepSeek-V3's (`symmem.blocks.hf.ffn`); Qwen2-MoE's shared expert is weighted by sigmoid(shared_expert_gate(x)),
  which keeps the sigmoid's output and the shared expert's output.
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem.blocks._dims import S_FULL, S_MOE, S_SP, B, H, seq
from symmem.blocks.features import Arch, h_S
from symmem.blocks.gqa import n_kv
from symmem.blocks.hf import ffn
from symmem.blocks.hf._ops import cast, linear, views
from symmem.blocks.hf.llama import repeat_heads, repeats_kv
from symmem.blocks.symbols import N, N_r, d_h, h_E, h_F, n_h
from symmem.config import ModelConfig
from symmem.errors import SymmemError
from symmem.graph import ACT, COMPLEX64, FP32, INT64, D, DataflowBuilder, Dim, Weight
from symmem.implementations import ATTN_IMPLS, EXPERTS_IMPLS
from symmem.symbols import E_tok

PREP = ("attention_prep",)
CORE = ("core_attention",)
ROUTING = ("routing",)


@dataclass(frozen=True)
class DecoderImpl:
    """Which implementation a declared decoder's HF dataflow follows: attention and experts implementations,
    whether b = 1 / s = 1 (where a reshape or .contiguous() is no copy)."""

    attn: str = "eager"
    experts: str = "eager"
    unit_batch: bool = False
    unit_seq: bool = False
    # whether a sliding layer's attention gets a mask (transformers makes one from s = sliding_window on)
    window_mask: bool = False

    def __post_init__(self) -> None:
        for field, value, known in (("attn_impl", self.attn, ATTN_IMPLS), ("experts_impl", self.experts,
                                                                           EXPERTS_IMPLS)):
            if value not in known:
                raise SymmemError(f"{field} = {value!r}: unknown; known: {', '.join(known)}")


def _norm(fb: DataflowBuilder, arch: Arch, name: str, x: str, out: str, dims: tuple[Dim, ...],
          weight: Dim | None = None) -> str:
    """An RMSNorm module: Llama's (weight · normalised cast back), OLMo 2's (weight · normalised, then cast back),
    Gemma's ((1 + weight) · normalised, in FP32)."""
    kind = {"llama": "rmsnorm", "fp32_weight": "rmsnorm_fp32_weight", "gemma": "rmsnorm_offset"}[arch.norm]
    (y,) = fb.op(kind, name, [x], [(out, dims)], [Weight(f"{name}.weight", (weight or dims[-1],))])
    return y


def layer(fb: DataflowBuilder, x: str, kind: str, *, model: ModelConfig, impl: DecoderImpl) -> str:
    arch: Arch = model.option("arch")
    axis = "sp_moe" if kind.startswith("moe") else "sp"
    y = attention(fb, x, model=model, impl=impl, arch=arch, resid_axis=axis,
                  masked="_sliding" in kind and impl.window_mask, nope=kind.endswith("_nope"))
    return moe(fb, y, model=model, impl=impl, arch=arch) if kind.startswith("moe") else dense_mlp(fb, y, arch=arch)


def attention(fb: DataflowBuilder, x_in: str, *, model: ModelConfig, impl: DecoderImpl, arch: Arch,
              resid_axis: str, masked: bool = False, nope: bool = False) -> str:
    """The attention block: its norms, projections, q/k norms, RoPE, eager or sdpa core, output, residual.
    `masked`: a sliding layer whose window bites at this s: transformers hands sdpa an explicit mask, which the CPU
    flash kernel keeps ((b, 1, s, s) in the model dtype, made per call), and with a mask repeats k and v to n_h
    heads (integrations/sdpa_attention.py use_gqa_in_sdpa: no GQA with a mask); eager attention masks its s x s
    scores whatever the window. `nope`: a Llama 4 NoPE layer (no RoPE, no q/k norm, temperature-scaled queries)."""
    fb.block = "attn"
    heads, kv_heads, S, hd = D(n_h, "tp"), D(n_kv, "tp"), S_FULL, D(d_h)
    (x,) = fb.op("region", "attn_enter", [x_in], [("attn.x", (B, S_SP, H))])
    xn = _norm(fb, arch, "input_layernorm", x, "attn.x_norm", (B, S_SP, H)) if arch.pre_norms else x
    whole = arch.qk_norm in ("proj", "hidden")  # the q/k norm runs over the flat projection (b, s, n d)
    q_dims = (B, S, D(n_h * d_h, "tp")) if whole else (B, S, heads, hd)
    k_dims = (B, S, D(n_kv * d_h, "tp")) if whole else (B, S, kv_heads, hd)
    if arch.fused_qkv:  # Phi-3: one qkv_proj, sliced into q, k, v (views)
        qkv = linear(fb, "self_attn.qkv_proj", xn, ("attn.qkv", (B, S, D(n_h + 2 * n_kv, "tp"), hd)),
                     (H, D(n_h + 2 * n_kv, "tp"), hd))
        q, k, v = views(fb, "split", "qkv_split", qkv, [("attn.q", q_dims), ("attn.k", k_dims),
                                                        ("attn.v", (B, S, kv_heads, hd))])
    else:
        bias = arch.qkv_bias
        q = _linear(fb, "self_attn.q_proj", xn, ("attn.q", q_dims), (H, heads, hd), D(n_h * d_h, "tp") if bias
                    else None)
        k = _linear(fb, "self_attn.k_proj", xn, ("attn.k", k_dims), (H, kv_heads, hd), D(n_kv * d_h, "tp") if bias
                    else None)
        v = _linear(fb, "self_attn.v_proj", xn, ("attn.v", (B, S, kv_heads, hd)), (H, kv_heads, hd),
                    D(n_kv * d_h, "tp") if bias else None)
    if arch.rope_complex:  # Llama 4: its own order (RoPE, then the L2 norm) and NoPE layers
        query, key = _llama4_qk(fb, q, k, model=model, nope=nope)
    else:
        query, key = _qk(fb, q, k, q_dims, k_dims, model=model, arch=arch, nope=nope)
    value = v
    ctx_dims = (B, heads, S, hd)
    repeats = repeats_kv(model, impl) or (masked and model.value("n_kv") != model.value("n_h"))
    mqa_view = repeats and model.value("n_kv") == 1
    if repeats:  # repeat_kv: expand + reshape, a copy to n_h heads (a stride-0 view at one kv head)
        key, value = (repeat_heads(fb, t, f"attn.{t.rsplit('.', 1)[1]}_heads", ctx_dims, mqa_view)
                      for t in (key, value))
    if impl.attn == "sdpa" and model.option("attention_dropout"):
        raise SymmemError(f"{model.name}: attention_dropout > 0 with sdpa: torch runs its math backend, not modelled; "
                          "use --attn-impl eager")
    if impl.attn == "sdpa":
        # flash-attention-for-CPU keeps q, k, v (as passed), its output and an FP32 logsumexp (b, n_h, s), and a
        # mask when given one; its output is laid out as the query is: (b, s, n_h, d) after Llama's elementwise
        # RoPE on the transposed projection (the attention output's .contiguous() is then no copy), (b, n_h, s, d)
        # after a RoPE that concatenates (Phi-3, GLM: a copy)
        ins = [query, key, value]
        if masked:
            (mask,) = fb.op("no_grad", "sliding_mask", [x_in], [("attn.sdpa_mask", (B, D(1), S, S))], tags=CORE)
            ins.append(mask)
        ctx, _lse = fb.op("sdpa_flash", "sdpa", ins,
                          [("attn.ctx", ctx_dims), ("attn.logsumexp", (B, heads, S), FP32)], tags=CORE)
        output_view = not arch.rope_concat or impl.unit_seq
    else:
        scores = (B, heads, S, S)
        if mqa_view:  # matmul's flattening of (b, n_h) over a stride-0 head dimension: a copy unless b = 1
            key, value = (repeat_heads(fb, t, f"{t}_flat", ctx_dims, impl.unit_batch, "flatten") for t in (key, value))
        (sc,) = fb.op("matmul", "qk", [query, key], [("attn.scores", scores)], tags=CORE)
        if arch.attn_softcap:  # Gemma 2: scores / cap, tanh, * cap
            (sc,) = fb.op("scale", "softcap.div", [sc], [("attn.scores_div", scores)], tags=CORE)
            (sc,) = fb.op("tanh", "softcap.tanh", [sc], [("attn.scores_tanh", scores)], tags=CORE)
            (sc,) = fb.op("scale", "softcap.mul", [sc], [("attn.scores_capped", scores)], tags=CORE)
        if arch.sinks:  # gpt-oss: cat the head's sink logit, subtract the row max, softmax in the model dtype
            probs = _sink_softmax(fb, sc, scores)
        else:
            dtype = FP32 if arch.softmax_fp32 else ACT  # softmax(dtype=float32) (Llama 4's: in the model dtype)
            (p,) = fb.op("softmax", "attn_softmax", [sc], [("attn.probs", scores, dtype)], tags=CORE)
            probs = cast(fb, "attn_probs_cast", p, "attn.probs_dt", scores, tags=CORE)  # .to(query.dtype)
        if model.option("attention_dropout"):  # F.dropout(p > 0, training=True): on the CPU, input * noise
            (probs,) = fb.op("dropout_noise", "attn_dropout", [probs], [("attn.probs_dropped", scores)], tags=CORE)
        (ctx,) = fb.op("matmul", "pv", [probs, value], [("attn.ctx", ctx_dims)], tags=CORE)
        output_view = impl.unit_seq
    (ctx_c,) = fb.op("contiguous", "attn_output", [ctx], [("attn.context", (B, S, heads, hd))])
    if output_view:
        fb.alias(ctx_c, view_of=ctx)
    o = _linear(fb, "self_attn.o_proj", ctx_c, ("attn.out", (B, S_SP, H)), (heads, hd, H), H if arch.o_bias else None)
    if arch.residual_dropout:  # Seed-OSS: dropout(attn_output, p=residual_dropout)
        (o,) = fb.op("dropout_noise", "attn_residual_dropout", [o], [("attn.out_dropped", (B, S_SP, H))])
    if arch.post_norms:  # Gemma 2/3, OLMo 2: post_attention_layernorm of the attention's output
        o = _norm(fb, arch, "post_attention_layernorm", o, "attn.out_norm", (B, S_SP, H))
    (oe,) = fb.op("region", "attn_exit", [o], [("attn.out_resid", (B, seq(resid_axis), H))])
    (y,) = fb.op("add", "attn_residual", [x_in, oe], [("attn.y", (B, seq(resid_axis), H))])
    return y


def _qk(fb: DataflowBuilder, q: str, k: str, q_dims, k_dims, *, model: ModelConfig, arch: Arch,
        nope: bool = False) -> tuple[str, str]:
    """The q/k norms (per head, over the projection, or from hidden_size), then apply_rotary_pos_emb (whole or
    partial): new q and k, whose multiplications keep only the shared cos and sin. A NoPE layer (SmolLM3) hands the
    transposed projections on instead: matmul copies them just the same. GLM-4 repeat-interleaves half of cos and
    sin on each call: those copies are what its multiplications keep."""
    heads, kv_heads, S, hd = D(n_h, "tp"), D(n_kv, "tp"), S_FULL, D(d_h)
    if arch.qk_norm:
        widths = {"hidden": (H, D(model.value("h") * model.value("n_kv") // model.value("n_h")))}.get(
            arch.qk_norm, (None, None))
        q = _norm(fb, arch, "self_attn.q_norm", q, "attn.q_normed", q_dims, widths[0])
        k = _norm(fb, arch, "self_attn.k_norm", k, "attn.k_normed", k_dims, widths[1])
    if nope:  # SmolLM3's NoPE layers: the transposed projections (what matmul copies, what sdpa keeps)
        (query,) = fb.op("view", "q_transpose", [q], [("attn.query", (B, heads, S, hd))], tags=PREP)
        (key,) = fb.op("view", "k_transpose", [k], [("attn.key", (B, kv_heads, S, hd))], tags=PREP)
        return fb.alias(query, view_of=q), fb.alias(key, view_of=k)
    if arch.rope_interleave:
        width = D(model.option("rotary_dim") or d_h)
        query, _cos, _sin, key = fb.op("rope_tables_mul", "rope", [q, k], [
            ("attn.query", (B, heads, S, hd)), ("attn.rope_cos", (D(1), D(1), S, width)),
            ("attn.rope_sin", (D(1), D(1), S, width)), ("attn.key", (B, kv_heads, S, hd))], tags=PREP)
        return query, key
    return fb.op("rope", "rope", [q, k], [("attn.query", (B, heads, S, hd)), ("attn.key", (B, kv_heads, S, hd))],
                 tags=PREP)


def _llama4_qk(fb: DataflowBuilder, q: str, k: str, *, model: ModelConfig, nope: bool) -> tuple[str, str]:
    """Llama4TextAttention (modeling_llama4.py:346-369): on a RoPE layer the complex RoPE (its products keep only
    the shared freqs_cis), then the weightless L2 norm of q and k (use_qk_norm: FP32 input and rsqrt kept, as an
    RMSNorm's without the weight's product); on a NoPE layer neither, and with attn_temperature_tuning the
    queries times per-position scales (log1p(floor((pos + 1) / floor_scale)) attn_scale + 1, FP32 (1, s, 1, 1),
    made on every call and kept by the product)."""
    heads, kv_heads, S, hd = D(n_h, "tp"), D(n_kv, "tp"), S_FULL, D(d_h)
    arch: Arch = model.option("arch")
    if nope:
        if model.option("temperature_tuning"):
            (q,) = fb.op("temperature", "attn_temperature", [q], [("attn.q_scaled", (B, S, heads, hd))], tags=PREP)
        (query,) = fb.op("view", "q_transpose", [q], [("attn.query", (B, heads, S, hd))], tags=PREP)
        (key,) = fb.op("view", "k_transpose", [k], [("attn.key", (B, kv_heads, S, hd))], tags=PREP)
        return fb.alias(query, view_of=q), fb.alias(key, view_of=k)
    qr, kr = fb.op("rope", "rope", [q, k], [("attn.q_rot", (B, S, heads, hd)), ("attn.k_rot", (B, S, kv_heads, hd))],
                   tags=PREP)
    if arch.qk_norm != "l2":
        return qr, kr
    (query,) = fb.op("l2norm", "qk_norm.q", [qr], [("attn.query", (B, heads, S, hd))], tags=PREP)
    (key,) = fb.op("l2norm", "qk_norm.k", [kr], [("attn.key", (B, kv_heads, S, hd))], tags=PREP)
    return query, key


def _sink_softmax(fb: DataflowBuilder, sc: str, scores: tuple[Dim, ...]) -> str:
    """gpt-oss's eager_attention_forward (modeling_gpt_oss.py:243-252): cat([scores, sinks]) keeps nothing; the
    max over each row keeps its int64 indices (MaxBackward0); the softmax, in the model dtype, keeps its output,
    (b, n_h, s, s + 1); the probabilities without the sink column are a view of it, which the product with v keeps."""
    b, heads, q, k = scores
    joined = (b, heads, q, D(k.size + 1))
    (j,) = fb.op("concat", "sinks", [sc], [("attn.scores_sinks", joined)], [Weight("self_attn.sinks", (heads,))],
                 tags=CORE)
    (mx,) = fb.op("max", "sinks_row_max", [j], [("attn.row_max_indices", (b, heads, q, D(1)), INT64)], tags=CORE)
    (c,) = fb.op("add", "sinks_subtract_max", [j, mx], [("attn.scores_centred", joined)], tags=CORE)
    (pj,) = fb.op("softmax", "attn_softmax", [c], [("attn.probs_sinks", joined)], tags=CORE)
    (p,) = fb.op("view", "drop_sinks", [pj], [("attn.probs", scores)], tags=CORE)
    return fb.alias(p, view_of=pj)


def _linear(fb: DataflowBuilder, name: str, x: str, out: tuple, weight_dims: tuple[Dim, ...],
            bias: Dim | None) -> str:
    ws = [Weight(f"{name}.weight", weight_dims)] + ([Weight(f"{name}.bias", (bias,))] if bias is not None else [])
    (y,) = fb.op("linear", name, [x], [out], ws)
    return y


def gated(fb: DataflowBuilder, name: str, x: str, *, arch: Arch, rows: tuple[Dim, ...], width: Dim,
          group: str = "dense") -> str:
    """HF's gated MLP `name`: down(act(gate(x)) * up(x)); Phi-3's and GLM-4's fused gate_up_proj chunked (views);
    biases where mlp_bias."""
    b = width if arch.mlp_bias else None
    inner = rows + (width,)
    act = "silu" if arch.act == "silu" else "gelu"
    if arch.fused_gate_up:  # up_states = gate_up_proj(x); gate, up = chunk(2); up * act(gate)
        gu = _linear(fb, f"{name}.gate_up_proj", x, (f"{name}.gate_up", rows + (D(2 * width.size, *width.axes),)),
                     (H, D(2 * width.size, *width.axes)), None)
        g, u = views(fb, "split", f"{name}.chunk", gu, [(f"{name}.gate", inner), (f"{name}.up", inner)])
    else:
        g = _linear(fb, f"{name}.gate_proj", x, (f"{name}.gate", inner), (H, width), b)
        u = _linear(fb, f"{name}.up_proj", x, (f"{name}.up", inner), (H, width), b)
    (a,) = fb.op(act, f"{name}.act_fn", [g], [(f"{name}.act", inner)])
    (p,) = fb.op("mul", f"{name}.mul", [a, u], [(f"{name}.prod", inner)])
    return _linear(fb, f"{name}.down_proj", p, (f"{name}.out", rows + (H,)), (width, H), H if arch.mlp_bias else None)


def _enter(fb: DataflowBuilder, x_in: str, arch: Arch, block: str, rows: tuple[Dim, ...]) -> str:
    fb.block = block
    (x,) = fb.op("region", f"{block}_enter", [x_in], [(f"{block}.x", rows)])
    return _norm(fb, arch, arch.mlp_norm, x, f"{block}.x_norm", rows) if arch.pre_norms else x


def _exit(fb: DataflowBuilder, x_in: str, out: str, arch: Arch, block: str, rows, resid) -> str:
    if arch.post_norms:
        out = _norm(fb, arch, "post_feedforward_layernorm", out, f"{block}.out_norm", rows)
    (oe,) = fb.op("region", f"{block}_exit", [out], [(f"{block}.out_resid", resid)])
    (y,) = fb.op("add", f"{block}_residual", [x_in, oe], [(f"{block}.y", resid)])
    return y


def dense_mlp(fb: DataflowBuilder, x_in: str, *, arch: Arch) -> str:
    xn = _enter(fb, x_in, arch, "mlp", (B, S_SP, H))
    out = gated(fb, arch.ffn_name, xn, arch=arch, rows=(B, S_FULL), width=D(h_F, "tp"))
    if arch.residual_dropout:  # Seed-OSS: dropout(down_proj, p=residual_dropout)
        (out,) = fb.op("dropout_noise", "mlp_residual_dropout", [out], [("mlp.out_dropped", (B, S_SP, H))])
    return _exit(fb, x_in, out, arch, "mlp", (B, S_SP, H), (B, seq("sp"), H))


def moe(fb: DataflowBuilder, x_in: str, *, model: ModelConfig, impl: DecoderImpl, arch: Arch) -> str:
    """The MoE block: GLM-4.5's is DeepSeek-V3's (`ffn.moe`); the softmax-routed ones (Qwen-MoE, OLMoE, Mixtral)
    are written here."""
    if arch.router == "sigmoid_top1":  # Llama 4: every expert on every token
        return _llama4_moe(fb, x_in, model=model, impl=impl, arch=arch)
    if arch.clamped_swiglu:  # gpt-oss: GptOssMLP (no norm of its own: the layer's post_attention_layernorm)
        return _gpt_oss_moe(fb, x_in, model=model, impl=impl, arch=arch)
    if arch.router == "sigmoid_bias":  # Glm4MoeMoE: DeepseekV3MoE's router, experts and shared experts
        router = "v3-norm" if model.option("norm_topk_prob", True) else "v3"
        return ffn.moe(fb, x_in, impl=ffn.HFImpl(impl.attn, impl.experts, router, unit_batch=impl.unit_batch,
                                                 unit_seq=impl.unit_seq))
    if arch.router not in ("softmax_topk", "topk_softmax") or arch.router_bias or arch.expert_bias \
            or arch.clamped_swiglu or arch.shared not in ("", "own_gated"):
        raise SymmemError(f"{model.name}: the hf dataflow of {model.family.name}'s MoE block is not written yet; use "
                          "--dataflow paper")
    rows = (B, S_MOE, H)
    xn = _enter(fb, x_in, arch, "moe", rows)
    mixtral = arch.router == "topk_softmax"  # Mixtral always renormalises and keeps its weights in FP32
    weights, idx = softmax_router(fb, xn, arch=arch, norm=mixtral or bool(model.option("norm_topk_prob")),
                                  cast_back=not mixtral)
    experts = ffn.experts_grouped_mm if impl.experts == "grouped_mm" else ffn.experts_eager
    y = experts(fb, xn, weights, idx, weight_dtype=FP32 if mixtral else ACT)
    if arch.shared == "own_gated":  # Qwen2-MoE: sigmoid(shared_expert_gate(x)) * shared_expert(x)
        ys = gated(fb, f"{arch.ffn_name}.shared_expert", xn, arch=arch, rows=(B, S_MOE), width=D(h_S),
                   group="shared_expert")
        g = _linear(fb, f"{arch.ffn_name}.shared_expert_gate", xn, ("moe.shared_gate", (B, S_MOE, D(1))), (H, D(1)),
                    None)
        (sg,) = fb.op("sigmoid", "shared_gate.sigmoid", [g], [("moe.shared_gate_sigmoid", (B, S_MOE, D(1)))])
        (ys,) = fb.op("mul", "shared_gate.mul", [sg, ys], [("moe.shared_gated", rows)])
        (y,) = fb.op("add", "moe_sum", [y, ys], [("moe.out", rows)])
    return _exit(fb, x_in, y, arch, "moe", rows, rows)


def _top_logits(fb: DataflowBuilder, xn: str, arch: Arch) -> tuple[str, str]:
    """The router (`ffn.router`, biased where the Arch says so) and the top-k of its logits: gpt-oss's and Llama 4's
    (the int64 indices kept by topk)."""
    r = (B, S_MOE)
    logits = _linear(fb, f"{arch.ffn_name}.{arch.router_name}", xn, ("moe.router_logits", r + (D(N),)), (D(N), H),
                     D(N) if arch.router_bias else None)
    top, idx = fb.op("topk", "router.topk", [logits], [("moe.topk_logits", r + (D(N_r),)),
                                                      ("moe.topk_indices", r + (D(N_r),), INT64)],
                     tags=ROUTING + ("routing_decision",))
    return top, idx


def _gpt_oss_moe(fb: DataflowBuilder, x_in: str, *, model: ModelConfig, impl: DecoderImpl, arch: Arch) -> str:
    """GptOssMLP (modeling_gpt_oss.py:117-146): the router's biased logits, their top-k (int64 indices kept) and
    the softmax of the top-k values in the model dtype (kept); GptOssExperts' eager loop: per expert its tokens
    (kept by the first product), gate_up = x @ W + b (kept whole: both clamps read strided views of it),
    sigmoid(alpha gate) (kept), the clamped gate and up + 1 and glu (each kept by a product), the gated output
    (kept by the down product), the down output and the gathered routing weight (kept by the weighting), the
    weighted output (kept by index_add_)."""
    if impl.experts != "eager":
        raise SymmemError(f"{model.name}: experts_impl = {impl.experts!r}: gpt-oss's hf dataflow models the eager "
                          "experts; use --experts-impl eager")
    rows = (B, S_MOE, H)
    xn = _enter(fb, x_in, arch, "moe", rows)
    r = (B, S_MOE)
    top, idx = _top_logits(fb, xn, arch)
    (w,) = fb.op("softmax", "router.softmax", [top], [("moe.topk_weights", r + (D(N_r),))], tags=ROUTING)
    experts, slots, width = D(N, "ep"), (D(N, "ep"), D(E_tok)), D(h_E, "etp")
    (where,) = fb.op("no_grad", "experts.where", [idx], [("experts.where", (D(2),) + slots, INT64)])
    tok, pos = views(fb, "split", "experts.where_unbind", where, [("experts.token_idx", slots, INT64),
                                                                  ("experts.topk_pos", slots, INT64)])
    (xs,) = fb.op("index", "experts.gather_tokens", [xn, tok], [("experts.x", slots + (H,))])
    pair = D(2 * h_E, "etp")
    group = "routed_expert"
    (gu,) = fb.op("linear", "experts.gate_up", [xs], [("experts.gate_up", slots + (pair,))],
                  [Weight("mlp.experts.gate_up_proj", (experts, H, pair), group),
                   Weight("mlp.experts.gate_up_proj_bias", (experts, pair), group)])
    inner = slots + (width,)
    gate, up = views(fb, "split", "experts.interleave", gu, [("experts.gate", inner), ("experts.up", inner)])
    (gc,) = fb.op("clamp", "experts.gate_clamp", [gate], [("experts.gate_clamped", inner)])
    (uc,) = fb.op("clamp", "experts.up_clamp", [up], [("experts.up_clamped", inner)])
    (ga,) = fb.op("scale", "experts.alpha", [gc], [("experts.gate_alpha", inner)])
    (sg,) = fb.op("sigmoid", "experts.sigmoid", [ga], [("experts.sigmoid", inner)])
    (glu,) = fb.op("mul", "experts.glu", [gc, sg], [("experts.glu", inner)])
    (u1,) = fb.op("add", "experts.up_plus_one", [uc], [("experts.up_plus_one", inner)])
    (go,) = fb.op("mul", "experts.gated", [u1, glu], [("experts.gated", inner)])
    (dn,) = fb.op("linear", "experts.down", [go], [("experts.down", slots + (H,))],
                  [Weight("mlp.experts.down_proj", (experts, width, H), group),
                   Weight("mlp.experts.down_proj_bias", (experts, H), group)])
    (ws,) = fb.op("index", "experts.gather_weights", [w, tok, pos], [("experts.weights", slots + (D(1),))])
    (wo,) = fb.op("mul", "experts.weigh", [dn, ws], [("experts.weighted", slots + (H,))])
    (y,) = fb.op("index_add", "experts.index_add", [tok, wo], [("moe.routed_out", rows)])
    return _exit(fb, x_in, y, arch, "moe", rows, rows)


def _llama4_moe(fb: DataflowBuilder, x_in: str, *, model: ModelConfig, impl: DecoderImpl, arch: Arch) -> str:
    """Llama4TextMoe (modeling_llama4.py:141-174): the router's top-k logits (int64 indices kept by topk and the
    scatter into a -inf row) and the sigmoid of that row in FP32 (kept; cast back to the model dtype);
    every expert runs every token (Llama4TextExperts: bmm over (N, T, h)), its input x repeated N times
    times the transposed scores (both kept by the product: the repeat (N T, h) and the scores as a column
    (N T, 1), a copy); the product kept by the first bmm, gate_up (N, T, 2 h_E) by silu and the product with up,
    silu's output, the gated product by the second bmm; the shared expert a gated MLP of width h_E on all tokens.
    Routing does not change what it keeps: no token slots, N x T rows."""
    if impl.experts != "eager":
        raise SymmemError(f"{model.name}: experts_impl = {impl.experts!r}: Llama 4's experts have one "
                          "implementation (a bmm over every expert); use --experts-impl eager")
    rows = (B, S_MOE, H)
    xn = _enter(fb, x_in, arch, "moe", rows)
    r = (B, S_MOE)
    ffn = arch.ffn_name
    top, idx = _top_logits(fb, xn, arch)
    (row,) = fb.op("no_grad", "router.scatter", [top, idx], [("moe.router_row", r + (D(N),))], tags=ROUTING)
    (sg,) = fb.op("sigmoid", "router.sigmoid", [row], [("moe.router_scores_fp32", r + (D(N),), FP32)], tags=ROUTING)
    scores = cast(fb, "router.cast", sg, "moe.router_scores", r + (D(N),), tags=ROUTING)
    experts = D(N, "ep")
    every = (experts, B, S_MOE)
    (rep,) = fb.op("no_grad", "experts.repeat", [xn], [("experts.x_repeated", every + (H,))])
    (col,) = fb.op("no_grad", "experts.score_column", [scores], [("experts.scores_column", every + (D(1),))])
    (xin,) = fb.op("mul", "experts.weigh_input", [rep, col], [("experts.x", every + (H,))])
    width, pair = D(h_E, "etp"), D(2 * h_E, "etp")
    (gu,) = fb.op("linear", "experts.gate_up", [xin], [("experts.gate_up", every + (pair,))],
                  [Weight(f"{ffn}.experts.gate_up_proj", (experts, H, pair), "routed_expert")])
    gate, up = views(fb, "split", "experts.chunk", gu, [("experts.gate", every + (width,)),
                                                        ("experts.up", every + (width,))])
    (a,) = fb.op("silu", "experts.act_fn", [gate], [("experts.act", every + (width,))])
    (p,) = fb.op("mul", "experts.mul", [up, a], [("experts.prod", every + (width,))])
    (dn,) = fb.op("linear", "experts.down", [p], [("experts.down", every + (H,))],
                  [Weight(f"{ffn}.experts.down_proj", (experts, width, H), "routed_expert")])
    (yr,) = fb.op("sum", "experts.sum", [dn], [("moe.routed_out", rows)])
    ys = gated(fb, f"{ffn}.shared_expert", xn, arch=arch, rows=(B, S_MOE), width=D(h_E), group="shared_expert")
    (y,) = fb.op("add", "moe_sum", [ys, yr], [("moe.out", rows)])
    return _exit(fb, x_in, y, arch, "moe", rows, rows)


def softmax_router(fb: DataflowBuilder, xn: str, *, arch: Arch, norm: bool, cast_back: bool) -> tuple[str, str]:
    """Qwen3MoeTopKRouter / MixtralTopKRouter / OlmoeTopKRouter: logits in the model dtype, an FP32 softmax, the
    top-k, the renormalisation (in place: it keeps the values and their sum), cast back or not."""
    r = (B, S_MOE)
    logits = linear(fb, f"{arch.ffn_name}.{arch.router_name}", xn, ("moe.router_logits", r + (D(N),)), (D(N), H),
                    "router", ROUTING)
    (probs,) = fb.op("softmax", "gate.softmax", [logits], [("moe.router_probs", r + (D(N),), FP32)], tags=ROUTING)
    w, idx = fb.op("topk", "gate.topk", [probs], [("moe.topk_values", r + (D(N_r),), FP32),
                                                 ("moe.topk_indices", r + (D(N_r),), INT64)],
                   tags=ROUTING + ("routing_decision",))
    if norm:
        (den,) = fb.op("sum", "gate.denominator", [w], [("moe.topk_sum", r + (D(1),), FP32)], tags=ROUTING)
        (w,) = fb.op("div", "gate.normalize", [w, den], [("moe.topk_normalized", r + (D(N_r),), FP32)],
                     tags=ROUTING)
    if cast_back:  # router_top_value.to(router_logits.dtype)
        w = cast(fb, "gate.cast", w, "moe.topk_weights", r + (D(N_r),), tags=ROUTING)
    return w, idx


def rope_tables(fb: DataflowBuilder, model: ModelConfig) -> str:
    """The rotary embedding's cos and sin, (1, s, rotary width) each in the model dtype, computed once per forward
    and kept by every layer's RoPE (the width: head_dim, or 2 ceil(int(head_dim partial_rotary_factor) / 2))."""
    fb.block = "rope"
    arch: Arch = model.option("arch")
    pos = fb.input("rope.position_ids", (D(1), S_FULL), INT64)
    if arch.rope_complex:  # Llama 4: one complex64 freqs_cis (1, s, head_dim / 2), whatever the model dtype
        (freqs,) = fb.op("rotary_emb", "rotary_emb", [pos], [("rope.freqs_cis", (D(1), S_FULL, D(d_h / 2)), COMPLEX64)])
        return freqs
    width = model.option("rotary_dim")
    dim = D(d_h / 2) if arch.rope_half_tables else D(d_h) if width is None else D(width)
    dtype = FP32 if arch.rope_fp32 else ACT
    names = fb.op("rotary_emb", "rotary_emb", [pos], [("rope.cos", (D(1), S_FULL, dim), dtype),
                                                      ("rope.sin", (D(1), S_FULL, dim), dtype)])
    return names[0]

