"""The Llama family: published totals, an independent recount of HF module shapes, tied embeddings, the CLI.

Facts and where they come from: the totals 8,030,261,248 / 70,553,706,496 / 405,853,388,800 are the parameter
counts Meta publishes for Llama 3 8B, 70B and Llama 3.1 405B (the model cards' safetensors totals); the recount
follows transformers' LlamaForCausalLM modules (q/k/v/o_proj, gate/up/down_proj, two RMSNorms per layer, the final
norm, embed_tokens and lm_head).
"""

from __future__ import annotations

import json
import random

import pytest

from symmem import load_model, model_totals
from symmem.config import from_dict
from symmem.errors import SymmemError


def recount(c: dict) -> int:
    """Parameters of LlamaForCausalLM counted module by module from a config dict (no symmem involved)."""
    h, nh = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or nh
    hd = c.get("head_dim") or h // nh
    attn = h * nh * hd + 2 * h * kv * hd + nh * hd * h
    mlp = 3 * h * c["intermediate_size"]
    per_layer = attn + mlp + 2 * h
    head = 0 if c.get("tie_word_embeddings") else c["vocab_size"] * h
    return c["num_hidden_layers"] * per_layer + h + c["vocab_size"] * h + head


PUBLISHED = {"llama-3-8b": 8_030_261_248, "llama-3-70b": 70_553_706_496, "llama-3.1-405b": 405_853_388_800}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_presets_give_the_published_totals(name):
    from importlib import resources

    assert model_totals(load_model(name)).total == PUBLISHED[name]
    raw = json.loads(resources.files("symmem.presets").joinpath(f"{name}.json").read_text())
    assert recount(raw) == PUBLISHED[name]


@pytest.mark.parametrize("seed", range(25))
def test_symbolic_count_matches_recount(seed):
    rng = random.Random(seed)
    kv = rng.choice([1, 2, 4])
    nh = kv * rng.choice([1, 2, 3, 8])
    c = {"model_type": "llama", "hidden_size": rng.choice([8, 24, 64, 96]), "num_attention_heads": nh,
         "num_key_value_heads": kv, "intermediate_size": rng.choice([5, 16, 100]), "vocab_size": rng.choice([7, 128]),
         "num_hidden_layers": rng.randint(1, 5), "tie_word_embeddings": rng.random() < 0.5,
         "head_dim": rng.choice([None, 4, 16])}
    if c["head_dim"] is None and c["hidden_size"] % nh:
        c["head_dim"] = 8
    assert model_totals(from_dict(c, f"grid{seed}")).total == recount(c)


def test_tied_embeddings_drop_the_head():
    raw = json.loads((__import__("importlib").resources.files("symmem.presets") / "llama-3-8b.json").read_text())
    raw["tie_word_embeddings"] = True
    assert model_totals(from_dict(raw)).total == PUBLISHED["llama-3-8b"] - 128_256 * 4096


@pytest.mark.parametrize("change, words", [
    ({"num_key_value_heads": 5}, "must divide num_attention_heads"),
    ({"hidden_size": 4097, "head_dim": None}, "multiple of num_attention_heads"),
    ({"attention_bias": True}, "no biases"),
    ({"tie_word_embeddings": "false"}, "must be true or false"),
    ({"num_hidden_layers": 0}, "positive integer"),
])
def test_bad_llama_configs(change, words):
    raw = json.loads((__import__("importlib").resources.files("symmem.presets") / "llama-3-8b.json").read_text())
    raw.update(change)
    with pytest.raises(SymmemError, match=words):
        from_dict(raw)


def test_cli_params_json(capsys):
    from symmem.cli.main import main

    assert main(["params", "--model", "llama-3-70b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 70_553_706_496  # PUBLISHED above (Meta)


def test_full_recomputation_keeps_only_the_layer_input():
    """Under full recomputation a Llama layer keeps its input, b s h in BF16 (2 bytes), whatever its blocks are
    called: the policy acts on the decoder_layer tag, not on block names."""
    from symmem.blocks.symbols import h
    from symmem.check.quantities import derive
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import Scenario
    from symmem.symbols import b, s

    scn = Scenario("t", load_model("llama-3-8b"), Parallel(), recompute_name="full")
    expr, _ = derive("layer.activations", scn, 0)
    assert expr == 2 * b * s * h
