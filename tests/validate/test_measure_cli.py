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
