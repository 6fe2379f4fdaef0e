"""Tiny configs of odd sizes for each decoder family (`symmem.families._decoder`): what the tests build with
transformers to hold symmem's counts and saved bytes against the real modules. Odd on purpose: head_dim differs from
hidden_size / num_attention_heads, GQA groups of 3, widths and vocabularies that are not powers of two, MoE layers
interleaved with dense ones where the family allows it, every switchable feature on.
"""

from __future__ import annotations

COMMON = {"hidden_size": 48, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 10,
          "intermediate_size": 36, "vocab_size": 97, "num_hidden_layers": 5, "pad_token_id": 0, "bos_token_id": 1,
          "eos_token_id": 2, "max_position_embeddings": 64}

TINY: dict[str, dict] = {
    "qwen2": {},
    "qwen2_moe": {"num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 20,
                  "shared_expert_intermediate_size": 28, "decoder_sparse_step": 2, "mlp_only_layers": [3]},
    "qwen3": {"attention_bias": True, "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1},
    "qwen3_moe": {"num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 20, "decoder_sparse_step": 1,
                  "mlp_only_layers": [0, 3], "norm_topk_prob": True},
    "mistral": {"sliding_window": 8},
    "ministral": {"sliding_window": 8},
    "mixtral": {"num_local_experts": 5, "num_experts_per_tok": 2},
    "gemma": {"attention_bias": True},
    "gemma2": {"sliding_window": 8, "query_pre_attn_scalar": 10},
    "gemma3_text": {"sliding_window": 8, "query_pre_attn_scalar": 10, "attn_logit_softcapping": 20.0,
                    "final_logit_softcapping": 15.0, "sliding_window_pattern": 3},
    "phi3": {},
    "olmo2": {"attention_bias": True},
    "olmoe": {"num_experts": 6, "num_experts_per_tok": 2, "head_dim": 8},  # its q/k norms are sized h
    "glm": {},
    "glm4_moe": {"n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 20, "n_shared_experts": 2,
                 "first_k_dense_replace": 2, "use_qk_norm": True, "attention_bias": True},
    "gpt_oss": {"num_local_experts": 5, "num_experts_per_tok": 2, "sliding_window": 8},
    "llama4_text": {"num_local_experts": 5, "num_experts_per_tok": 1, "intermediate_size_mlp": 44,
                    "interleave_moe_layer_step": 2, "attention_chunk_size": 8, "no_rope_layer_interval": 2,
                    "floor_scale": 4},
    "granite": {"attention_bias": True, "mlp_bias": True},
    "smollm3": {"mlp_bias": True},
    "exaone4": {"sliding_window": 8, "sliding_window_pattern": 3},
    "seed_oss": {"attention_out_bias": True, "mlp_bias": True},  # attention_dropout: its default 0.1
}


def tiny(model_type: str, **overrides) -> dict:
    """The tiny config of `model_type` (a copy; `overrides` replace keys)."""
    return {"model_type": model_type, **COMMON, **TINY[model_type], **overrides}
