"""The command line: JSON outputs, and every bad input as one line on stderr with exit code 2."""

import json
import os
import stat
import subprocess
import sys

import pytest

from symmem.cli.main import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_params_json_keys(capsys):
    code, out, _ = run(capsys, "params", "--model", "deepseek-v3", "--json")
    d = json.loads(out)
    assert code == 0
    # DeepSeek-V3's published 671B total and 37B activated (the V3 report, arXiv 2412.19437), to the parameter as
    # test_params recounts them from the HF config's shapes. By hand: per layer MLA + norms 187,121,664; dense FFN
    # 3·7168·18432; MoE 257 experts of 3·7168·2048 + router 256·7168; vocabulary 129,280·7168 each for embedding
    # and head: 61·187,121,664 + 3·396,361,728 + 58·11,320,164,352 + 2·926,679,040 + final norm 7168 =
    # 671,026,404,352. Activated: 9 experts (8 routed + 1 shared) + router per MoE layer and the head, not the
    # embedding table (a lookup): 61·187,121,664 + 3·396,361,728 + 58·398,196,736 + 926,679,040 + 7168
    # = 36,625,603,584
    assert d["total"] == 671_026_404_352 and isinstance(d["total"], int)
    assert d["activated"] == 36_625_603_584 and isinstance(d["activated"], int)
    assert d["per_part"]["moe layers"]["count"] == 58


def test_params_symbolic(capsys):
    code, out, _ = run(capsys, "params", "--model", "deepseek-v2-lite", "--symbolic")
    assert code == 0 and "V*h" in out


def test_states_json(capsys):
    code, out, _ = run(capsys, "states", "--scenario", "paper", "--zero", "3", "--stage", "1", "--json")
    d = json.loads(out)
    (row,) = d["stages"]
    assert row["params_per_gpu"]["total"] == 6_250_364_928  # the paper's Table 6
    assert row["bytes_per_gpu"]["total"] == 10_374_131_712  # the paper's Table 8, ZeRO-3: 9.66 GiB


def test_activations_json(capsys):
    code, out, _ = run(capsys, "activations", "--stage", "1", "--json", "--symbolic")
    d = json.loads(out)
    assert d["stages"][0]["per_microbatch"] == 24_671_158_272  # the paper's Table 10 (22.98 GiB, 24.67 GB)
    assert d["schedule"] == "1F1B" and d["routing"].startswith("paper")
    code, out, _ = run(capsys, "activations", "--stage", "1", "--json", "--recompute", "full")
    assert json.loads(out)["stages"][0]["per_microbatch"] == 235_143_168  # Table 10, full recomputation


def test_memory_names_peak_and_schedule(capsys):
    code, out, _ = run(capsys, "memory", "--recompute", "full", "--zero", "3", "--json")
    d = json.loads(out)
    # peak stage 1: a regression value (symmem's own finding at c51ecda under full recomputation and ZeRO-3), not a
    # figure the paper states
    assert code == 0 and d["peak_stage"] == 1 and d["schedule"] == "1F1B"
    assert sum(r["peak"] for r in d["stages"]) == 1
    code, out, _ = run(capsys, "memory", "--recompute", "full", "--zero", "3")
    assert "<- peak" in out and "1F1B" in out


def test_flags_override_scenario(capsys, tmp_path):
    toml = tmp_path / "mine.toml"
    toml.write_text('model = "deepseek-v2-lite"\n[parallel]\ntp = 2\npp = 3\nep = 4\ndp = 4\n'
                    '[layout]\nkind = "paper"\n[training]\nmicro_batch_size = 2\n')
    code, out, err = run(capsys, "memory", "--scenario", str(toml), "--json", "-b", "1", "--tp", "4",
                         "--dp", "2")
    assert code == 0, err
    d = json.loads(out)
    assert d["b"] == 1 and "TP 4" in d["parallel"]


BAD = [
    (["states", "--tp", "3", "--dp", "32"], "must divide num_attention_heads"),
    (["states", "--tp", "3"], "world of 1,024 GPUs is not divisible by TP·CP·PP = 48"),
    (["states", "--ep", "7", "--dp", "7", "--tp", "1"], "must divide n_routed_experts"),
    (["states", "--layers-per-stage", "4,4,4"], "has 3 stages"),
    (["states", "--layers-per-stage", "4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,2"], "sums to 62"),
    (["states", "--edp", "5"], "inconsistent with DP"),
    (["states", "--tp", "0"], "positive integer"),
    (["states", "--tp", "-2"], "positive integer"),
    (["states", "--tp", "2.5"], "not an integer in ASCII digits"),
    (["states", "--zero", "4"], "ZeRO stage must be"),
    (["states", "--scenario", "nonesuch"], "built-in scenarios: paper, paper-megatron"),
    (["params", "--model", "deepseek-v9"], "known presets: deepseek-v3, deepseek-v2, deepseek-v2-lite"),
    (["params", "--model", "/nonexistent/config.json"], "no such file"),
    (["activations", "--recompute", "sometimes"], "unknown policy"),
    (["activations", "--schedule", "fifo"], "unknown schedule"),
    (["activations", "--rules", "folklore"], "unknown rule set"),
    (["activations", "--schedule", "interleaved", "--microbatches", "8"], "multiple of PP"),
    (["activations", "--capacity-factor", "0"], "> 0"),
    (["memory", "--gpu-memory", "eighty"], "not a size"),
    (["states", "--frobnicate"], "unrecognized arguments"),
    (["paper", "--out", "/proc/nope"], "cannot write"),
]


@pytest.mark.parametrize("args, words", BAD)
def test_bad_input_one_line_exit_2(capsys, args, words):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("symmem: error: "), err
    assert words in err
    assert "Traceback" not in err


def test_world_inconsistent(capsys, tmp_path):
    toml = tmp_path / "w.toml"
    toml.write_text('model = "deepseek-v3"\n[parallel]\ntp = 2\npp = 16\nep = 8\ndp = 32\nworld = 1000\n')
    code, _, err = run(capsys, "states", "--scenario", str(toml))
    assert code == 2 and "must equal DP·TP·CP·PP" in err


def test_unknown_toml_key(capsys, tmp_path):
    toml = tmp_path / "u.toml"
    toml.write_text('model = "deepseek-v3"\n[parallel]\ntp = 2\ntensor_parallel = 2\n')
    code, _, err = run(capsys, "states", "--scenario", str(toml))
    assert code == 2 and "unknown key 'tensor_parallel'" in err


@pytest.mark.parametrize("content, words", [
    ("{not json", "not JSON"),
    ("[1, 2]", "must hold a JSON object"),
    ('{"model_type": "deepseek_v3"}', "missing key"),
    ('{"model_type": "gpt_neox"}', "symmem models"),
])
def test_bad_configs(capsys, tmp_path, content, words):
    cfg = tmp_path / "config.json"
    cfg.write_text(content)
    code, _, err = run(capsys, "params", "--model", str(cfg))
    assert code == 2 and words in err


def test_config_non_integer_and_inconsistent(capsys, tmp_path):
    import json as j
    from importlib import resources

    base = j.loads(resources.files("symmem.presets").joinpath("deepseek-v3.json").read_text())
    for key, value, words in (("hidden_size", 7168.5, "positive integer"), ("num_attention_heads", 0, "positive"),
                              ("num_experts_per_tok", 300, "more than n_routed_experts"),
                              ("num_key_value_heads", 1, "must equal num_attention_heads"),
                              ("model_type", "gpt_neox", "symmem models")):
        cfg = tmp_path / f"{key}.json"
        cfg.write_text(j.dumps({**base, key: value}))
        code, _, err = run(capsys, "params", "--model", str(cfg))
        assert code == 2 and words in err, (key, err)


def test_unreadable_config(capsys, tmp_path):
    if os.geteuid() == 0:
        cfg = tmp_path / "dir.json"
        cfg.mkdir()
    else:
        cfg = tmp_path / "secret.json"
        cfg.write_text("{}")
        cfg.chmod(0)
    code, _, err = run(capsys, "params", "--model", str(cfg))
    assert code == 2 and "cannot read" in err


def test_unwritable_output_leaves_nothing(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run(capsys, "paper", "--out", str(blocker / "sub"))
    assert code == 2 and "cannot write" in err
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    if os.geteuid() != 0:  # root ignores permission bits
        code, _, err = run(capsys, "paper", "--out", str(ro / "tables"))
        assert code == 2
        assert list(ro.iterdir()) == []


def test_module_entry_point():
    r = subprocess.run([sys.executable, "-m", "symmem", "states", "--tp", "3"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1


@pytest.mark.parametrize("body, words", [
    ('mtp = "false"', "mtp = 'false': must be true or false"),
    ('[parallel]\nsequence_parallel = "no"', "sequence_parallel = 'no': must be true or false"),
    ('[parallel]\nmoe_sequence_parallel = "false"', "must be true or false"),
    ('[gpu]\nfragmentation = 0.1', "fragmentation = 0.1: must be a list"),
    ('[gpu]\ncomm_buffers = 5', "comm_buffers = 5: must be a list"),
    ('[gpu]\nfragmentation = [true, true]', "must be [low, high] fractions"),
    ('[training]\nrecompute = 1', "recompute = 1: must be a string"),
    ('[training]\nactivation_dtype = [2]', "must be a string"),
    ('[training]\nactivation_bytes = 3', "activation dtype bytes must be 1"),
    ('[precision]\nrecipe = ["paper"]', "must be a string"),
    ('[routing]\nkind = "capacity"\ncapacity_factor = "1e100000"', "out of range"),
    ('name = {a = 1}', "name = {'a': 1}: must be a string"),
    ('[parallel]\ntp = true', "tp = True: must be an integer"),
])
def test_toml_values_of_the_wrong_type(capsys, tmp_path, body, words):
    toml = tmp_path / "s.toml"
    toml.write_text('model = "deepseek-v3"\n' + body + "\n")
    code, _, err = run(capsys, "memory", "--scenario", str(toml))
    assert code == 2 and words in err and err.count("\n") == 1, err


@pytest.mark.parametrize("args, words", [
    (["memory", "--recompute", "custom:nonexistent_op"], "is no op kind, tag or name"),
    (["activations", "--chunks", "2"], "applies to --schedule interleaved (or interleaved-zb) only"),
    (["memory", "--routing", "dispatch", "--capacity-factor", "2"], "applies to routing 'capacity' only"),
    (["activations", "--attn-impl", "sdpa"], "only the hf dataflow follows"),
    (["states", "--layers-per-stage", ""], "argument --layers-per-stage: '': empty"),
    (["memory", "--rank-load", "1e300"], "out of range"),
    (["memory", "--gpu-memory", "1e400"], "up to 10^18 bytes"),
    (["memory", "--schedule", "interleaved", "--chunks", "2"], "cannot split into 2 chunks"),
    (["memory", "--scenario", "paper", "--model", "deepseek-v2-lite"], "choose another PP (--pp)"),
])
def test_conflicting_or_out_of_range_flags(capsys, args, words):
    code, _, err = run(capsys, *args)
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_latex_and_plot_take_json(capsys, tmp_path):
    code, out, _ = run(capsys, "plot", "--out", str(tmp_path), "--figures", "params_by_block", "--json")
    assert code == 0 and json.loads(out)["files"] == ["params_by_block.pdf", "params_by_block.png"]
    code, out, _ = run(capsys, "latex", "--out", str(tmp_path / "tex"), "--json")
    assert code == 0 and "report.tex" in json.loads(out)["files"]


def test_in_flight_is_a_number(capsys):
    """JSON gives micro-batches in flight as a number: an int when whole, else a float with the exact fraction."""
    from fractions import Fraction

    from symmem.cli.commands import in_flight_fields

    for cmd in ("memory", "activations"):
        code, out, _ = run(capsys, cmd, "--scenario", "paper", "--json")
        d = json.loads(out)
        assert code == 0
        assert [r["in_flight"] for r in d["stages"]][:2] == [16, 15]
        assert all(type(r["in_flight"]) is int and "in_flight_exact" not in r for r in d["stages"])
    assert in_flight_fields(Fraction(15, 2)) == {"in_flight": 7.5, "in_flight_exact": "15/2"}
    assert in_flight_fields(Fraction(7)) == {"in_flight": 7}


@pytest.mark.parametrize("model, s", [("gpt2", 1024), ("llama-3-8b", 4096), ("deepseek-v2-lite", 4096)])
def test_bare_model_is_one_model_on_one_gpu(capsys, model, s):
    # `--model` alone: that model on one GPU (issue 18 item 4), never the paper's 1,024-GPU DeepSeek-V3 scenario.
    # GPT-2's context is 1,024 tokens (n_positions in its published config.json), shorter than the default 4,096.
    code, out, err = run(capsys, "memory", "--model", model, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["parallel"].startswith("DP 1, TP 1, PP 1,") and "(1 GPUs" in d["parallel"]
    assert (d["b"], d["s"]) == (1, s) and len(d["stages"]) == 1


def test_bare_model_errors_name_only_given_flags(capsys):
    # GPT-2's vocabulary (50,257, prime) divides by no TP > 1: the error names the flag the user gave
    code, _, err = run(capsys, "memory", "--model", "gpt2", "--tp", "2")
    assert code == 2 and "--tp 2: must divide" in err and err.count("\n") == 1  # (as typed: was "tp = 2")
    code, _, err = run(capsys, "memory", "--model", "gpt2")
    assert code == 0, err


def test_one_flag_vocabulary(capsys, monkeypatch):
    # issue 22: --gpu NAME on every command that takes a GPU, no abbreviations, negative-looking values refused
    from symmem.cli import commands
    from symmem.cli import sweep as sweep_cli

    monkeypatch.setitem(commands.COMMANDS, "sweep", sweep_cli.COMMAND)
    code, out, err = run(capsys, "memory", "--model", "gpt2", "--gpu", "H100", "--json")
    assert code == 0, err
    assert json.loads(out)["gpu_memory"] == 80 * 10**9  # H100 SXM: 80 GB of HBM3 (NVIDIA's datasheet)
    code, out, err = run(capsys, "sweep", "--model", "gpt2", "--gpus", "8", "--gpu", "H100", "--json", "--top", "1")
    assert code == 0 and json.loads(out)["gpu_memory"] == 80 * 10**9, err
    for argv, words in ((["memory", "--gpu-m", "80GB"], "unrecognized arguments: --gpu-m"),
                        (["sweep", "--gpus", "8", "--gp", "H100"], "unrecognized arguments: --gp"),
                        (["memory", "--gpu-memory", "-80GB"], "--gpu-memory = '-80GB': not a size"),
                        (["memory", "--tp", "-2"], "-2: must be a positive integer"),
                        (["memory", "--gpu", "X100"], "--gpu = 'X100': unknown GPU")):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and words in err and err.count("\n") == 1, (argv, err)
