"""A decoder layer composed of the features an `Arch` names, in the paper's convention (Korthikanti et al. 2022:
the unfused attention core, key and value repeated to the query heads; what each op keeps is the rule set's).

With every feature off this is Llama's layer (`symmem.blocks.gqa` and `symmem.blocks.mlp`) op for op. Weight names
are Hugging Face's module names, so a parameter count can be compared module by module. A bias is a second weight
of its linear (adding it keeps nothing for backward); a fused projection (Phi-3's qkv_proj, gate_up_proj) is one
weight whose parts the ops read; a learned sink logit is a weight of the op that joins it to the scores.
"""

from __future__ import annotations

from symmem.blocks._dims import S_FULL, S_KV, S_MOE, S_SP, B, H, seq
from symmem.blocks.features import Arch, h_S
from symmem.blocks.gqa import n_kv
from symmem.blocks.symbols import N, N_r, N_s, V, d_h, h, h_E, h_F, n_h
from symmem.graph import FP32, INT64, D, DataflowBuilder, Dim, Weight
from symmem.symbols import E_tok, s

CORE = ("core_attention",)
PREP = ("attention_prep",)


def norm(fb: DataflowBuilder, name: str, x: str, out: str, dims: tuple[Dim, ...], weight: Dim | None = None,
         has_weight: bool = True) -> str:
    """An RMSNorm module `name` (its weight over the last dimension, or `weight`; none for an L2 norm)."""
    ws = [Weight(f"{name}.weight", (weight or dims[-1],))] if has_weight else []
    (y,) = fb.op("rmsnorm", name, [x], [(out, dims)], ws)
    return y


def linear(fb: DataflowBuilder, name: str, x: str, out: tuple, weight_dims: tuple[Dim, ...], *, bias: Dim | None = None,
           group: str = "dense", tags=(), weight: str | None = None, lead: tuple[Dim, ...] = ()) -> str:
    """An nn.Linear `name` (weight `name.weight` unless given; with `bias`, a bias of that size too)."""
    ws = [Weight(weight or f"{name}.weight", lead + weight_dims, group)]
    if bias is not None:
        ws.append(Weight(f"{name}.bias" if weight is None else f"{weight}_bias", lead + (bias,), group))
    (y,) = fb.op("linear", name, [x], [out], ws, tags=tags)
    return y


def attention(fb: DataflowBuilder, x_in: str, *, arch: Arch, resid_axis: str = "sp", rope: bool = True,
              qk_norm: bool = True, dropout: bool = False) -> str:
    """The attention block with its norms and residual. `rope`: whether the layer rotates q and k (Llama 4's and
    SmolLM3's NoPE layers do not); `qk_norm`: whether this layer normalises them (Llama 4: its RoPE layers only)."""
    fb.block = "attn"
    heads, kv_heads, hd = D(n_h, "tp"), D(n_kv, "tp"), D(d_h)
    (x,) = fb.op("region", "attn_enter", [x_in], [("attn.x", (B, S_SP, H))])
    xn = norm(fb, "input_layernorm", x, "attn.x_norm", (B, S_SP, H)) if arch.pre_norms else x
    qkv = ("module:linear_qkv",)  # Megatron-Core computes q, k, v with one fused linear_qkv
    shapes = (("q", heads), ("k", kv_heads), ("v", kv_heads))
    proj = {}
    for part, nh in shapes:
        if arch.fused_qkv:  # Phi-3's qkv_proj: one weight (H, (n_h + 2 n_kv) d_h), read in three parts
            w = f"self_attn.qkv_proj.{part}"
            proj[part] = linear(fb, f"{part}_proj", xn, (f"attn.{part}", (B, S_FULL, nh, hd)), (H, nh, hd),
                                weight=w, tags=qkv)
        else:
            proj[part] = linear(fb, f"self_attn.{part}_proj", xn, (f"attn.{part}", (B, S_FULL, nh, hd)), (H, nh, hd),
                                bias=D(nh.size * d_h, "tp") if arch.qkv_bias else None, tags=qkv)
    q, k, v = proj["q"], proj["k"], proj["v"]
    if arch.qk_norm and qk_norm:
        # the norm's weight: per head (None: d_h), over all heads' projections (OLMo 2), or hidden-size widths
        width = {"proj": (D(n_h * d_h), D(n_kv * d_h)), "hidden": (H, D(h * n_kv / n_h))}.get(arch.qk_norm,
                                                                                             (None, None))
        q = norm(fb, "self_attn.q_norm", q, "attn.q_normed", (B, S_FULL, heads, hd), weight=width[0],
                 has_weight=arch.qk_norm != "l2")
        k = norm(fb, "self_attn.k_norm", k, "attn.k_normed", (B, S_FULL, kv_heads, hd), weight=width[1],
                 has_weight=arch.qk_norm != "l2")
    if rope:
        (q,) = fb.op("rope", "q_rope", [q], [("attn.query", (B, S_FULL, heads, hd))], tags=PREP)
        (k,) = fb.op("rope", "k_rope", [k], [("attn.key", (B, S_FULL, kv_heads, hd))], tags=PREP)
    (ke,) = fb.op("expand", "repeat_kv.key", [k], [("attn.key_heads", (B, S_FULL, heads, hd))], tags=CORE)
    (ve,) = fb.op("expand", "repeat_kv.value", [v], [("attn.value_heads", (B, S_FULL, heads, hd))], tags=CORE)
    scores = (B, heads, S_FULL, S_KV)
    (sc,) = fb.op("matmul", "qk", [q, ke], [("attn.scores", scores)], tags=CORE)
    if arch.attn_softcap:  # Gemma 2: cap * tanh(scores / cap)
        (sc,) = fb.op("scale", "attn_softcap.div", [sc], [("attn.scores_scaled", scores)], tags=CORE)
        (sc,) = fb.op("tanh", "attn_softcap.tanh", [sc], [("attn.scores_tanh", scores)], tags=CORE)
        (sc,) = fb.op("scale", "attn_softcap.mul", [sc], [("attn.scores_capped", scores)], tags=CORE)
    if arch.sinks:  # gpt-oss: each head's learned sink logit joins every score row; softmax over s + 1
        joined = (B, heads, S_FULL, D(S_KV.size + 1))
        (sc,) = fb.op("concat", "sinks", [sc], [("attn.scores_sinks", joined)],
                      [Weight("self_attn.sinks", (heads,))], tags=CORE)
        (pj,) = fb.op("softmax", "attn_softmax", [sc], [("attn.probs_sinks", joined)], tags=CORE)
        (p,) = fb.op("view", "drop_sinks", [pj], [("attn.probs", scores)], tags=CORE)
        fb.alias(p, view_of=pj)
    else:
        (p,) = fb.op("softmax", "attn_softmax", [sc], [("attn.probs", scores)], tags=CORE)
    if dropout:
        (p,) = fb.op("dropout", "attn_dropout", [p], [("attn.probs_dropped", scores)], tags=CORE)
    (ctx,) = fb.op("matmul", "pv", [p, ve], [("attn.context", (B, S_FULL, heads, hd))], tags=CORE)
    # o_proj is row-parallel: its output is reduce-scattered back to the sequence-sharded region.
    o = linear(fb, "self_attn.o_proj", ctx, ("attn.out", (B, S_SP, H)), (heads, hd, H),
               bias=H if arch.o_bias else None)
    if arch.post_norms:  # Gemma's and OLMo 2's post_attention_layernorm normalises the attention's output
        o = norm(fb, "post_attention_layernorm", o, "attn.out_norm", (B, S_SP, H))
    (oe,) = fb.op("region", "attn_exit", [o], [("attn.out_resid", (B, seq(resid_axis), H))])
    (y,) = fb.op("add", "attn_residual", [x_in, oe], [("attn.y", (B, seq(resid_axis), H))])
    return y


def gated(fb: DataflowBuilder, name: str, x: str, *, arch: Arch, rows: tuple[Dim, ...], out_rows: tuple[Dim, ...],
          width: Dim, lead: tuple[Dim, ...] = (), group: str = "dense", bias: bool = False,
          weights: str = "proj") -> str:
    """down(act(gate(x)) * up(x)) (gpt-oss: its clamped form), the MLP of every layer and expert here. `weights`:
    "proj" for nn.Linear modules (`name.gate_proj.weight`, or Phi-3's fused `name.gate_up_proj.weight`), "param"
    for experts stored as 3-D parameters (`name.gate_up_proj`, `name.down_proj`, their `_bias`)."""
    fc1 = (f"module:{name}.linear_fc1",)  # Megatron-Core fuses gate and up into one linear_fc1
    b = width if bias else None
    if weights == "param" or arch.fused_gate_up:
        stem = f"{name}.gate_up_proj" if weights == "param" else f"{name}.gate_up_proj.weight"
        g = linear(fb, f"{name}.gate", x, (f"{name}.gate", rows + (width,)), (H, width), lead=lead, group=group,
                   weight=f"{stem}.gate", tags=fc1)
        u = linear(fb, f"{name}.up", x, (f"{name}.up", rows + (width,)), (H, width), lead=lead, group=group,
                   weight=f"{stem}.up", tags=fc1)
        if bias:  # the fused bias, one weight beside the fused matrix
            g = _bias(fb, f"{name}.gate_up_proj", g, lead + (D(2 * width.size, *width.axes),), group)
    else:
        g = linear(fb, f"{name}.gate_proj", x, (f"{name}.gate", rows + (width,)), (H, width), bias=b, lead=lead,
                   group=group, tags=fc1)
        u = linear(fb, f"{name}.up_proj", x, (f"{name}.up", rows + (width,)), (H, width), bias=b, lead=lead,
                   group=group, tags=fc1)
    inner = rows + (width,)
    if arch.clamped_swiglu:  # gpt-oss: gate.clamp(max=l), up.clamp(-l, l), gate * sigmoid(alpha gate) * (up + 1)
        (g,) = fb.op("clamp", f"{name}.gate_clamp", [g], [(f"{name}.gate_clamped", inner)], tags=("swiglu",))
        (u,) = fb.op("clamp", f"{name}.up_clamp", [u], [(f"{name}.up_clamped", inner)], tags=("swiglu",))
        (sg,) = fb.op("sigmoid", f"{name}.glu_sigmoid", [g], [(f"{name}.glu_gate", inner)], tags=("swiglu",))
        (a,) = fb.op("mul", f"{name}.glu", [g, sg], [(f"{name}.act", inner)], tags=("swiglu",))
    else:
        (a,) = fb.op("silu" if arch.act == "silu" else "gelu", f"{name}.act", [g], [(f"{name}.act", inner)],
                     tags=("swiglu",))
    (p,) = fb.op("mul", f"{name}.mul", [a, u], [(f"{name}.prod", inner)], tags=("swiglu",))
    down = f"{name}.down_proj" if weights == "param" else None
    return linear(fb, f"{name}.down_proj", p, (f"{name}.out", out_rows + (H,)), (width, H), lead=lead, group=group,
                  weight=down, bias=H if bias else None)


def _bias(fb: DataflowBuilder, name: str, x: str, dims: tuple[Dim, ...], group: str) -> str:
    t = fb.tensors[x]
    (y,) = fb.op("add", f"{name}.bias_add", [x], [(f"{t.name.removeprefix(fb.prefix)}_biased", t.dims)],
                 [Weight(f"{name}_bias", dims, group)])
    return y


def _ffn_enter(fb: DataflowBuilder, x_in: str, arch: Arch, block: str, rows: tuple[Dim, ...]) -> str:
    fb.block = block
    (x,) = fb.op("region", f"{block}_enter", [x_in], [(f"{block}.x", rows)])
    return norm(fb, arch.mlp_norm, x, f"{block}.x_norm", rows) if arch.pre_norms else x


def _ffn_exit(fb: DataflowBuilder, x_in: str, out: str, arch: Arch, block: str, rows: tuple[Dim, ...],
              resid: tuple[Dim, ...]) -> str:
    if arch.post_norms:
        out = norm(fb, "post_feedforward_layernorm", out, f"{block}.out_norm", rows)
    (oe,) = fb.op("region", f"{block}_exit", [out], [(f"{block}.out_resid", resid)])
    (y,) = fb.op("add", f"{block}_residual", [x_in, oe], [(f"{block}.y", resid)])
    return y


def dense_mlp(fb: DataflowBuilder, x_in: str, *, arch: Arch, resid_axis: str = "sp") -> str:
    """The dense MLP block: its norms, the gated MLP of width h_F, the residual."""
    xn = _ffn_enter(fb, x_in, arch, "mlp", (B, S_SP, H))
    out = gated(fb, arch.ffn_name, xn, arch=arch, rows=(B, S_FULL), out_rows=(B, S_SP), width=D(h_F, "tp"),
                bias=arch.mlp_bias)
    return _ffn_exit(fb, x_in, out, arch, "mlp", (B, S_SP, H), (B, seq(resid_axis), H))


def moe(fb: DataflowBuilder, x_in: str, *, arch: Arch, convention: str = "paper") -> str:
    """The MoE block: its norms, the router, N routed experts (top-N_r per token), the shared expert if any.

    As in `symmem.blocks.moe`: under the `megatron` convention the router is a dense parameter and a shared
    expert is a tensor-parallel MLP; in the paper's both count with the experts."""
    megatron = convention == "megatron"
    rows = (B, S_MOE, H)
    xn = _ffn_enter(fb, x_in, arch, "moe", rows)
    ffn, routing = arch.ffn_name, ("routing",)
    router = linear(fb, f"{ffn}.{arch.router_name}", xn, ("moe.router_logits", (B, S_MOE, D(N))), (H, D(N)),
                    bias=D(N) if arch.router_bias else None, group="dense" if megatron else "router", tags=routing)
    (scores,) = fb.op("router_score", "gate.score", [router], [("moe.router_scores", (B, S_MOE, D(N)))],
                      tags=routing)
    topw, topi = fb.op("topk", "gate.topk", [scores], [("moe.topk_weights", (B, S_MOE, D(N_r))),
                                                      ("moe.topk_indices", (B, S_MOE, D(N_r)), INT64)],
                       tags=routing + ("routing_decision",))
    experts = D(N, "ep")
    (xe,) = fb.op("dispatch", "dispatch", [xn, topi], [("moe.expert_in", (experts, D(E_tok), H))])
    oe = gated(fb, f"{ffn}.experts", xe, arch=arch, rows=(experts, D(E_tok)), out_rows=(experts, D(E_tok)),
               width=D(h_E, "etp"), lead=(experts,), group="routed_expert", bias=arch.expert_bias, weights="param")
    (y,) = fb.op("combine", "combine", [oe, topw, topi], [("moe.routed_out", (B, S_MOE, H))])
    if arch.shared:
        width = {"experts": N_s * h_E, "own": h_S, "own_gated": h_S, "expert_width": h_E}[arch.shared]
        name = f"{ffn}.shared_experts" if arch.shared == "experts" else f"{ffn}.shared_expert"
        if megatron:
            ys = gated(fb, name, xn, arch=arch, rows=(B, D(s, "cp")), out_rows=(B, S_MOE), width=D(width, "tp"))
        else:
            ys = gated(fb, name, xn, arch=arch, rows=(B, S_MOE), out_rows=(B, S_MOE), width=D(width),
                       group="shared_expert")
        if arch.shared == "own_gated":  # Qwen2-MoE: sigmoid(shared_expert_gate(x)) * shared_expert(x)
            g = linear(fb, f"{ffn}.shared_expert_gate", xn, ("moe.shared_gate", (B, S_MOE, D(1))), (H, D(1)),
                       group="dense" if megatron else "shared_expert")
            (sg,) = fb.op("sigmoid", "shared_gate.sigmoid", [g], [("moe.shared_gate_sigmoid", (B, S_MOE, D(1)))])
            (ys,) = fb.op("mul", "shared_gate.mul", [sg, ys], [("moe.shared_gated", rows)])
        (y,) = fb.op("add", "moe_sum", [y, ys], [("moe.out", rows)])
    return _ffn_exit(fb, x_in, y, arch, "moe", rows, rows)


def scaled_embedding(fb: DataflowBuilder, x: str) -> str:
    """Gemma: the embedding's output times sqrt(h) (a constant: its backward keeps nothing)."""
    (y,) = fb.op("scale", "embed_scale", [x], [("embed_tokens.scaled", fb.tensors[x].dims)])
    return y


def head(fb: DataflowBuilder, x_in: str, *, arch: Arch, shared_with: str | None) -> str:
    """The final norm, lm_head (tied or not), the final logits' soft-capping (Gemma 2), the loss."""
    (x,) = fb.op("region", "head_enter", [x_in], [("head.x", (B, S_SP, H))])
    xn = norm(fb, "norm", x, "head.x_norm", (B, S_SP, H))
    logits = (B, S_FULL, D(V, "tp"))
    (lg,) = fb.op("linear", "lm_head", [xn], [("head.logits", logits)],
                  [Weight("lm_head.weight", (H, D(V, "tp")), "dense", shared_with)])
    if arch.final_softcap:
        (lg,) = fb.op("scale", "final_softcap.div", [lg], [("head.logits_scaled", logits)])
        (lg,) = fb.op("tanh", "final_softcap.tanh", [lg], [("head.logits_tanh", logits)])
        (lg,) = fb.op("scale", "final_softcap.mul", [lg], [("head.logits_capped", logits)])
    (loss,) = fb.op("cross_entropy", "loss", [lg], [("head.loss", (), FP32)])
    return loss
