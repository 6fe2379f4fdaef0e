"""Issue 45, defect 3: flags a framework's profile cannot take are refused in one line naming the flag and what to
use, never silently ignored (under --profile torchtitan, --zero 0/1/2 and --precision paper/megatron used to give
byte-identical output; TransformerEngine's and DeepSeek's recipes were accepted under torchtitan and torchao's under
megatron-te; html took --recompute-choices none,bogus)."""

from __future__ import annotations

import pytest

from symmem.cli.main import main

BASE = ["memory", "--model", "llama-3-8b", "-s", "1024"]


@pytest.mark.parametrize("flags, words", [
    (["--profile", "torchtitan", "--dp", "8", "--zero", "0"], "--zero = 0: profile torchtitan shards"),
    (["--profile", "torchtitan", "--dp", "8", "--zero", "2"], "use --zero 3"),
    (["--profile", "torchtitan-2412", "--dp", "8", "--zero", "1"], "--zero = 1: profile torchtitan-2412"),
    (["--profile", "torchtitan", "--dp", "8", "--precision", "paper"], "--precision = 'paper': profile torchtitan"),
    (["--profile", "torchtitan", "--dp", "8", "--precision", "megatron"], "its low precision is torchao's"),
    (["--profile", "torchtitan", "--dp", "8", "--precision", "te-delayed"], "--precision = 'te-delayed'"),
    (["--profile", "torchtitan", "--dp", "8", "--precision", "te-nvfp4"], "--precision = 'te-nvfp4'"),
    (["--profile", "torchtitan-cpu", "--dp", "8", "--precision", "deepseek-v3-fp8"], "'deepseek-v3-fp8'"),
    (["--profile", "megatron-te", "--precision", "torchao-float8-tensorwise"], "torchao's Float8 is torchtitan's"),
])
def test_refused_in_one_line(capsys, flags, words):
    code = main([*BASE, *flags])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err


@pytest.mark.parametrize("flags", [
    ["--profile", "torchtitan", "--dp", "8", "--zero", "3"],
    ["--profile", "torchtitan", "--dp", "8", "--precision", "fp32"],
    ["--profile", "torchtitan", "--dp", "8", "--precision", "torchao-float8-tensorwise"],
    ["--profile", "megatron-te", "--precision", "te-delayed"],
])
def test_what_the_framework_runs_is_taken(capsys, flags):
    assert main([*BASE, *flags]) == 0, capsys.readouterr().err


def test_html_checks_every_choice(capsys, tmp_path):
    for flag, bad, words in (("--recompute-choices", "none,bogus", "unknown policy"),
                             ("--precision-choices", "paper,fp9", "unknown recipe")):
        code = main(["html", "--model", "llama-3-8b", flag, bad, "-o", str(tmp_path / "p.html")])
        err = capsys.readouterr().err
        assert code == 2 and f"{flag} entry" in err and words in err and err.count("\n") == 1, err
        assert not (tmp_path / "p.html").exists()
