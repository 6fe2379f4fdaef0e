"""Hostile input (issue 12): every bad input is one line on stderr and exit 2, within seconds; an unexpected
exception is one line and exit 3; nothing is half-written.

Hang guards run the CLI in a subprocess with a timeout; everything else runs `symmem.cli.main` in-process.
The bounds the messages name (1,048,576, 16,777,216, 100,000, 10^18 bytes, ...) are symmem's own limits
(symmem/_numbers.py and the modules that name them), not facts about models or hardware.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from symmem import _json
from symmem._files import MAX_FILE_BYTES, read_text_file
from symmem.cli.main import main
from symmem.errors import SymmemError

ROOT = Path(__file__).resolve().parents[1]
PAPER_TOML = (ROOT / "symmem" / "scenarios" / "paper.toml").read_text()
S16 = "(b+s+h+d_cq+d_c+n_h+d_h+d_hr+h_E+h_F+N+N_r+N_s+V+L+E_tok)"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str) -> bool:
    return code == 2 and err.count("\n") == 1 and err.startswith("symmem: error: ") and "Traceback" not in err


# ------------------------------------------------------------------------------------- hang guards (subprocess)
def _cli(args: list[str], cwd: Path, timeout: float = 20) -> tuple[int, str, str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "symmem", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout, r.stderr, time.perf_counter() - t0


def test_hang_guards(tmp_path):
    """Each input of the issue's hangs: one line, exit 2, within 10 s of its own (run two at a time)."""
    (tmp_path / "exp.toml").write_text(PAPER_TOML.replace('memory = "80GB"', 'memory = "1e999999999"'))
    (tmp_path / "cf.toml").write_text(PAPER_TOML.replace('kind = "paper"\n\n[gpu]',
                                                         'kind = "capacity"\ncapacity_factor = "1e999999999"\n\n'
                                                         '[gpu]'))
    (tmp_path / "zero.toml").write_text('model = "/dev/zero"\n')
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    cases = [
        ["check", S16 + "^{16}"],
        ["check", "(b+s+h)" * 1400],
        ["memory", "--gpu-memory", "1e999999999"],
        ["memory", "--capacity-factor", "1e999999999"],
        ["memory", "--scenario", "exp.toml"],
        ["memory", "--scenario", "cf.toml"],
        ["memory", "--scenario", "zero.toml"],
        ["memory", "--scenario", str(fifo)],
        ["params", "--model", "/dev/zero"],
        ["memory", "--histogram", "/dev/zero"],
        ["sweep", "--gpus", "1024", "--gpu-memory", "1e999999999"],
        ["sweep", "--gpus", "1024", "-b", "1-10000000"],
        ["sweep", "--gpus", "1024", "--tp", "1-" + "9" * 4000 + ":x2"],
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda a: _cli(a, tmp_path), cases))
    for args, (code, out, err, seconds) in zip(cases, results, strict=True):
        what = " ".join(args)[:80]
        assert code == 2 and err.count("\n") == 1 and err.startswith("symmem: error: "), (what, err)
        assert out == "", (what, out[:200])  # no verdict header or partial output before the error
        assert seconds < 10, (what, seconds)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cf.toml", "exp.toml", "fifo.toml", "zero.toml"]
    # TP 4 x PP 6 (divisors of 1024 up to 61 layers) x EP 9 x recompute 3 (none, selective, full) x ZeRO 4 x b 1e7
    assert "25,920,000,000 configurations" in results[11][2]


def test_entry_point_exit_codes(tmp_path):
    code, out, err, _ = _cli(["--version"], tmp_path)
    assert code == 0 and out.startswith("symmem ")
    code, out, err, _ = _cli([], tmp_path)
    assert code == 2 and out == "" and err.count("\n") == 1 and "missing command" in err


# ------------------------------------------------------------------------------------------------ exit codes
def test_internal_error_is_one_line_exit_3(capsys, monkeypatch):
    from symmem.cli import commands

    def boom(args):
        raise RuntimeError("boom\nsecond line")

    help_text, add_args, _ = commands.COMMANDS["states"]
    monkeypatch.setitem(commands.COMMANDS, "states", (help_text, add_args, boom))
    code, out, err = run(capsys, "states")
    assert code == 3 and err == "symmem: internal error: RuntimeError: boom second line\n"


@pytest.mark.parametrize("argv", [["--frobnicate"], ["states", "--frobnicate"]])
def test_symmem_printed_once(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert one_line_error(code, err) and err.count("symmem") == 1, err
    assert "unrecognized arguments: --frobnicate" in err


# ----------------------------------------------------------------------------------------- numbers and flags
BAD_FLAGS = [
    (["states", "--tp", "٢"], "ASCII digits"),
    (["states", "--tp", "２"], "ASCII digits"),
    (["states", "--tp", "1_6"], "ASCII digits"),
    (["states", "--pp", "1" + "0" * 30], "up to 256"),
    (["states", "--pp", "257"], "up to 256"),
    (["states", "--dp", "1" + "0" * 30], "up to 1,048,576"),
    (["states", "--dp", "9" * 5000], "up to 1,048,576"),
    (["memory", "--microbatches", "1" + "0" * 30], "up to 1,048,576"),
    (["memory", "--chunks", "0"], "from 2 to 1,024"),
    (["memory", "--schedule", "interleaved", "--chunks", "1"], "from 2 to 1,024"),
    (["memory", "-b", "1" + "0" * 30], "up to 16,777,216"),
    (["memory", "--gpu-memory", "0.1b"], "at least 1 byte"),
    (["memory", "--gpu-memory", "0.5"], "at least 1 byte"),
    (["memory", "--gpu-memory", ""], "argument --gpu-memory: '': empty"),
    (["memory", "--model", ""], "argument --model: '': empty"),  # was: the scenario's model, silently
    (["memory", "--recompute", " "], "argument --recompute: ' ': empty"),
    (["sweep", "--gpus", "16", "--plot="], "argument --plot: '': empty"),
    (["memory", "--gpu-memory", "9" * 5000], "not a size"),
    (["memory", "--gpu-memory", "1e999999999"], "up to 10^18 bytes"),
    (["memory", "--capacity-factor", "1e999999999"], "out of range"),
    (["memory", "--capacity-factor", "٢"], "ASCII digits"),
    (["memory", "--rank-load", "9" * 5000], "at most 40 characters"),
    (["memory", "--layers-per-stage", "4,٤"], "ASCII digits"),
    (["states", "--stage", "٢"], "ASCII digits"),
    (["states", "--zero", "٢"], "ZeRO stage must be 0, 1, 2 or 3"),
    (["sweep", "--gpus", "16", "--zero", "٢"], "not an integer or a range"),
    (["check", "--stage", "1_0", "10bsh"], "ASCII digits"),
    (["check", "9" * 40 + "^{16}*" + "9" * 40 + "^{16}*b"], "coefficient of about"),
    (["check", "h" * 30], "degree 30"),
    (["check", S16 + "^{16}"], "more than 2,000 terms"),
    (["check", "10bsh + 1/(s-4096)"], "the denominator s - 4096 is 0 at the scenario's values (s = 4096)"),
    (["check", "10bsh + \\frac{b}{h-7168}"], "the denominator h - 7168 is 0"),
    (["check", "10bsh + 1/(t-2)"], "the denominator t - 2 is 0 at the scenario's parallel sizes"),
    (["check", "10bsh + 1/(s-4096+1/(s-4096))"], "the denominator s - 4096 is 0"),
    (["sweep", "--gpus", "1" + "0" * 30], "up to 16,777,216"),
    (["sweep", "--gpus", "٢"], "ASCII digits"),
    (["sweep", "--gpus", "1024", "--tp", "٢"], "not an integer or a range"),
    (["sweep", "--gpus", "1024", "--capacity-factor", "1e999999999"], "out of range"),
    (["sweep", "--gpus", "1024", "-b", "1-100", "--max-configs", "1000"], "more than the limit of 1,000"),
    (["sweep", "--gpus", "1024", "-s", "1-" + "9" * 13], "digits"),
    (["sweep", "--gpus", "1024", "--schedule", "interleaved:0"], "from 2 to 1,024"),
    (["sweep", "--gpus", "1024", "--chunks", "0"], "from 2 to 1,024"),
    (["sweep", "--gpus", "1024", "--pp", "1-1024"], "values go from 1 to 256"),
    (["sweep", "--gpus", "1048576", "--tp", "1", "--pp", "1", "--ep", "1-100001"],
     "100,001 parallel arrangements (TP, CP, PP, EP, ETP: 1, 1, 1, 100,001, 1 values), more than the limit of 100,000"),
    (["sweep", "--gpus", "1024", "--chunk", "1"], "from 1,024 to 16,777,216"),
    (["timeline", "--stage", "0", "--out", "t.png", "--schedule", "gpipe", "--microbatches", "1048576"],
     "more than the limit of 50,000 a timeline draws"),
    (["states", "--layers-per-stage", ",".join(["0"] * 300)], "more than the limit of 256 pipeline stages"),
    (["states", "--layers-per-stage", "61", "--pp", "1", "--dp", "1", "--first-stage-layers", "3"],
     "conflicts with"),  # the flags' conflict first, not the parallel sizes it would build
    (["latex", "--out", ""], "empty"),
    (["plot", "--out", "figs", "--figures", ""], "empty"),
    (["plot", "--out", "figs", "--figures", " , "], "empty"),
]


@pytest.mark.parametrize("argv, words", BAD_FLAGS)
def test_bad_flags_one_line(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert one_line_error(code, err), err
    assert words in err, err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_tp_override_keeps_the_world(capsys):
    code, out, _ = run(capsys, "states", "--json", "--tp", "4")
    assert code == 0
    par = json.loads(out)["parallel"]
    assert "DP 16, TP 4, PP 16" in par and "(1024 GPUs" in par
    code, out, _ = run(capsys, "states", "--json", "--pp", "8")
    assert code == 0 and "DP 64, TP 2, PP 8" in json.loads(out)["parallel"]
    code, out, _ = run(capsys, "states", "--json", "--tp", "4", "--dp", "32")  # --dp: the flags say it all
    assert code == 0 and "(2048 GPUs" in json.loads(out)["parallel"]
    code, _, err = run(capsys, "states", "--pp", "3")
    assert one_line_error(code, err) and "world of 1,024 GPUs is not divisible by TP·CP·PP = 6" in err


def test_scenario_without_world_keeps_dp(capsys, tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('model = "deepseek-v2-lite"\n[parallel]\ntp = 2\npp = 3\nep = 4\ndp = 4\n')
    code, out, _ = run(capsys, "states", "--scenario", str(toml), "--json", "--tp", "4")
    assert code == 0 and "DP 4, TP 4, PP 3" in json.loads(out)["parallel"]


# ---------------------------------------------------------------------------------------------------- files
def test_file_reader_refuses_special_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, words in ((fifo, "is a FIFO"), (tmp_path, "is a folder"), ("/dev/zero", "is a device"),
                        (tmp_path / "none", "cannot read"), ("", "empty")):
        with pytest.raises(SymmemError, match=words):
            read_text_file(path, "--histogram")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_FILE_BYTES + 1))
    with pytest.raises(SymmemError, match="larger than the limit of 4,194,304 bytes"):
        read_text_file(big, "--model")
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(SymmemError, match="not UTF-8"):
        read_text_file(bad, "--model")


@pytest.mark.parametrize("text, words", [
    ('{"a": 1, "a": 2}', "duplicate key 'a'"),
    ('{"x": {"vocab_size": 1, "vocab_size": 2}}', "duplicate key 'vocab_size'"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than the limit of 64"),
    ('{"a": "[[[[' + "[" * 100 + '"}', None),  # brackets inside a string do not count
    ('{"a": ' + "9" * 5000 + "}", "5,000 digits"),
    ('{"a": ' + "9" * 31 + "}", "31 digits"),
    ('{"a": NaN}', "NaN is not JSON"),
    ('{"a": 1e999}', "out of range"),
    ('{"a": 1', "not JSON"),
])
def test_strict_json(text, words):
    if words is None:
        assert _json.loads(text) == {"a": "[[[[" + "[" * 100}
        return
    with pytest.raises(SymmemError, match=words) as e:
        _json.loads(text, "model = 'x.json'")
    assert "\n" not in str(e.value)


def test_config_files_through_the_strict_loader(capsys, tmp_path):
    preset = json.loads((ROOT / "symmem" / "presets" / "deepseek-v3.json").read_text())
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps(preset)[:-1] + ', "vocab_size": 5}')
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({**preset, "vocab_size": 0}).replace('"vocab_size": 0', '"vocab_size": ' + "9" * 5000))
    for path, words in ((dup, "duplicate key 'vocab_size'"), (deep, "nested deeper"), (huge, "5,000 digits"),
                        (tmp_path, "is a folder"), ("/dev/zero", "is a device")):
        code, out, err = run(capsys, "params", "--model", str(path))
        assert one_line_error(code, err) and words in err, err


@pytest.mark.parametrize("body, words", [
    ("[parallel]\npp = " + "9" * 5000, "not TOML we read"),
    ("[training]\nmicro_batch_size = " + "9" * 5000, "not TOML we read"),
    ("[routing]\nhistogram = " + "[" * 100_000 + "]" * 100_000, "not TOML we read"),
    ("[parallel]\ndp = 99999999999999999999", "TOML integers are 64-bit"),
    ("[parallel]\ndp = 1000000000000000000", "up to 1,048,576"),
    ("[parallel]\npp = 1000000000000", "up to 256"),
    ("[parallel]\ncp = 1000000000000", "up to 1,048,576"),
    ("[layout]\nkind = \"explicit\"\nlayers_per_stage = [" + ",".join(["0"] * 300) + "]", "limit of 256"),
    ("[training]\nmicrobatches = 1000000000000", "up to 1,048,576"),
    ("[training]\nchunks = 0", "up to 1,024"),
    ("[training]\nseq_length = 4294967296", "up to 2,147,483,648"),
    ("[precision]\nweight_bytes = 1000000000000", "from 0 to 64"),
    ("[precision]\nweight_bytes = 0\ngrad_bytes = 0\nmaster_bytes = 0\noptimizer_bytes = 0", "at least 1 byte"),
    ("[gpu]\nmemory = \"1e999999999\"", "up to 10^18 bytes"),
    ("[gpu]\nmemory = \"0.5\"", "at least 1 byte"),
    ("[gpu]\nmemory = \"\"", "not a size"),
    ("[gpu]\ncomm_buffers = [1, 2, 3]", "give two"),
    ("[layout]\nkind = \"explicit\"\nlayers_per_stage = [1000000000]", "from 0 to 100,000"),
])
def test_toml_bounds(capsys, tmp_path, body, words):
    toml = tmp_path / "s.toml"
    toml.write_text('model = "deepseek-v3"\n' + body + "\n")
    code, out, err = run(capsys, "memory", "--scenario", str(toml))
    assert one_line_error(code, err) and words in err, err


# --------------------------------------------------------------------------------------------- all or nothing
def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.is_dir(), p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns,
                                         stat.S_IMODE(p.stat().st_mode))
            for p in sorted(folder.rglob("*"))}


def test_latex_folder_left_byte_identical(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "latex", "--out", "out")[0] == 0
    out = tmp_path / "out"
    names = sorted(p.name for p in out.iterdir())
    assert names == ["formulas.tex", "memory_per_stage.tex", "params_per_stage.tex", "report.tex"]
    (out / "report.tex").unlink()
    (out / "report.tex").mkdir()  # one target file replaced by a folder
    (out / "mine.txt").write_text("the user's")
    before, folder_mtime = _snapshot(out), out.stat().st_mtime_ns
    code, stdout, err = run(capsys, "latex", "--out", "out", "--tp", "4")
    assert one_line_error(code, err) and "report.tex is a folder" in err, err
    assert _snapshot(out) == before and out.stat().st_mtime_ns == folder_mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left beside it
    (out / "report.tex").rmdir()
    assert run(capsys, "latex", "--out", "out", "--tp", "4")[0] == 0
    assert (out / "mine.txt").read_text() == "the user's"  # files symmem does not write are kept
    assert (out / "report.tex").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_write_tree_failures_leave_nothing(capsys, tmp_path, monkeypatch):
    from symmem import output

    monkeypatch.chdir(tmp_path)
    for out in (".", str(tmp_path), "/"):
        code, _, err = run(capsys, "latex", "--out", out)
        assert one_line_error(code, err), err
    assert list(tmp_path.iterdir()) == []

    def full_disk(self, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full_disk)
    with pytest.raises(SymmemError, match="No space left on device"):
        output.write_tree("a/b/new", {"x.txt": "x"})
    assert list(tmp_path.iterdir()) == []  # neither the new folder, nor its parents, nor a staging folder


def test_new_folder_and_sweep_plot_follow_the_umask(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o022)
    try:
        assert run(capsys, "latex", "--out", "tex")[0] == 0
        code, _, err = run(capsys, "sweep", "--model", "deepseek-v2-lite", "--gpus", "16", "--tp", "1,2", "--pp",
                           "1-2", "-b", "1-2", "--zero", "0", "--plot", "region.svg")
        assert code == 0, err
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "region.svg").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "tex").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "tex" / "report.tex").stat().st_mode) == 0o644


def test_scenario_name_stays_in_its_latex_comment(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    toml = tmp_path / "s.toml"
    toml.write_text(PAPER_TOML.replace('name = "paper"', 'name = "evil\\n\\\\end{document}\\r\\n\\npar"'))
    assert run(capsys, "latex", "--scenario", str(toml), "--out", "out")[0] == 0
    for f in (tmp_path / "out").iterdir():
        text = f.read_text()
        assert "\\end{document}" not in text.replace("\\textbackslash{}end\\{document\\}", "") or \
            f.name == "report.tex"
        for line in text.splitlines():
            assert not line.startswith("par"), (f.name, line)
    line = (tmp_path / "out" / "formulas.tex").read_text().splitlines()[1]
    assert line.startswith("% Scenario: evil \\textbackslash{}end\\{document\\}")


# ---------------------------------------------------------------------------------------------------- measure
@pytest.fixture
def tiny(tmp_path):
    from symmem.validate import tiny_config

    def write(**changes) -> str:
        path = tmp_path / f"c{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({**tiny_config("deepseek-v3"), **changes}))
        return str(path)

    return write


@pytest.mark.parametrize("changes, words", [
    ({"rope_scaling": "bogus"}, "rope_scaling = 'bogus': must be null or an object"),
    ({"rope_scaling": {"type": "bogus"}}, "rope_scaling type = 'bogus'"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings = 'false': must be true or false"),
    ({"n_group": 3, "topk_group": 5}, "topk_group = 5: more than n_group = 3"),
    ({"n_group": 3, "topk_group": 1}, "n_group = 3: must divide n_routed_experts"),
    ({"n_group": 0}, "n_group = 0: must be a positive integer"),
    ({"qk_rope_head_dim": 3}, "qk_rope_head_dim = 3"),
])
def test_measure_refuses_what_transformers_crashes_on(capsys, tiny, changes, words):
    code, out, err = run(capsys, "measure", "--config", tiny(**changes))
    assert one_line_error(code, err) and words in err, err


def test_measure_refuses_above_available_memory(capsys, tiny, monkeypatch):
    from symmem.cli import measure as measure_cli

    code, out, err = run(capsys, "measure", "--config", str(ROOT / "symmem" / "presets" / "deepseek-v3.json"))
    assert one_line_error(code, err) and "more than the" in err and "available" in err, err
    code, out, err = run(capsys, "measure", "--config", tiny(), "-b", "100000", "-s", "100000")
    assert one_line_error(code, err) and "b = 100000, s = 100000" in err, err
    monkeypatch.setattr(measure_cli, "available_memory", lambda: 1000)
    code, out, err = run(capsys, "measure", "--config", tiny())
    assert one_line_error(code, err) and "more than the 0.00 GiB" in err, err
    code, out, err = run(capsys, "measure", "--config", tiny(), "--seed", "1" + "0" * 30)
    assert one_line_error(code, err) and "4,294,967,295" in err, err


@pytest.mark.parametrize("argv, body, words", [
    (["--layers-per-stage", "61", "--pp", "1", "--dp", "1", "--first-stage-layers", "3"], "", "conflicts with"),
    ([], '[layout]\nkind = "paper"\nlayers_per_stage = [61]', "takes no layers_per_stage"),
    ([], '[layout]\nlayers_per_stage = [61]', "takes no layers_per_stage"),
    ([], '[layout]\nkind = "explicit"\nfirst = 3', "takes no first/last"),
])
def test_conflicting_layouts_refused(capsys, tmp_path, argv, body, words):
    toml = tmp_path / "s.toml"
    toml.write_text('model = "deepseek-v3"\n' + body + "\n")
    code, _, err = run(capsys, "states", "--scenario", str(toml), *argv)
    assert one_line_error(code, err) and words in err, err


@pytest.mark.parametrize("formula", [
    S16,  # 16 free constants: the search for a condition was exponential (2^16 cancels, 70 s)
    "10bsh + 1/(b+s+h+d_c+d_cq+N+N_r+h_E+h_F+V+L+n_h+d_h+d_hr)",  # not a polynomial: probed by substitution
    S16 + "^{2}(b+s)",
])
def test_check_stays_fast_on_wide_formulas(capsys, formula):
    t0 = time.perf_counter()
    code, out, err = run(capsys, "check", formula)
    assert code == 1 and "verdict: DIFFERENT" in out, err
    assert time.perf_counter() - t0 < 8


# ------------------------------------------------------------------------- issue 12's inputs, each through the CLI
# Every input quoted in the issue, run by `symmem.cli.main` in real processes (a few batches, two at a time, so
# that each input costs its own work and not an interpreter's start): one line on stderr and exit 2, or the right
# output where the input is valid; under 10 s each, the process under 1 GiB, nothing written where it ran.
_BATCH = r"""
import contextlib, io, json, os, resource, sys, time
from symmem.cli.main import main

os.umask(0o022)
for line in sys.stdin:
    argv, cwd = json.loads(line)
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # --version and --help exit through argparse
            code = e.code
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps([code, out.getvalue(), err.getvalue(), time.perf_counter() - t0, rss]), flush=True)
"""
V3 = json.loads((ROOT / "symmem" / "presets" / "deepseek-v3.json").read_text())
EXP = "1e999999999"


def _v3(**changes) -> str:
    return json.dumps({**V3, **changes})


def _v3_raw(key: str, raw: str) -> str:
    """The V3 preset with `key` set to a raw JSON text (a 5,000-digit integer, nested brackets)."""
    return json.dumps({**V3, key: "@"}).replace('"@"', raw)


def _tiny(**changes) -> str:
    from symmem.validate import tiny_config

    return json.dumps({**tiny_config("deepseek-v3"), **changes})


def _paper_toml(old: str, new: str) -> str:
    assert old in PAPER_TOML, old
    return PAPER_TOML.replace(old, new)


_CAPACITY = ('kind = "paper"\n\n[gpu]', 'kind = "capacity"\ncapacity_factor = "1e999999999"\n\n[gpu]')


def _json_parallel(words: str):
    return lambda out: words in json.loads(out)["parallel"]


def _in_flight_numbers(out: str) -> bool:
    stages = json.loads(out)["stages"]
    return all(isinstance(st["in_flight"], (int, float)) and not isinstance(st["in_flight"], bool) for st in stages)


# (argv, files written in the folder it runs in, expected: words of the one-line error, or ("ok" | "different",
# a check of stdout or None)); grouped as the issue lists them.
ISSUE_INPUTS = [
    # hangs
    (["check", S16 + "^{16}"], {}, "more than 2,000 terms"),
    (["check", "(b+s+h)" * 1400], {}, "more than 2,000 terms"),
    (["check", "+".join(["(b+s+h)"] * 1400)], {}, "longer than the limit of 10000 characters"),
    (["check", "+".join(["(b+s+h)"] * 1200)], {}, ("different", lambda out: "verdict: DIFFERENT" in out)),
    # issue 22: a difference beyond a float's range, in GiB: (10^40)^16 / 2^30 = 9.31e630, not -inf
    (["check", "((9999999999999999999999999999999999999999)^4)^4"], {},
     ("different", lambda out: "(-9.31e+630 GiB)" in out)),
    (["check", "((9999999999999999999999999999999999999999)^4)^4", "--json"], {},
     ("different", lambda out: '"verdict": "DIFFERENT"' in out)),
    (["memory", "--gpu-memory", EXP], {}, "up to 10^18 bytes"),
    (["memory", "--capacity-factor", EXP], {}, "the exponent is limited to 30"),
    (["memory", "--scenario", "s.toml"], {"s.toml": _paper_toml('memory = "80GB"', f'memory = "{EXP}"')},
     "up to 10^18 bytes"),
    (["memory", "--scenario", "s.toml"], {"s.toml": _paper_toml(*_CAPACITY)}, "the exponent is limited to 30"),
    (["memory", "--scenario", "s.toml"], {"s.toml": _paper_toml(*_CAPACITY).replace(f'"{EXP}"', EXP)},
     "capacity_factor = 'inf'"),
    (["sweep", "--gpus", "1024", "--gpu-memory", EXP], {}, "up to 10^18 bytes"),
    (["sweep", "--gpus", "1024", "--capacity-factor", EXP], {}, "the exponent is limited to 30"),
    (["sweep", "--gpus", "1024", "--scenario", "s.toml"],
     {"s.toml": _paper_toml('memory = "80GB"', f'memory = "{EXP}"')}, "up to 10^18 bytes"),
    (["sweep", "--gpus", "1024", "--scenario", "s.toml"], {"s.toml": _paper_toml(*_CAPACITY)},
     "the exponent is limited to 30"),
    (["params", "--model", "c.json"], {"c.json": _v3(num_hidden_layers=10**9)},
     "num_hidden_layers = 1000000000: must be at most 100,000"),
    (["memory", "--model", "c.json"], {"c.json": _v3(num_nextn_predict_layers=100_000)},
     "num_nextn_predict_layers = 100000: must be at most 64"),
    (["params", "--model", "/dev/zero"], {}, "is a device"),
    (["memory", "--scenario", "/dev/zero"], {}, "is a device"),
    (["memory", "--histogram", "/dev/zero"], {}, "is a device"),
    (["memory", "--scenario", "s.toml"], {"s.toml": 'model = "/dev/zero"\n'}, "is a device"),
    (["sweep", "--gpus", "1024", "-b", "1-10000000"], {}, "25,920,000,000 configurations"),
    (["sweep", "--gpus", "1024", "--tp", "1-" + "9" * 4000 + ":x2"], {}, "a number of 4,000 digits"),
    # config.json and TOML shapes
    (["params", "--model", "c.json"], {"c.json": _v3(topk_method=["x"])}, "topk_method = ['x']: must be a string"),
    (["params", "--model", "c.json"], {"c.json": _v3_raw("vocab_size", "9" * 5000)}, "5,000 digits"),
    (["params", "--model", "c.json"], {"c.json": _v3_raw("x", "[" * 100_000 + "]" * 100_000)},
     "nested deeper than the limit of 64"),
    (["memory", "--scenario", "s.toml"], {"s.toml": PAPER_TOML + "\n[model_overrides]\nx = " + "[" * 100_000
                                          + "]" * 100_000 + "\n"}, "nested too deeply"),
    (["memory", "--scenario", "s.toml"],
     {"s.toml": _paper_toml("micro_batch_size = 1", "micro_batch_size = " + "9" * 5000)}, "not TOML we read"),
    # huge integers
    (["states", "--pp", "10**30"], {}, "not an integer in ASCII digits"),
    (["states", "--pp", "1" + "0" * 30], {}, "must be a positive integer up to 256"),
    (["sweep", "--gpus", "10**30"], {}, "not an integer in ASCII digits"),
    (["sweep", "--gpus", "1" + "0" * 30], {}, "up to 16,777,216"),
    (["memory", "--gpu-memory", "9" * 5000], {}, "a size is at most 40 characters"),
    (["check", "10^{100000}bsh"], {}, "an exponent must be an integer literal from 0 to 16"),
    (["check", "10^100000*b*s*h"], {}, "ambiguous exponent"),
    (["check", "9" * 5000 + "bsh"], {}, "numeric literal longer than 40 digits"),
    (["check", "10bsh + " + "9" * 5000], {}, "numeric literal longer than 40 digits"),
    # measure (refused before torch is imported)
    (["measure", "--config", str(ROOT / "symmem" / "presets" / "deepseek-v3.json")], {},
     "GiB this machine has available"),
    (["measure", "--config", "c.json", "-b", "100000", "-s", "100000"], {"c.json": _tiny()},
     "b = 100000, s = 100000"),
    (["measure", "--config", "c.json", "--seed", "10**30"], {"c.json": _tiny()}, "4,294,967,295"),
    (["measure", "--config", "c.json", "--seed", "1" + "0" * 30], {"c.json": _tiny()}, "4,294,967,295"),
    (["measure", "--config", "c.json"], {"c.json": _tiny(rope_scaling="bogus")}, "rope_scaling = 'bogus'"),
    (["measure", "--config", "c.json"], {"c.json": _tiny(tie_word_embeddings="false")},
     "tie_word_embeddings = 'false': must be true or false"),
    (["measure", "--config", "c.json"], {"c.json": _tiny(n_group=3, topk_group=5)},
     "topk_group = 5: more than n_group = 3"),
    (["measure", "--config", "c.json"], {"c.json": _tiny(qk_rope_head_dim=3)}, "qk_rope_head_dim = 3"),
    # half-written outputs: a target file replaced by a folder; the folder must stay as it was (the snapshot of
    # the case's folder is compared), with no staging folder beside it
    (["latex", "--out", "out"], {"out/report.tex/keep.txt": "mine", "out/mine.txt": "the user's"},
     "report.tex is a folder where symmem writes a file"),
    (["paper", "--out", "pt"], {"pt/model_totals.md/keep.txt": "mine", "pt/mine.txt": "the user's"},
     "model_totals.md is a folder where symmem writes a file"),
    # accepted nonsense
    (["memory", "--gpu-memory", "0.1b"], {}, "a size is at least 1 byte"),
    (["memory", "--gpu-memory", "0.5"], {}, "a size is at least 1 byte"),
    (["params", "--model", "c.json"], {"c.json": _v3(tie_word_embeddings="false")},
     "tie_word_embeddings = 'false': must be true or false"),
    (["params", "--model", "c.json"], {"c.json": _v3()[:-1] + ', "vocab_size": 5}'}, "duplicate key 'vocab_size'"),
    (["params", "--model", "c.json"], {"c.json": _v3(vocab_size=10**30)}, "an integer of 31 digits"),
    (["states", "--dp", "1" + "0" * 30], {}, "up to 1,048,576"),
    (["memory", "--microbatches", "1" + "0" * 30], {}, "up to 1,048,576"),
    (["memory", "--scenario", "s.toml"], {"s.toml": 'model = "deepseek-v3"\n[precision]\nweight_bytes = '
                                          '1000000000000\n'}, "weight_bytes = 1000000000000: must be an integer"),
    (["memory", "--scenario", "s.toml"], {"s.toml": 'model = "deepseek-v3"\n[precision]\nweight_bytes = 0\n'
                                          'grad_bytes = 0\nmaster_bytes = 0\noptimizer_bytes = 0\n'},
     "at least 1 byte"),
    (["memory", "--chunks", "0"], {}, "from 2 to 1,024"),
    (["states", "--layers-per-stage", "61", "--first-stage-layers", "3"], {}, "conflicts with"),
    (["states", "--scenario", "s.toml"], {"s.toml": 'model = "deepseek-v3"\n[layout]\nkind = "paper"\n'
                                          'layers_per_stage = [61]\n'}, "takes no layers_per_stage"),
    (["memory", "--gpu-memory", ""], {}, "argument --gpu-memory: '': empty"),
    (["latex", "--out", ""], {}, "argument --out: '': empty"),
    (["plot", "--out", "figs", "--figures", ""], {}, "argument --figures: '': empty"),
    (["plot", "--out", "figs", "--figures", " , "], {}, "empty; name at least one of"),
    (["params", "--model", "c.json"], {"c.json": _v3(norm_topk_prob="yes")},
     "norm_topk_prob = 'yes': must be true or false"),
    (["params", "--model", "c.json"], {"c.json": _v3(n_group=0)}, "n_group = 0: must be a positive integer"),
    (["params", "--model", "c.json"], {"c.json": _v3(topk_group=99)}, "topk_group = 99: more than n_group = 8"),
    # new users
    (["--version"], {}, ("ok", lambda out: out.startswith("symmem "))),
    ([], {}, "missing command"),
    (["--frobnicate"], {}, "unrecognized arguments: --frobnicate"),
    (["states", "--json", "--scenario", "s.toml", "--tp", "4"], {"s.toml": PAPER_TOML},
     ("ok", _json_parallel("DP 16, TP 4, PP 16, EP 8, ETP 1, EDP 8 (1024 GPUs"))),
    (["sweep", "--model", "deepseek-v2-lite", "--gpus", "16", "--tp", "1,2", "--pp", "1-2", "-b", "1-2", "--zero",
      "0", "--plot", "region.svg"], {}, ("ok", None)),
    (["memory", "--json"], {}, ("ok", _in_flight_numbers)),
]

# `--tp ٢`, `--tp ２`, `--tp 1_6`: refused by every integer flag of every command (sweep's lists and ranges too)
_INT_FLAGS = {
    "states": ["--tp", "--pp", "--ep", "--etp", "--dp", "--edp", "--cp", "--first-stage-layers",
               "--last-stage-layers", "--stage", "--zero", "--layers-per-stage"],
    "activations": ["-b", "-s", "--chunks", "--microbatches", "--stage"],
    "memory": ["--capacity-factor", "--rank-load", "--gpu-memory"],
    "timeline": ["--stage"],
    "check": ["--stage", "--layer"],
    "latex": ["--tp"],
    "plot": ["--tp"],
    "sweep": ["--gpus", "--tp", "--pp", "--ep", "--etp", "-b", "-s", "--zero", "--chunks", "--microbatches",
              "--top", "--max-configs", "--gpu-memory", "--capacity-factor", "--rank-load"],
    "measure": ["--layer", "-b", "-s", "--seed"],
}
_TAIL = {"check": ["10bsh"], "latex": ["--out", "o"], "plot": ["--out", "o"], "timeline": ["--out", "t.png"],
         "measure": ["--config", "c.json"]}
for _digit in ("٢", "２", "1_6"):
    for _cmd, _flags in _INT_FLAGS.items():
        for _flag in _flags:
            _argv = [_cmd] + (["--gpus", "16"] if _cmd == "sweep" and _flag != "--gpus" else [])
            _argv += [_flag, _digit if _flag != "--layers-per-stage" else f"4,{_digit}", *_TAIL.get(_cmd, [])]
            ISSUE_INPUTS.append((_argv, {"c.json": "{}"} if _cmd == "measure" else {}, _digit))


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.is_dir(), p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns,
                                         stat.S_IMODE(p.stat().st_mode)) for p in sorted(folder.rglob("*"))}


def test_issue_inputs_through_the_cli(tmp_path):
    cases = []
    for i, (_, files, _) in enumerate(ISSUE_INPUTS):
        cwd = tmp_path / f"case{i}"
        for name, text in files.items():
            (cwd / name).parent.mkdir(parents=True, exist_ok=True)
            (cwd / name).write_text(text)
        cwd.mkdir(exist_ok=True)
        cases.append((i, cwd, _tree(cwd)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    batches = [cases[k::4] for k in range(4)]

    def run_batch(batch):
        lines = "".join(json.dumps([ISSUE_INPUTS[i][0], str(cwd)]) + "\n" for i, cwd, _ in batch)
        try:
            r = subprocess.run([sys.executable, "-c", _BATCH], input=lines, env=env, capture_output=True, text=True,
                               timeout=240)
        except subprocess.TimeoutExpired as e:
            done = len((e.stdout or b"").splitlines())
            raise AssertionError(f"hung on {ISSUE_INPUTS[batch[done][0]][0]!r:.200}") from None
        assert r.returncode == 0, r.stderr[-3000:]
        return [json.loads(line) for line in r.stdout.splitlines()]

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run_batch, batches))
    for batch, outs in zip(batches, results, strict=True):
        assert len(outs) == len(batch)
        for (i, cwd, before), (code, out, err, seconds, rss_kib) in zip(batch, outs, strict=True):
            argv, _, expected = ISSUE_INPUTS[i]
            what = f"{' '.join(argv)[:100]!r}"
            assert "Traceback" not in err, (what, err)
            # numbers too large for a float print exactly or in scientific notation, never as inf or nan (issue 22);
            # the user's own text, echoed in quotes ('inf' refused as a number), is not a printed number
            printed = re.sub(r"'[^'\n]*'", "", out + err)
            assert not re.search(r"(?<![A-Za-z_])-?(inf|nan|Infinity|NaN)(?![A-Za-z_])", printed), (what, out, err)
            assert seconds < 10, (what, seconds)
            assert rss_kib < 1 << 20, (what, rss_kib)  # the batch's process under 1 GiB, this input included
            if isinstance(expected, str):
                assert code == 2 and err.count("\n") == 1 and err.startswith("symmem: error: "), (what, code, err)
                assert expected in err, (what, err)
                assert out == "", (what, out[:300])  # no verdict header or table before the error
                assert _tree(cwd) == before, what  # nothing written, the output folder byte-identical
            else:
                kind, check = expected
                assert code == (0 if kind == "ok" else 1), (what, code, err)
                assert check is None or check(out), (what, out[:300])
    plot = next(i for i, (argv, _, _) in enumerate(ISSUE_INPUTS) if "--plot" in argv)
    assert stat.S_IMODE((tmp_path / f"case{plot}" / "region.svg").stat().st_mode) == 0o644  # umask 022, not 600
    leftovers = [p.name for p in tmp_path.iterdir() if not p.name.startswith("case")]
    assert leftovers == []


# ------------------------------------------------------------------------------------ folders symmem cannot replace
def _chattr(*args: str | Path) -> bool:
    exe = shutil.which("chattr")
    return exe is not None and subprocess.run([exe, *map(str, args)], capture_output=True).returncode == 0


@pytest.mark.parametrize("command, locked", [
    ("latex", "report.tex"),  # a file symmem writes
    ("latex", "mine.txt"),  # a file symmem keeps: the old folder could not be deleted either
    ("latex", "."),  # the folder itself
    ("paper", "report.tex"),
])
def test_immutable_file_leaves_the_folder_as_it_was(capsys, tmp_path, monkeypatch, command, locked):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert run(capsys, "latex", "--out", "out")[0] == 0
    (out / "mine.txt").write_text("the user's")
    target = out / locked
    if not _chattr("+i", target):
        pytest.skip("chattr +i is not available here (needs root and a filesystem with inode flags)")
    try:
        before, folder_mtime = _snapshot(out), out.stat().st_mtime_ns
        code, stdout, err = run(capsys, command, "--out", "out")
        assert one_line_error(code, err) and "immutable or append-only" in err, err
        assert stdout == "" and _snapshot(out) == before and out.stat().st_mtime_ns == folder_mtime
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging or old folder beside it
    finally:  # the whole folder: a regression could have moved the locked file elsewhere in it
        _chattr("-R", "-i", tmp_path)


def test_read_only_subfolder_is_refused_before_writing(capsys, tmp_path, monkeypatch):
    """As a user other than root, a read-only subfolder's files could not be deleted with the old folder."""
    from symmem import output

    monkeypatch.chdir(tmp_path)
    assert run(capsys, "latex", "--out", "out")[0] == 0
    (tmp_path / "out" / "sub").mkdir()
    (tmp_path / "out" / "sub" / "x.txt").write_text("x")
    before = _snapshot(tmp_path / "out")
    real_access = os.access
    monkeypatch.setattr(output.os, "access", lambda p, mode: Path(p).name != "sub" and real_access(p, mode))
    code, _, err = run(capsys, "latex", "--out", "out")
    assert one_line_error(code, err) and "sub is read-only" in err, err
    assert _snapshot(tmp_path / "out") == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# ---------------------------------------------------------------------------------------------- LaTeX of user text
def test_tex_escape_is_ascii():
    from symmem.render.tables import tex_escape

    assert tex_escape("a\nb\r%é中ħ\u202e≥") == r"a b \%e?? $\geq$"
    assert tex_escape("x").isascii() and tex_escape("".join(map(chr, range(0x80, 0x3000)))).isascii()


@pytest.mark.latex
def test_scenario_name_with_newline_compiles(capsys, tmp_path, monkeypatch):
    exe = shutil.which("pdflatex")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("pdflatex is missing: .ci/run must install Debian's TeX Live packages")
        pytest.skip("pdflatex not installed")
    monkeypatch.chdir(tmp_path)
    toml = tmp_path / "s.toml"
    toml.write_text(PAPER_TOML.replace('name = "paper"', 'name = "evil\\n\\\\end{document}\\n% # $ & _ ~ ^ é 中 ħ"'))
    assert run(capsys, "latex", "--scenario", str(toml), "--out", "out")[0] == 0
    r = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", "report.tex"], cwd=tmp_path / "out",
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]


def test_pytest_shows_skip_reasons():
    import tomllib

    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-rs" in addopts.split()
