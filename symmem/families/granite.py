"""Llama-shaped decoders whose differences change no parameter and no saved tensor of the paper's dataflow, read
with their own config classes' defaults: Granite (multipliers on the embedding, residual, attention and logits;
mlp_bias), SmolLM3 (NoPE layers, tied head), Seed-OSS (q/k/v biases, attention_out_bias).
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import HEADS, PER_HEAD, Decoder, Switch, nope_window, smollm3_nope

BIAS = (Switch("qkv_bias", "attention_bias"), Switch("o_bias", "attention_bias"), Switch("mlp_bias", "mlp_bias"))

GRANITE = Decoder(
    name="granite", model_types=("granite",),
    defaults={"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": HEADS, "head_dim": PER_HEAD,
              "intermediate_size": 11008, "vocab_size": 32000, "num_hidden_layers": 32, "attention_bias": False,
              "mlp_bias": False},
    switches=BIAS, reads=("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"),
    doc="Granite: Llama's layer with scaling multipliers")

SMOLLM3 = Decoder(
    name="smollm3", model_types=("smollm3",),
    defaults={"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": PER_HEAD,
              "intermediate_size": 11008, "vocab_size": 128256, "num_hidden_layers": 36, "attention_bias": False,
              "mlp_bias": False, "sliding_window": None, "use_sliding_window": False, "no_rope_layer_interval": 4},
    window_rule=nope_window, nope_rule=smollm3_nope,
    switches=BIAS, tie_default=True, reads=("no_rope_layers", "no_rope_layer_interval", "sliding_window",
                                            "use_sliding_window", "layer_types"),
    doc="SmolLM3: Llama's layer with NoPE layers, tied head")

SEED_OSS = Decoder(
    name="seed_oss", model_types=("seed_oss",),
    defaults={"hidden_size": 4096, "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128,
              "intermediate_size": 27648, "vocab_size": 155136, "num_hidden_layers": 64, "attention_bias": True,
              "attention_out_bias": False, "mlp_bias": False, "attention_dropout": 0.1, "residual_dropout": 0.1},
    arch=Arch(), switches=(Switch("qkv_bias", "attention_bias"), Switch("o_bias", "attention_out_bias"),
                           Switch("mlp_bias", "mlp_bias"), Switch("residual_dropout", "residual_dropout", "positive")),
    doc="Seed-OSS: q/k/v biases, its own output-projection bias, attention and residual dropout (0.1 by default)")

FAMILIES = (GRANITE, SMOLLM3, SEED_OSS)
