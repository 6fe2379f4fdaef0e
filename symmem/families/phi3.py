"""Phi-3 (transformers 5.24 models/phi3): Llama's layer with one fused qkv_proj ((n_h + 2 n_kv) d_h outputs) and
one fused gate_up_proj (2 intermediate_size outputs, chunked), partial rotary (the same parameters).
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import HEADS, PER_HEAD, Decoder, window_everywhere

FAMILY = Decoder(
    name="phi3", model_types=("phi3",), presets=("phi-3-mini",),
    defaults={"hidden_size": 3072, "num_attention_heads": 32, "num_key_value_heads": HEADS, "head_dim": PER_HEAD,
              "intermediate_size": 8192, "vocab_size": 32064, "num_hidden_layers": 32, "sliding_window": None},
    arch=Arch(fused_qkv=True, fused_gate_up=True, rope_concat=True), window_rule=window_everywhere,
    reads=("sliding_window", "partial_rotary_factor", "original_max_position_embeddings"),
    doc="Phi-3: fused qkv_proj and gate_up_proj")
