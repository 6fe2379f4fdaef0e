"""torchtitan 0.3.0's DeepSeek-V3 decoder layer (torchtitan/models/deepseek_v3/model.py `DeepSeekV3TransformerBlock`):
MLA, then a dense feed-forward or the MoE block. Each op cites the line it follows; what each op keeps for backward is
the rule set's (`symmem.rules.torchtitan`), measured on the CPU by `symmem measure --framework fsdp2` (DeepSeek-V3
at tiny sizes, tests/validate/test_fsdp2.py).

Only the local token dispatcher (no expert parallelism) is written: torchtitan's `LocalTokenDispatcher`
(models/common/token_dispatcher.py:47-169). It keeps every routed slot, unpadded, whatever the routing: the slots
are (b, s, N_r), not the other MoE dataflows' (N experts, E_tok tokens each).

Under TP with sequence parallelism (models/deepseek_v3/sharding.py, models/common/moe_sharding.py, EP off) the norms
run on the rank's s/t rows and each module's input is all-gathered at its entry: the attention then runs on the whole
sequence, its low-rank projections (wkv_a, kv_norm, wq_a, q_norm) replicated and its up-projections and wo split by
heads; the MoE block's router, dispatcher and grouped experts run on every token of the whole sequence, the experts'
hidden dimension split over TP (w1_EFD, w3_EFD Shard(1), w2_EDF Shard(2)), the shared experts column- and
row-parallel. The rule set's `under_tp` keeps each gathered input whole (symmem.rules.torchtitan).
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem.blocks._dims import S_FULL, S_MOE, S_SP, B, H, seq
from symmem.blocks.hf._ops import cast, linear, rmsnorm, views
from symmem.blocks.hf.attention import CORE, PREP, core
from symmem.blocks.hf.ffn import ROUTING, dense_mlp, swiglu
from symmem.blocks.hf.impl import sdpa_backend
from symmem.blocks.mla import d_v_symbol, q_latent
from symmem.blocks.symbols import N, N_r, N_s, d_c, d_cq, d_h, d_hr, h_E, n_h
from symmem.config import ModelConfig
from symmem.errors import SymmemError
from symmem.graph import ACT, BF16, BOOL, FP32, INT32, INT64, D, DataflowBuilder, Dim, Weight

SCORE_FUNCS = ("softmax", "sigmoid")
TORCHTITAN_FFN = ("w1", "w3", "w2")  # FeedForward's gate, up and down projections


@dataclass(frozen=True)
class TorchtitanImpl:
    """How torchtitan runs the layer: on a GPU or on the CPU, its router's options, and whether b = 1 / s = 1.

    * `on_gpu`: the router's gate runs under `torch.autocast(dtype=torch.float32)` (models/common/moe.py:297-299),
      which CUDA honours (torch/amp/autocast_mode.py:282-295: no dtype check for CUDA) and the CPU refuses with a
      warning (:297-304: CPU autocast supports BF16 and FP16 only), so on the CPU the router runs in the activation
      dtype. The attention on a GPU is FlexAttention (torchtitan's default inner attention,
      models/deepseek_v3/model.py:51), which keeps q, k, v, the output and the FP32 logsumexp
      (torch/_higher_order_ops/flex_attention.py); on the CPU torchtitan's `ScaledDotProductAttention`
      (models/common/attention.py:414-445), whose backend torch picks (`sdpa_backend`).
    * `score_func`, `route_norm`, `groups`: `TokenChoiceTopKRouter.Config` (models/common/moe.py:214-225), from the
      HF config's `scoring_func`, `norm_topk_prob`, and `n_group`, `topk_group` (num_expert_groups,
      num_limited_groups).
    """

    on_gpu: bool = True
    score_func: str = "sigmoid"
    route_norm: bool = True
    unit_batch: bool = False  # b = 1
    unit_seq: bool = False  # s = 1
    groups: tuple[int, int] | None = None  # group-limited routing: (n_group, topk_group), n_group > 1
    attn: str = "sdpa"  # what `symmem.blocks.hf.attention.core` reads on the CPU

    def __post_init__(self) -> None:
        if self.score_func not in SCORE_FUNCS:
            raise SymmemError(f"scoring_func = {self.score_func!r}: torchtitan's router runs "
                              f"{' or '.join(SCORE_FUNCS)}")

    # the local token dispatcher keeps every routed slot, b·s·N_r per rank, whatever the routing model
    fixed_slots = True

    @property
    def flat_view(self) -> bool:  # as HFImpl.flat_view (the math backend's flattening of v)
        return self.unit_batch or self.unit_seq

    @property
    def output_view(self) -> bool:
        return self.unit_seq

    @classmethod
    def of(cls, model: ModelConfig, on_gpu: bool, unit_batch: bool, unit_seq: bool) -> TorchtitanImpl:
        norm = model.option("norm_topk_prob")
        n_group, topk_group = model.option("n_group"), model.option("topk_group")
        groups = (n_group, topk_group or n_group) if n_group is not None and n_group > 1 else None
        return cls(on_gpu, model.option("scoring_func") or "softmax",
                   bool(norm) if norm is not None else model.model_type == "deepseek_v3",  # transformers' default
                   unit_batch=unit_batch, unit_seq=unit_seq, groups=groups)


def layer(fb: DataflowBuilder, x: str, kind: str, *, model: ModelConfig, impl: TorchtitanImpl, resid_axis: str) -> str:
    """`x + attention(attention_norm(x))`, then `+ moe(ffn_norm(·))` or `+ feed_forward(ffn_norm(·))`
    (models/deepseek_v3/model.py:171-177)."""
    y = mla(fb, x, model=model, impl=impl, resid_axis=resid_axis)
    return moe(fb, y, impl=impl) if kind == "moe" else dense(fb, y, resid_axis=resid_axis)


def mla(fb: DataflowBuilder, x_in: str, *, model: ModelConfig, impl: TorchtitanImpl, resid_axis: str) -> str:
    """`Attention.forward` (models/deepseek_v3/model.py:96-146)."""
    fb.block = "mla"
    heads, S, d_v = D(n_h, "tp"), S_FULL, d_v_symbol(model)
    d_qk = d_h + d_hr
    (x,) = fb.op("region", "attn_enter", [x_in], [("attn.x", (B, S_SP, H))])
    xn = rmsnorm(fb, "attention_norm", x, "attn.x_norm", (B, S_SP, H))
    if q_latent(model):  # :106-108: wq_b(q_norm(wq_a(x)))
        cq = linear(fb, "attention.wq_a", xn, ("attn.q_a", (B, S, D(d_cq))), (H, D(d_cq)))
        cqn = rmsnorm(fb, "attention.q_norm", cq, "attn.q_a_norm", (B, S, D(d_cq)))
        q = linear(fb, "attention.wq_b", cqn, ("attn.q", (B, S, heads, D(d_qk))), (D(d_cq), heads, D(d_qk)),
                   tags=["up_projection"])
    else:  # :104
        q = linear(fb, "attention.wq", xn, ("attn.q", (B, S, heads, D(d_qk))), (H, heads, D(d_qk)))
    # :111-121: q.view(...) and torch.split: views
    q_nope, q_pe = views(fb, "split", "q_split", q, [("attn.q_nope", (B, S, heads, D(d_h))),
                                                     ("attn.q_pe", (B, S, heads, D(d_hr)))], tags=PREP)
    # :124-125 on the whole sequence (the attention's input is gathered at its entry, sharding.py:81-92)
    kv = linear(fb, "attention.wkv_a", xn, ("attn.kv_a", (B, S, D(d_c + d_hr))), (H, D(d_c + d_hr)))
    kv_nope, k_pe = views(fb, "split", "kv_split", kv, [("attn.kv_nope", (B, S, D(d_c))),
                                                        ("attn.k_pe", (B, S, D(d_hr)))])
    # :127: ComplexRoPE multiplies the complex views of FP32 copies by the cached table, a buffer that needs no
    # gradient (models/common/rope.py): nothing is kept for backward; the outputs are new tensors
    q_pe_r, k_pe_r = fb.op("rope", "rope", [q_pe, k_pe], [("attn.q_pe_rope", (B, S, heads, D(d_hr))),
                                                          ("attn.k_pe_rope", (B, S, D(d_hr)))], tags=PREP)
    (query,) = fb.op("concat", "q_cat", [q_nope, q_pe_r], [("attn.query", (B, heads, S, D(d_qk)))], tags=PREP)  # :128
    kvn = rmsnorm(fb, "attention.kv_norm", kv_nope, "attn.kv_norm", (B, S, D(d_c)))  # :130
    kvb = linear(fb, "attention.wkv_b", kvn, ("attn.kv_b", (B, S, heads, D(d_h + d_v))),
                 (D(d_c), heads, D(d_h + d_v)), tags=["up_projection"])
    k_nope, value = views(fb, "split", "kv_b_split", kvb, [("attn.k_nope", (B, heads, S, D(d_h))),
                                                           ("attn.value", (B, heads, S, D(d_v)))], tags=PREP)
    # :138: torch.cat([k_nope, k_pe.expand(...)]): a new tensor
    (key,) = fb.op("concat", "k_cat", [k_nope, k_pe_r], [("attn.key", (B, heads, S, D(d_qk)))], tags=PREP)
    if impl.on_gpu or sdpa_backend(model) == "flash":
        # FlexAttention (a GPU's default) and flash-attention-for-CPU keep q, k, v, the output and an FP32
        # logsumexp; their output is laid out (b, s, n_h, d_v), the query's stride order (torch/_higher_order_ops/
        # flex_attention.py:60-92 `_permute_strides`; the CPU's flash kernel likewise), so the transpose's
        # .contiguous() below is no copy and wo keeps the very tensor the attention keeps (measured on the CPU, as
        # for Llama's sdpa, symmem.blocks.hf.llama)
        ctx, _lse = fb.op("sdpa_flash", "inner_attention", [query, key, value],
                          [("attn.ctx", (B, heads, S, D(d_v))), ("attn.logsumexp", (B, heads, S), FP32)], tags=CORE)
        output_view = True
    else:  # the CPU's math backend, as for Hugging Face's sdpa (q/k head size unequal to v's)
        ctx = core(fb, query, key, value, model=model, impl=impl)
        output_view = impl.output_view
    # :146-148: .contiguous() of the (B, L, N, H) transpose, then view: wo keeps the copy (or the output itself)
    (ctx_c,) = fb.op("contiguous", "attn_output", [ctx], [("attn.context", (B, S, heads, D(d_v)))])
    if output_view:
        fb.alias(ctx_c, view_of=ctx)
    o = linear(fb, "attention.wo", ctx_c, ("attn.out", (B, S_SP, H)), (heads, D(d_v), H))
    (oe,) = fb.op("region", "attn_exit", [o], [("attn.out_resid", (B, seq(resid_axis), H))])
    (y,) = fb.op("add", "attn_residual", [x_in, oe], [("attn.y", (B, seq(resid_axis), H))])
    return y


def feed_forward(fb: DataflowBuilder, name: str, x: str, *, rows: tuple[Dim, ...], out_rows: tuple[Dim, ...],
                 width: Dim, group: str = "dense") -> str:
    """`FeedForward.forward`: w2(F.silu(w1(x)) * w3(x)) (models/common/feed_forward.py:53-54), Hugging Face's SwiGLU
    under torchtitan's module names."""
    return swiglu(fb, name, x, rows=rows, out_rows=out_rows, width=width, group=group, projections=TORCHTITAN_FFN)


def dense(fb: DataflowBuilder, x_in: str, *, resid_axis: str) -> str:
    """`ffn_norm`, then `feed_forward` (Hugging Face's dense MLP under torchtitan's names)."""
    return dense_mlp(fb, x_in, resid_axis=resid_axis, norm="ffn_norm", name="feed_forward",
                     projections=TORCHTITAN_FFN)


def moe(fb: DataflowBuilder, x_in: str, *, impl: TorchtitanImpl) -> str:
    """`MoE.forward` (models/common/moe.py:392-455): router, routed experts, shared experts, their sum."""
    fb.block = "moe"
    # the norm on the rank's rows (s/t under sequence parallelism), the block on the whole sequence (its input
    # gathered at its entry), its output reduce-scattered back to the residual's rows (moe_sharding.py)
    (x,) = fb.op("region", "moe_enter", [x_in], [("moe.x", (B, S_SP, H))])
    xn = rmsnorm(fb, "ffn_norm", x, "moe.x_norm", (B, S_SP, H))
    scores, idx = router(fb, xn, impl)
    # :415-421: a one-hot [b, s, N] boolean routing map summed per expert (no gradient); MoE.forward's locals (the
    # map, the counts, the scaled top-k scores) stay alive until it returns (`moe_return`, below)
    (rmap,) = fb.op("no_grad", "moe.routing_map", [idx], [("moe.routing_map", (B, S_FULL, D(N)), BOOL)])
    (counts,) = fb.op("no_grad", "moe.tokens_per_expert", [rmap], [("moe.tokens_per_expert", (D(N),), INT64)])
    routed = routed_experts(fb, xn, scores, counts, idx, score_dtype=FP32 if impl.on_gpu else ACT)
    # the routed experts' output is a partial sum over TP (their hidden dimension split), reduce-scattered to the
    # sequence shards (moe_sharding.py `_routed_experts_sharding_configs`); the shared experts' w2 is row-parallel
    # (`_shared_expert_rowwise_config`): each its own reduce-scatter, an identity without TP
    (routed_rs,) = fb.op("reduce_scatter", "routed_experts.reduce_scatter", [routed],
                         [("moe.routed_out_sp", (B, S_SP, H))])
    shared = feed_forward(fb, "moe.shared_experts", xn, rows=(B, S_FULL), out_rows=(B, S_SP),
                          width=D(N_s * h_E, "tp"), group="shared_expert")
    (ym,) = fb.op("add", "moe_sum", [routed_rs, shared], [("moe.out", (B, S_SP, H))])
    fb.op("region", "moe_return", [scores, rmap, counts], [])  # the Python scope's end: its locals released
    (oe,) = fb.op("region", "moe_exit", [ym], [("moe.out_resid", (B, S_MOE, H))])
    (y,) = fb.op("add", "moe_residual", [x_in, oe], [("moe.y", (B, S_MOE, H))])
    return y


def router(fb: DataflowBuilder, xn: str, impl: TorchtitanImpl) -> tuple[str, str]:
    """`TokenChoiceTopKRouter.forward` (models/common/moe.py:285-343); returns (top-k scores, expert ids)."""
    rows = (B, S_FULL)
    dt = FP32 if impl.on_gpu else ACT
    w = Weight("moe.router.gate.weight", (H, D(N)), "router")
    if impl.on_gpu:
        # :297-299 under CUDA's FP32 autocast: the mm runs on FP32 copies of its input and of the BF16 weight,
        # both kept for backward (the weight's copy is the size of the gate's weight, in FP32)
        x = cast(fb, "moe.router.gate.autocast_input", xn, "moe.router_in", rows + (H,), FP32, ROUTING)
        fb.op("autocast_weight", "moe.router.gate.autocast_weight", [], [("moe.router_weight_fp32", (D(N), H), FP32)],
              tags=ROUTING)
    else:
        x = xn
    (logits,) = fb.op("linear", "moe.router.gate", [x], [("moe.router_logits", rows + (D(N),), dt)], [w], tags=ROUTING)
    # :303-306: sigmoid or softmax keeps its output
    (scores,) = fb.op(impl.score_func, f"moe.router.{impl.score_func}", [logits],
                      [("moe.router_scores", rows + (D(N),), dt)], tags=ROUTING)
    decision = ROUTING + ("routing_decision",)
    if impl.groups is not None:
        # :246-280 `_get_node_limited_routing_scores`: each group's top 2 scores summed, the best `topk_group`
        # groups kept (two aten.topk: per-op AC's save list caches their values, FP32 with the expert bias, and
        # ids; nothing else is kept, the choice needing no gradient)
        n_group, topk_group = impl.groups
        fb.op("argtopk", "moe.router.group_top2", [scores], [
            ("moe.group_top2_values", rows + (D(n_group), D(2)), FP32),
            ("moe.group_top2_ids", rows + (D(n_group), D(2)), INT64)], tags=decision)
        fb.op("argtopk", "moe.router.group_topk", [scores], [
            ("moe.group_topk_values", rows + (D(topk_group),), FP32),
            ("moe.group_topk_ids", rows + (D(topk_group),), INT64)], tags=decision)
    # :308-317: the expert bias, the group-limited masking and topk choose the ids; the scores they build are not
    # used for the gradient, so their nodes and what they saved die at once. topk's values are FP32 whatever the
    # scores' dtype: the FP32 expert_bias_E (moe.py:380-392) promotes the sum. Per-op AC's save list holds topk
    # (torchtitan/distributed/activation_checkpoint.py:51-53): both outputs cached (measured)
    _values, ids = fb.op("argtopk", "moe.router.topk", [scores], [("moe.topk_values", rows + (D(N_r),), FP32),
                                                                  ("moe.topk_ids", rows + (D(N_r),), INT64)],
                         tags=decision)
    # :321: scores.gather(-1, ids): GatherBackward0 keeps the ids (and the scores, already kept)
    (w_k,) = fb.op("gather", "moe.router.gather", [scores, ids], [("moe.topk_scores", rows + (D(N_r),), dt)],
                   tags=ROUTING)
    if impl.route_norm:  # :330-332: topk_scores / (topk_scores.sum(-1, keepdim=True) + 1e-20)
        (den,) = fb.op("sum", "moe.router.denominator", [w_k], [("moe.topk_denominator", rows + (D(1),), dt)],
                       tags=ROUTING)
        (w_k,) = fb.op("div", "moe.router.normalize", [w_k, den], [("moe.topk_normalized", rows + (D(N_r),), dt)],
                       tags=ROUTING)
    (w_k,) = fb.op("scale", "moe.router.route_scale", [w_k], [("moe.topk_weights", rows + (D(N_r),), dt)],
                   tags=ROUTING)  # :333: times a Python float: keeps nothing
    return w_k, ids


def routed_experts(fb: DataflowBuilder, xn: str, scores: str, counts: str, ids: str, *, score_dtype) -> str:
    """`RoutedExperts.forward` (models/common/moe.py:158-197) with the `LocalTokenDispatcher`: reorder the token
    slots by expert (token_dispatcher.py:70-106), the three grouped products (moe.py:87-107), weigh in FP32 and
    scatter-add back (token_dispatcher.py:141-169)."""
    experts, slots, width = D(N), (B, S_FULL, D(N_r)), D(h_E, "tp")
    # argsort(ids.view(-1), stable=True): the slots in expert order (int64, no gradient)
    (order,) = fb.op("no_grad", "dispatch.argsort", [ids], [("dispatch.sorted_slots", slots, INT64)])
    # topk_scores.view(-1)[order]: IndexBackward0 keeps `order`
    (s_sorted,) = fb.op("index", "dispatch.gather_scores", [scores, order],
                        [("dispatch.scores_sorted", slots, score_dtype)])
    (tok,) = fb.op("no_grad", "dispatch.token_of_slot", [order], [("dispatch.token_idx", slots, INT64)])  # // top_k
    (xs,) = fb.op("index", "dispatch.gather_tokens", [xn, tok], [("experts.x", slots + (H,))])  # x_TD[tok]
    # the per-expert counts cumsum'd to int32 offsets (moe.py:76)
    (offs,) = fb.op("no_grad", "experts.offsets", [counts], [("experts.offsets", (experts,), INT32)])
    xb = cast(fb, "experts.x_bf16", xs, "experts.x_bf16", slots + (H,), BF16)  # x_RD.bfloat16()
    h1 = _grouped(fb, "w1_EFD", xb, offs, ("experts.h1", slots + (width,)), (experts, width, H))
    (a,) = fb.op("silu", "experts.silu", [h1], [("experts.act", slots + (width,), BF16)])
    h3 = _grouped(fb, "w3_EFD", xb, offs, ("experts.h3", slots + (width,)), (experts, width, H))
    (p,) = fb.op("mul", "experts.mul", [a, h3], [("experts.prod", slots + (width,), BF16)])
    dn = _grouped(fb, "w2_EDF", p, offs, ("experts.down", slots + (H,)), (experts, H, width))
    d = cast(fb, "experts.type_as", dn, "experts.out", slots + (H,))  # .type_as(x_RD)
    # combine: out_TD = zeros_like(x_TD) first, then (out.to(float32) * scores_sorted.reshape(-1, 1)).to(out.dtype):
    # the product keeps both
    (zeros,) = fb.op("no_grad", "combine.zeros", [], [("combine.zeros", (B, S_FULL, H))])
    d32 = cast(fb, "combine.to_fp32", d, "combine.out_fp32", slots + (H,), FP32)
    (col,) = views(fb, "view", "combine.scores_column", s_sorted, [("combine.scores_col", slots + (D(1),),
                                                                     score_dtype)])
    (wo,) = fb.op("mul", "combine.weigh", [d32, col], [("combine.weighted_fp32", slots + (H,), FP32)])
    wd = cast(fb, "combine.to_dtype", wo, "combine.weighted", slots + (H,))
    # deterministic_scatter_add(out, tok.reshape(-1, 1).expand(-1, dim), src): keeps the index (a view of `tok`),
    # torchtitan/ops/scatter_add.py:36-43
    (y,) = fb.op("scatter_add", "combine.scatter_add", [tok, wd, zeros], [("moe.routed_out", (B, S_FULL, H))])
    # RoutedExperts.forward holds the experts' output (`routed_output_RD`) until combine returns
    fb.op("region", "routed_experts_return", [d], [])
    return y


def _grouped(fb: DataflowBuilder, name: str, x: str, offs: str, out: tuple, dims: tuple[Dim, ...]) -> str:
    """`torch._grouped_mm(x, w.bfloat16().transpose(-2, -1), offs=offs)` (moe.py:110-120): GroupedMmBackward0
    keeps the input and the offsets (and the BF16 weight, a parameter under FSDP's BF16 param_dtype)."""
    (y,) = fb.op("grouped_mm", f"experts.{name}", [x, offs], [(out[0], out[1], BF16)],
                 [Weight(f"moe.routed_experts.inner_experts.{name}", dims, "routed_expert")])
    return y
