"""Hostile input (issue 12): every bad input is one line on stderr and exit 2, within seconds; an unexpected
exception is one line and exit 3; nothing is half-written.

Hang guards run the CLI in a subprocess with a timeout; everything else runs `symmem.cli.main` in-process.
"""

from __future__ import annotations

import json
import os
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
    assert "17,280,000,000 configurations" in results[11][2]


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
    (["states", "--pp", "1" + "0" * 30], "up to 1,048,576"),
    (["states", "--dp", "1" + "0" * 30], "up to 1,048,576"),
    (["states", "--dp", "9" * 5000], "up to 1,048,576"),
    (["memory", "--microbatches", "1" + "0" * 30], "up to 1,048,576"),
    (["memory", "--chunks", "0"], "from 2 to 1,024"),
    (["memory", "--schedule", "interleaved", "--chunks", "1"], "from 2 to 1,024"),
    (["memory", "-b", "1" + "0" * 30], "up to 16,777,216"),
    (["memory", "--gpu-memory", "0.1b"], "at least 1 byte"),
    (["memory", "--gpu-memory", "0.5"], "at least 1 byte"),
    (["memory", "--gpu-memory", ""], "not a size"),
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
    (["sweep", "--gpus", "1" + "0" * 30], "up to 16,777,216"),
    (["sweep", "--gpus", "٢"], "ASCII digits"),
    (["sweep", "--gpus", "1024", "--tp", "٢"], "not an integer or a range"),
    (["sweep", "--gpus", "1024", "--capacity-factor", "1e999999999"], "out of range"),
    (["sweep", "--gpus", "1024", "-b", "1-100", "--max-configs", "1000"], "more than the limit of 1,000"),
    (["sweep", "--gpus", "1024", "-s", "1-" + "9" * 13], "digits"),
    (["sweep", "--gpus", "1024", "--schedule", "interleaved:0"], "from 2 to 1,024"),
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
    ("[parallel]\npp = 1000000000000", "up to 1,048,576"),
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
