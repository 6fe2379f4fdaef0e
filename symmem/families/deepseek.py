"""DeepSeek-V2 and V3 (`model_type` deepseek_v2, deepseek_v3): MLA attention, DeepSeekMoE, dense first layers,
multi-token prediction. Config keys are Hugging Face's (transformers' DeepseekV2Config / DeepseekV3Config).
"""

from __future__ import annotations

from collections.abc import Mapping

from symmem import blocks
from symmem.blocks import hf, torchtitan
from symmem.blocks._dims import B, H, seq
from symmem.blocks.embedding import token_ids
from symmem.blocks.mla import d_v_symbol, q_latent
from symmem.blocks.symbols import d_h, d_v
from symmem.errors import SymmemError
from symmem.family import Family, ignored, read_sizes
from symmem.graph import DataflowBuilder
from symmem.model_config import ModelConfig, boolean, non_negative_int, one_of, positive_int, require


def _resid_axis(kind: str) -> str:
    """The region of the residual stream a layer of `kind` (or the embedding) emits.

    The stream leaving a layer is produced by its FFN block, so it lives in that block's region: sequence-sharded
    after a dense layer ("sp"), and after an MoE layer in the MoE block's region ("sp_moe"), which the paper's
    convention does not shard (the scenario's `moe_sequence_parallel = false`); this is what reproduces the paper's
    full-recomputation term 8bsh for four MoE layers (2bsh per layer, Section 5). The embedding emits a
    sequence-sharded stream (Megatron reduce-scatters it, `symmem.blocks.embedding`). A layer's input is what the
    layer or embedding before it emits (`Family.residual_dims`), so the first MoE layer after the dense ones
    receives, and under full recomputation keeps, a sequence-sharded tensor."""
    return "sp_moe" if kind == "moe" else "sp"


class DeepSeek(Family):
    name = "deepseek"
    model_types = ("deepseek_v2", "deepseek_v3")
    presets = ("deepseek-v3", "deepseek-v2", "deepseek-v2-lite", "kimi-k2")
    config_keys = {
        "h": "hidden_size", "d_cq": "q_lora_rank", "d_c": "kv_lora_rank", "n_h": "num_attention_heads",
        "d_h": "qk_nope_head_dim", "d_v": "v_head_dim", "d_hr": "qk_rope_head_dim",
        "h_E": "moe_intermediate_size", "h_F": "intermediate_size", "N": "n_routed_experts",
        "N_r": "num_experts_per_tok", "N_s": "n_shared_experts", "V": "vocab_size", "L": "num_hidden_layers",
    }
    optional_keys = ("q_lora_rank",)  # null: no query latent (V2-Lite); the key itself is required
    structural_keys = (
        "first_k_dense_replace", "moe_layer_freq", "num_nextn_predict_layers", "num_key_value_heads",
        "scoring_func", "tie_word_embeddings", "n_group", "topk_group", "topk_method", "norm_topk_prob",
    )
    architectures = {"DeepseekV3ForCausalLM": "deepseek_v3", "DeepseekV2ForCausalLM": "deepseek_v2"}
    routed_experts = ("N", "N_r")
    divisibility = (("tp", "n_h"), ("tp", "h_F"), ("tp", "V"), ("ep", "N"), ("etp", "h_E"))
    conventions = ("paper", "megatron")
    layer_kind_order = ("dense", "moe")
    hf_dataflow = True

    def parse(self, raw: Mapping, source: str) -> ModelConfig:
        require(raw, ["q_lora_rank", "first_k_dense_replace"], source, "DeepSeek-V2/V3")
        values = read_sizes(raw, self, source)
        first_k = non_negative_int("first_k_dense_replace", raw["first_k_dense_replace"], source)
        if first_k > values["L"]:
            raise SymmemError(f"{source}: first_k_dense_replace = {first_k}: more than num_hidden_layers = "
                              f"{values['L']}")
        freq = positive_int("moe_layer_freq", raw.get("moe_layer_freq", 1), source)
        n_mtp = non_negative_int("num_nextn_predict_layers", raw.get("num_nextn_predict_layers", 0), source, 64)
        if values["N_r"] > values["N"]:
            raise SymmemError(
                f"{source}: num_experts_per_tok = {values['N_r']}: more than n_routed_experts = {values['N']}")
        kvh = raw.get("num_key_value_heads", values["n_h"])
        if kvh != values["n_h"]:
            raise SymmemError(
                f"{source}: num_key_value_heads = {kvh!r}: MLA has one key and value per head; must equal "
                f"num_attention_heads = {values['n_h']}")
        scoring = one_of("scoring_func", raw.get("scoring_func", "softmax"), ("softmax", "sigmoid"), source)
        tie = boolean("tie_word_embeddings", raw.get("tie_word_embeddings", False), source)
        options: dict[str, object] = {"first_k_dense": first_k, "moe_layer_freq": freq, "scoring_func": scoring}
        # routing options Hugging Face's routers read (absent: transformers' default applies)
        if raw.get("topk_method") is not None:
            if not isinstance(raw["topk_method"], str):
                raise SymmemError(f"{source}: topk_method = {raw['topk_method']!r:.60}: must be a string")
            options["topk_method"] = raw["topk_method"]
        if raw.get("norm_topk_prob") is not None:
            options["norm_topk_prob"] = boolean("norm_topk_prob", raw["norm_topk_prob"], source)
        # group-limited routing (torchtitan's num_expert_groups / num_limited_groups): what torchtitan's router
        # builds (symmem.blocks.torchtitan), absent or null: none
        for key in ("n_group", "topk_group"):
            if raw.get(key) is not None:
                options[key] = positive_int(key, raw[key], source, 1_000_000)
        if options.get("topk_group", 0) > options.get("n_group", 1 << 62):
            raise SymmemError(f"{source}: topk_group = {options['topk_group']}: more than n_group = "
                              f"{options['n_group']}")
        notes = () if freq == 1 else (
            f"moe_layer_freq = {freq}: the MoE layers are those at index >= first_k_dense_replace and divisible by "
            f"it, as DeepSeek's own modeling code places them; transformers 5.24 ignores the key (every layer from "
            "first_k_dense_replace on is MoE there), so its parameter count differs",)
        return ModelConfig(name=source, family=self, model_type=raw["model_type"],
                           values=tuple(values.items()), n_mtp=n_mtp, tie_word_embeddings=tie,
                           ignored_keys=ignored(raw, self), options=tuple(options.items()), notes=notes)

    def layer_kinds(self, model: ModelConfig) -> tuple[str, ...]:
        """'dense' or 'moe' for each decoder layer, by DeepSeek's rule: MoE iff layer >= first_k_dense_replace and
        layer % moe_layer_freq == 0 (modeling_deepseek.py published with the DeepSeek-V2/V3 checkpoints,
        DeepseekV3DecoderLayer.__init__). transformers 5.24 ignores moe_layer_freq (modeling_deepseek_v3.py:493,
        modeling_deepseek_v2.py:428); `symmem measure` predicts what transformers builds and says so
        (`symmem.validate.predict`). The published configs have moe_layer_freq = 1, where the two agree."""
        first_k, freq = model.option("first_k_dense"), model.option("moe_layer_freq")
        return tuple("moe" if (i >= first_k and i % freq == 0) else "dense" for i in range(model.value("L")))

    def residual_dims(self, model: ModelConfig, kind: str):
        return (B, seq(_resid_axis(kind)), H)

    def build_layer(self, fb: DataflowBuilder, x: str, kind: str, model: ModelConfig, convention: str,
                    impl: object | None) -> str:
        axis = _resid_axis(kind)
        if isinstance(impl, torchtitan.TorchtitanImpl):  # torchtitan's DeepSeek-V3
            return torchtitan.layer(fb, x, kind, model=model, impl=impl, resid_axis=axis)
        if impl is not None:  # Hugging Face's implementation; the TP convention does not apply
            return hf.layer(fb, x, kind, model=model, impl=impl, resid_axis=axis)
        y = blocks.mla(fb, x, resid_axis=axis, q_latent=q_latent(model), convention=convention,
                       d_v=d_v_symbol(model))
        return blocks.moe(fb, y, convention) if kind == "moe" else blocks.dense_mlp(fb, y, resid_axis=axis)

    def build_embedding(self, fb: DataflowBuilder, model: ModelConfig, impl: object | None = None) -> str:
        # The paper's layers keep hidden-dropout masks; Megatron's embedding dropout has the same probability
        # (language_model_embedding.py:86). Hugging Face's DeepseekV3Model / V2Model have no embedding dropout.
        return blocks.embedding(fb, token_ids(fb), dropout=impl is None)

    def build_head(self, fb: DataflowBuilder, model: ModelConfig) -> str:
        fb.block = "head"
        x = fb.input("final.x", (B, seq(_resid_axis(model.layer_kinds()[-1])), H))
        shared = "embed_tokens.weight" if model.tie_word_embeddings else None
        return blocks.head(fb, x, shared_with=shared)

    def build_mtp(self, fb, model, index, convention, impl, layer) -> str:
        """An MTP module: its own MoE layer; embedding and head shared with the main model."""
        fb.block = "mtp"
        h_main = fb.input("mtp.h_main", (B, seq(_resid_axis(model.layer_kinds()[-1])), H))
        ids = token_ids(fb, "mtp.input_ids")
        head_weight = "embed_tokens.weight" if model.tie_word_embeddings else "lm_head.weight"
        kw = {} if impl is not None else {"convention": convention}
        return blocks.mtp(fb, h_main, ids, index=index, head_shared_with=head_weight,
                          layer=lambda f, x: layer(f, x, "moe"), embed_dropout=impl is None, **kw)

    def build_shared(self, fb, model, impl) -> str | None:
        # Hugging Face computes the rotary tables once per forward; every layer's RoPE keeps them. torchtitan's
        # tables are each attention's buffer (symmem.blocks.torchtitan)
        return hf.rope_tables(fb, model) if isinstance(impl, hf.HFImpl) else None

    def formula_aliases(self, model):
        # The paper writes d_h for the value head dimension too: where v_head_dim equals qk_nope_head_dim, the
        # dataflow says d_h (`d_v_symbol`), and a formula's d_v means the same.
        return {d_v: d_h} if d_v_symbol(model) == d_h else {}

    def torchtitan_impl(self, model, on_gpu, unit_batch, unit_seq):
        return torchtitan.TorchtitanImpl.of(model, on_gpu, unit_batch, unit_seq)

    def hf_impl(self, model, attn, experts, router, unit_batch, unit_seq):
        return hf.HFImpl(attn, experts, router or hf.router_kind_of(model), unit_batch=unit_batch,
                         unit_seq=unit_seq)


FAMILY = DeepSeek()
