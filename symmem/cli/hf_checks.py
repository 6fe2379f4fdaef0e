"""What transformers' model code would crash on, or silently misread, in a config.json: refused before a model is
built by `symmem measure` (the transformers and torchao-float8 frameworks)."""

from __future__ import annotations

from symmem.errors import SymmemError

# Keys transformers reads with a type of its own: a string where a bool is needed ("false") is true in Python.
_BOOL_KEYS = ("tie_word_embeddings", "norm_topk_prob", "attention_bias", "mlp_bias", "rope_interleave", "use_cache")
_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")


def check_for_transformers(raw: dict, name: str) -> None:
    """What transformers' DeepSeek-V2/V3 code would crash on (or silently misread), refused before it is built."""
    for key in _BOOL_KEYS:
        if key in raw and not isinstance(raw[key], bool):
            raise SymmemError(f"{name}: {key} = {repr(raw[key])[:40]}: must be true or false")
    rope = raw.get("rope_scaling")
    if rope is not None:
        if not isinstance(rope, dict):
            raise SymmemError(f"{name}: rope_scaling = {str(rope)[:40]!r}: must be null or an object such as "
                              '{"type": "yarn", "factor": 40, ...}')
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in _ROPE_TYPES:
            raise SymmemError(f"{name}: rope_scaling type = {str(kind)[:40]!r}: must be one of "
                              f"{', '.join(_ROPE_TYPES)}")
        for key, value in rope.items():
            if key not in ("type", "rope_type") and not (value is None or isinstance(value, (int, float, bool, list))):
                raise SymmemError(f"{name}: rope_scaling {key} = {repr(value)[:40]}: must be a number")
    rope_dim = raw.get("qk_rope_head_dim")
    if isinstance(rope_dim, int) and rope_dim % 2:
        raise SymmemError(f"{name}: qk_rope_head_dim = {rope_dim}: rotary embeddings rotate pairs; must be even")
    n_experts = raw.get("n_routed_experts")
    groups, top_groups = raw.get("n_group"), raw.get("topk_group")
    for key, value in (("n_group", groups), ("topk_group", top_groups)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SymmemError(f"{name}: {key} = {repr(value)[:40]}: must be a positive integer")
    if isinstance(groups, int) and isinstance(n_experts, int) and n_experts % groups:
        raise SymmemError(f"{name}: n_group = {groups}: must divide n_routed_experts = {n_experts}")
    if isinstance(groups, int) and isinstance(top_groups, int) and top_groups > groups:
        raise SymmemError(f"{name}: topk_group = {top_groups}: more than n_group = {groups}")
    k = raw.get("num_experts_per_tok")
    if all(isinstance(v, int) for v in (groups, top_groups, n_experts, k)) and groups and n_experts % groups == 0:
        if top_groups * (n_experts // groups) < k:
            raise SymmemError(f"{name}: topk_group = {top_groups}: its {top_groups} groups of "
                              f"{n_experts // groups} experts hold fewer than num_experts_per_tok = {k}")
        if raw.get("model_type") == "deepseek_v3" and n_experts // groups < 2:
            raise SymmemError(f"{name}: n_group = {groups}: DeepSeek-V3's router scores each group by its top 2 "
                              f"experts; needs at least 2 experts per group (n_routed_experts = {n_experts})")
