"""Issue 44: the open decoder families' parameter counts equal transformers 5.24's own count of the same config,
the model built on the meta device (no memory, no weights): the sixteen published configs shipped as presets, and a
tiny config of odd sizes for every family (`symmem.validate.tiny_configs`: head_dim unlike hidden/heads, GQA
groups of 3, dense and MoE layers interleaved, every switchable feature on)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from symmem import load_model, model_totals
from symmem.config import from_dict
from symmem.validate.tiny_configs import TINY, tiny

pytestmark = pytest.mark.torch

# the sixteen open models of issue 44, by preset name
PUBLISHED = ("qwen2.5-7b", "qwen3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "mistral-7b-v0.3", "mixtral-8x7b",
             "gemma-2-9b", "gemma-3-12b", "phi-3-mini", "olmo-2-7b", "glm-4.5-air", "gpt-oss-20b", "llama-4-scout",
             "kimi-k2", "llama-3.1-8b", "deepseek-v2-lite")


def _meta_count(raw: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    raw = {k: v for k, v in raw.items() if k not in ("architectures", "auto_map", "_name_or_path")}
    cfg = transformers.AutoConfig.for_model(**raw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_config_total_equals_transformers(name):
    raw = json.loads(resources.files("symmem.presets").joinpath(f"{name}.json").read_text())
    if raw["model_type"] == "kimi_k2":  # transformers has no kimi_k2: its architectures is DeepseekV3ForCausalLM
        raw = {**raw, "model_type": "deepseek_v3"}
    assert model_totals(load_model(name)).total == _meta_count(raw)


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_tiny_odd_config_total_equals_transformers(model_type):
    raw = tiny(model_type)
    assert model_totals(from_dict(raw, model_type)).total == _meta_count(raw)


def test_kimi_k2_is_exact_at_the_issue_s_figure():
    # issue 44: relabelled deepseek_v3, Kimi-K2 has 1,026,408,209,408 parameters
    assert model_totals(load_model("kimi-k2")).total == 1_026_408_209_408


def test_shipped_model_type_list_is_transformers_own():
    # symmem/data/transformers_model_types.txt: the model types a config may name without being read by its
    # architectures instead (kimi_k2 is not among them)
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from symmem.family import transformers_model_types

    assert transformers_model_types() == frozenset(CONFIG_MAPPING_NAMES)
    assert "kimi_k2" not in transformers_model_types()
