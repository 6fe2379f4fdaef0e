"""A model's sizes and structure as the engine sees them (`ModelConfig`), and the checks every family's config
parser shares. Below `symmem.family` (which builds ModelConfigs) and `symmem.config` (which loads config.json
files): it imports neither. A ModelConfig holds the family that built it (`ModelConfig.family`, handed over by the
family's `parse`), so it never has to look one up: no registry, no setter, nothing `symmem.family` installs here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import sympy

from symmem._cache import hash_once
from symmem.errors import SymmemError
from symmem.symbols import sym

Family = Any  # symmem.family.Family (not imported: that module imports this one)


@hash_once
@dataclass(frozen=True)
class ModelConfig:
    """The sizes and structure of one model, as the engine sees them."""

    name: str
    # the family that built this config (its `parse`); not compared, hashed or shown: `family_name`, derived from
    # it, is. A Family pickles as its registry name (symmem.family.Family.__reduce_ex__), so a copy finds the same one.
    family: Family = field(compare=False, repr=False)
    family_name: str = field(init=False)
    model_type: str
    values: tuple[tuple[str, int], ...]  # symbol name -> value
    n_mtp: int = 0  # multi-token-prediction modules (num_nextn_predict_layers)
    tie_word_embeddings: bool = False
    ignored_keys: tuple[str, ...] = ()
    options: tuple[tuple[str, object], ...] = ()  # the family's structural settings (hashable values)
    # the context length the model was built for (HF `max_position_embeddings`, GPT-2's `n_positions`); None when
    # the config does not say. It sizes nothing: a scenario derived from the model alone takes s from it.
    max_positions: int | None = None
    # what the reading of the config says to the user (a model_type read as another): shown, not part of the model
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "family_name", self.family.name)  # frozen: set once, here

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
    """A config value as the config.json spells it (true, null, "x"), cut short."""
    import json

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
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
