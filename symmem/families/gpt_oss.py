"""gpt-oss (transformers 5.24 models/gpt_oss): attention with biases on q, k, v and o (attention_bias) and a
learned sink logit per head; every layer a mixture of experts whose router has a bias and takes the softmax of the
top-k logits, whose experts have biases (gate_up_proj_bias, down_proj_bias) and the clamped SwiGLU
(swiglu_limit); sliding and full layers alternate (layer_types).
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import DENSE_SIZES, Decoder, Switch, all_moe, alternate_window

FAMILY = Decoder(
    name="gpt_oss", model_types=("gpt_oss",), presets=("gpt-oss-20b",),
    sizes={**DENSE_SIZES, "N": "num_local_experts", "N_r": "num_experts_per_tok", "h_E": "intermediate_size"},
    defaults={"hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
              "intermediate_size": 2880, "vocab_size": 201088, "num_hidden_layers": 36, "num_local_experts": 128,
              "num_experts_per_tok": 4, "attention_bias": True, "sliding_window": 128},
    arch=Arch(sinks=True, router="topk_softmax", router_name="router", router_bias=True, expert_bias=True,
              clamped_swiglu=True, norm="fp32_weight", rope_half_tables=True), window_rule=alternate_window, sdpa=False,
    switches=(Switch("qkv_bias", "attention_bias"), Switch("o_bias", "attention_bias")), layer_rule=all_moe,
    reads=("sliding_window", "layer_types", "swiglu_limit", "hidden_act"), act_key=None,
    doc="gpt-oss: attention sinks, biases, clamped SwiGLU experts")
