"""HF's feed-forward blocks: the dense MLP, and the MoE block with its FP32 router, its routed experts (an
`eager` loop over experts or one `grouped_mm` per projection) and its shared experts.

The routed experts' token-slot dimension is (N experts, E_tok tokens each), as in the paper's MoE dataflow, so
that a routing model gives E_tok; with one GPU and the paper's routing, N·E_tok = T = b·s·N_r. What eager
experts keep is a sum over experts of terms linear in each expert's token count, so only T matters.
"""

from __future__ import annotations

from symmem.blocks._dims import S_FULL, S_MOE, S_SP, B, H, seq
from symmem.blocks.hf._ops import cast, linear, rmsnorm, views
from symmem.blocks.hf.impl import HFImpl
from symmem.blocks.symbols import N, N_r, N_s, h_E, h_F
from symmem.graph import BOOL, FP32, INT32, INT64, D, DataflowBuilder, Dim, DType, Weight
from symmem.symbols import E_tok

ROUTING = ("routing",)


def swiglu(fb: DataflowBuilder, name: str, x: str, *, rows: tuple[Dim, ...], out_rows: tuple[Dim, ...], width: Dim,
           group: str = "dense", projections: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> str:
    """HF's DeepseekV3MLP / DeepseekV2MLP: down(silu(gate(x)) * up(x)), no dropout; `projections`: the gate's,
    up's and down's module names (torchtitan's FeedForward: w1, w3, w2)."""
    gate, up, down = projections
    g = linear(fb, f"{name}.{gate}", x, (f"{name}.gate", rows + (width,)), (H, width), group)
    u = linear(fb, f"{name}.{up}", x, (f"{name}.up", rows + (width,)), (H, width), group)
    (a,) = fb.op("silu", f"{name}.act_fn", [g], [(f"{name}.act", rows + (width,))])
    (p,) = fb.op("mul", f"{name}.mul", [a, u], [(f"{name}.prod", rows + (width,))])
    return linear(fb, f"{name}.{down}", p, (f"{name}.out", out_rows + (H,)), (width, H), group)


def dense_mlp(fb: DataflowBuilder, x_in: str, *, resid_axis: str, norm: str = "post_attention_layernorm",
              name: str = "mlp", projections: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> str:
    """The norm, then `swiglu` (its module `name` and `projections`: torchtitan's are ffn_norm, feed_forward and
    w1, w3, w2), and the residual."""
    fb.block = "mlp"
    (x,) = fb.op("region", "mlp_enter", [x_in], [("mlp.x", (B, S_SP, H))])
    xn = rmsnorm(fb, norm, x, "mlp.x_norm", (B, S_SP, H))
    out = swiglu(fb, name, xn, rows=(B, S_FULL), out_rows=(B, S_SP), width=D(h_F, "tp"), projections=projections)
    (oe,) = fb.op("region", "mlp_exit", [out], [("mlp.out_resid", (B, seq(resid_axis), H))])
    (y,) = fb.op("add", "mlp_residual", [x_in, oe], [("mlp.y", (B, seq(resid_axis), H))])
    return y


def moe(fb: DataflowBuilder, x_in: str, *, impl: HFImpl) -> str:
    fb.block = "moe"
    xn = rmsnorm(fb, "post_attention_layernorm", x_in, "moe.x_norm", (B, S_MOE, H))
    weights, idx = router(fb, xn, impl.router)
    routed = experts_grouped_mm if impl.experts == "grouped_mm" else experts_eager
    yr = routed(fb, xn, weights, idx)
    ys = swiglu(fb, "mlp.shared_experts", xn, rows=(B, S_MOE), out_rows=(B, S_MOE), width=D(N_s * h_E),
                group="shared_expert")
    (ym,) = fb.op("add", "moe_sum", [yr, ys], [("moe.out", (B, S_MOE, H))])
    (y,) = fb.op("add", "moe_residual", [x_in, ym], [("moe.y", (B, S_MOE, H))])
    return y


def router(fb: DataflowBuilder, xn: str, kind: str) -> tuple[str, str]:
    """DeepseekV3TopkRouter / DeepseekV2TopkRouter, in FP32 whatever the model dtype; returns (weights, indices)."""
    rows = (B, S_MOE)
    x32 = cast(fb, "gate.input_fp32", xn, "moe.router_in", rows + (H,), FP32, ROUTING)
    logits = linear(fb, "mlp.gate", x32, ("moe.router_logits", rows + (D(N),), FP32), (D(N), H), "router", ROUTING)
    decision = ROUTING + ("routing_decision",)
    if kind.startswith("v3"):
        (scores,) = fb.op("sigmoid", "gate.sigmoid", [logits], [("moe.router_scores", rows + (D(N),), FP32)],
                          tags=ROUTING)
        # The group-limited choice (+ correction bias, group top-2 sums, masked_fill, topk) yields only indices:
        # the tensors it saves die with it, before the layer returns.
        (idx,) = fb.op("argtopk", "gate.topk", [scores], [("moe.topk_indices", rows + (D(N_r),), INT64)],
                       tags=decision)
        (w,) = fb.op("gather", "gate.gather", [scores, idx], [("moe.topk_scores", rows + (D(N_r),), FP32)],
                     tags=ROUTING)
        if kind == "v3-norm":  # topk_weights /= topk_weights.sum(-1, keepdim=True) + 1e-20
            (den,) = fb.op("sum", "gate.denominator", [w], [("moe.topk_denominator", rows + (D(1),), FP32)],
                           tags=ROUTING)
            (w,) = fb.op("div", "gate.normalize", [w, den], [("moe.topk_normalized", rows + (D(N_r),), FP32)],
                         tags=ROUTING)
    else:
        (scores,) = fb.op("softmax", "gate.softmax", [logits], [("moe.router_scores", rows + (D(N),), FP32)],
                          tags=ROUTING)
        if kind == "v2-group":  # masked_fill(~score_mask.bool(), 0.0) keeps the boolean mask
            (mask,) = fb.op("no_grad", "gate.group_mask", [scores], [("moe.group_mask", rows + (D(N),), BOOL)],
                            tags=ROUTING)
            (scores,) = fb.op("masked_fill", "gate.masked_fill", [scores, mask],
                              [("moe.router_scores_masked", rows + (D(N),), FP32)], tags=ROUTING)
        w, idx = fb.op("topk", "gate.topk", [scores], [("moe.topk_scores", rows + (D(N_r),), FP32),
                                                       ("moe.topk_indices", rows + (D(N_r),), INT64)], tags=decision)
    (weights,) = fb.op("scale", "gate.routed_scaling", [w], [("moe.topk_weights", rows + (D(N_r),), FP32)],
                       tags=ROUTING)
    return weights, idx


def _expert_dims():
    experts = D(N, "ep")
    return experts, (experts, D(E_tok)), D(h_E, "etp")


def experts_grouped_mm(fb: DataflowBuilder, xn: str, weights: str, idx: str, weight_dtype: DType = FP32) -> str:
    """transformers.integrations.moe.grouped_mm_experts_forward: sort the token-slots by expert, two grouped_mm.
    `weight_dtype`: the routing weights' (FP32 from DeepSeek's and Mixtral's routers, the model dtype from
    Qwen's and OLMoE's, which cast them back): the weighting's product has the wider of it and the model's."""
    experts, slots, width = _expert_dims()
    ids, perm = fb.op("no_grad", "experts.sort", [idx], [("experts.sorted_ids", slots, INT64),
                                                         ("experts.perm", slots, INT64)])
    (tok,) = fb.op("no_grad", "experts.token_of_slot", [perm], [("experts.token_idx", slots, INT64)])  # perm // k
    (xs,) = fb.op("index", "experts.gather_tokens", [xn, tok], [("experts.x", slots + (H,))])
    (ws,) = fb.op("index", "experts.gather_weights", [weights, perm], [("experts.weights", slots + (D(1),),
                                                                         weight_dtype)])
    (offs,) = fb.op("no_grad", "experts.offsets", [ids], [("experts.offsets", (experts,), INT32)])
    (gu,) = fb.op("grouped_mm", "experts.gate_up", [xs, offs], [("experts.gate_up", slots + (D(2 * h_E, "etp"),))],
                  [_weight("mlp.experts.gate_up_proj", (experts, D(2 * h_E, "etp"), H))])
    out = _swiglu_tail(fb, gu, slots, width)
    (dn,) = fb.op("grouped_mm", "experts.down", [out, offs], [("experts.down", slots + (H,))],
                  [_weight("mlp.experts.down_proj", (experts, H, width))])
    # promoted to FP32 by FP32 weights
    (wo,) = fb.op("mul", "experts.weigh", [dn, ws], [("experts.weighted", slots + (H,), weight_dtype)])
    (inv,) = fb.op("no_grad", "experts.inv_perm", [perm], [("experts.inv_perm", slots, INT64)])
    (wu,) = fb.op("index", "experts.unsort", [wo, inv], [("experts.unsorted", slots + (H,), weight_dtype)])
    (y32,) = fb.op("sum", "experts.sum_topk", [wu], [("moe.routed_out_fp32", (B, S_MOE, H), weight_dtype)])
    return cast(fb, "experts.out_cast", y32, "moe.routed_out", (B, S_MOE, H))


def experts_eager(fb: DataflowBuilder, xn: str, weights: str, idx: str, weight_dtype: DType = FP32) -> str:
    """DeepseekV3Experts.forward: a loop over the experts hit, each on its own tokens, summed by index_add_ (the
    same code in Qwen3-MoE, OLMoE, Mixtral, GLM-4.5). `weight_dtype`: as `experts_grouped_mm`'s."""
    experts, slots, width = _expert_dims()
    # torch.where(expert_mask[e]) returns (top_k_pos, token_idx): two views of one int64 storage.
    (where,) = fb.op("no_grad", "experts.where", [idx], [("experts.where", (D(2),) + slots, INT64)])
    tok, pos = views(fb, "split", "experts.where_unbind", where, [("experts.token_idx", slots, INT64),
                                                                  ("experts.topk_pos", slots, INT64)])
    (xs,) = fb.op("index", "experts.gather_tokens", [xn, tok], [("experts.x", slots + (H,))])
    (gu,) = fb.op("linear", "experts.gate_up", [xs], [("experts.gate_up", slots + (D(2 * h_E, "etp"),))],
                  [_weight("mlp.experts.gate_up_proj", (experts, D(2 * h_E, "etp"), H))])
    out = _swiglu_tail(fb, gu, slots, width)
    (dn,) = fb.op("linear", "experts.down", [out], [("experts.down", slots + (H,))],
                  [_weight("mlp.experts.down_proj", (experts, H, width))])
    (ws,) = fb.op("index", "experts.gather_weights", [weights, tok, pos], [("experts.weights", slots + (D(1),),
                                                                              weight_dtype)])
    # promoted to FP32 by FP32 weights
    (wo,) = fb.op("mul", "experts.weigh", [dn, ws], [("experts.weighted", slots + (H,), weight_dtype)])
    wd = cast(fb, "experts.weighted_cast", wo, "experts.weighted_dt", slots + (H,))
    (y,) = fb.op("index_add", "experts.index_add", [tok, wd], [("moe.routed_out", (B, S_MOE, H))])
    return y


def _swiglu_tail(fb: DataflowBuilder, gu: str, slots: tuple[Dim, ...], width: Dim) -> str:
    # gate, up = gate_up.chunk(2, dim=-1): both views of the gate_up output
    gate, up = views(fb, "split", "experts.chunk", gu, [("experts.gate", slots + (width,)),
                                                        ("experts.up", slots + (width,))])
    (a,) = fb.op("silu", "experts.act_fn", [gate], [("experts.act", slots + (width,))])
    (p,) = fb.op("mul", "experts.mul", [a, up], [("experts.prod", slots + (width,))])
    return p


def _weight(name: str, dims: tuple[Dim, ...]) -> Weight:
    return Weight(name, dims, "routed_expert")
