"""DeepSeek-V4 (`model_type` deepseek_v4): hybrid compressed attention (sliding / CSA / HCA per layer), mHC
residual streams, hash-routed and sqrt-softplus-routed MoE in every layer, a hyper head, MTP modules.

Config keys are transformers 5.24's DeepseekV4Config (configuration_deepseek_v4.py:127-319), read as its
`__post_init__` reads them:
* `layer_types` (one of sliding_attention, compressed_sparse_attention, heavily_compressed_attention per layer)
  wins; else the legacy `compress_ratios` (0 / 4 / 128 per layer, truncated to num_hidden_layers: the published
  configs carry one more entry, for the MTP block); else transformers' default pattern (HCA, HCA, then HCA on
  even and CSA on odd indices).
* `mlp_layer_types` (hash_moe / moe) wins; else `num_hash_layers` (default 3) hash layers first.
* `compress_rates` (default CSA 4, HCA 128; legacy `compress_rate_csa` / `compress_rate_hca` override),
  `partial_rotary_factor` (or legacy `qk_rope_head_dim`; default 64/512), `hc_mult`, `hc_sinkhorn_iters` (20),
  `sliding_window`, `o_groups`, `o_lora_rank`, `index_*`.
`num_key_value_heads` must be 1 (one shared KV head). `n_shared_experts` is not read by the model (the shared
expert has width moe_intermediate_size). The MTP modules (`num_nextn_predict_layers`) are not built by
transformers; symmem builds them as the published checkpoint holds them (`mtp.0.*`): one sliding-attention layer
with a routed MoE and mHC, `e_proj`, `h_proj` [h, h], `enorm`, `hnorm`, `norm`, `hc_head`.

Layer kinds: `<attention>_<mlp>` with attention in sliding, csa, hca and mlp in hash, moe.
Parameter conventions: `total` is what transformers builds (embedding and head included, MTP excluded);
`activated` is the engine's (input embedding out, head in, routed experts, hash layers' included, at N_r/N):
284,332,230,231 / 13,270,091,351 (284B / 13B) for V4-Flash, 1,572,997,179,491 / 48,852,379,747 (1.6T / 49B)
for V4-Pro (docs/deepseek_v4.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from symmem import blocks
from symmem.blocks._dims import S_SP, B, H
from symmem.blocks.embedding import token_ids
from symmem.blocks.hash_moe import v4_moe
from symmem.blocks.hf import deepseek_v4 as hf_v4
from symmem.blocks.mhc import hc_post, hc_pre, hyper_head
from symmem.blocks.symbols import n_hc
from symmem.blocks.v4_attention import v4_attention
from symmem.errors import SymmemError
from symmem.family import Family, ignored, read_sizes
from symmem.graph import D, DataflowBuilder, Weight
from symmem.model_config import (
    ModelConfig,
    boolean,
    check_layer_types,
    non_negative_int,
    positive_int,
    require,
)

LAYER_TYPES = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
               "heavily_compressed_attention": "hca"}
RATIO_TYPES = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
MLP_TYPES = {"hash_moe": "hash", "moe": "moe"}
KINDS = tuple(f"{a}_{m}" for a in ("sliding", "csa", "hca") for m in ("hash", "moe"))


def _streams():
    return (B, S_SP, D(n_hc), H)


class DeepSeekV4(Family):
    name = "deepseek_v4"
    model_types = ("deepseek_v4",)
    presets = ("deepseek-v4-flash", "deepseek-v4-pro")
    config_keys = {
        "h": "hidden_size", "d_cq": "q_lora_rank", "n_h": "num_attention_heads", "d_k": "head_dim",
        "n_g": "o_groups", "d_o": "o_lora_rank", "h_E": "moe_intermediate_size", "N": "n_routed_experts",
        "N_r": "num_experts_per_tok", "n_I": "index_n_heads", "d_I": "index_head_dim", "k_I": "index_topk",
        "s_w": "sliding_window", "m_hc": "hc_mult", "V": "vocab_size", "L": "num_hidden_layers",
    }
    structural_keys = (
        "layer_types", "compress_ratios", "mlp_layer_types", "num_hash_layers", "compress_rates", "compress_rate_csa",
        "compress_rate_hca", "partial_rotary_factor", "qk_rope_head_dim", "hc_sinkhorn_iters",
        "num_key_value_heads", "num_nextn_predict_layers", "tie_word_embeddings", "n_shared_experts",
        "scoring_func", "norm_topk_prob", "attention_dropout",
    )
    routed_experts = ("N", "N_r")
    divisibility = (("tp", "n_h"), ("tp", "n_g"), ("tp", "V"), ("ep", "N"), ("etp", "h_E"))
    fixed_kv_heads = 1  # one shared KV head (num_key_value_heads must be 1, `parse`)
    layer_kind_order = KINDS

    def parse(self, raw: Mapping, source: str) -> ModelConfig:
        require(raw, ["hidden_size", "num_hidden_layers"], source, "DeepSeek-V4")
        values = read_sizes(raw, self, source)
        n_layers, d_k = values["L"], values["d_k"]
        attn = _layer_types(raw, n_layers, source)
        mlp = raw.get("mlp_layer_types")
        if mlp is None:
            n_hash = non_negative_int("num_hash_layers", raw.get("num_hash_layers", 3), source, n_layers)
            mlp = ["hash_moe"] * n_hash + ["moe"] * (n_layers - n_hash)
        check_layer_types(mlp, "mlp_layer_types", tuple(MLP_TYPES), n_layers, source)
        rates = raw.get("compress_rates") or {}
        if not isinstance(rates, dict):
            raise SymmemError(f"{source}: compress_rates = {rates!r:.40}: must be an object")
        csa = positive_int("compress_rates.compressed_sparse_attention",
                           raw.get("compress_rate_csa", rates.get("compressed_sparse_attention", 4)), source)
        hca = positive_int("compress_rates.heavily_compressed_attention",
                           raw.get("compress_rate_hca", rates.get("heavily_compressed_attention", 128)), source)
        if raw.get("qk_rope_head_dim") is not None:
            rope = positive_int("qk_rope_head_dim", raw["qk_rope_head_dim"], source, d_k)
        else:
            factor = raw.get("partial_rotary_factor", 64 / 512)
            if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
                raise SymmemError(f"{source}: partial_rotary_factor = {factor!r:.40}: must be a number in (0, 1]")
            rope = int(d_k * factor)
        if rope % 2 or rope < 2:
            raise SymmemError(f"{source}: rope dimensions = {rope}: must be a positive even number (interleaved "
                              "pairs)")
        kvh = raw.get("num_key_value_heads", 1)
        if kvh != 1:
            raise SymmemError(f"{source}: num_key_value_heads = {kvh!r:.40}: DeepSeek-V4 has one shared KV head")
        if (values["n_h"] * d_k) % values["n_g"]:
            raise SymmemError(f"{source}: o_groups = {values['n_g']}: must divide num_attention_heads * head_dim = "
                              f"{values['n_h'] * d_k}")
        if values["N_r"] > values["N"]:
            raise SymmemError(
                f"{source}: num_experts_per_tok = {values['N_r']}: more than n_routed_experts = {values['N']}")
        iters = positive_int("hc_sinkhorn_iters", raw.get("hc_sinkhorn_iters", 20), source, 1000)
        if raw.get("attention_dropout") or 0:
            raise SymmemError(f"{source}: attention_dropout = {raw['attention_dropout']!r}: DeepSeek-V4's attention "
                              "has no dropout")
        n_mtp = non_negative_int("num_nextn_predict_layers", raw.get("num_nextn_predict_layers", 0), source, 64)
        tie = boolean("tie_word_embeddings", raw.get("tie_word_embeddings", False), source)
        values.update({"d_hr": rope, "m_C": csa, "m_H": hca})
        kinds = tuple(f"{LAYER_TYPES[a]}_{MLP_TYPES[m]}" for a, m in zip(attn, mlp, strict=True))
        options = {"kinds": kinds, "sinkhorn_iters": iters, "partial_rotary": Fraction(rope, d_k)}
        return ModelConfig(name=source, family=self, model_type="deepseek_v4",
                           values=tuple(values.items()), n_mtp=n_mtp, tie_word_embeddings=tie,
                           ignored_keys=ignored(raw, self), options=tuple(options.items()))

    def layer_kinds(self, model: ModelConfig) -> tuple[str, ...]:
        return model.option("kinds")

    def residual_dims(self, model: ModelConfig, kind: str):
        return _streams()

    def build_layer(self, fb: DataflowBuilder, x: str, kind: str, model: ModelConfig, convention: str,
                    impl: object | None) -> str:
        if impl is not None:
            return hf_v4.layer(fb, x, kind, iters=model.option("sinkhorn_iters"), impl=impl)
        attn, mlp = kind.split("_")
        rows = (B, S_SP)
        iters = model.option("sinkhorn_iters")
        fb.block = "mhc"
        post, comb, col = hc_pre(fb, "attn_hc", x, rows, iters)
        a = v4_attention(fb, col, attn)
        fb.block = "mhc"
        x1 = hc_post(fb, "attn_hc", x, a, post, comb, rows)
        post, comb, col = hc_pre(fb, "ffn_hc", x1, rows, iters)
        f = v4_moe(fb, col, hashed=(mlp == "hash"))
        fb.block = "mhc"
        return hc_post(fb, "ffn_hc", x1, f, post, comb, rows)

    def hf_impl(self, model, attn, experts, router, unit_batch, unit_seq):
        # transformers' DeepSeek-V4 has one router per layer type (hash / sqrt-softplus top-k): `router` is ignored
        return hf_v4.V4Impl(attn, experts, unit_batch=unit_batch, unit_seq=unit_seq)

    def build_embedding(self, fb: DataflowBuilder, model: ModelConfig, impl: object | None = None) -> str:
        e = blocks.embedding(fb, token_ids(fb))
        # inputs_embeds.unsqueeze(2).expand(-1, -1, n_hc, -1).contiguous(): n_hc copies (modeling_deepseek_v4.py:1363)
        (x,) = fb.op("expand", "hc_expand", [e], [("embed_tokens.streams", _streams())])
        return x

    def build_head(self, fb: DataflowBuilder, model: ModelConfig) -> str:
        fb.block = "head"
        x = fb.input("final.x", _streams())
        col = hyper_head(fb, x, (B, S_SP))
        shared = "embed_tokens.weight" if model.tie_word_embeddings else None
        return blocks.head(fb, col, shared_with=shared)

    def build_mtp(self, fb, model, index, convention, impl, layer) -> str:
        """An MTP module as DeepSeek-V4's checkpoint holds it (`mtp.<i>.*`): e = enorm(embed(ids)) through e_proj,
        h = hnorm(streams) through h_proj, their sum through a sliding-attention routed-MoE layer with mHC, then its
        own hc_head and norm before the shared output head."""
        p = f"mtp{index}."
        fb.block = "mtp"
        h_main = fb.input("mtp.h_main", _streams())
        ids = token_ids(fb, "mtp.input_ids")
        emb = blocks.embedding(fb, ids, name=f"{p}embed_tokens", shared_with="embed_tokens.weight")
        fb.block = "mtp"
        (en,) = fb.op("rmsnorm", f"{p}enorm", [emb], [(f"{p}e_norm", (B, S_SP, H))], [Weight(f"{p}enorm.weight", (H,))])
        (ep,) = fb.op("linear", f"{p}e_proj", [en], [(f"{p}e", (B, S_SP, H))], [Weight(f"{p}e_proj.weight", (H, H))])
        (hn,) = fb.op("rmsnorm", f"{p}hnorm", [h_main], [(f"{p}h_norm", _streams())],
                      [Weight(f"{p}hnorm.weight", (H,))])
        (hp,) = fb.op("linear", f"{p}h_proj", [hn], [(f"{p}h", _streams())], [Weight(f"{p}h_proj.weight", (H, H))])
        (x,) = fb.op("add", f"{p}sum", [ep, hp], [(f"{p}x", _streams())])
        y = layer(fb, x, "sliding_moe")
        fb.block = "mtp"
        col = hyper_head(fb, y, (B, S_SP), prefix=p)
        head = "embed_tokens.weight" if model.tie_word_embeddings else "lm_head.weight"
        return blocks.head(fb, col, prefix=p, shared_with=head)



def _layer_types(raw: Mapping, n_layers: int, source: str) -> list[str]:
    types = raw.get("layer_types")
    if types is None and raw.get("compress_ratios") is not None:
        ratios = raw["compress_ratios"]
        if not isinstance(ratios, list):
            raise SymmemError(f"{source}: compress_ratios = {ratios!r:.40}: must be a list")
        for i, r in enumerate(ratios):
            if r not in RATIO_TYPES or isinstance(r, bool):
                raise SymmemError(f"{source}: compress_ratios[{i}] = {r!r:.40}: must be 0, 4 or 128")
        types = [RATIO_TYPES[r] for r in ratios][:n_layers]  # transformers truncates (the MTP entry)
    if types is None:
        types = ["heavily_compressed_attention"] * min(2, n_layers) + [
            "heavily_compressed_attention" if i % 2 == 0 else "compressed_sparse_attention"
            for i in range(n_layers - 2)]
    check_layer_types(types, "layer_types", tuple(LAYER_TYPES), n_layers, source)
    return types


FAMILY = DeepSeekV4()
