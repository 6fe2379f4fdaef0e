"""Issue 45, defect 6: symmem measure refuses what symmem memory refuses, names the user's file (not a temporary
copy), and refuses flags its framework does not take (--layer with megatron-core and fsdp2, which measure every
layer of each rank). Refused before any process starts: no torch needed."""

from __future__ import annotations

import json

import pytest

from symmem.cli.main import main

TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64,
              "tie_word_embeddings": False}


def _config(tmp_path, **keys) -> str:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**TINY_LLAMA, **keys}))
    return str(path)


def _refused(capsys, argv, words):
    code = main(["measure", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err, err
    return err


def test_megatron_refuses_a_gpt2_memory_refuses(capsys, tmp_path):
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 66, "n_layer": 2, "n_head": 4, "vocab_size": 128,
                                "n_positions": 64}))
    _refused(capsys, ["--framework", "megatron-core", "--config", str(path)],
             f"{path}: n_embd = 66: must be a multiple of n_head = 4")


@pytest.mark.parametrize("framework", ["megatron-core", "fsdp2"])
def test_layer_is_refused_where_every_layer_is_measured(capsys, tmp_path, framework):
    _refused(capsys, ["--framework", framework, "--config", _config(tmp_path), "--layer", "7"],
             f"--layer: only with --framework transformers or torchao-float8 ({framework} measures every layer")


def test_fsdp2_names_the_user_s_file(capsys, tmp_path):
    err = _refused(capsys, ["--framework", "fsdp2", "--config", _config(tmp_path, num_key_value_heads=3)],
                   "num_key_value_heads = 3: must divide num_attention_heads = 4")
    assert str(tmp_path / "mine.json") in err and "/tmp/tmp" not in err


def test_fsdp2_says_what_the_file_holds(capsys, tmp_path):
    _refused(capsys, ["--framework", "fsdp2", "--config", _config(tmp_path, tie_word_embeddings="false")],
             "tie_word_embeddings = 'false': must be true or false")
