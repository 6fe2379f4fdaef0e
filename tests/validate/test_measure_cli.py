"""`symmem measure`: measured and predicted bytes of one layer, the expression, parameters per module; errors."""

from __future__ import annotations

import json
import sys

import pytest
from _cases import config

from symmem.cli.main import _Parser
from symmem.cli.measure import COMMAND
from symmem.errors import SymmemError


def _run(argv: list[str]) -> int:
    help_text, add_args, run = COMMAND
    p = _Parser(prog="symmem measure", description=help_text)
    add_args(p)
    return run(p.parse_args(argv))


@pytest.fixture
def v3_path(tmp_path):
    path = tmp_path / "tiny-v3.json"
    path.write_text(json.dumps(config("deepseek-v3")))
    return str(path)


@pytest.mark.torch
@pytest.mark.parametrize("argv", [
    ["--layer", "1", "-b", "2", "-s", "5", "--dtype", "bf16", "--attn", "sdpa", "--experts", "grouped_mm"],
    ["--layer", "0", "-b", "1", "-s", "6", "--dtype", "fp32", "--attn", "eager", "--experts", "eager"],
])
def test_json_output(v3_path, argv, capsys, measure):
    assert _run(["--config", v3_path, *argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out["measured"], int) and out["measured"] == out["predicted"] > 0
    assert out["match"] and out["shared_match"] and out["params_match"]
    assert out["measured_shared"] == out["predicted_shared"] > 0
    assert "b*s" in out["expression"] and "d_hr" in out["shared_expression"]
    assert out["params"]["total"]["measured"] == out["paper_dataflow_params"]


@pytest.mark.torch
def test_text_output(v3_path, capsys, measure):
    assert _run(["--config", v3_path, "--layer", "1", "-b", "3", "-s", "4"]) == 0
    text = capsys.readouterr().out
    assert "(exact)" in text and "all equal to the measured counts" in text


def test_missing_torch_is_one_line(v3_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(SymmemError, match=r"pip install -e '\.\[validate\]'") as e:
        _run(["--config", v3_path])
    assert "\n" not in str(e.value)


@pytest.mark.torch
@pytest.mark.parametrize("argv,match", [
    (["--config", "/nonexistent.json"], "cannot read"),
    (["--layer", "7"], "--layer = 7"),
    (["-b", "0"], r"\(b, s\) = \(0, 5\)"),
    (["--dtype", "fp8"], "invalid choice"),
])
def test_bad_input(v3_path, argv, match):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    with pytest.raises(SymmemError, match=match):
        _run(["--config", v3_path, *argv])


@pytest.mark.parametrize("key,value", [("attention_dropout", 0.1), ("attention_bias", True)])
def test_unmodelled_config_keys(key, value):
    from symmem.validate.predict import predict

    with pytest.raises(SymmemError, match=key):
        predict(config("deepseek-v3", **{key: value}), 0, 2, 5)


# ---- moe_layer_freq: transformers 5.24 decides a layer's kind by first_k_dense_replace alone
# (models/deepseek_v3/modeling_deepseek_v3.py:493, models/deepseek_v2/modeling_deepseek_v2.py:428); DeepSeek's
# rule, which the family follows, also needs layer % moe_layer_freq == 0. With first_k_dense_replace = 1 and
# moe_layer_freq = 2, layers 1 and 3 are MoE layers in transformers and dense by DeepSeek's rule; layer 2 is MoE in
# both, layer 0 dense in both.
def _freq_config(family="deepseek-v3", freq=2):
    return config(family, num_hidden_layers=4, moe_layer_freq=freq)


@pytest.fixture
def freq_path(tmp_path):
    path = tmp_path / "tiny-v3-freq2.json"
    path.write_text(json.dumps(_freq_config()))
    return str(path)


def test_prediction_follows_what_transformers_builds():
    from symmem.config import from_dict
    from symmem.validate.predict import predict

    cfg = _freq_config()
    # DeepSeek's rule: MoE iff i >= 1 and i % 2 == 0
    assert from_dict(cfg, "cfg").layer_kinds() == ("dense", "dense", "moe", "dense")
    for layer, built, reference in ((0, "dense", "dense"), (1, "moe", "dense"), (2, "moe", "moe"), (3, "moe", "dense")):
        p = predict(cfg, layer, 2, 5)
        assert (p.layer_kind, p.reference_kind) == (built, reference)
        if built == reference:
            assert p.note is None
        else:
            assert "\n" not in p.note
            for words in (f"layer {layer} is an MoE layer in transformers 5.24", "first_k_dense_replace = 1",
                          "transformers/models/deepseek_v3/modeling_deepseek_v3.py:493", "moe_layer_freq = 2",
                          "a dense layer"):
                assert words in p.note
    # an MoE layer of the same sizes: the bytes of layer 1 are the bytes of an MoE layer (layer 1 of the default
    # tiny config, moe_layer_freq = 1, where the two rules agree)
    assert predict(cfg, 1, 2, 5).layer_bytes == predict(config("deepseek-v3"), 1, 2, 5).layer_bytes
    v2 = predict(_freq_config("deepseek-v2", 3), 2, 2, 5, "bf16")
    assert (v2.layer_kind, v2.reference_kind) == ("moe", "dense")
    assert "transformers/models/deepseek_v2/modeling_deepseek_v2.py:428" in v2.note and "moe_layer_freq = 3" in v2.note


def test_memory_estimate_counts_the_layers_transformers_builds():
    from symmem.accounting.analysis import model_totals
    from symmem.cli.measure import estimate_bytes
    from symmem.config import from_dict
    from symmem.validate.predict import predict

    cfg = _freq_config()
    pred = predict(cfg, 1, 2, 5)
    built = estimate_bytes({**cfg, "moe_layer_freq": 1}, pred, 2, 5, "fp32", "cfg")
    assert estimate_bytes(cfg, pred, 2, 5, "fp32", "cfg") == built
    # transformers builds three MoE layers, DeepSeek's rule one: the estimate holds the larger model
    hf_total = model_totals(from_dict({**cfg, "moe_layer_freq": 1}, "cfg")).total
    assert hf_total > model_totals(from_dict(cfg, "cfg")).total


@pytest.mark.torch
@pytest.mark.parametrize("layer, reference", [(1, "dense"), (2, "moe"), (3, "dense")])
def test_measure_with_moe_layer_freq(freq_path, layer, reference, capsys, measure):
    assert _run(["--config", freq_path, "--layer", str(layer), "-b", "2", "-s", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # transformers' module decides: the layer it built has routed experts
    assert out["measured_layer_kind"] == out["layer_kind"] == "moe"
    assert out["reference_layer_kind"] == reference
    assert out["match"] and out["measured"] == out["predicted"] and out["params_match"]
    assert (out["layer_kind_note"] is None) == (reference == "moe")


@pytest.mark.torch
def test_measure_says_why_in_one_line(freq_path, capsys, measure):
    assert _run(["--config", freq_path, "--layer", "1", "-b", "2", "-s", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    notes = [x for x in lines if x.strip().startswith("note:")]
    assert len(notes) == 1
    assert "moe_layer_freq = 2" in notes[0] and "modeling_deepseek_v3.py:493" in notes[0]
    assert lines[0].startswith(f"{freq_path} layer 1 (moe)")
    assert any("(exact)" in x for x in lines)
