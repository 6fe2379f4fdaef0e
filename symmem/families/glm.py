"""GLM-4 (0414 series, `glm`) and GLM-4.5 (`glm4_moe`) (transformers 5.24 models/glm, glm4_moe): q/k/v biases
(attention_bias; o_proj never has one), partial rotary; GLM-4 fuses gate and up; GLM-4.5 has dense first layers
(first_k_dense_replace), a sigmoid router with an e_score_correction_bias buffer (not a parameter), n_shared_experts
shared experts of the experts' width, and optional q/k RMSNorm per head (use_qk_norm).
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import DENSE_SIZES, PER_HEAD, Decoder, Switch, first_k_dense

GLM = Decoder(
    name="glm", model_types=("glm",),
    defaults={"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
              "intermediate_size": 13696, "vocab_size": 151552, "num_hidden_layers": 40, "attention_bias": True},
    arch=Arch(fused_gate_up=True, rope_concat=True, rope_interleave=True),
    switches=(Switch("qkv_bias", "attention_bias"),),
    reads=("partial_rotary_factor",), rotary_default=0.5, doc="GLM-4: q/k/v biases, fused gate_up_proj")

GLM4_MOE = Decoder(
    name="glm4_moe", model_types=("glm4_moe",), presets=("glm-4.5-air",),
    sizes={**DENSE_SIZES, "N": "n_routed_experts", "N_r": "num_experts_per_tok", "h_E": "moe_intermediate_size",
           "N_s": "n_shared_experts"},
    defaults={"hidden_size": 4096, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": PER_HEAD,
              "intermediate_size": 10944, "vocab_size": 151552, "num_hidden_layers": 46, "n_routed_experts": 128,
              "num_experts_per_tok": 8, "moe_intermediate_size": 1408, "n_shared_experts": 1,
              "first_k_dense_replace": 1, "use_qk_norm": False, "attention_bias": False},
    arch=Arch(router="sigmoid_bias", shared="experts", rope_concat=True),
    switches=(Switch("qkv_bias", "attention_bias"), Switch("qk_norm", "use_qk_norm", on="head")),
    layer_rule=first_k_dense, rotary_default=0.5, norm_topk_default=True,
    # (num_nextn_predict_layers is not read: transformers' Glm4MoeForCausalLM builds no MTP layer, and symmem
    # models none for GLM; left unread, memory names it in its config notes)
    reads=("first_k_dense_replace", "norm_topk_prob", "n_group", "topk_group", "routed_scaling_factor",
           "partial_rotary_factor"),
    doc="GLM-4.5: sigmoid-routed experts with shared experts after dense first layers")

FAMILIES = (GLM, GLM4_MOE)
