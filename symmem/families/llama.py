"""Llama 2/3 (`model_type` llama): grouped-query attention with RoPE, SwiGLU MLP, RMSNorm, tied or untied
embeddings; the paper's dataflow (`symmem.blocks.gqa`) and Hugging Face's (`symmem.blocks.hf.llama`, for the
torch-eager rule set). Config keys are Hugging Face's (transformers' LlamaConfig); `head_dim` defaults to
hidden_size / num_attention_heads and `num_key_value_heads` to num_attention_heads, as LlamaConfig does.
"""

from __future__ import annotations

from collections.abc import Mapping

from symmem import blocks
from symmem.blocks._dims import B, H, seq
from symmem.blocks.embedding import token_ids
from symmem.blocks.gqa import gqa
from symmem.blocks.hf import llama as hf_llama
from symmem.errors import SymmemError
from symmem.family import Family, ignored, read_sizes
from symmem.graph import DataflowBuilder
from symmem.model_config import ModelConfig, boolean, positive_int, require


class Llama(Family):
    name = "llama"
    model_types = ("llama",)
    presets = ("llama-3-8b", "llama-3-70b", "llama-3.1-405b", "llama-3.1-8b")
    config_keys = {
        "h": "hidden_size", "n_h": "num_attention_heads", "n_kv": "num_key_value_heads", "d_h": "head_dim",
        "h_F": "intermediate_size", "V": "vocab_size", "L": "num_hidden_layers",
    }
    optional_keys = ("num_key_value_heads", "head_dim")
    structural_keys = ("tie_word_embeddings", "attention_dropout", "attention_bias", "mlp_bias")
    divisibility = (("tp", "n_h"), ("tp", "n_kv"), ("tp", "h_F"), ("tp", "V"))
    layer_kind_order = ("dense",)
    hf_dataflow = True

    def parse(self, raw: Mapping, source: str) -> ModelConfig:
        require(raw, ["hidden_size", "num_attention_heads"], source, "Llama")
        n_h = positive_int("num_attention_heads", raw["num_attention_heads"], source)
        h = positive_int("hidden_size", raw["hidden_size"], source)
        defaults = {"num_key_value_heads": n_h}
        if raw.get("head_dim") is None:
            if h % n_h:
                raise SymmemError(f"{source}: hidden_size = {h}: must be a multiple of num_attention_heads = {n_h} "
                                  "when head_dim is not given")
            defaults["head_dim"] = h // n_h
        values = read_sizes({**defaults, **{k: v for k, v in raw.items() if v is not None}}, self, source)
        if n_h % values["n_kv"]:
            raise SymmemError(f"{source}: num_key_value_heads = {values['n_kv']}: must divide num_attention_heads = "
                              f"{n_h}")
        for key in ("attention_bias", "mlp_bias"):
            if boolean(key, raw.get(key, False), source):
                raise SymmemError(f"{source}: {key} = true: symmem's Llama dataflow has no biases")
        dropout = raw.get("attention_dropout", 0.0)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise SymmemError(f"{source}: attention_dropout = {dropout!r}: must be a number in [0, 1)")
        tie = boolean("tie_word_embeddings", raw.get("tie_word_embeddings", False), source)
        return ModelConfig(name=source, family=self, model_type="llama", values=tuple(values.items()),
                           tie_word_embeddings=tie, ignored_keys=ignored(raw, self),
                           options=(("attention_dropout", dropout > 0),))

    def layer_kinds(self, model: ModelConfig) -> tuple[str, ...]:
        return ("dense",) * model.value("L")

    def residual_dims(self, model: ModelConfig, kind: str):
        return (B, seq("sp"), H)

    def build_layer(self, fb: DataflowBuilder, x: str, kind: str, model: ModelConfig, convention: str,
                    impl: object | None) -> str:
        if impl is not None:  # Hugging Face's LlamaDecoderLayer; the TP convention does not apply
            return hf_llama.layer(fb, x, model=model, impl=impl)
        y = gqa(fb, x, attention_dropout=bool(model.option("attention_dropout")))
        return blocks.dense_mlp(fb, y, dropout=False)  # LlamaMLP has no dropout

    def build_embedding(self, fb: DataflowBuilder, model: ModelConfig, impl: object | None = None) -> str:
        # No embedding dropout: the paper's Llama dataflow has no hidden dropout (LlamaMLP has none), and Megatron's
        # embedding dropout has the hidden-dropout probability.
        return blocks.embedding(fb, token_ids(fb))

    def build_head(self, fb: DataflowBuilder, model: ModelConfig) -> str:
        fb.block = "head"
        x = fb.input("final.x", (B, seq("sp"), H))
        return blocks.head(fb, x, shared_with="embed_tokens.weight" if model.tie_word_embeddings else None)

    def build_shared(self, fb: DataflowBuilder, model: ModelConfig, impl: object | None) -> str | None:
        # LlamaModel computes cos and sin once per forward; every layer's RoPE keeps them.
        return hf_llama.rope_tables(fb, model) if impl is not None else None

    def hf_impl(self, model: ModelConfig, attn: str, experts: str, router: str | None, unit_batch: bool,
                unit_seq: bool) -> hf_llama.LlamaImpl:
        # Llama has no routed experts and no router: `experts` and `router` do not apply and are ignored.
        if model.option("attention_dropout"):
            raise SymmemError(f"{model.name}: attention_dropout > 0: the hf dataflow models attention_dropout = 0")
        return hf_llama.LlamaImpl(attn, unit_batch=unit_batch, unit_seq=unit_seq)


FAMILY = Llama()
