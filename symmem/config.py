"""Model configurations read from Hugging Face `config.json` files; the family of the `model_type` checks them.

Strict: a missing key, a non-integer or non-positive size, or an inconsistent combination is a `SymmemError`
naming the key. Keys the engine does not use are listed in `ModelConfig.ignored_keys`, never silently trusted.
Which keys a config needs, and what they mean, is the family's (`symmem.families`): `symmem.model_config` holds the
generic `ModelConfig` and the checks families share (re-exported here), this module the loader.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from functools import cache

from symmem import _json
from symmem._config_checks import check_config
from symmem._files import read_named_or_path, read_text_file
from symmem.errors import SymmemError
from symmem.family import all_presets, family_of_config, ignored, read_sizes
from symmem.model_config import (
    MAX_SIZE,
    ModelConfig,
    boolean,
    check_layer_types,
    non_negative_int,
    one_of,
    positive_int,
    require,
)

__all__ = ["MAX_SIZE", "ModelConfig", "boolean", "check_layer_types", "from_dict", "ignored", "load_model",
           "non_negative_int", "one_of", "positive_int", "presets", "read_sizes", "require"]


def from_dict(raw: dict, name: str = "config") -> ModelConfig:
    """Build a `ModelConfig` from the parsed contents of an HF config.json (its family by `model_type`)."""
    if not isinstance(raw, dict):
        raise SymmemError(f"{name}: top level is {type(raw).__name__}: a config.json must hold a JSON object")
    if "model_type" not in raw:
        raise SymmemError(f"{name}: missing key 'model_type': it selects the model family")
    fam, model_type, note = family_of_config(raw, name)
    cfg = fam.parse(raw if note is None else {**raw, "model_type": model_type}, name)
    for key in UNMODELLED_IF_TRUE:  # a switch the family does not read, set: parameters its dataflow lacks
        if key in cfg.ignored_keys and raw.get(key) not in (None, False):
            raise SymmemError(f"{name}: {key} = {json.dumps(raw[key])[:20]}: symmem's {fam.name} dataflow has no "
                              "biases (transformers then adds them to every projection); it is modelled false only")
    act = raw.get("hidden_act")
    if "hidden_act" in cfg.ignored_keys and act is not None and act not in ("silu", "swish"):
        # (the families that leave it unread gate their MLPs by SiLU; another activation keeps other tensors)
        raise SymmemError(f"{name}: hidden_act = {json.dumps(act)[:30]}: symmem's {fam.name} dataflow gates its "
                          "MLPs by silu; must be 'silu' or 'swish'")
    for key in UNMODELLED_IF_NONZERO:  # a dropout the family does not read, on: masks its dataflow does not keep
        if key in cfg.ignored_keys and raw.get(key) not in (None, 0, 0.0) and not isinstance(raw.get(key), bool):
            raise SymmemError(f"{name}: {key} = {json.dumps(raw[key])[:20]}: symmem's {fam.name} dataflow has no "
                              "dropout there (each would keep a mask a layer); it is modelled 0 only")
    if note is not None:
        cfg = dataclasses.replace(cfg, notes=(*cfg.notes, note))
    for key in CONTEXT_KEYS:
        if raw.get(key) is not None:
            return dataclasses.replace(cfg, max_positions=positive_int(key, raw[key], name))
    return cfg


CONTEXT_KEYS = ("max_position_embeddings", "n_positions")  # HF's names for the context length, in that order
UNMODELLED_IF_TRUE = ("attention_bias", "mlp_bias")  # keys a family may leave unread only while they are false
# dropout rates a family may leave unread only while they are 0 (transformers' Phi-3: resid_attn_dropout and
# resid_mlp_dropout from resid_pdrop, modeling_phi3.py; GPT-2's summary_first_dropout is a classification head's)
UNMODELLED_IF_NONZERO = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "hidden_dropout",
                         "residual_dropout")


def load_model(name_or_path: str, overrides: Mapping | None = None) -> ModelConfig:
    """A preset name (`deepseek-v3`, `llama-3-8b`, ...), the path of an HF config.json, or a Hugging Face Hub
    repository `ORG/NAME` (its config.json through huggingface_hub's cache: `symmem._hub`); `overrides` replace
    config keys (e.g. `{"num_hidden_layers": 12}` for a truncated model)."""
    if not overrides and name_or_path in all_presets():
        return _preset(name_or_path)  # a shipped preset never changes: read and checked once per process
    return _load(name_or_path, overrides)


@cache
def _preset(name: str) -> ModelConfig:
    return _load(name, None)


def _load(name_or_path: str, overrides: Mapping | None) -> ModelConfig:
    from symmem import _hub

    if name_or_path not in all_presets() and _hub.is_repo_id(name_or_path):  # ORG/NAME: the Hub's config.json
        path, source = _hub.config_json(name_or_path)
        text = read_text_file(path, "model")
    else:
        text, source = read_named_or_path("model", name_or_path, "symmem.presets", ".json", tuple(all_presets()),
                                          "unknown preset; known presets")
    raw = _json.loads(text, f"model = {name_or_path!r}")
    if overrides:
        if not isinstance(raw, dict):
            raise SymmemError(f"{source}: top level is {type(raw).__name__}: a config.json must hold a JSON object")
        new = [k for k in overrides if k not in raw]
        if new:  # a key the config does not have must be one its family reads: a typo is not an override
            reads = set(from_dict(raw, source).family.config_keys.values())
            unknown = [k for k in new if k not in reads]
            if unknown:
                raise SymmemError(f"{source} [model_overrides]: unknown key {str(unknown[0])[:60]!r}: not in the "
                                  "config.json and not a key its family reads (an override replaces a value the "
                                  "model has)")
        raw = {**raw, **overrides}
        source = f"{source} with " + ", ".join(f"{k} = {v!r}" for k, v in overrides.items())
    check_config(raw, source)
    return from_dict(raw, source)


def presets() -> tuple[str, ...]:
    return tuple(all_presets())
