"""What a decoder layer is made of: each architectural feature of today's open decoder-only models, declared once.

A family (`symmem.families`) reads its config into an `Arch`; the dataflows (`symmem.blocks.decoder` in the
paper's convention, `symmem.blocks.hf.decoder` as Hugging Face's eager modules run it) compose the features it
names. Every field is a hashable value: an `Arch` is a ModelConfig option, part of the model's identity.

The features, and the models of transformers 5.24 that use them:

* q/k/v biases (Qwen2, GLM-4, gpt-oss, Seed-OSS), an output-projection bias (gpt-oss);
* q/k normalisation: RMSNorm per head (Qwen3, Gemma 3, GLM-4.5 with use_qk_norm), over the whole projection
  (OLMo 2; OLMoE sizes it from hidden_size), or a weightless L2 norm on the RoPE layers (Llama 4);
* fused projections: one qkv_proj and one gate_up_proj (Phi-3);
* attention sinks: a learned logit per head joined to every score row before the softmax (gpt-oss);
* soft-capping: cap·tanh(x/cap) of the attention scores and of the final logits (Gemma 2);
* where the norms stand: before attention and MLP (Llama), before and after both (Gemma 2/3's sandwich), after
  both only (OLMo 2);
* the gated MLP's activation: SiLU or GELU-tanh (Gemma), biases (granite's mlp_bias), the clamped SwiGLU of
  gpt-oss (gate clamped above, up both ways, gate·σ(α·gate)·(up + 1));
* MoE routers: top-k of a softmax (Qwen-MoE, OLMoE; with norm_topk_prob), softmax of the top-k logits (Mixtral,
  gpt-oss), sigmoid with a correction bias (GLM-4.5, DeepSeek-V3's), the sigmoid of the top-1 logit (Llama 4);
  a router bias (gpt-oss); expert biases (gpt-oss); shared experts of N_s·h_E (GLM-4.5), one of its own width
  h_S (Qwen2-MoE, with its sigmoid gate) or of the experts' width (Llama 4);
* the embedding scaled by sqrt(h) (Gemma).
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem.symbols import declare

h_S = declare("h_S", "h_S", "shared expert FFN width (its own size: Qwen2-MoE's shared_expert_intermediate_size)")

QK_NORMS = ("", "head", "proj", "hidden", "l2")
NORM_PLACES = ("pre", "sandwich", "post")
ACTIVATIONS = ("silu", "gelu_tanh")
ROUTERS = ("softmax_topk", "topk_softmax", "sigmoid_bias", "sigmoid_top1")
SHARED = ("", "experts", "own", "own_gated", "expert_width")
NORMS = ("llama", "fp32_weight", "gemma")


@dataclass(frozen=True)
class Arch:
    """The features one model's decoder layers compose (all off: Llama's layer)."""

    # attention
    qkv_bias: bool = False
    o_bias: bool = False
    # one of QK_NORMS: none, per head (d_h), over the projection (n_h d_h, n_kv d_h), over hidden-size widths
    # (OLMoE: h and h n_kv / n_h), weightless L2
    qk_norm: str = ""
    fused_qkv: bool = False
    sinks: bool = False
    attn_softcap: bool = False
    # norms: where they stand, and whether they have a weight (OLMo's LayerNorm has none)
    norms: str = "pre"  # one of NORM_PLACES
    # one of NORMS: how an RMSNorm applies its weight: to the normalised input cast back to the model dtype
    # (Llama), before that cast, in FP32 (OLMo 2, gpt-oss), or as (1 + weight) in FP32 (Gemma)
    norm: str = "llama"
    # RoPE: whether apply_rotary_pos_emb concatenates the rotated and passed parts (Phi-3, GLM: a new contiguous
    # tensor, laid out (b, n, s, d)), and whether it repeat-interleaves half of cos and sin on every call (GLM-4)
    rope_concat: bool = False
    rope_interleave: bool = False
    rope_fp32: bool = False  # the rotary tables stay FP32 in a BF16 model (OLMo 2's rotary embedding)
    rope_half_tables: bool = False  # cos and sin of head_dim / 2 (gpt-oss rotates the two halves: no repeat)
    rope_complex: bool = False  # one complex64 table freqs_cis of head_dim / 2 (Llama 4's complex RoPE)
    softmax_fp32: bool = True  # eager attention's softmax(dtype=float32) then .to(dtype); Llama 4's runs in the dtype
    residual_dropout: bool = False  # dropout of attention's and the MLP's outputs (Seed-OSS's residual_dropout)
    # MLP and experts
    act: str = "silu"  # one of ACTIVATIONS
    fused_gate_up: bool = False
    mlp_bias: bool = False
    clamped_swiglu: bool = False
    ffn_name: str = "mlp"  # the decoder layer's attribute holding the MLP or MoE (Llama 4: feed_forward)
    # MoE
    router: str = "softmax_topk"  # one of ROUTERS
    router_name: str = "gate"  # the router's module (gpt-oss, Llama 4: router)
    router_bias: bool = False
    expert_bias: bool = False
    shared: str = ""  # one of SHARED: which shared expert, if any
    # embedding and head
    embed_scale: bool = False
    final_softcap: bool = False

    def __post_init__(self) -> None:
        for name, value, known in (("qk_norm", self.qk_norm, QK_NORMS), ("norms", self.norms, NORM_PLACES),
                                   ("act", self.act, ACTIVATIONS), ("router", self.router, ROUTERS),
                                   ("shared", self.shared, SHARED), ("norm", self.norm, NORMS)):
            if value not in known:
                raise ValueError(f"Arch.{name} = {value!r}: one of {known}")

    @property
    def pre_norms(self) -> bool:
        """Whether attention and MLP read a normalised input (not OLMo 2, whose norms follow them)."""
        return self.norms != "post"

    @property
    def post_norms(self) -> bool:
        """Whether attention's and the MLP's outputs are normalised before the residual (Gemma 2/3, OLMo 2)."""
        return self.norms != "pre"

    @property
    def mlp_norm(self) -> str:
        """The MLP's pre-norm module: Llama's post_attention_layernorm, the sandwich's pre_feedforward_layernorm."""
        return "pre_feedforward_layernorm" if self.norms == "sandwich" else "post_attention_layernorm"
