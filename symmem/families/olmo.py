"""OLMo 2 and OLMoE (transformers 5.24 models/olmo2, olmoe): RMSNorm on q and k over the whole projection
(q_norm of n_h d_h, k_norm of n_kv d_h); OLMo 2 normalises after attention and MLP and not before
(post_attention_layernorm, post_feedforward_layernorm); OLMoE keeps Llama's pre-norms, sizes its q/k norms from
hidden_size (q_norm of h, k_norm of (h / n_h)·n_kv: modeling_olmoe.py, OlmoeAttention) and routes every layer to
top-k of a softmax.
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import DENSE_SIZES, HEADS, PER_HEAD, Decoder, Switch, all_moe

BIAS = (Switch("qkv_bias", "attention_bias"), Switch("o_bias", "attention_bias"))

OLMO2 = Decoder(
    name="olmo2", model_types=("olmo2",), presets=("olmo-2-7b",),
    defaults={"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": HEADS, "head_dim": PER_HEAD,
              "intermediate_size": 11008, "vocab_size": 50304, "num_hidden_layers": 32, "attention_bias": False},
    arch=Arch(qk_norm="proj", norms="post", norm="fp32_weight", rope_fp32=True), switches=BIAS, megatron=False,
    doc="OLMo 2: norms after attention and MLP, q/k norm over the whole projection")

OLMOE = Decoder(
    name="olmoe", model_types=("olmoe",),
    sizes={**DENSE_SIZES, "N": "num_experts", "N_r": "num_experts_per_tok", "h_E": "intermediate_size"},
    defaults={"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": HEADS, "head_dim": PER_HEAD,
              "intermediate_size": 2048, "vocab_size": 50304, "num_hidden_layers": 16, "num_experts": 64,
              "num_experts_per_tok": 8, "attention_bias": False},
    arch=Arch(qk_norm="hidden"), switches=BIAS, layer_rule=all_moe, reads=("norm_topk_prob", "clip_qkv"),
    megatron=False, doc="OLMoE: q/k norm over the projection, softmax top-k experts in every layer")

FAMILIES = (OLMO2, OLMOE)
