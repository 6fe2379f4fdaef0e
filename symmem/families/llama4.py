"""Llama 4's text model (transformers 5.24 models/llama4, `llama4_text`): MoE layers (moe_layers, or every
interleave_moe_layer_step-th) of experts of width intermediate_size, a router taking the sigmoid of the top-1
logit, and a shared expert of the experts' width; dense layers of width intermediate_size_mlp; a weightless L2 norm
on q and k of the RoPE layers (use_qk_norm); NoPE and chunked-attention layers (no_rope_layers,
attention_chunk_size) change no parameter.
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import Decoder, Switch, chunked_window, llama4_nope, moe_layers_or_step

FAMILY = Decoder(
    name="llama4_text", model_types=("llama4_text",), presets=("llama-4-scout",),
    sizes={"h": "hidden_size", "n_h": "num_attention_heads", "n_kv": "num_key_value_heads", "d_h": "head_dim",
           "h_F": "intermediate_size_mlp", "V": "vocab_size", "L": "num_hidden_layers", "N": "num_local_experts",
           "N_r": "num_experts_per_tok", "h_E": "intermediate_size"},
    defaults={"hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
              "intermediate_size": 8192, "intermediate_size_mlp": 16384, "vocab_size": 202048,
              "num_hidden_layers": 48, "num_local_experts": 16, "num_experts_per_tok": 1,
              "interleave_moe_layer_step": 1, "moe_layers": None, "use_qk_norm": True, "attention_bias": False,
              "no_rope_layer_interval": 4, "attention_chunk_size": 8192, "attn_temperature_tuning": True},
    arch=Arch(router="sigmoid_top1", router_name="router", shared="expert_width", ffn_name="feed_forward",
              rope_complex=True, softmax_fp32=False),
    switches=(Switch("qkv_bias", "attention_bias"), Switch("o_bias", "attention_bias"),
              Switch("qk_norm", "use_qk_norm", on="l2")),
    layer_rule=moe_layers_or_step, window_rule=chunked_window, nope_rule=llama4_nope,
    reads=("interleave_moe_layer_step", "moe_layers", "use_qk_norm", "no_rope_layers", "no_rope_layer_interval",
           "attention_chunk_size", "attn_temperature_tuning", "floor_scale", "attn_scale", "layer_types"),
    doc="Llama 4 (text): interleaved MoE with a shared expert, NoPE and chunked layers")
