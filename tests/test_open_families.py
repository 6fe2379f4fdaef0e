"""Issue 44, without PyTorch: the declared decoder families read their configs as transformers 5.24 does (layer kinds
by its rules, its defaults, its activation names), refuse what they do not model in one line, answer under every
profile that can run them (megatron-te at TP 2 x PP 2 x DP 2 for Qwen3, Qwen3-MoE, Mixtral, Mistral), and take
`--model ORG/NAME` from a Hugging Face cache. Parameter counts and saved bytes against transformers itself are in
tests/validate/test_open_families_{params,exact}.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources

import pytest

from symmem.cli.main import main
from symmem.config import from_dict, load_model
from symmem.errors import SymmemError
from symmem.validate.tiny_configs import tiny


def _preset(name: str) -> dict:
    return json.loads(resources.files("symmem.presets").joinpath(f"{name}.json").read_text())


def _kinds(model_type: str, **keys) -> tuple[str, ...]:
    return from_dict(tiny(model_type, **keys), model_type).layer_kinds()


# ------------------------------------------------------------------------------------------------ layer kinds
def test_moe_layers_follow_transformers_rules():
    # Qwen3-MoE: MoE iff not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0 (modeling_qwen3_moe.py:310)
    assert _kinds("qwen3_moe", decoder_sparse_step=2, mlp_only_layers=[3], num_hidden_layers=6) == (
        "dense", "moe", "dense", "dense", "dense", "moe")
    # GLM-4.5: MoE from first_k_dense_replace on
    assert _kinds("glm4_moe", first_k_dense_replace=2, num_hidden_layers=4) == ("dense", "dense", "moe", "moe")
    # Llama 4: every interleave_moe_layer_step-th layer from step - 1, unless moe_layers lists them
    plain = {"attention_chunk_size": None, "no_rope_layer_interval": 100}  # no chunked and no NoPE layer
    assert _kinds("llama4_text", interleave_moe_layer_step=2, num_hidden_layers=4, **plain) == (
        "dense", "moe", "dense", "moe")
    assert _kinds("llama4_text", moe_layers=[0], num_hidden_layers=3, **plain) == ("moe", "dense", "dense")
    # Mixtral: every layer
    assert set(_kinds("mixtral", sliding_window=8)) == {"moe_sliding"} and set(_kinds("mixtral")) == {"moe"}


def test_sliding_layers_follow_transformers_rules():
    # Gemma 2 and gpt-oss alternate from layer 0; Gemma 3 keeps every sliding_window_pattern-th layer global
    assert _kinds("gemma2", num_hidden_layers=4) == ("dense_sliding", "dense", "dense_sliding", "dense")
    assert _kinds("gemma3_text", num_hidden_layers=6, sliding_window_pattern=6) == ("dense_sliding",) * 5 + ("dense",)
    # Qwen: only with use_sliding_window, from max_window_layers on (configuration_qwen2.py:83-93)
    assert _kinds("qwen2", sliding_window=8, num_hidden_layers=3) == ("dense",) * 3
    assert _kinds("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=2, num_hidden_layers=3) == (
        "dense", "dense", "dense_sliding")
    # Llama 4: every no_rope_layer_interval-th layer is NoPE (an empty no_rope_layers too, as Scout's), the RoPE layers
    # attend in chunks of attention_chunk_size
    assert _kinds("llama4_text", interleave_moe_layer_step=2, num_hidden_layers=4, no_rope_layers=[]) == (
        "dense_sliding", "moe_nope", "dense_sliding", "moe_nope")
    # a config's own layer_types wins, as in transformers
    assert _kinds("ministral", num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"]) == (
        "dense", "dense_sliding")


# ------------------------------------------------------------------------------------------------ reading configs
def test_defaults_are_transformers_config_classes():
    # absent keys take the config class's default, not hidden / heads: Qwen3's head_dim is 128, Qwen2's
    # num_key_value_heads 32; Phi-3's num_key_value_heads is num_attention_heads
    assert load_model("qwen3-8b").value("d_h") == 128
    raw = {k: v for k, v in tiny("qwen2").items() if k != "num_key_value_heads"}
    with pytest.raises(SymmemError, match="num_key_value_heads = 32: must divide num_attention_heads = 6"):
        from_dict(raw, "qwen2")
    raw = {k: v for k, v in tiny("phi3").items() if k != "num_key_value_heads"}
    assert from_dict(raw, "phi3").value("n_kv") == 6


@pytest.mark.parametrize("key, value, words", [
    ("hidden_act", "relu", "hidden_act = 'relu': the qwen3 dataflow's MLP is gated by silu"),
    ("num_experts_per_tok", 9, "num_experts_per_tok = 9: more than num_experts = 6"),
    ("decoder_sparse_step", 0, "decoder_sparse_step = 0: must be a positive integer"),
    ("mlp_only_layers", [7], "mlp_only_layers has 7: must be a layer index in [0, 5)"),
])
def test_bad_values_refused_in_one_line(key, value, words):
    mt = "qwen3" if key == "hidden_act" else "qwen3_moe"
    with pytest.raises(SymmemError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        from_dict(tiny(mt, **{key: value}), mt)


def test_kimi_k2_is_read_by_its_architectures_with_a_note(capsys):
    assert main(["params", "--model", "kimi-k2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"] == 1_026_408_209_408  # the figure
    assert out["notes"] == ["model_type = 'kimi_k2' is not a model type of transformers 5.24; its architectures "
                            "names DeepseekV3ForCausalLM: read as model_type 'deepseek_v3'"]


def test_a_model_type_transformers_knows_is_not_read_by_its_architectures(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({**_preset("deepseek-v3"), "model_type": "gpt_neox"}))
    assert main(["params", "--model", str(cfg)]) == 2
    assert "model_type = 'gpt_neox': symmem models" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ profiles
@pytest.mark.parametrize("name", ["qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b", "mistral-7b-v0.3"])
def test_megatron_te_answers_at_tp2_pp2_dp2(capsys, name):
    code = main(["memory", "--model", name, "--profile", "megatron-te", "--tp", "2", "--pp", "2", "--dp", "2",
                 "-s", "4096", "--gpu", "H100", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert len(result["stages"]) == 2 and all(st["peak_allocated"] > 0 for st in result["stages"])


def test_torchtitan_refuses_families_it_does_not_model(capsys):
    assert main(["memory", "--model", "qwen3-8b", "--profile", "torchtitan", "--dp", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "qwen3-8b (family qwen3)" in err


# ------------------------------------------------------------------------------------------------ --model ORG/NAME
def _symmem(args, **env):
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "symmem", *args], capture_output=True, text=True, env=full,
                          timeout=120)


def _cache_with(tmp_path, repo: str, config: dict):
    """A Hugging Face cache holding repo's config.json, laid out as huggingface_hub lays it out."""
    root = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
    sha = "0123456789abcdef0123456789abcdef01234567"
    (root / "snapshots" / sha).mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(sha)
    (root / "snapshots" / sha / "config.json").write_text(json.dumps(config))
    return str(tmp_path / "hub")


def test_model_from_the_hugging_face_cache_offline(tmp_path):
    cache = _cache_with(tmp_path, "Qwen/Qwen3-8B", _preset("qwen3-8b"))
    run = _symmem(["params", "--model", "Qwen/Qwen3-8B", "--json"], HF_HUB_CACHE=cache, HF_HUB_OFFLINE="1")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["model"] == "Qwen/Qwen3-8B" and out["total"] == 8_190_735_360


def test_model_not_cached_offline_says_so_in_one_line(tmp_path):
    run = _symmem(["params", "--model", "Qwen/Qwen3-8B"], HF_HUB_CACHE=str(tmp_path), HF_HUB_OFFLINE="1")
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "not in the Hugging Face cache" in run.stderr
    assert "HF_HUB_OFFLINE" in run.stderr and "Traceback" not in run.stderr


def test_a_path_that_looks_like_a_repository_is_a_path(tmp_path, monkeypatch):
    (tmp_path / "Qwen").mkdir()
    shutil.copy(resources.files("symmem.presets").joinpath("qwen3-8b.json"), tmp_path / "Qwen" / "Qwen3-8B")
    monkeypatch.chdir(tmp_path)
    assert load_model("Qwen/Qwen3-8B").value("d_h") == 128
