"""Hostile input, issue 29 item 8: surfaces the first passes missed (size bounds of every family, GPUs without
speed figures, a sweep the user's own flag empties, a closed stdout, messages that name the flag to change)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_hostile import one_line_error, run  # the first hostile suite's helpers (tests/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- 1. size bounds of every family
def _preset_with(tmp_path: Path, preset: str, **changes) -> str:
    raw = json.loads((ROOT / "symmem" / "presets" / f"{preset}.json").read_text())
    raw.update(changes)
    path = tmp_path / f"{preset}-hostile.json"
    path.write_text(json.dumps(raw))
    return str(path)


@pytest.mark.parametrize("command", [["params"], ["memory", "--pp", "256"]])
def test_gpt_layer_count_has_the_layer_cap(capsys, tmp_path, command):
    """GPT-2's n_layer had only the width bound (2^31): 10^9 layers ran for minutes or ran out of memory."""
    model = _preset_with(tmp_path, "gpt2", n_layer=1_000_000_000)
    code, out, err = run(capsys, *command, "--model", model)
    assert one_line_error(code, err), err
    assert "n_layer = 1000000000: must be at most 100,000" in err and out == ""


@pytest.mark.parametrize(("preset", "key"), [("gpt2", "n_layer"), ("llama-3-8b", "num_hidden_layers"),
                                             ("deepseek-v2-lite", "num_hidden_layers")])
def test_every_family_layer_count_bound_in_one_place(preset, key):
    """`from_dict` (the API, without the CLI's config check) applies the same cap through `read_sizes`."""
    from symmem.config import from_dict
    from symmem.errors import SymmemError

    raw = json.loads((ROOT / "symmem" / "presets" / f"{preset}.json").read_text())
    raw[key] = 100_001
    with pytest.raises(SymmemError, match=f"{key} = 100001: must be a positive integer up to 100,000"):
        from_dict(raw, "cfg")


# ------------------------------------------------------------------------ 2. a GPU with a capacity, no speeds
@pytest.mark.parametrize("name", ["H20", "MI300X", "mi300x"])
def test_memory_on_a_gpu_without_speed_figures(capsys, name):
    """--gpu sets the capacity (symmem.units.GPUS); the step time needs speeds (symmem.hardware) it may lack."""
    code, out, err = run(capsys, "memory", "--model", "llama-3-8b", "--gpu", name)
    assert code == 0 and err == "", err
    capacity = {"H20": "96,000,000,000", "MI300X": "192,000,000,000"}[name.upper()]
    assert f"GPU capacity {capacity} bytes" in out
    assert f"step time not estimated: no speed figures for GPU {name.upper()}" in out
    code, out, err = run(capsys, "memory", "--model", "llama-3-8b", "--gpu", name, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["step"] is None and "no speed figures" in doc["step_unavailable"]
    assert doc["gpu_memory"] == int(capacity.replace(",", ""))


def test_sweep_on_a_gpu_without_speed_figures(capsys):
    code, out, err = run(capsys, "sweep", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "H20")
    assert code == 0 and err == "", err
    assert "ranked by headroom" in out and "step time not estimated: no speed figures for GPU H20" in out
    code, out, err = run(capsys, "sweep", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "MI300X",
                         "--rank-by", "time")
    assert one_line_error(code, err) and out == "", err
    assert "--gpu = 'MI300X': no speed figures for it, which --rank-by time needs" in err


def test_gpu_with_speed_figures_still_timed(capsys):
    code, out, _ = run(capsys, "memory", "--model", "llama-3-8b", "--gpu", "H100")
    assert code == 0 and "step on H100:" in out and "not estimated" not in out


# ----------------------------------------------------------------- 3. a sweep the user's own flag empties
@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "gpt2", "--ep", "2"], "--ep = '2': gpt2 has no routed experts, so every layout needs EP 1"),
    (["--model", "gpt2", "--etp", "2"], "--etp = '2': gpt2 has no routed experts, so every layout needs ETP 1"),
    (["--model", "gpt2", "--tp", "2"], "--tp = '2': no value divides vocab_size = 50257"),
    (["--model", "deepseek-v2-lite", "--ep", "3"], "--ep = '3': no value divides n_routed_experts = 64"),
])
def test_sweep_flag_that_rules_out_every_layout(capsys, argv, message):
    """Was: "no configuration fits", exit 0, the reason only under --rejected."""
    code, out, err = run(capsys, "sweep", "--gpus", "8", *argv)
    assert one_line_error(code, err) and out == "", err
    assert message in err


def test_sweep_flag_that_keeps_some_layouts(capsys):
    code, out, err = run(capsys, "sweep", "--gpus", "8", "--model", "gpt2", "--ep", "1,2", "--tp", "1-8:x2")
    assert code == 0 and err == "" and "no configuration fits" not in out


# ------------------------------------------------------------------------------- 4. output that cannot be written
def _symmem(shell_redirect: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = " ".join([sys.executable, "-m", "symmem", *args, shell_redirect])
    return subprocess.run(["sh", "-c", command], env=env, stderr=subprocess.PIPE, text=True, timeout=60)


def test_closed_stdout_is_an_error():
    """`symmem memory ... >&-` exited 0 having written nothing (Python's print to a None stdout is silent)."""
    r = _symmem(">&-", "memory", "--model", "llama-3-8b")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "standard output is closed" in r.stderr, r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [("memory", "--model", "llama-3-8b"), ("params", "--model", "gpt2")])
def test_full_stdout_is_an_error(args):
    """A large output failed mid-run as an "internal error" (exit 3); a small one at exit, after exit 0."""
    r = _symmem(">/dev/full", *args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr == "symmem: error: could not write the output (standard output): No space left on device\n"


def test_reader_that_stops_early_is_not_an_error():
    r = _symmem("| head -c 10 >/dev/null", "memory", "--model", "llama-3-8b")
    assert "Traceback" not in r.stderr and "error" not in r.stderr, r.stderr


# ------------------------------------------------------------------------- 5. messages that name the fix to type
WRONG_FIX = [
    # was: "op kind = 'rotary_emb' (rotary_emb): rule set 'paper' has no rule for it"
    (["memory", "--dataflow", "hf", "--model", "llama-3-8b"], "use rules = 'torch-eager' (--rules torch-eager)",
     "has no rule"),
    # was: "use rules = 'paper'"
    (["memory", "--model", "gpt2", "--dataflow", "hf"], "use dataflow = 'paper' (--dataflow paper)", "rules = "),
    # was: "capacity_factor = None: must be a number > 0"
    (["memory", "--routing", "capacity"], "--routing capacity: needs --capacity-factor", "None"),
    (["memory", "--routing", "dynamic"], "--routing dynamic: needs --rank-load", "None"),
    # was: "the remaining -39 layers do not spread evenly over 1 stages"
    (["memory", "--first-stage-layers", "100", "--pp", "2"],
     # (issue 45: only the first stage's count was given, so only the first stage is named; no "last = None")
     "--first-stage-layers = 100: more layers on the first stage than the model's 61 layers",
     "remaining -"),
    # was: ignored, a verdict on the stage
    (["check", "--layer", "1000", "2*b*s*h"], "--layer = 1000: applies only to per-layer quantities", "verdict"),
    # was: "(dataflow = 'hf', or rules = 'torch-eager')" although the rules are torch-eager (the profile's own
    # dataflow is hf now, as --rules torch-eager's: the paper dataflow is asked for here)
    (["memory", "--profile", "torch-eager", "--dataflow", "paper", "--attn-impl", "sdpa"],
     "use dataflow = 'hf' (--dataflow hf)", "rules = 'torch-eager'"),
    (["memory", "--attn-impl", "sdpa"], "use rules = 'torch-eager' (--rules torch-eager)", "dataflow = 'hf',"),
    (["memory", "--schedule", "gpipe:2"], "--schedule = 'gpipe:2': only interleaved and interleaved-zb take :V",
     "unknown"),
    (["memory", "--schedule", "interleaved:2", "--chunks", "3"], "--chunks = 3: conflicts with --schedule", "Trace"),
]


@pytest.mark.parametrize(("argv", "message", "not_said"), WRONG_FIX)
def test_message_names_the_fix(capsys, argv, message, not_said):
    code, out, err = run(capsys, *argv)
    assert one_line_error(code, err) and out == "", err
    assert message in err and not_said not in err, err


def test_memory_accepts_interleaved_v_as_sweep_does(capsys):
    """`memory --schedule interleaved:2` was "unknown schedule"; it means `--schedule interleaved --chunks 2`."""
    common = ["memory", "--model", "llama-3-8b", "--pp", "4", "--microbatches", "8", "--json"]
    code, spelled, err = run(capsys, *common, "--schedule", "interleaved:2")
    assert code == 0, err
    code, flags, err = run(capsys, *common, "--schedule", "interleaved", "--chunks", "2")
    assert code == 0 and spelled == flags
    assert json.loads(spelled)["schedule"].startswith("interleaved")


def test_layer_still_applies_to_layer_quantities(capsys):
    code, out, err = run(capsys, "check", "--quantity", "layer.activations", "--layer", "1", "2*b*s*h")
    assert code in (0, 1) and "layer.activations" in out, err
