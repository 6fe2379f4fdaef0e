"""SwiGLU MLPs: the dense FFN, a shared expert, a group of routed experts all use one dataflow."""

from __future__ import annotations

from symmem.blocks._dims import S_FULL, S_SP, B, H, seq
from symmem.blocks.symbols import h_F
from symmem.graph import D, DataflowBuilder, Dim, Weight


def swiglu(
    fb: DataflowBuilder,
    name: str,
    x: str,
    *,
    rows: tuple[Dim, ...],
    out_rows: tuple[Dim, ...],
    width: Dim,
    lead: tuple[Dim, ...] = (),
    group: str = "dense",
    dropout: bool = True,
) -> str:
    """down(silu(gate(x)) * up(x)), then the hidden dropout (unless `dropout` is False); return the output.

    `rows` are the token dimensions of the intermediate tensors (after any sequence all-gather), `out_rows` those
    of the output (after any reduce-scatter); `lead` are leading weight dimensions (the local experts).
    """
    fc1 = [f"module:{name}.linear_fc1"]  # Megatron-Core fuses gate and up into one linear_fc1
    (g,) = fb.op("linear", f"{name}.gate_proj", [x], [(f"{name}.gate", rows + (width,))],
                 [Weight(f"{name}.gate_proj", lead + (H, width), group)], tags=fc1)
    (u,) = fb.op("linear", f"{name}.up_proj", [x], [(f"{name}.up", rows + (width,))],
                 [Weight(f"{name}.up_proj", lead + (H, width), group)], tags=fc1)
    (a,) = fb.op("silu", f"{name}.act", [g], [(f"{name}.act", rows + (width,))], tags=["swiglu"])
    (p,) = fb.op("mul", f"{name}.mul", [a, u], [(f"{name}.prod", rows + (width,))], tags=["swiglu"])
    (o,) = fb.op("linear", f"{name}.down_proj", [p], [(f"{name}.out", out_rows + (H,))],
                 [Weight(f"{name}.down_proj", lead + (width, H), group)])
    if not dropout:
        return o
    (od,) = fb.op("dropout", f"{name}.dropout", [o], [(f"{name}.out_dropped", out_rows + (H,))])
    return od


def dense_mlp(fb: DataflowBuilder, x_in: str, *, resid_axis: str = "sp", dropout: bool = True) -> str:
    """The dense FFN block (DeepSeek's first `first_k_dense_replace` layers, Llama's every layer): norm, SwiGLU of
    width h_F, residual."""
    fb.block = "mlp"
    (x,) = fb.op("region", "mlp_enter", [x_in], [("mlp.x", (B, S_SP, H))])
    (xn,) = fb.op("rmsnorm", "post_attention_layernorm", [x], [("mlp.x_norm", (B, S_SP, H))],
                  [Weight("post_attention_layernorm.weight", (H,))])
    out = swiglu(fb, "mlp", xn, rows=(B, S_FULL), out_rows=(B, S_SP), width=D(h_F, "tp"), dropout=dropout)
    (oe,) = fb.op("region", "mlp_exit", [out], [("mlp.out_resid", (B, seq(resid_axis), H))])
    (y,) = fb.op("add", "mlp_residual", [x_in, oe], [("mlp.y", (B, seq(resid_axis), H))])
    return y
