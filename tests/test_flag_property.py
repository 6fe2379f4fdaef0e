"""Every flag of `symmem memory` under every profile (issue 45, item 3): the flag changes the answer, or it is
refused in one line naming it, or a printed note names it as changing nothing here (`symmem/cli/_inapplicable.py`),
or it restates the default (the scenario it builds is the one without it). Nothing is silently ignored, and no note
names a flag that did change the answer.

Three models (a dense Llama, a decoder MoE, DeepSeek's MLA MoE) x seven profiles x two arrangements (one GPU;
TP 2 x PP 2 x DP 2, EP 2 for the MoE models) x every flag below: about 2,000 runs in process, a minute."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from symmem.cli.args import scenario_from_args
from symmem.cli.main import build_parser, main
from symmem.config import load_model
from symmem.errors import SymmemError

PROFILES = ["paper", "torch-eager", "megatron-te", "megatron-local", "torchtitan", "torchtitan-cpu", "torchtitan-2412",
            "torchtitan-2506"]
MODELS = {"dense": ["--model", "llama-3-8b"], "moe": ["--model", "qwen3-30b-a3b"], "mla": ["--model", "deepseek-v3"]}
COMMON = ["-s", "1024", "--gpu", "H100"]
# a value other than the usual default for each flag (both values of a switch)
FLAGS = [
    ("--tp", "4"), ("--pp", "4"), ("--dp", "4"), ("--cp", "2"), ("--cp-comm-type", "a2a"), ("--ep", "2"),
    ("--etp", "2"), ("--edp", "2"), ("--hsdp-replicate", "2"), ("--sequence-parallel",), ("--no-sequence-parallel",),
    ("--moe-sequence-parallel",), ("--no-moe-sequence-parallel",), ("--convention", "megatron"),
    ("--convention", "paper"), ("--precision", "paper"), ("--precision", "megatron"), ("--precision", "fp32"),
    ("--precision", "te-current"), ("--precision", "torchao-float8-tensorwise"), ("--zero", "0"), ("--zero", "2"),
    ("--zero", "3"), ("--mtp",), ("--no-mtp",), ("--enable-fsdp-float8-all-gather",), ("--first-stage-layers", "1"),
    ("--last-stage-layers", "1"), ("--layers-per-stage", "20,12"), ("-b", "2"), ("-s", "2048"), ("--rules", "paper"),
    ("--rules", "torch-eager"), ("--recompute", "full"), ("--recompute", "selective"),
    ("--recompute", "selective-op"), ("--recompute", "deepseek"), ("--schedule", "gpipe"),
    ("--schedule", "interleaved:2"), ("--chunks", "2"), ("--microbatches", "8"), ("--global-batch-size", "16"),
    ("--routing", "dispatch"), ("--routing", "capacity"), ("--capacity-factor", "1.5"), ("--rank-load", "1.5"),
    ("--histogram", "HISTOGRAM"), ("--dataflow", "hf"), ("--dataflow", "paper"), ("--attn-impl", "sdpa"),
    ("--attn-impl", "eager"), ("--experts-impl", "grouped_mm"), ("--activation-dtype", "fp32"),
    ("--flops-convention", "exact"), ("--flops-convention", "paper"), ("--gpu-memory", "141GB"),
    ("--gpu", "B200"), ("--profile", "megatron-te"), ("--overlap-grad-reduce",), ("--overlap-param-gather",),
    ("--ddp-bucket-size", "20000000"), ("--compile",),
]
# what is not a setting of the scenario: output, the scenario itself, the model
NOT_SETTINGS = {"-h", "--help", "--json", "--scenario", "--model"}
ANSWER = ("stages", "step", "step_unavailable", "peak_stage", "global_batch_size", "microbatches", "b", "s",
          "gpu_memory")


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _scenario(argv: list[str]):
    try:
        return scenario_from_args(build_parser().parse_args(argv))
    except SymmemError:
        return None


def test_every_memory_flag_is_covered():
    # a flag added to `memory` must be added above (or to NOT_SETTINGS with a reason)
    parser = build_parser()
    memory = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "memory")[1]
    options = {o for a in memory._actions for o in a.option_strings}
    covered = {f[0] for f in FLAGS} | NOT_SETTINGS
    aliases = {o for a in memory._actions for o in a.option_strings if set(a.option_strings) & covered}
    assert options - covered - aliases == set()


@pytest.mark.parametrize("multi", [False, True], ids=["one GPU", "TP2 PP2 DP2"])
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("model", list(MODELS))
def test_no_flag_is_silently_ignored(model, profile, multi, tmp_path):
    base = ["memory", *MODELS[model], *COMMON, "--profile", profile]
    if multi:
        base += ["--tp", "2", "--pp", "2", "--dp", "2"] + (["--ep", "2"] if model != "dense" else [])
    code, out, err = _run([*base, "--json"])
    if code == 2:
        pytest.skip(f"the profile refuses the model: {err.strip()[:120]}")
    assert code == 0, err
    before = json.loads(out)
    scn_before = _scenario(base)
    histogram = tmp_path / "loads.txt"
    loaded = load_model(MODELS[model][1])
    histogram.write_text(" ".join(str(i + 1) for i in range(loaded.value("N") if loaded.has("N") else 8)))
    silent, lying, unnamed = [], [], []
    for flag in FLAGS:
        argv = [*base, *(str(histogram) if x == "HISTOGRAM" else x for x in flag)]
        code, out, err = _run([*argv, "--json"])
        if code == 2:
            lines = err.strip().splitlines()
            if len(lines) != 1 or flag[0] not in err:
                unnamed.append((flag, err.strip()[:200]))
            continue
        assert code == 0, (flag, err)
        after = json.loads(out)
        noted = [n for n in after["flag_notes"] if f"note: {flag[0]}" in n]
        changed = any(before.get(k) != after.get(k) for k in ANSWER)
        if changed and noted:
            lying.append((flag, noted))
        elif not changed and not noted and _scenario(argv) != scn_before:
            silent.append(flag)
    assert not silent, f"changed nothing and said nothing: {silent}"
    assert not lying, f"noted as changing nothing, but changed the answer: {lying}"
    assert not unnamed, f"refused without naming the flag in one line: {unnamed}"


def test_the_note_is_printed(capsys):
    assert main(["memory", "--model", "llama-3-8b", "--cp-comm-type", "a2a", "--sequence-parallel"]) == 0
    out = capsys.readouterr().out
    assert "note: --cp-comm-type a2a changes nothing here: at CP 1 there is no context parallelism (--cp)" in out
    assert "note: --sequence-parallel changes nothing here: at TP 1" in out
