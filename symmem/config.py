"""Model configurations read from Hugging Face `config.json` files; the family of the `model_type` checks them.

Strict: a missing key, a non-integer or non-positive size, or an inconsistent combination is a `SymmemError`
naming the key. Keys the engine does not use are listed in `ModelConfig.ignored_keys`, never silently trusted.
Which keys a config needs, and what they mean, is the family's (`symmem.families`): this module holds the
generic `ModelConfig`, the checks families share, and the loader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, cached_property

import sympy

from symmem import _json
from symmem._cache import hash_once
from symmem._config_checks import check_config
from symmem._files import read_named_or_path
from symmem.errors import SymmemError
from symmem.family import Family, all_presets, family, family_of_type
from symmem.symbols import sym


@hash_once
@dataclass(frozen=True)
class ModelConfig:
    """The sizes and structure of one model, as the engine sees them."""

    name: str
    family_name: str
    model_type: str
    values: tuple[tuple[str, int], ...]  # symbol name -> value
    n_mtp: int = 0  # multi-token-prediction modules (num_nextn_predict_layers)
    tie_word_embeddings: bool = False
    ignored_keys: tuple[str, ...] = ()
    options: tuple[tuple[str, object], ...] = ()  # the family's structural settings (hashable values)
    # the context length the model was built for (HF `max_position_embeddings`, GPT-2's `n_positions`); None when
    # the config does not say. It sizes nothing: a scenario derived from the model alone takes s from it.
    max_positions: int | None = None

    @cached_property
    def family(self) -> Family:
        return family(self.family_name)

    # Derived once per config (the engine asks for them thousands of times in one `symmem paper`).
    @cached_property
    def _value_map(self) -> dict[str, int]:
        return dict(self.values)

    @cached_property
    def _option_map(self) -> dict[str, object]:
        return dict(self.options)

    @cached_property
    def _layer_kinds(self) -> tuple[str, ...]:
        return self.family.layer_kinds(self)

    def value(self, name: str) -> int:
        return self._value_map[name]

    def has(self, name: str) -> bool:
        return name in self._value_map

    def option(self, key: str, default: object = None) -> object:
        return self._option_map.get(key, default)

    def substitutions(self) -> dict[sympy.Symbol, int]:
        """{symbol: value} (a copy: the caller may extend it)."""
        return dict(self._substitutions)

    @cached_property
    def _substitutions(self) -> dict[sympy.Symbol, int]:
        return {sym(k): v for k, v in self.values}

    def layer_kinds(self) -> tuple[str, ...]:
        return self._layer_kinds


# ---------------------------------------------------------------------------------------------- shared checks
MAX_SIZE = 2**40  # no model size is larger; beyond it a value is a typo (and would make every number noise)


def positive_int(key: str, value: object, source: str, top: int = MAX_SIZE) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= top:
        raise SymmemError(f"{source}: {key} = {_short(value)}: must be a positive integer up to {top:,}")
    return value


def non_negative_int(key: str, value: object, source: str, top: int = MAX_SIZE) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise SymmemError(f"{source}: {key} = {_short(value)}: must be a non-negative integer up to {top:,}")
    return value


def boolean(key: str, value: object, source: str) -> bool:
    if not isinstance(value, bool):
        raise SymmemError(f"{source}: {key} = {_short(value)}: must be true or false")
    return value


def one_of(key: str, value: object, known: Iterable[str], source: str) -> str:
    known = tuple(known)
    if not isinstance(value, str) or value not in known:
        raise SymmemError(f"{source}: {key} = {_short(value)}: must be one of {', '.join(map(repr, known))}")
    return value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:40] + "..."


def check_layer_types(types: object, key: str, known: tuple[str, ...], n_layers: int, source: str) -> None:
    """A per-layer list of layer types (HF's `layer_types`): one known type per layer."""
    if not isinstance(types, list) or len(types) != n_layers:
        got = f"{len(types)} entries" if isinstance(types, list) else repr(types)[:40]
        raise SymmemError(f"{source}: {key} = {got}: must list one type per layer (num_hidden_layers = {n_layers})")
    for i, t in enumerate(types):
        if t not in known:
            raise SymmemError(f"{source}: {key}[{i}] = {t!r:.40}: unknown layer type; known: {', '.join(known)}")


def require(raw: Mapping, keys: Iterable[str], source: str, what: str) -> None:
    missing = [k for k in keys if k not in raw]
    if missing:
        raise SymmemError(f"{source}: missing key {missing[0]!r}: {what} configs need {', '.join(missing)}")


def read_sizes(raw: Mapping, fam: Family, source: str) -> dict[str, int]:
    """The family's size symbols from their config keys; optional keys absent or null are left out."""
    require(raw, [k for k in fam.config_keys.values() if k not in fam.optional_keys], source, fam.name)
    values: dict[str, int] = {}
    for name, key in fam.config_keys.items():
        if raw.get(key) is None and key in fam.optional_keys:
            continue
        values[name] = positive_int(key, raw[key], source)
    return values


def ignored(raw: Mapping, fam: Family) -> tuple[str, ...]:
    used = set(fam.config_keys.values()) | set(fam.structural_keys) | {"model_type"}
    return tuple(sorted(k for k in raw if k not in used))


def from_dict(raw: dict, name: str = "config") -> ModelConfig:
    """Build a `ModelConfig` from the parsed contents of an HF config.json (its family by `model_type`)."""
    if not isinstance(raw, dict):
        raise SymmemError(f"{name}: top level is {type(raw).__name__}: a config.json must hold a JSON object")
    if "model_type" not in raw:
        raise SymmemError(f"{name}: missing key 'model_type': it selects the model family")
    cfg = family_of_type(raw["model_type"], name).parse(raw, name)
    for key in CONTEXT_KEYS:
        if raw.get(key) is not None:
            return dataclasses.replace(cfg, max_positions=positive_int(key, raw[key], name))
    return cfg


CONTEXT_KEYS = ("max_position_embeddings", "n_positions")  # HF's names for the context length, in that order


def load_model(name_or_path: str, overrides: Mapping | None = None) -> ModelConfig:
    """A preset name (`deepseek-v3`, `llama-3-8b`, ...) or the path of an HF config.json; `overrides` replace
    config keys (e.g. `{"num_hidden_layers": 12}` for a truncated model)."""
    if not overrides and name_or_path in all_presets():
        return _preset(name_or_path)  # a shipped preset never changes: read and checked once per process
    return _load(name_or_path, overrides)


@cache
def _preset(name: str) -> ModelConfig:
    return _load(name, None)


def _load(name_or_path: str, overrides: Mapping | None) -> ModelConfig:
    text, source = read_named_or_path("model", name_or_path, "symmem.presets", ".json", tuple(all_presets()),
                                      "unknown preset; known presets")
    raw = _json.loads(text, f"model = {name_or_path!r}")
    if overrides:
        if not isinstance(raw, dict):
            raise SymmemError(f"{source}: top level is {type(raw).__name__}: a config.json must hold a JSON object")
        raw = {**raw, **overrides}
        source = f"{source} with " + ", ".join(f"{k} = {v!r}" for k, v in overrides.items())
    check_config(raw, source)
    return from_dict(raw, source)


def presets() -> tuple[str, ...]:
    return tuple(all_presets())
