"""DeepSeek-V3.2 (`model_type` deepseek_v32): DeepSeek-V3's layer with DeepSeek Sparse Attention, i.e. MLA whose
queries attend only to the top-k keys a lightning indexer picks (`index_n_heads`, `index_head_dim`, `index_topk`).

Config keys are transformers 5.24's DeepseekV32Config (configuration_deepseek_v32.py:86-142): V3's keys plus the
indexer's; `mlp_layer_types` ("dense"/"sparse" per layer, default from `first_k_dense_replace`) and `layer_types`
(all "indexed_attention") are read when present. The query latent is required (transformers dropped the q_proj
path, modeling_deepseek_v32.py:339). The router is V3's (sigmoid, group-limited, e_score_correction_bias a
buffer), hard-coded: `scoring_func`/`topk_method` are not read.

Indexer and gradients: transformers runs the indexer under `@torch.no_grad()` (modeling_deepseek_v32.py:178):
nothing of it is saved for backward and its weights get no gradient from the loss; they are parameters all the
same (counted in totals, with model states). See `symmem.blocks.indexer`.
"""

from __future__ import annotations

from collections.abc import Mapping

from symmem import blocks
from symmem.blocks import hf
from symmem.blocks.indexer import v32_indexer, v32_keys
from symmem.blocks.mla import d_v_symbol
from symmem.errors import SymmemError
from symmem.families.deepseek import DeepSeek, _resid_axis
from symmem.family import ignored, read_sizes
from symmem.model_config import (
    ModelConfig,
    boolean,
    check_layer_types,
    non_negative_int,
    positive_int,
    require,
)

MLP_TYPES = {"dense": "dense", "sparse": "moe"}


class DeepSeekV32(DeepSeek):
    name = "deepseek_v32"
    model_types = ("deepseek_v32",)
    presets = ("deepseek-v3.2",)
    config_keys = {**DeepSeek.config_keys, "n_I": "index_n_heads", "d_I": "index_head_dim", "k_I": "index_topk"}
    optional_keys = ()
    structural_keys = DeepSeek.structural_keys + ("mlp_layer_types", "layer_types")

    def parse(self, raw: Mapping, source: str) -> ModelConfig:
        require(raw, ["q_lora_rank", "first_k_dense_replace"], source, "DeepSeek-V3.2")
        if raw.get("q_lora_rank") is None:
            raise SymmemError(f"{source}: q_lora_rank = None: DeepSeek-V3.2's indexer reads the query latent; "
                              "transformers has no q_proj path for it")
        values = read_sizes(raw, self, source)
        n_layers = values["L"]
        first_k = non_negative_int("first_k_dense_replace", raw["first_k_dense_replace"], source)
        if first_k > n_layers:
            raise SymmemError(f"{source}: first_k_dense_replace = {first_k}: more than num_hidden_layers = {n_layers}")
        mlp_types = raw.get("mlp_layer_types")
        if mlp_types is None:
            mlp_types = ["dense"] * first_k + ["sparse"] * (n_layers - first_k)
        check_layer_types(mlp_types, "mlp_layer_types", tuple(MLP_TYPES), n_layers, source)
        attn_types = raw.get("layer_types")
        if attn_types is not None:
            check_layer_types(attn_types, "layer_types", ("indexed_attention",), n_layers, source)
        if values["N_r"] > values["N"]:
            raise SymmemError(
                f"{source}: num_experts_per_tok = {values['N_r']}: more than n_routed_experts = {values['N']}")
        kvh = raw.get("num_key_value_heads", values["n_h"])
        if kvh != values["n_h"]:
            raise SymmemError(f"{source}: num_key_value_heads = {kvh!r}: MLA has one key and value per head; must "
                              f"equal num_attention_heads = {values['n_h']}")
        n_mtp = non_negative_int("num_nextn_predict_layers", raw.get("num_nextn_predict_layers", 0), source, 64)
        tie = boolean("tie_word_embeddings", raw.get("tie_word_embeddings", False), source)
        norm = boolean("norm_topk_prob", raw.get("norm_topk_prob", True), source)
        options = {"first_k_dense": first_k, "moe_layer_freq": positive_int("moe_layer_freq",
                                                                            raw.get("moe_layer_freq", 1), source),
                   "scoring_func": "sigmoid", "norm_topk_prob": norm,
                   "mlp_kinds": tuple(MLP_TYPES[t] for t in mlp_types)}
        return ModelConfig(name=source, family=self, model_type="deepseek_v32",
                           values=tuple(values.items()), n_mtp=n_mtp, tie_word_embeddings=tie,
                           ignored_keys=ignored(raw, self), options=tuple(options.items()))

    def layer_kinds(self, model: ModelConfig) -> tuple[str, ...]:
        return model.option("mlp_kinds")

    def build_layer(self, fb, x, kind, model, convention, impl) -> str:
        axis = _resid_axis(kind)
        if impl is not None:
            return hf.layer(fb, x, kind, model=model, impl=impl, resid_axis=axis)
        y = blocks.mla(fb, x, resid_axis=axis, q_latent=True, convention=convention, d_v=d_v_symbol(model),
                       indexer=v32_indexer, keys=v32_keys())
        return blocks.moe(fb, y, convention) if kind == "moe" else blocks.dense_mlp(fb, y, resid_axis=axis)

    def hf_impl(self, model, attn, experts, router, unit_batch, unit_seq):
        kind = router or ("v3-norm" if model.option("norm_topk_prob") else "v3")
        return hf.HFImpl(attn, experts, kind, unit_batch=unit_batch, unit_seq=unit_seq)

    def torchtitan_impl(self, model, on_gpu, unit_batch, unit_seq):
        # torchtitan 0.3.0 ships DeepSeek-V3, not V3.2's lightning indexer: refused in one line (it reached
        # DeepSeek's torchtitan dataflow, inherited, and failed inside it)
        raise SymmemError(f"{model.name} (family {self.name}): torchtitan 0.3.0 ships DeepSeek-V3's layers, not "
                          "V3.2's lightning indexer; use --profile torch-eager or megatron-te")


FAMILY = DeepSeekV32()
