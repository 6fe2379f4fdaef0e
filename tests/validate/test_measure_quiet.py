"""Issue 45, defect 6: symmem measure prints no library noise (torchao's CUDA-extension load failures, torch's pytree
deprecation, Megatron-Core's missing-TransformerEngine/Apex warnings, torch.distributed's FutureWarnings) on a run
that succeeds: standard error stays empty (symmem/validate/_quiet.py names each message silenced)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.torch

TINY_QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 128,
              "max_position_embeddings": 64, "tie_word_embeddings": False}


def _measure(tmp_path, *argv):
    cfg = tmp_path / "qwen3.json"
    cfg.write_text(json.dumps(TINY_QWEN3))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "TRANSFORMERS_VERBOSITY")}
    return subprocess.run([sys.executable, "-m", "symmem", "measure", "--config", str(cfg), *argv],
                          capture_output=True, text=True, env=env, timeout=600)


def test_transformers_run_prints_no_library_noise(tmp_path):
    run = _measure(tmp_path, "--framework", "transformers")
    assert run.returncode == 0 and "exact" in run.stdout, run.stderr
    assert run.stderr == ""


@pytest.mark.megatron
def test_megatron_core_run_prints_no_library_noise(tmp_path):
    pytest.importorskip("megatron.core")
    run = _measure(tmp_path, "--framework", "megatron-core", "-s", "16")
    assert run.returncode == 0 and "EQUAL" in run.stdout, run.stdout + run.stderr
    assert run.stderr == ""
