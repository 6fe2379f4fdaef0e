"""GPT-2/GPT-3 (`model_type` gpt2): the model of Korthikanti et al. (2022), "Reducing Activation Recomputation in
Large Transformer Models" (arXiv 2205.05198). LayerNorm, multi-head attention with `a` heads, a GeLU MLP of width
4h, biases everywhere, dropout after the attention probabilities, the attention output, the MLP and the
embeddings; learned position embeddings; output head tied to the token embeddings by default.

Config keys are Hugging Face's (transformers' GPT2Config): `n_embd`, `n_head`, `n_layer`, `vocab_size`,
`n_positions`, `n_inner` (null: 4·n_embd), `tie_word_embeddings` (default true), `attn_pdrop`, `resid_pdrop`,
`embd_pdrop` (default 0.1 each; 0 removes the dropout and its mask), `activation_function` (a GeLU variant).
"""

from __future__ import annotations

from collections.abc import Mapping

from symmem.blocks import gpt
from symmem.blocks._dims import B, H, seq
from symmem.blocks.symbols import h, h_F, n_h
from symmem.errors import SymmemError
from symmem.family import Family, ignored, read_sizes
from symmem.graph import D, DataflowBuilder
from symmem.model_config import ModelConfig, boolean, require

GELUS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate")
DROPOUTS = ("attn_pdrop", "resid_pdrop", "embd_pdrop")


class GPT(Family):
    name = "gpt"
    model_types = ("gpt2",)
    presets = ("gpt3-175b", "gpt2")
    config_keys = {"h": "n_embd", "a": "n_head", "h_F": "n_inner", "V": "vocab_size", "L": "n_layer",
                   "n_pos": "n_positions"}
    optional_keys = ("n_inner",)
    structural_keys = ("tie_word_embeddings", "activation_function", "add_cross_attention", *DROPOUTS)
    divisibility = (("tp", "a"), ("tp", "h_F"), ("tp", "V"))
    layer_kind_order = ("dense",)

    def parse(self, raw: Mapping, source: str) -> ModelConfig:
        require(raw, ["n_embd", "n_head"], source, "GPT-2")
        values = read_sizes({k: v for k, v in raw.items() if v is not None}, self, source)
        if values["h"] % values["a"]:
            raise SymmemError(f"{source}: n_embd = {values['h']}: must be a multiple of n_head = {values['a']}")
        if values.get("h_F") == 4 * values["h"]:
            del values["h_F"]  # GPT-2's default width: the dataflow writes it 4h, as the paper does
        act = raw.get("activation_function", "gelu_new")
        if act not in GELUS:
            raise SymmemError(f"{source}: activation_function = {act!r:.60}: symmem's GPT dataflow has a GeLU MLP; "
                              f"must be one of {', '.join(GELUS)}")
        if boolean("add_cross_attention", raw.get("add_cross_attention", False), source):
            raise SymmemError(f"{source}: add_cross_attention = true: symmem's GPT dataflow is decoder-only")
        options: dict[str, object] = {}
        for key in DROPOUTS:
            p = raw.get(key, 0.1)  # GPT2Config's default
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
                raise SymmemError(f"{source}: {key} = {p!r:.60}: must be a number in [0, 1)")
            options[key] = p > 0
        tie = boolean("tie_word_embeddings", raw.get("tie_word_embeddings", True), source)
        return ModelConfig(name=source, family=self, model_type="gpt2", values=tuple(values.items()),
                           tie_word_embeddings=tie, ignored_keys=ignored(raw, self), options=tuple(options.items()))

    def layer_kinds(self, model: ModelConfig) -> tuple[str, ...]:
        return ("dense",) * model.value("L")

    def residual_dims(self, model: ModelConfig, kind: str):
        return (B, seq("sp"), H)

    def build_layer(self, fb: DataflowBuilder, x: str, kind: str, model: ModelConfig, convention: str,
                    impl: object | None) -> str:
        if impl is not None:
            raise SymmemError("dataflow = 'hf': model family 'gpt' has no Hugging Face dataflow; use dataflow = "
                              "'paper' (--dataflow paper)")
        resid = bool(model.option("resid_pdrop"))
        y = gpt.attention(fb, x, attn_dropout=bool(model.option("attn_pdrop")), resid_dropout=resid)
        width = D(h_F, "tp") if model.has("h_F") else D(4 * h, "tp")
        return gpt.mlp(fb, y, width=width, resid_dropout=resid)

    def build_embedding(self, fb: DataflowBuilder, model: ModelConfig, impl: object | None = None) -> str:
        return gpt.embedding(fb, dropout=bool(model.option("embd_pdrop")))

    def build_head(self, fb: DataflowBuilder, model: ModelConfig) -> str:
        x = fb.input("final.x", (B, seq("sp"), H))
        return gpt.head(fb, x, tied=model.tie_word_embeddings)

    def formula_aliases(self, model: ModelConfig):
        # Korthikanti writes a for the heads; a formula written with DeepSeek's n_h means the same here.
        return {n_h: gpt.a}


FAMILY = GPT()
