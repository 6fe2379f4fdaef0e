"""Property tests (issue 12): valid scenario TOML files and flag lists, mutated at random, give exit 0, 1 or 2
(3, an internal error, fails the test), exactly one line on stderr for 2, no traceback, within seconds, and
nothing written on error. Derandomised: the same examples on every run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symmem.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
PAPER_TOML = (ROOT / "symmem" / "scenarios" / "paper.toml").read_text()
LINES = PAPER_TOML.splitlines()
VALUE_LINES = [i for i, line in enumerate(LINES) if " = " in line and not line.startswith("#")]

HOSTILE_TOML = ["0", "-1", "1", "3", "1024", "1" + "0" * 30, "9" * 5000, "1e999999999", "0.5", "nan", "inf",
                "true", "false", '""', '"1e999999999"', '"0.1b"', '"80GB"', '"٢"', '"1_6"', '"x\\ny"', "[]",
                "[1, 2]", "[" * 300 + "]" * 300, "{a = 1}", '"/dev/zero"', '"deepseek-v2-lite"', '"interleaved"',
                '"capacity"', '"histogram"', '"full"', '"custom:nope"', "1000000000000", "9223372036854775807"]
EXTRA_KEYS = ["world = 7", "edp = 3", "chunks = 0", "microbatches = 1000000000", 'kind = "explicit"',
              "layers_per_stage = [61]", "first = 0", 'memory = "0.5"', "capacity_factor = 1e300", "zzz = 1",
              "weight_bytes = 0", "[gpu]", "[parallel]", "[training]", "[[x]]"]

FLAGS = ["--tp", "--pp", "--ep", "--etp", "--dp", "--edp", "-b", "-s", "--microbatches", "--chunks", "--zero",
         "--stage", "--gpu-memory", "--capacity-factor", "--rank-load", "--routing", "--schedule", "--recompute",
         "--layers-per-stage", "--first-stage-layers", "--histogram", "--model", "--scenario", "--precision",
         "--convention", "--rules", "--activation-dtype", "--gpus", "--top", "--quantity", "--out", "--figures"]
HOSTILE_FLAG_VALUES = ["", "0", "1", "2", "4", "-1", "٢", "２", "1_6", "1e999999999", "0.1b", "0.5", "9" * 5000,
                       "1" + "0" * 30, "1-" + "9" * 4000 + ":x2", "1-10000000", "80GB", "1e400", "/dev/zero", ".",
                       "/", "interleaved", "dualpipe", "capacity", "custom:rmsnorm", "paper", "megatron", "x,y",
                       "4,4", "1,2,4", "nonesuch.toml", "H800", "torch-eager", "\x00", "a\nb"]
COMMANDS = [["states"], ["memory", "--json"], ["activations"], ["check", "10bsh + 8bs(d_{cq}+d_c)"],
            ["latex", "--out", "out"],
            ["sweep", "--model", "deepseek-v2-lite", "--gpus", "16", "--tp", "1,2", "--pp", "1-2", "-b", "1-2",
             "--zero", "0"]]

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _run_in(folder: Path, argv: list[str]) -> tuple[int, str, float]:
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(folder)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(cwd)
    return code, err.getvalue(), time.perf_counter() - t0


def _check(code: int, err: str, seconds: float, folder: Path, before: set[str], argv) -> None:
    what = repr(argv)[:300]
    assert code in (0, 1, 2), (what, code, err)
    assert "Traceback" not in err, what
    assert seconds < 10, (what, seconds)
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("symmem: error: "), (what, err)
        assert {p.name for p in folder.iterdir()} == before, (what, "written on error")


@st.composite
def mutated_toml(draw) -> str:
    lines = list(LINES)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["value", "value", "delete", "duplicate", "insert", "truncate", "noise"]))
        if op == "value" and lines:
            i = min(draw(st.sampled_from(VALUE_LINES)), len(lines) - 1)
            key = lines[i].split(" = ")[0] if " = " in lines[i] else "x"
            lines[i] = f"{key} = {draw(st.sampled_from(HOSTILE_TOML))}"
        elif op == "delete" and lines:
            del lines[draw(st.integers(0, len(lines) - 1))]
        elif op == "duplicate" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
        elif op == "insert":
            lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(EXTRA_KEYS)))
        elif op == "truncate":
            text = "\n".join(lines)
            lines = text[:draw(st.integers(0, len(text)))].splitlines()
        elif op == "noise":
            text = "\n".join(lines)
            at = draw(st.integers(0, len(text)))
            lines = (text[:at] + draw(st.text(max_size=8)) + text[at:]).splitlines()
    return "\n".join(lines) + "\n"


@SETTINGS
@given(toml=mutated_toml(), command=st.sampled_from([["memory", "--json"], ["states"], ["latex", "--out", "out"]]))
def test_mutated_scenario_toml(toml, command):
    with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as work:
        path = Path(src) / "s.toml"
        path.write_text(toml)
        argv = [*command, "--scenario", str(path)]
        code, err, seconds = _run_in(Path(work), argv)
        _check(code, err, seconds, Path(work), set(), (argv, toml[-200:]))


@SETTINGS
@given(command=st.sampled_from(COMMANDS),
       flags=st.lists(st.tuples(st.sampled_from(FLAGS),
                                st.one_of(st.sampled_from(HOSTILE_FLAG_VALUES), st.text(max_size=12))),
                      min_size=1, max_size=3))
def test_mutated_flag_lists(command, flags):
    _run_with_flags(command, flags)


def _run_with_flags(command: list[str], flags: list[tuple[str, str]]) -> None:
    """`command` with each (flag, value) appended, run in an empty folder and checked (`_check`)."""
    argv = list(command)
    for flag, value in flags:
        argv += [flag, value]
    with tempfile.TemporaryDirectory() as work:
        code, err, seconds = _run_in(Path(work), argv)
        _check(code, err, seconds, Path(work), set(), argv)


PRESET = json.loads((ROOT / "symmem" / "presets" / "deepseek-v3.json").read_text())
HOSTILE_JSON = [["x"], "x", None, True, False, 0, -1, 3, 10**30, 1.5, {}, "false", "yes", 1_000_000_000, 100_000,
                [[[[]]]], "\n", 2**63]


@SETTINGS
@given(changes=st.dictionaries(st.sampled_from(sorted(PRESET) + ["extra"]), st.sampled_from(HOSTILE_JSON),
                               min_size=1, max_size=3),
       drop=st.lists(st.sampled_from(sorted(PRESET)), max_size=2))
def test_mutated_config_json(changes, drop):
    raw = {k: v for k, v in {**PRESET, **changes}.items() if k not in drop}
    with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as work:
        path = Path(src) / "config.json"
        path.write_text(json.dumps(raw))
        argv = ["memory", "--json", "--model", str(path)]
        code, err, seconds = _run_in(Path(work), argv)
        _check(code, err, seconds, Path(work), set(), (changes, drop))


PIECES = ["b", "s", "h", "N", "N_r", "d_{cq}", "h_E", "V", "(", ")", "(", ")", "+", "-", "*", "/", "^", "^{16}",
          "^{2}", "{", "}", "2", "16", "9" * 40, "0", "\\frac", "\\cdot", " ", "0.5", "(b+s+h+N+V+L)"]


@SETTINGS
@given(pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=60))
def test_random_formulas(pieces):
    formula = "".join(pieces)
    with tempfile.TemporaryDirectory() as work:
        code, err, seconds = _run_in(Path(work), ["check", formula])
        _check(code, err, seconds, Path(work), set(), formula)


# Issue 29: the newer surfaces — profiles x families, precision recipes, the timeline, sweep ranking, the global
# batch, `measure --framework` — under mutated flag combinations (values drawn from valid and hostile ones).
NEW_COMMANDS = [["memory", "--json", "--model", m] for m in ("llama-3-8b", "gpt2", "deepseek-v2-lite")] + [
    ["sweep", "--model", "gpt2", "--gpus", "8", "--tp", "1,2", "--pp", "1", "-b", "1,2", "--recompute", "none",
     "--replay", "0"],
    ["timeline", "--model", "llama-3-8b", "-s", "256"],
    ["measure", "--config", str(ROOT / "symmem" / "presets" / "gpt2.json")]]
NEW_FLAGS = {
    "--profile": ["paper", "torch-eager", "megatron-te", "megatron-local", "torchtitan", "torchtitan-cpu",
                  "torchtitan-2412", "torchtitan-2506", "x"],
    "--recompute": ["none", "full", "selective-op", "selective-layer:2", "selective-layer:0", "selective-layer",
                    "selective-layer:x"],
    "--precision": ["te-delayed", "deepseek-v3-fp8", "te-nvfp4", "torchao-float8-rowwise", "torchao-float8-tensorwise",
                    "fp32", "nope"],
    "--global-batch-size": ["8", "16", "7", "0", "-2", "1" + "0" * 25, "x"],
    "--gpu": ["H100", "B200", "H20", "MI300X", "A100", "nope"],
    "--rank-by": ["time", "headroom", "x"],
    "--microbatches": ["1", "4", "pp", "0"],
    "--schedule": ["1f1b", "interleaved:2", "zb1p", "dualpipe", "gpipe", "x"],
    "--cp": ["1", "2", "3"],
    "--cp-comm-type": ["a2a", "p2p", "x"],
    "--zero": ["0", "1", "2", "3", "4"],
    "--framework": ["fsdp2", "transformers", "x"],  # the measured config is GPT-2's: refused before any run
    "--ac": ["none", "full", "selective-op", "selective-layer:2", "selective-layer:-1"],
    "--dp": ["1", "2", "3", "9"],
    "--attn-impl": ["sdpa", "eager", "x"],
    "--dataflow": ["hf", "paper", "x"],
}


@SETTINGS
@given(command=st.sampled_from(NEW_COMMANDS),
       flags=st.lists(st.sampled_from(sorted(NEW_FLAGS)).flatmap(
           lambda f: st.tuples(st.just(f), st.sampled_from(NEW_FLAGS[f]))), min_size=1, max_size=4))
def test_mutated_flags_on_the_newer_surfaces(command, flags):
    _run_with_flags(command, flags)


# `measure --framework fsdp2` with a DeepSeek-V3 config: every mutated config is either turned into the runner's
# settings, whose prediction the profile then derives, or refused in one SymmemError line, before any process starts
DSV3_VALUES = [None, True, 0, 1, 2, 3, 4, 7, 8, 16, 24, 31, 32, 64, 256, 10**12, -1, 2.5, "8", [], {}]
DSV3_KEYS = ["hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
             "vocab_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "kv_lora_rank",
             "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "first_k_dense_replace",
             "num_nextn_predict_layers", "moe_layer_freq", "scoring_func", "norm_topk_prob", "n_group", "topk_group",
             "max_position_embeddings", "tie_word_embeddings"]


@SETTINGS
@given(changes=st.dictionaries(st.sampled_from(DSV3_KEYS), st.sampled_from(DSV3_VALUES + ["sigmoid", "softmax"]),
                               max_size=3),
       tp=st.sampled_from([1, 2, 3]), ac=st.sampled_from(["none", "full", "selective-op", "selective-layer:2"]))
def test_mutated_deepseek_v3_configs_for_fsdp2_measure(changes, tp, ac):
    import argparse

    from symmem.cli.measure_fsdp2 import _settings
    from symmem.errors import SymmemError
    from symmem.validate.fsdp2.predict import deepseek_v3_config, predicted
    from symmem.validate.fsdp2.runner import MoESettings, Settings

    raw = deepseek_v3_config(Settings(family="deepseek_v3", moe=MoESettings(), dim=64, n_layers=3, n_heads=4,
                                      vocab=256)) | changes
    args = argparse.Namespace(dp=2, tp=tp, hsdp_replicate=1, ac=ac, b=1, s=32, no_reshard_after_forward=False, seed=0)
    try:
        st = _settings(raw, args, "cfg.json")
        predicted(st, raw)
    except SymmemError as e:
        assert "\n" not in str(e) and str(e)


def test_a_null_first_k_dense_replace_is_refused_in_one_line():
    # found by the property above at a larger sample: `first_k_dense_replace: null` reached a comparison (TypeError)
    import argparse

    import pytest

    from symmem.cli.measure_fsdp2 import _settings
    from symmem.errors import SymmemError
    from symmem.validate.fsdp2.predict import deepseek_v3_config
    from symmem.validate.fsdp2.runner import MoESettings, Settings

    raw = deepseek_v3_config(Settings(family="deepseek_v3", moe=MoESettings(), dim=64, n_layers=3, n_heads=4,
                                      vocab=256)) | {"first_k_dense_replace": None}
    args = argparse.Namespace(dp=2, tp=1, hsdp_replicate=1, ac="none", b=1, s=32, no_reshard_after_forward=False,
                              seed=0)
    with pytest.raises(SymmemError, match=r"cfg.json: first_k_dense_replace = None: must be a whole number$"):
        _settings(raw, args, "cfg.json")
