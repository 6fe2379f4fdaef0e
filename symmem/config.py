"""Model configurations read from Hugging Face `config.json` files of the DeepSeek-V2/V3 family.

Strict: a missing key, a non-integer or non-positive size, or an inconsistent combination is a `SymmemError`
naming the key. Keys the engine does not use are listed in `ModelConfig.ignored_keys`, never silently trusted.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from . import _json
from ._config_checks import check_config
from ._files import read_named_or_path
from .errors import SymmemError
from .symbols import SYMBOLS, sym

PRESETS = ("deepseek-v3", "deepseek-v2", "deepseek-v2-lite")
MODEL_TYPES = ("deepseek_v2", "deepseek_v3")

# Keys whose values the engine reads (besides the symbol table's config keys).
_STRUCTURAL = (
    "model_type", "first_k_dense_replace", "moe_layer_freq", "num_nextn_predict_layers", "num_key_value_heads",
    "scoring_func", "tie_word_embeddings", "n_group", "topk_group", "topk_method", "norm_topk_prob",
)
_REQUIRED = tuple(spec.config_key for spec in SYMBOLS.values() if spec.config_key) + (
    "model_type", "first_k_dense_replace",
)


@dataclass(frozen=True)
class ModelConfig:
    """The sizes and structure of one model, as the engine sees them."""

    name: str
    model_type: str
    values: tuple[tuple[str, int], ...]  # symbol name -> value (d_cq absent without a query latent)
    first_k_dense: int
    moe_layer_freq: int
    n_mtp: int  # multi-token-prediction modules (num_nextn_predict_layers)
    scoring_func: str
    tie_word_embeddings: bool
    ignored_keys: tuple[str, ...]
    # routing options Hugging Face's routers read (None: absent, transformers' default applies)
    topk_method: str | None = None
    norm_topk_prob: bool | None = None

    def value(self, name: str) -> int:
        return dict(self.values)[name]

    @property
    def q_latent(self) -> bool:
        """DeepSeek-V2-Lite has no query latent (q_lora_rank null)."""
        return "d_cq" in dict(self.values)

    @property
    def d_v(self) -> sympy.Symbol:
        """The symbol for the value head dimension: the paper's d_h where v_head_dim equals qk_nope_head_dim."""
        vals = dict(self.values)
        return sym("d_h") if vals["d_v"] == vals["d_h"] else sym("d_v")

    def substitutions(self) -> dict[sympy.Symbol, int]:
        return {sym(k): v for k, v in self.values}

    def layer_kinds(self) -> tuple[str, ...]:
        """'dense' or 'moe' for each decoder layer, by HF's rule (first_k_dense_replace, moe_layer_freq)."""
        n = self.value("L")
        return tuple(
            "moe" if (i >= self.first_k_dense and i % self.moe_layer_freq == 0) else "dense" for i in range(n)
        )


def _positive_int(key: str, value: object, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SymmemError(f"{source}: {key} = {value!r}: must be a positive integer")
    if value <= 0:
        raise SymmemError(f"{source}: {key} = {value!r}: must be a positive integer")
    return value


def from_dict(raw: dict, name: str = "config") -> ModelConfig:
    """Build a `ModelConfig` from the parsed contents of an HF config.json."""
    if not isinstance(raw, dict):
        raise SymmemError(f"{name}: top level is {type(raw).__name__}: a config.json must hold a JSON object")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise SymmemError(f"{name}: missing key {missing[0]!r}: DeepSeek-V2/V3 configs need {', '.join(missing)}")
    mt = raw["model_type"]
    if mt not in MODEL_TYPES:
        raise SymmemError(f"{name}: model_type = {mt!r}: symmem models {', '.join(MODEL_TYPES)}")
    values: dict[str, int] = {}
    for spec in SYMBOLS.values():
        key = spec.config_key
        if key is None:
            continue
        if key == "q_lora_rank" and raw[key] is None:
            continue  # no query latent (V2-Lite)
        values[spec.name] = _positive_int(key, raw[key], name)
    first_k = raw["first_k_dense_replace"]
    if isinstance(first_k, bool) or not isinstance(first_k, int) or first_k < 0:
        raise SymmemError(f"{name}: first_k_dense_replace = {first_k!r}: must be a non-negative integer")
    if first_k > values["L"]:
        raise SymmemError(f"{name}: first_k_dense_replace = {first_k}: more than num_hidden_layers = {values['L']}")
    freq = _positive_int("moe_layer_freq", raw.get("moe_layer_freq", 1), name)
    n_mtp = raw.get("num_nextn_predict_layers", 0)
    if isinstance(n_mtp, bool) or not isinstance(n_mtp, int) or n_mtp < 0:
        raise SymmemError(f"{name}: num_nextn_predict_layers = {n_mtp!r}: must be a non-negative integer")
    if values["N_r"] > values["N"]:
        raise SymmemError(
            f"{name}: num_experts_per_tok = {values['N_r']}: more than n_routed_experts = {values['N']}")
    kvh = raw.get("num_key_value_heads", values["n_h"])
    if kvh != values["n_h"]:
        raise SymmemError(
            f"{name}: num_key_value_heads = {kvh!r}: MLA has one key and value per head; must equal "
            f"num_attention_heads = {values['n_h']}")
    scoring = raw.get("scoring_func", "softmax")
    if scoring not in ("softmax", "sigmoid"):
        raise SymmemError(f"{name}: scoring_func = {scoring!r}: must be 'softmax' or 'sigmoid'")
    used = set(_REQUIRED) | set(_STRUCTURAL) | {"q_lora_rank"}
    ignored = tuple(sorted(k for k in raw if k not in used))
    return ModelConfig(
        name=name,
        model_type=mt,
        values=tuple(values.items()),
        first_k_dense=first_k,
        moe_layer_freq=freq,
        n_mtp=n_mtp,
        scoring_func=scoring,
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        ignored_keys=ignored,
        topk_method=raw.get("topk_method"),
        norm_topk_prob=raw.get("norm_topk_prob"),
    )


def load_model(name_or_path: str) -> ModelConfig:
    """A preset name (`deepseek-v3`, `deepseek-v2`, `deepseek-v2-lite`) or the path of an HF config.json."""
    text, source = read_named_or_path("model", name_or_path, "symmem.presets", ".json", PRESETS,
                                      "unknown preset; known presets")
    raw = _json.loads(text, f"model = {name_or_path!r}")
    check_config(raw, source)
    return from_dict(raw, source)
