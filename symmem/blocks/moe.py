"""DeepSeekMoE: a router, N routed experts (top-N_r per token), N_s shared experts, as a dataflow.

The routed experts' token dimension is the symbol E_tok (tokens one expert processes); a routing model
(`symmem.parallel.routing`) gives its value: the paper's E_tok = b s N_r / N, real expert-parallel dispatch, a capacity
factor, or a measured load histogram. V3's `e_score_correction_bias` is a buffer, not a parameter: it does not
appear here.
"""

from __future__ import annotations

from symmem.blocks._dims import S_MOE, B, H
from symmem.blocks.mlp import swiglu
from symmem.blocks.symbols import N, N_r, N_s, h_E
from symmem.graph import INT64, D, DataflowBuilder, Weight
from symmem.symbols import E_tok, s


def moe(fb: DataflowBuilder, x_in: str, convention: str = "paper") -> str:
    """Append the MoE block; its residual stream lives in the `sp_moe` region.

    Under the `megatron` convention the router is a dense parameter (sharded over DP with the dense ones) and the
    shared experts are one tensor-parallel MLP (split over TP, dense parameters), as Megatron-Core builds them
    (megatron/core/transformer/moe/router.py, shared_experts.py: SharedExpertMLP is an MLP with TP-split
    linear_fc1/linear_fc2 whose parameters are not expert-parallel)."""
    megatron = convention == "megatron"
    fb.block = "moe"
    (xn,) = fb.op("rmsnorm", "post_attention_layernorm", [x_in], [("moe.x_norm", (B, S_MOE, H))],
                  [Weight("post_attention_layernorm.weight", (H,))])
    routing = ["routing"]
    # The paper counts the router with the expert parameters (sharded over EDP under ZeRO).
    (logits,) = fb.op("linear", "gate", [xn], [("moe.router_logits", (B, S_MOE, D(N)))],
                      [Weight("router.weight", (D(N), H), "dense" if megatron else "router")], tags=routing)
    (scores,) = fb.op("router_score", "gate.score", [logits], [("moe.router_scores", (B, S_MOE, D(N)))],
                      tags=routing)
    topw, topi = fb.op("topk", "gate.topk", [scores], [("moe.topk_weights", (B, S_MOE, D(N_r))),
                                                      ("moe.topk_indices", (B, S_MOE, D(N_r)), INT64)],
                      tags=routing + ["routing_decision"])
    experts = D(N, "ep")
    (xe,) = fb.op("dispatch", "dispatch", [xn, topi], [("moe.expert_in", (experts, D(E_tok), H))])
    oe = swiglu(fb, "experts", xe, rows=(experts, D(E_tok)), out_rows=(experts, D(E_tok)),
                width=D(h_E, "etp"), lead=(experts,), group="routed_expert")
    (yr,) = fb.op("combine", "combine", [oe, topw, topi], [("moe.routed_out", (B, S_MOE, H))])
    # Shared experts run on every token; like Hugging Face, the N_s of them form one SwiGLU of width N_s h_E.
    # The paper counts them with the experts (not split over TP, sharded over EDP).
    if megatron:
        ys = swiglu(fb, "shared_experts", xn, rows=(B, D(s, "cp")), out_rows=(B, S_MOE), width=D(N_s * h_E, "tp"),
                    group="dense")
    else:
        ys = swiglu(fb, "shared_experts", xn, rows=(B, S_MOE), out_rows=(B, S_MOE), width=D(N_s * h_E),
                    group="shared_expert")
    (ym,) = fb.op("add", "moe_sum", [yr, ys], [("moe.out", (B, S_MOE, H))])
    (y,) = fb.op("add", "moe_residual", [x_in, ym], [("moe.y", (B, S_MOE, H))])
    return y
