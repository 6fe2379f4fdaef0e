"""Mistral, Ministral and Mixtral (transformers 5.24 models/mistral, ministral, mixtral): Llama's layer with a
sliding window (a mask in eager attention: the same s x s scores; a smaller span for windowed kernels); Mixtral
replaces every MLP by eight experts under a softmax over the top-2 router logits (modeling_mixtral.py,
MixtralTopKRouter). head_dim absent or null is hidden_size / num_attention_heads.
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import DENSE_SIZES, PER_HEAD, Decoder, all_moe, window_everywhere

WINDOW = ("sliding_window", "layer_types", "use_sliding_window")
DEFAULTS = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": PER_HEAD,
            "intermediate_size": 14336, "vocab_size": 32000, "num_hidden_layers": 32, "sliding_window": 4096}

MISTRAL = Decoder(name="mistral", model_types=("mistral",), presets=("mistral-7b-v0.3",), defaults=DEFAULTS,
                  reads=WINDOW, window_rule=window_everywhere, doc="Mistral: Llama's layer, sliding-window attention")
MINISTRAL = Decoder(name="ministral", model_types=("ministral",), defaults=DEFAULTS, reads=WINDOW,
                    window_rule=window_everywhere,
                    doc="Ministral: Mistral's layer, per-layer sliding or full attention")
MIXTRAL = Decoder(
    name="mixtral", model_types=("mixtral",), presets=("mixtral-8x7b",),
    sizes={**DENSE_SIZES, "N": "num_local_experts", "N_r": "num_experts_per_tok", "h_E": "intermediate_size"},
    defaults={**DEFAULTS, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": None},
    arch=Arch(router="topk_softmax"), layer_rule=all_moe, window_rule=window_everywhere,
    reads=WINDOW + ("router_jitter_noise",),
    doc="Mixtral: every MLP a top-2 mixture of experts")

FAMILIES = (MISTRAL, MINISTRAL, MIXTRAL)
