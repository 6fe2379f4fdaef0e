"""torchao 0.18.0's float8 training on the CPU (`emulate=True`) against the engine (`symmem measure --framework
torchao-float8`): four Llama-family layers, the tensorwise and rowwise recipes and the options of
Float8LinearConfig, measured with the real library (saved bytes, model states after an AdamW step) and compared to
what the engine derives under --precision torchao-float8-<recipe>. Runs are marked `torch` and skip without torch,
transformers or torchao; the flag checks need neither."""

from __future__ import annotations

import json

import pytest

from symmem.cli.main import _Parser
from symmem.cli.measure import COMMAND
from symmem.errors import SymmemError

BASE = {"model_type": "llama", "vocab_size": 128, "num_hidden_layers": 2, "max_position_embeddings": 256,
        "attention_dropout": 0.0, "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
        "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "use_cache": False}
# Four Llama-family shapes: GQA, MHA, MQA with sizes that are not multiples of 16 (torchao pads nothing under
# emulation; pad_inner_dim is exercised below), and Llama-3-style rope scaling with tied embeddings.
CONFIGS = {
    "gqa": {**BASE, "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2},
    "mha": {**BASE, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4},
    "mqa-odd": {**BASE, "hidden_size": 60, "intermediate_size": 84, "num_attention_heads": 3,
                "num_key_value_heads": 1},
    "llama3-rope-tied": {**BASE, "hidden_size": 128, "intermediate_size": 176, "num_attention_heads": 8,
                         "num_key_value_heads": 2, "tie_word_embeddings": True, "rope_theta": 500000.0,
                         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
}
POINTS = {"gqa": (2, 5), "mha": (1, 9), "mqa-odd": (3, 7), "llama3-rope-tied": (2, 11)}


def _run(argv: list[str]) -> int:
    help_text, add_args, run = COMMAND
    p = _Parser(prog="symmem measure", description=help_text)
    add_args(p)
    return run(p.parse_args(argv))


def _measure(tmp_path, capsys, name: str, recipe: str, *extra: str, layer: int = 1, dtype: str = "fp32"
             ) -> tuple[int, dict]:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("torchao.float8")
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(CONFIGS[name]))
    b, s = POINTS[name]
    rc = _run(["--framework", "torchao-float8", "--recipe", recipe, "--config", str(path), "--layer", str(layer),
               "-b", str(b), "-s", str(s), "--dtype", dtype, "--json", *extra])
    return rc, json.loads(capsys.readouterr().out)


def _params(cfg: dict) -> int:
    """A Llama decoder layer's parameters from its config: q, k, v, o, gate, up, down and two RMSNorm weights."""
    h, f, n, g = (cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads"))
    d = h // n
    return h * n * d + 2 * h * g * d + n * d * h + 3 * h * f + 2 * h


@pytest.mark.torch
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_float8_layer_is_byte_exact(tmp_path, capsys, name, recipe, dtype):
    rc, out = _measure(tmp_path, capsys, name, recipe, dtype=dtype)
    assert out["match"] == {"saved": True, "shared": True, "states": True}, out
    assert rc == 0
    # The model states, by hand: parameters, gradients, AdamW's exp_avg and exp_avg_sq in the layer's dtype (FP32:
    # 4 + 4 + 8 bytes per parameter; BF16: 2 + 2 + 4), and one FP32 step per parameter tensor (torch/optim/adam.py:
    # 168-185 at v2.13.0): 4 x 9 tensors.
    n = _params(CONFIGS[name])
    assert out["measured"]["states"]["total"] == (16 if dtype == "fp32" else 8) * n + 4 * 9


@pytest.mark.torch
def test_gqa_states_and_saved_by_hand(tmp_path, capsys):
    rc, out = _measure(tmp_path, capsys, "gqa", "tensorwise")
    assert rc == 0
    # h = 64, f = 96, 4 heads of 16, 2 KV groups: q 4096 + k 2048 + v 2048 + o 4096 + 3 x 6144 + 2 x 64 = 30848
    assert _params(CONFIGS["gqa"]) == 30848
    assert out["measured"]["states"] == {"weights": 4 * 30848, "gradients": 4 * 30848,
                                         "optimizer": 8 * 30848 + 4 * 9, "total": 16 * 30848 + 36,
                                         "parameter_tensors": 9}


@pytest.mark.torch
@pytest.mark.parametrize("recipe, options", [
    ("rowwise_with_gw_hp", []),
    ("tensorwise", ["--option", "pad_inner_dim=true"]),
    ("rowwise", ["--option", "round_scales_to_power_of_2=false", "--option", "pad_inner_dim=true"]),
    ("tensorwise", ["--option", "force_recompute_fp8_weight_in_bwd=true"]),
])
def test_options_keep_what_is_saved(tmp_path, capsys, recipe, options):
    """Float8Linear saves the high-precision input and weight whatever the config (torchao/float8/
    float8_linear.py:45): the options change the casts, not the saved bytes, which equal the recipes' without
    options (measured) and the engine's."""
    rc, out = _measure(tmp_path, capsys, "mqa-odd", recipe, *options)
    _, plain = _measure(tmp_path, capsys, "mqa-odd", "tensorwise")
    assert rc == 0 and out["equal"]
    assert out["measured"] == plain["measured"]


@pytest.mark.parametrize("argv, message", [
    (["--recipe", "blockwise"], "--recipe = 'blockwise'"),
    (["--option", "emulate=false"], "--option = 'emulate=false': unknown"),
    (["--option", "pad_inner_dim=yes"], "must be true or false"),
])
def test_bad_flags_are_one_line_errors(tmp_path, argv, message):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CONFIGS["gqa"]))
    with pytest.raises(SymmemError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _run(["--framework", "torchao-float8", "--config", str(path), *argv])


def test_recipe_flag_only_with_torchao(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CONFIGS["gqa"]))
    with pytest.raises(SymmemError, match="--recipe: only with --framework torchao-float8"):
        _run(["--config", str(path), "--recipe", "rowwise"])


def test_missing_torchao_is_one_line(tmp_path, monkeypatch):
    import sys

    path = tmp_path / "c.json"
    path.write_text(json.dumps(CONFIGS["gqa"]))
    monkeypatch.setitem(sys.modules, "torchao", None)  # `import torchao...` raises ImportError
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    with pytest.raises(SymmemError, match="torchao not installed"):
        _run(["--framework", "torchao-float8", "--config", str(path), "-b", "1", "-s", "2"])
