"""`symmem check`: the paper's formulas as copied from it, wrong coefficients, forgotten blocks, hostile input."""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from symmem.cli.main import main

MLA = r"10bsh + 8bs(d_{cq}+d_c) + 16bsd_hn_h + 8bsd_{hr}n_h + 10bn_hs^2"
MOE = r"20bsh + 16bsN + 8bsN_r + 4bs(N_r/N)(96h+256h_E) + 32bsh_E"
FULL = r"8bsh + 8bsN_r"


def check(capsys, *args):
    code = main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_paper_mla_equal(capsys):
    code, out, _ = check(capsys, "--scenario", "paper", "--quantity", "stage.activations.mla", "--recompute", "none",
                         MLA)
    assert code == 0 and "verdict: EQUAL" in out


def test_paper_mla_in_display_latex(capsys):
    text = r"$10bsh + 8bs\left(d_{cq}+d_{c}\right) + 16 b s d_h n_h + 8\,bs\,d_{hr}n_h + 10\cdot b n_h s^{2}$"
    code, out, _ = check(capsys, "--quantity", "stage.activations.mla", text)
    assert code == 0 and "verdict: EQUAL" in out


def test_paper_moe_equal_at_this_scenario(capsys):
    code, out, _ = check(capsys, "--quantity", "stage.activations.moe", MOE)
    assert code == 0
    assert "EQUAL AT THIS SCENARIO, NOT IN GENERAL" in out and "N = 256, N_s = 1" in out
    code, _, _ = check(capsys, "--quantity", "stage.activations.moe", "--strict", MOE)
    assert code == 1


def test_paper_full_recompute_equal(capsys):
    code, out, _ = check(capsys, "--quantity", "stage.activations", "--recompute", "full", FULL)
    assert code == 0 and "verdict: EQUAL" in out


def test_one_coefficient_changed(capsys):
    code, out, _ = check(capsys, "--quantity", "stage.activations.mla", "--json",
                         MLA.replace("8bsd_{hr}n_h", "6bsd_{hr}n_h"))
    d = json.loads(out)
    assert code == 1 and d["verdict"] == "DIFFERENT"
    (term,) = d["terms"]
    assert term["monomial"] == "b*d_hr*n_h*s" and (term["derived"], term["claimed"]) == ("8", "6")
    assert term["difference_value"] == 2 * 4096 * 64 * 128 == d["difference_value"]
    assert any("qk keeps attn.query" in s for s in term["from"])
    code, out, _ = check(capsys, "--quantity", "stage.activations.mla", MLA.replace("8bsd_{hr}n_h", "6bsd_{hr}n_h"))
    assert "0.06 GiB" in out  # 67,108,864 bytes


def test_forgotten_dense_ffn_on_stage0(capsys):
    # Stage 0 = the embedding, four MLA blocks and one MoE block, written without its three dense FFN blocks and
    # without the embedding. The dense FFNs keep 12bsh_F (three layers, 4bsh_F each at t = 2) and 5bsh/2 each of
    # norm input, output and mask (15bsh/2 in all); the embedding keeps its int64 token ids (8bs) and the 1-byte
    # dropout mask of its sequence-sharded output (bsh/t = bsh/2): b·h·s is 15 + 15/2 + 1/2 = 23.
    code, out, _ = check(capsys, "--stage", "0", "--quantity", "stage.activations", "--json",
                         r"10bsh + 8bs(d_{cq}+d_c) + 16bsd_hn_h + 8bsd_{hr}n_h + 10bn_hs^2"
                         r" + 5bsh + 4bsN + 2bsN_r + \frac{3}{8}bshN_r + bsN_rh_E + 8bsh_EN_s")
    d = json.loads(out)
    assert code == 1
    terms = {t["monomial"]: t for t in d["terms"]}
    assert set(terms) == {"b*h*s", "b*h_F*s", "b*s"}
    assert terms["b*h_F*s"]["derived"] == "12" and terms["b*h_F*s"]["claimed"] == "0"
    assert terms["b*h*s"]["derived"] == "23" and terms["b*h*s"]["claimed"] == "15"
    assert terms["b*s"]["derived"] == "8" and terms["b*s"]["claimed"] == "0"
    assert any("mlp.act keeps mlp.gate" in s for s in terms["b*h_F*s"]["from"])
    assert any("dense layers/mlp" in s for s in terms["b*h*s"]["from"])
    assert any("embedding/embedding" in s and "mask" in s for s in terms["b*h*s"]["from"])
    assert any("embedding/embedding" in s and "input_ids" in s for s in terms["b*s"]["from"])


def test_params_and_states_quantities(capsys):
    code, out, _ = check(capsys, "--quantity", "gpu.params.experts", "--json", "132*3*h*h_E")
    assert code == 0 and json.loads(out)["verdict"].startswith("EQUAL")
    code, out, _ = check(capsys, "--quantity", "gpu.states", "--zero", "3", "--json", "0")
    # the paper's Table 8: ZeRO-3 (os+g+params) per GPU of stages 1-14, 9.66 GiB = 10,374,131,712 bytes; by hand,
    # (429,719,552 non-MoE / DP 32 + 5,820,645,376 MoE / EDP 8) x (2 + 4 + 8) bytes = 741,009,408 x 14
    assert code == 1 and json.loads(out)["difference_value"] == 10_374_131_712


def test_list(capsys):
    code, out, _ = check(capsys, "--list")
    for q in ("stage.activations.mla", "stage.activations.moe", "stage.activations", "gpu.params", "gpu.states"):
        assert q in out


HOSTILE = [
    "__import__('os').system('touch {marker}')",
    "lambda x: x",
    "b.__class__",
    "__builtins__",
    "s.real",
    r"\input{/etc/passwd}",
    r"\sqrt{b}",
    "10bsh + (8bs",
    "10bsh + {8bs",
    "b" * 100_000,
    "(" * 10_000 + "b" + ")" * 10_000,
    "9^9^9^9",
    "s^{1000000}",
    "2^(10^10)",
    "",
    "10bsh +",
    "bsx",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_input_refused(capsys, text, tmp_path):
    marker = tmp_path / f"PWNED_{uuid.uuid4().hex}"
    code, out, err = check(capsys, "--quantity", "stage.activations.mla", text.replace("{marker}", str(marker)))
    assert code == 2
    assert err.startswith("symmem: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not marker.exists()


def test_nothing_executed_in_a_real_process(tmp_path):
    marker = tmp_path / "PWNED"
    payload = f"__import__('os').system('touch {marker}')"
    r = subprocess.run([sys.executable, "-m", "symmem", "check", payload], capture_output=True, text=True)
    assert r.returncode == 2 and not marker.exists()


def test_never_evaluates(monkeypatch, capsys):
    import builtins

    import sympy

    def boom(*a, **k):
        raise AssertionError("user text reached an evaluator")

    check(capsys, "--quantity", "stage.activations.mla", MLA)  # first: the standard library's lazy imports
    # (importlib.metadata's namedtuples use eval on their own text) happen before the evaluators are replaced
    for target, name in ((builtins, "eval"), (builtins, "exec"), (sympy, "sympify"),
                         (sympy.parsing.sympy_parser, "parse_expr")):
        monkeypatch.setattr(target, name, boom)
    code, out, _ = check(capsys, "--quantity", "stage.activations.mla", MLA)
    assert code == 0 and "EQUAL" in out


def test_parallel_symbols_take_scenario_values(capsys):
    # t and EP in a hand formula are substituted by the scenario's sizes before comparing.
    code, out, _ = check(capsys, "--quantity", "gpu.params.experts", "4*(N/ep + N_s)*3*h*h_E")
    assert code == 0 and "EQUAL" in out


def test_source_scan_has_no_evaluators():
    root = Path(__file__).resolve().parent.parent / "symmem" / "check"
    for path in root.glob("*.py"):
        text = path.read_text()
        for word in ("eval(", "exec(", "sympify(", "parse_expr("):
            assert word not in text, (path.name, word)
