"""Gemma, Gemma 2 and Gemma 3's text model (transformers 5.24 models/gemma, gemma2, gemma3): GELU-tanh gated MLP,
the embedding scaled by sqrt(hidden_size), the head tied by default, RMSNorm scaling by (1 + weight) (the same
parameters); Gemma 2 and 3 put norms before and after both attention and MLP (pre/post_feedforward_layernorm)
and alternate sliding and global layers; Gemma 2 soft-caps the attention scores and the final logits
(attn_logit_softcapping, final_logit_softcapping: null turns them off) and runs eager attention only; Gemma 3
normalises q and k per head and soft-caps the final logits only (transformers 5.24 reads its
attn_logit_softcapping and never applies it).
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import Decoder, Switch, alternate_window, pattern_window

BIAS = (Switch("qkv_bias", "attention_bias"), Switch("o_bias", "attention_bias"))
# read and ignored by Gemma 2/3's modules (hidden_act: they read hidden_activation)
WINDOW = ("sliding_window", "layer_types", "query_pre_attn_scalar", "hidden_act")

GEMMA = Decoder(
    name="gemma", model_types=("gemma",),
    defaults={"hidden_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
              "intermediate_size": 24576, "vocab_size": 256000, "num_hidden_layers": 28, "attention_bias": False},
    arch=Arch(act="gelu_tanh", embed_scale=True, norm="gemma"), switches=BIAS, tie_default=True,
    act_default="gelu_pytorch_tanh",
    reads=("hidden_activation",), doc="Gemma: GELU-tanh MLP, scaled embedding, tied head")

GEMMA2 = Decoder(
    name="gemma2", model_types=("gemma2",), presets=("gemma-2-9b",),
    defaults={"hidden_size": 2304, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
              "intermediate_size": 9216, "vocab_size": 256000, "num_hidden_layers": 26, "attention_bias": False,
              "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "sliding_window": 4096},
    arch=Arch(act="gelu_tanh", embed_scale=True, norms="sandwich", norm="gemma"), window_rule=alternate_window,
    sdpa=False,
    switches=BIAS + (Switch("attn_softcap", "attn_logit_softcapping", "set"),
                     Switch("final_softcap", "final_logit_softcapping", "set")),
    tie_default=True, reads=WINDOW, act_key="hidden_activation", act_default="gelu_pytorch_tanh", megatron=False,
    doc="Gemma 2: sandwich norms, soft-capped scores and logits, alternating sliding layers")

GEMMA3 = Decoder(
    name="gemma3_text", model_types=("gemma3_text",), presets=("gemma-3-12b",),
    defaults={"hidden_size": 2304, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
              "intermediate_size": 9216, "vocab_size": 262208, "num_hidden_layers": 26, "attention_bias": False,
              "final_logit_softcapping": None, "sliding_window": 4096, "sliding_window_pattern": 6},
    arch=Arch(act="gelu_tanh", embed_scale=True, norms="sandwich", qk_norm="head", norm="gemma"),
    # Gemma3Attention stores attn_logit_softcapping and never applies it (modeling_gemma3.py:306): read, no op
    switches=BIAS + (Switch("final_softcap", "final_logit_softcapping", "set"),), window_rule=pattern_window,
    tie_default=True, reads=WINDOW + ("sliding_window_pattern", "rope_local_base_freq", "attn_logit_softcapping"),
    act_key="hidden_activation",
    act_default="gelu_pytorch_tanh", megatron=False,
    doc="Gemma 3 (text): Gemma 2's layer with q/k norm, local and global layers")

FAMILIES = (GEMMA, GEMMA2, GEMMA3)
