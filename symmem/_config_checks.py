"""Bounds and types of a config.json's values, checked before `config.from_dict` builds anything from them.

A separate module so that `config.py` changes by one call (its loader is being rewritten): every size has an
upper bound stated in its message, booleans must be JSON booleans (`"false"` would read as true), and the
router's group settings must be consistent. `num_hidden_layers: 1000000000` and `num_nextn_predict_layers:
100000` would otherwise be laid out layer by layer (a MemoryError, a hang).
"""

from __future__ import annotations

from symmem._numbers import MAX_DIMENSION, MAX_LAYERS, size_bound
from symmem.errors import SymmemError

MAX_MTP = 64  # multi-token-prediction modules (DeepSeek-V3 has 1)
_BOUNDS = {"num_hidden_layers": MAX_LAYERS, "first_k_dense_replace": MAX_LAYERS, "moe_layer_freq": MAX_LAYERS,
           "num_nextn_predict_layers": MAX_MTP, "n_group": MAX_DIMENSION, "topk_group": MAX_DIMENSION,
           "num_key_value_heads": MAX_DIMENSION}
_BOOLS = ("tie_word_embeddings", "norm_topk_prob")
_STRINGS = ("model_type", "topk_method", "scoring_func")


def check_config(raw: object, name: str) -> None:
    """Refuse, with one line, values of a parsed config.json that the engine must not build from."""
    if not isinstance(raw, dict):
        return  # from_dict names the top-level type
    from symmem.family import registry  # here: the CLI imports this module, and families import sympy

    sizes: dict[str, int] = {}
    for fam in registry().values():
        for symbol, key in fam.config_keys.items():
            sizes[key] = min(sizes.get(key, MAX_DIMENSION), size_bound(symbol))
    for key, top in {**sizes, **_BOUNDS}.items():
        value = raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and not -top <= value <= top:
            shown = str(value) if value.bit_length() <= 128 else f"an integer of {len(str(value)):,} digits"
            raise SymmemError(f"{name}: {key} = {shown}: must be at most {top:,}")
    for key in _BOOLS:
        if raw.get(key) is not None and not isinstance(raw[key], bool):
            raise SymmemError(f"{name}: {key} = {repr(raw[key])[:40]}: must be true or false")
    for key in _STRINGS:
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise SymmemError(f"{name}: {key} = {repr(raw[key])[:40]}: must be a string")
    groups, top_groups, experts = raw.get("n_group"), raw.get("topk_group"), raw.get("n_routed_experts")
    for key, value in (("n_group", groups), ("topk_group", top_groups)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SymmemError(f"{name}: {key} = {repr(value)[:40]}: must be a positive integer")
    if isinstance(groups, int) and isinstance(top_groups, int) and top_groups > groups:
        raise SymmemError(f"{name}: topk_group = {top_groups}: more than n_group = {groups}")
    if isinstance(groups, int) and isinstance(experts, int) and not isinstance(experts, bool) and experts > 0 \
            and experts % groups:
        raise SymmemError(f"{name}: n_group = {groups}: must divide n_routed_experts = {experts}")
