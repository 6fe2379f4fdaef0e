"""Hugging Face's `LlamaDecoderLayer` (transformers 5.24.0, models/llama/modeling_llama.py) as a dataflow, and the
rotary tables `LlamaModel` computes once per forward and passes to every layer.

What differs from the paper's GQA block (`symmem.blocks.gqa`), as measured (docs/torch_eager_saved_tensors.md,
section 8):

* `LlamaRMSNorm` computes in FP32 (as DeepSeek's: `_ops.rmsnorm`);
* `apply_rotary_pos_emb`: `q * cos + rotate_half(q) * sin`; cos and sin need no grad, so MulBackward0 keeps only
  them (the shared tables), never q or k; `rotate_half` (two slices, a negation, a cat) keeps nothing;
* `repeat_kv` (eager, and sdpa when it cannot pass `enable_gqa`): `expand` then `reshape`, a copy to n_h heads
  (an expanded dimension of stride 0 cannot be merged); with n_kv = n_h it returns its input;
* eager attention: `softmax(dtype=float32)` keeps its FP32 output, `.to(query.dtype)` a copy in BF16 (none in
  FP32); `dropout(p=0.0, training=True)` returns its input (ATen `dropout`: `p == 0` is a no-op), keeps nothing;
* sdpa (`integrations/sdpa_attention.py`): the model passes no mask, so `use_gqa_in_sdpa` is true for
  head_dim <= 256 and sdpa gets `enable_gqa=True` with k, v at n_kv heads; above 256 it repeats k, v (s > 1) or
  packs the single query (s = 1: `pack_gqa`, k and v stay at n_kv heads). torch 2.13 runs
  flash-attention-for-CPU (q, k, v head sizes are equal), whose output is laid out (b, s, n_h, d_h): HF's
  `transpose(1, 2).contiguous()` is no copy, and o_proj keeps the very tensor flash keeps;
* LlamaMLP: down(silu(gate(x)) * up(x)), as DeepSeek's dense MLP (`ffn.dense_mlp`).
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem.blocks._dims import S_FULL, S_SP, B, H, seq
from symmem.blocks.gqa import n_kv
from symmem.blocks.hf._ops import cast, linear, rmsnorm
from symmem.blocks.hf.ffn import dense_mlp
from symmem.blocks.symbols import d_h, n_h
from symmem.config import ModelConfig
from symmem.errors import SymmemError
from symmem.graph import FP32, INT64, D, DataflowBuilder
from symmem.implementations import ATTN_IMPLS

PREP = ("attention_prep",)
CORE = ("core_attention",)
SDPA_GQA_MAX_HEAD_DIM = 256  # transformers' use_gqa_in_sdpa: key.shape[-1] == value.shape[-1] <= 256


@dataclass(frozen=True)
class LlamaImpl:
    """Which implementation a Llama dataflow follows: the attention, and whether b = 1 / s = 1 (where the
    attention output's `.contiguous()` is no copy: the same bytes, one storage fewer)."""

    attn: str = "eager"  # attn_implementation: "eager" or "sdpa"
    unit_batch: bool = False  # b = 1
    unit_seq: bool = False  # s = 1
    # k and v repeated to n_h heads before the attention whatever SDPA could take (torchtitan 9dec370's `repeat_kv`,
    # models/llama/model.py:116-131, :201-209 there, then a plain `scaled_dot_product_attention`)
    repeat_kv: bool = False

    def __post_init__(self) -> None:
        if self.attn not in ATTN_IMPLS:
            raise SymmemError(f"attn_impl = {self.attn!r}: unknown; known: {', '.join(ATTN_IMPLS)}")


def repeats_kv(model: ModelConfig, impl) -> bool:
    """Whether the attention receives key and value repeated to n_h heads (a copy each); `impl`: its attention
    implementation (`attn`) and whether s = 1 (`unit_seq`)."""
    if model.value("n_kv") == model.value("n_h"):
        return False  # repeat_kv(x, 1) returns x; sdpa needs no GQA
    if impl.attn == "eager" or getattr(impl, "repeat_kv", False):
        return True
    return model.value("d_h") > SDPA_GQA_MAX_HEAD_DIM and not impl.unit_seq


def repeat_heads(fb: DataflowBuilder, src: str, out: str, dims, view: bool, what: str = "repeat_kv") -> str:
    """repeat_kv's expand + reshape (`what`: or matmul's flattening): a copy to n_h heads, or a view."""
    (o,) = fb.op("reshape", f"{what}.{src.split('.', 1)[1]}", [src], [(out, dims)], tags=CORE)
    return fb.alias(o, view_of=src) if view else o


def layer(fb: DataflowBuilder, x: str, *, model: ModelConfig, impl: LlamaImpl) -> str:
    """LlamaDecoderLayer: x + attn(norm(x)), then + mlp(norm(·))."""
    y = attention(fb, x, model=model, impl=impl)
    return dense_mlp(fb, y, resid_axis="sp")


def attention(fb: DataflowBuilder, x_in: str, *, model: ModelConfig, impl: LlamaImpl) -> str:
    """LlamaAttention with its pre-norm and residual."""
    fb.block = "attn"
    heads, kv_heads, S, hd = D(n_h, "tp"), D(n_kv, "tp"), S_FULL, D(d_h)
    (x,) = fb.op("region", "attn_enter", [x_in], [("attn.x", (B, S_SP, H))])
    xn = rmsnorm(fb, "input_layernorm", x, "attn.x_norm", (B, S_SP, H))
    q = linear(fb, "self_attn.q_proj", xn, ("attn.q", (B, S, heads, hd)), (H, heads, hd))
    k = linear(fb, "self_attn.k_proj", xn, ("attn.k", (B, S, kv_heads, hd)), (H, kv_heads, hd))
    # value_states is a transposed view of v_proj's output; what keeps it keeps that output
    v = linear(fb, "self_attn.v_proj", xn, ("attn.v", (B, S, kv_heads, hd)), (H, kv_heads, hd))
    # apply_rotary_pos_emb: new q, k; its multiplications keep only cos and sin (counted with the shared tables)
    query, key = fb.op("rope", "rope", [q, k], [("attn.query", (B, heads, S, hd)), ("attn.key", (B, kv_heads, S, hd))],
                       tags=PREP)
    value = v
    ctx_dims = (B, heads, S, hd)
    # With one key/value head (multi-query), repeat_kv's reshape merges a size-1 dimension with the expanded one:
    # a view with stride 0 over the heads, no copy.
    mqa_view = repeats_kv(model, impl) and model.value("n_kv") == 1
    if repeats_kv(model, impl):
        # repeat_kv: hidden_states[:, :, None].expand(...).reshape(b, n_h, s, d): a copy to n_h heads
        key, value = (repeat_heads(fb, t, f"attn.{t.rsplit('.', 1)[1]}_heads", ctx_dims, mqa_view)
                      for t in (key, value))
    if impl.attn == "sdpa":
        # flash-attention-for-CPU keeps q, k, v (as passed), its output and an FP32 logsumexp (b, n_h, s)
        ctx, _lse = fb.op("sdpa_flash", "sdpa", [query, key, value],
                          [("attn.ctx", ctx_dims), ("attn.logsumexp", (B, heads, S), FP32)], tags=CORE)
        output_view = True
    else:
        scores = (B, heads, S, S)
        # matmul(query, key_states.transpose(2, 3)) flattens (b, n_h): BmmBackward0 keeps both operands (copies,
        # or views of tensors nothing else keeps: the same bytes)
        if mqa_view:  # matmul's flattening of (b, n_h) over a stride-0 head dimension: a copy unless b = 1
            key, value = (repeat_heads(fb, t, f"{t}_flat", ctx_dims, impl.unit_batch, "flatten") for t in (key, value))
        (sc,) = fb.op("matmul", "qk", [query, key], [("attn.scores", scores)], tags=CORE)
        (p,) = fb.op("softmax", "attn_softmax", [sc], [("attn.probs", scores, FP32)], tags=CORE)  # dtype=float32
        probs = cast(fb, "attn_probs_cast", p, "attn.probs_dt", scores, tags=CORE)  # .to(query.dtype)
        # dropout(p=0.0, training=True) returns its input: no op
        (ctx,) = fb.op("matmul", "pv", [probs, value], [("attn.ctx", ctx_dims)], tags=CORE)
        output_view = impl.unit_seq  # (b, n_h, 1, d) transposed is contiguous already
    # attn_output.transpose(1, 2).contiguous(), then reshape(b, s, -1): o_proj's input
    (ctx_c,) = fb.op("contiguous", "attn_output", [ctx], [("attn.context", (B, S, heads, hd))])
    if output_view:
        fb.alias(ctx_c, view_of=ctx)
    o = linear(fb, "self_attn.o_proj", ctx_c, ("attn.out", (B, S_SP, H)), (heads, hd, H))
    (oe,) = fb.op("region", "attn_exit", [o], [("attn.out_resid", (B, seq("sp"), H))])
    (y,) = fb.op("add", "attn_residual", [x_in, oe], [("attn.y", (B, seq("sp"), H))])
    return y


def rope_tables(fb: DataflowBuilder, model: ModelConfig) -> str:
    """LlamaRotaryEmbedding's output: cos and sin, (1, s, d_h) each in the model dtype, kept by every layer's
    RoPE multiplications (as (1, 1, s, d_h) views)."""
    fb.block = "rope"
    pos = fb.input("rope.position_ids", (D(1), S_FULL), INT64)
    names = fb.op("rotary_emb", "rotary_emb", [pos], [("rope.cos", (D(1), S_FULL, D(d_h))),
                                                      ("rope.sin", (D(1), S_FULL, D(d_h)))])
    return names[0]
