"""Config keys a family does not read (a hostile review of bring-your-own-model): biases switched on are refused
in every family that has none (DeepSeek-V2/V3 ignored them: 18,560 parameters short at 2 layers), and the commands
that give the memory name any unread key that may change what a step holds, not only `symmem params`."""

from __future__ import annotations

import json

import pytest

from symmem.cli.main import main


def _config(tmp_path, preset: str, **changes) -> str:
    from importlib import resources

    raw = json.loads(resources.files("symmem.presets").joinpath(f"{preset}.json").read_text())
    path = tmp_path / f"{preset}.json"
    path.write_text(json.dumps({**raw, **changes}))
    return str(path)


@pytest.mark.parametrize("preset, key", [("deepseek-v3", "attention_bias"), ("deepseek-v2-lite", "mlp_bias"),
                                         ("phi-3-mini", "attention_bias"), ("deepseek-v4-flash", "mlp_bias")])
def test_biases_switched_on_are_refused(tmp_path, capsys, preset, key):
    assert main(["params", "--model", _config(tmp_path, preset, **{key: True})]) == 2
    err = capsys.readouterr().err
    assert f"{key} = true" in err and "has no biases" in err and err.count("\n") == 1, err
    assert main(["params", "--model", _config(tmp_path, preset, **{key: False})]) == 0


@pytest.mark.parametrize("command", ["memory", "states", "activations"])
def test_an_unread_key_is_named_where_the_memory_is_given(tmp_path, capsys, command):
    path = _config(tmp_path, "llama-3-8b", qk_norm=True)
    assert main([command, "--model", path, "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["config_notes"]
    assert len(notes) == 1 and "does not read: qk_norm" in notes[0], notes
    assert main([command, "--model", path]) == 0
    assert "does not read: qk_norm" in capsys.readouterr().out
    # a preset's unread keys are metadata (token ids, RoPE's frequencies, versions): nothing to say
    assert main([command, "--model", "llama-3-8b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config_notes"] == []


def test_the_torch_eager_profile_and_rule_set_follow_the_same_dataflow(capsys):
    """--profile torch-eager and --rules torch-eager describe the same step (transformers on one device): both
    follow Hugging Face's dataflow (the profile followed the paper's, half the activations, under the same header)."""
    got = []
    for flags in (["--profile", "torch-eager"], ["--rules", "torch-eager"]):
        assert main(["memory", "--model", "llama-3-8b", *flags, "--json"]) == 0
        got.append(json.loads(capsys.readouterr().out)["stages"])
    assert got[0] == got[1]


@pytest.mark.parametrize("preset, key", [("phi-3-mini", "resid_pdrop"), ("phi-3-mini", "embd_pdrop"),
                                         ("deepseek-v3", "attention_dropout")])
def test_a_dropout_the_family_does_not_read_is_refused_when_on(tmp_path, capsys, preset, key):
    """transformers' Phi-3 applies resid_pdrop twice a layer (a mask each): unread, it was silently ignored."""
    assert main(["params", "--model", _config(tmp_path, preset, **{key: 0.1})]) == 2
    err = capsys.readouterr().err
    assert f"{key} = 0.1" in err and "has no dropout there" in err and err.count("\n") == 1, err
    assert main(["params", "--model", _config(tmp_path, preset, **{key: 0.0})]) == 0


@pytest.mark.parametrize("preset", ["llama-3-8b", "deepseek-v2-lite"])
def test_an_activation_the_family_does_not_read_is_refused(tmp_path, capsys, preset):
    """Llama's and DeepSeek's families leave hidden_act unread (their MLPs gated by SiLU): gelu_new was ignored."""
    assert main(["params", "--model", _config(tmp_path, preset, hidden_act="gelu_new")]) == 2
    err = capsys.readouterr().err
    assert 'hidden_act = "gelu_new"' in err and "gates its MLPs by silu" in err and err.count("\n") == 1, err


def test_glms_mtp_layers_are_named_not_modelled(capsys):
    """GLM-4.5-Air's config asks for one MTP layer, which transformers does not build and symmem does not model:
    said in memory's notes (it was counted as read and the --mtp note said there were none)."""
    assert main(["memory", "--model", "glm-4.5-air", "--mtp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("num_nextn_predict_layers" in n for n in out["config_notes"]), out["config_notes"]
    assert not any("num_nextn_predict_layers = 0" in n for n in out["flag_notes"]), out["flag_notes"]


@pytest.mark.parametrize("preset, key, value", [("gemma-2-9b", "final_logit_softcapping", 0),
                                                ("gemma-2-9b", "attn_logit_softcapping", "x"),
                                                ("gpt-oss-20b", "swiglu_limit", -1)])
def test_a_scale_transformers_could_not_run_is_refused(tmp_path, capsys, preset, key, value):
    assert main(["params", "--model", _config(tmp_path, preset, **{key: value})]) == 2
    err = capsys.readouterr().err
    assert f"{key} = " in err and "must be a number above 0 (or null)" in err and err.count("\n") == 1, err
    assert main(["params", "--model", _config(tmp_path, preset, **{key: None})]) == 0


def test_a_multimodal_config_points_to_its_text_config(tmp_path, capsys):
    path = tmp_path / "mm.json"
    path.write_text(json.dumps({"model_type": "llama4", "text_config": {"model_type": "llama4_text"}}))
    assert main(["params", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert "a multimodal config; symmem models its language model, model_type 'llama4_text'" in err, err


def test_deepseeks_moe_layer_frequency_says_whose_placement_it_follows(tmp_path, capsys):
    path = _config(tmp_path, "deepseek-v2-lite", moe_layer_freq=2)
    assert main(["memory", "--model", path, "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["config_notes"]
    assert any("moe_layer_freq = 2" in n and "transformers 5.24 ignores the key" in n for n in notes), notes
