"""Qwen2, Qwen2-MoE, Qwen3 and Qwen3-MoE (transformers 5.24 models/qwen2, qwen2_moe, qwen3, qwen3_moe): Llama's
layer with q/k/v biases (Qwen2: always, modeling_qwen2.py; Qwen2-MoE: qkv_bias), or with RMSNorm on q and k per
head (Qwen3); the MoE models route by top-k of a softmax (norm_topk_prob renormalises), every
decoder_sparse_step-th layer outside mlp_only_layers; Qwen2-MoE adds a shared expert of its own width behind a
sigmoid gate. Defaults are the config classes' (configuration_qwen*.py).
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import (
    DENSE_SIZES,
    PER_HEAD,
    Decoder,
    Switch,
    qwen2_moe_window,
    qwen_moe_window,
    qwen_window,
    sparse_step,
)

MOE_SIZES = {**DENSE_SIZES, "N": "num_experts", "N_r": "num_experts_per_tok", "h_E": "moe_intermediate_size"}
WINDOW = ("sliding_window", "use_sliding_window", "max_window_layers", "layer_types")
WINDOW_DEFAULTS = {"sliding_window": 4096, "use_sliding_window": False, "max_window_layers": 28}
SPARSE = ("decoder_sparse_step", "mlp_only_layers", "norm_topk_prob")

QWEN2 = Decoder(
    name="qwen2", model_types=("qwen2",), presets=("qwen2.5-7b",),
    defaults={"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": PER_HEAD,
              "intermediate_size": 22016, "vocab_size": 151936, "num_hidden_layers": 32, **WINDOW_DEFAULTS},
    arch=Arch(qkv_bias=True), reads=WINDOW, window_rule=qwen_window, doc="Qwen2 / Qwen2.5: q, k, v biases")

QWEN2_MOE = Decoder(
    name="qwen2_moe", model_types=("qwen2_moe",),
    sizes={**MOE_SIZES, "h_S": "shared_expert_intermediate_size"},
    defaults={"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": PER_HEAD,
              "intermediate_size": 5632, "vocab_size": 151936, "num_hidden_layers": 24, "num_experts": 60,
              "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "qkv_bias": True, **WINDOW_DEFAULTS},
    arch=Arch(shared="own_gated"), switches=(Switch("qkv_bias", "qkv_bias"),), layer_rule=sparse_step,
    window_rule=qwen2_moe_window,
    reads=WINDOW + SPARSE, doc="Qwen1.5-MoE / Qwen2-MoE: softmax top-k experts, a gated shared expert")

QWEN3 = Decoder(
    name="qwen3", model_types=("qwen3",), presets=("qwen3-8b",),
    defaults={"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128,
              "intermediate_size": 22016, "vocab_size": 151936, "num_hidden_layers": 32, "attention_bias": False,
              **WINDOW_DEFAULTS},
    arch=Arch(qk_norm="head"), switches=(Switch("qkv_bias", "attention_bias"), Switch("o_bias", "attention_bias")),
    reads=WINDOW, window_rule=qwen_window, doc="Qwen3: RMSNorm on q and k per head")

QWEN3_MOE = Decoder(
    name="qwen3_moe", model_types=("qwen3_moe",), presets=("qwen3-30b-a3b", "qwen3-235b-a22b"), sizes=MOE_SIZES,
    defaults={"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": PER_HEAD,
              "intermediate_size": 6144, "vocab_size": 151936, "num_hidden_layers": 24, "num_experts": 128,
              "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1,
              "mlp_only_layers": [], "attention_bias": False, **WINDOW_DEFAULTS},
    arch=Arch(qk_norm="head"), switches=(Switch("qkv_bias", "attention_bias"), Switch("o_bias", "attention_bias")),
    layer_rule=sparse_step, window_rule=qwen_moe_window, reads=WINDOW + SPARSE,
    doc="Qwen3-MoE: Qwen3's attention, softmax top-k experts")

FAMILIES = (QWEN2, QWEN2_MOE, QWEN3, QWEN3_MOE)
