"""DeepSeek-V4's MoE block as a paper-style dataflow: a sqrt-softplus router over N routed experts, top-N_r or
hash routing, one shared expert, clamped SwiGLU experts.

transformers 5.24 (`DeepseekV4SparseMoeBlock`, modeling_deepseek_v4.py:1129-1146): every layer is an MoE layer.
* Routed layers (`DeepseekV4TopKRouter`, :1077-1095): logits = x Wᵀ, scores = sqrt(softplus(logits)), the top N_r of
  scores + `e_score_correction_bias` (a buffer), weights = the chosen scores normalized, times
  `routed_scaling_factor`.
* Hash layers (the first `num_hash_layers`, `DeepseekV4HashRouter`, :1098-1126): the same scores and weights, but
  the experts come from `tid2eid[input_ids]`, a frozen token-id → N_r expert-ids table stored as a **buffer**
  (not a parameter, not counted). The block therefore reads the layer's token ids (an input of the dataflow).
  Hash layers activate N_r of N experts per token, like routed ones.
* Experts (`DeepseekV4Experts`, :1040-1074): fused `gate_up_proj` [N, 2 h_E, h], `down_proj` [N, h, h_E]; the
  gate is clamped from above and the up projection to ±`swiglu_limit` before silu(gate)·up (a 1-byte mask each
  under the paper's rules).
* The shared expert (`DeepseekV4MLP`) has width h_E: `n_shared_experts` is stored by the config but not read.
The router and experts are counted as MoE parameters, as the paper counts V3's.
"""

from __future__ import annotations

from symmem.blocks._dims import S_FULL, S_MOE, S_SP, B, H
from symmem.blocks.symbols import N, N_r, h_E
from symmem.graph import INT64, D, DataflowBuilder, Dim, Weight
from symmem.symbols import E_tok


def clamped_swiglu(fb: DataflowBuilder, name: str, x: str, *, rows: tuple[Dim, ...], width: Dim,
                   lead: tuple[Dim, ...] = (), group: str, fused: bool, weight_prefix: str) -> str:
    """down(silu(min(gate, limit)) · clamp(up, ±limit)); fused: one gate_up weight (the routed experts)."""
    if fused:
        both = D(2 * width.size, *width.axes)
        (gu,) = fb.op("linear", f"{name}.gate_up_proj", [x], [(f"{name}.gate_up", rows + (both,))],
                      [Weight(f"{weight_prefix}gate_up_proj", lead + (both, H), group)])
        g, u = fb.op("view", f"{name}.chunk", [gu], [(f"{name}.gate", rows + (width,)),
                                                     (f"{name}.up", rows + (width,))])
    else:
        (g,) = fb.op("linear", f"{name}.gate_proj", [x], [(f"{name}.gate", rows + (width,))],
                     [Weight(f"{weight_prefix}gate_proj.weight", (H, width), group)])
        (u,) = fb.op("linear", f"{name}.up_proj", [x], [(f"{name}.up", rows + (width,))],
                     [Weight(f"{weight_prefix}up_proj.weight", (H, width), group)])
    (gc,) = fb.op("clamp", f"{name}.gate_clamp", [g], [(f"{name}.gate_clamped", rows + (width,))])
    (uc,) = fb.op("clamp", f"{name}.up_clamp", [u], [(f"{name}.up_clamped", rows + (width,))])
    (a,) = fb.op("silu", f"{name}.act_fn", [gc], [(f"{name}.act", rows + (width,))])
    (p,) = fb.op("mul", f"{name}.mul", [a, uc], [(f"{name}.prod", rows + (width,))])
    down = f"{weight_prefix}down_proj" + ("" if fused else ".weight")
    (o,) = fb.op("linear", f"{name}.down_proj", [p], [(f"{name}.out", rows + (H,))],
                 [Weight(down, lead + (width, H), group)])
    return o


def v4_moe(fb: DataflowBuilder, x: str, *, hashed: bool) -> str:
    """post_attention_layernorm + the MoE block on the collapsed stream `x` [b, s, h]; returns its output."""
    fb.block = "moe"
    (xm,) = fb.op("region", "moe_enter", [x], [("moe.x", (B, S_MOE, H))])
    (xn,) = fb.op("rmsnorm", "post_attention_layernorm", [xm], [("moe.x_norm", (B, S_MOE, H))],
                  [Weight("post_attention_layernorm.weight", (H,))])
    routing = ["routing"]
    (logits,) = fb.op("linear", "gate", [xn], [("moe.router_logits", (B, S_MOE, D(N)))],
                      [Weight("mlp.gate.weight", (D(N), H), "router")], tags=routing)
    (scores,) = fb.op("router_score", "gate.sqrtsoftplus", [logits], [("moe.router_scores", (B, S_MOE, D(N)))],
                      tags=routing)
    decision = routing + ["routing_decision"]
    if hashed:
        ids = fb.input("moe.input_ids", (B, S_FULL), INT64)
        (topi,) = fb.op("no_grad", "gate.tid2eid", [ids], [("moe.topk_indices", (B, S_MOE, D(N_r)), INT64)],
                        tags=decision)
        (topw,) = fb.op("gather", "gate.gather", [scores, topi], [("moe.topk_weights", (B, S_MOE, D(N_r)))],
                        tags=routing)
    else:
        topw, topi = fb.op("topk", "gate.topk", [scores], [("moe.topk_weights", (B, S_MOE, D(N_r))),
                                                          ("moe.topk_indices", (B, S_MOE, D(N_r)), INT64)],
                          tags=decision)
    experts = D(N, "ep")
    (xe,) = fb.op("dispatch", "dispatch", [xn, topi], [("moe.expert_in", (experts, D(E_tok), H))])
    oe = clamped_swiglu(fb, "experts", xe, rows=(experts, D(E_tok)), width=D(h_E, "etp"), lead=(experts,),
                        group="routed_expert", fused=True, weight_prefix="mlp.experts.")
    (yr,) = fb.op("combine", "combine", [oe, topw, topi], [("moe.routed_out", (B, S_MOE, H))])
    ys = clamped_swiglu(fb, "shared_experts", xn, rows=(B, S_MOE), width=D(h_E), group="shared_expert", fused=False,
                        weight_prefix="mlp.shared_experts.")
    (ym,) = fb.op("add", "moe_sum", [yr, ys], [("moe.out", (B, S_MOE, H))])
    (y,) = fb.op("region", "moe_exit", [ym], [("moe.out_resid", (B, S_SP, H))])
    return y
