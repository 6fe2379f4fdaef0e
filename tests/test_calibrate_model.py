"""`symmem calibrate --model NAME` on this CPU (issue 46, item 3: "the GEMM shapes of the model's own dataflow"):
the kernel table holds the step's own GEMMs, the routed experts' grouped GEMMs (torch._grouped_mm) and the
attention, so that `symmem memory --gpu FILE` times that step at exactly the measured seconds, none read off a
neighbouring shape; what cannot be timed within bounds is refused in one line before any timing."""

from __future__ import annotations

import json

import pytest

from symmem.cli.main import main
from symmem.validate.tiny_configs import tiny

pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("registry_restored")

S = 24  # tokens of the one sequence: 24 x top-2 / 6 experts = 8 tokens an expert, a whole number


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """A tiny Qwen3-MoE (h 48, 6 query heads and 2 KV heads of 10, 6 experts of width 20, top 2, vocabulary 97,
    layers 0 and 3 dense of width 36, the other three MoE) and the profile calibrated for it at s 24."""
    folder = tmp_path_factory.mktemp("calibrate_model")
    cfg = folder / "config.json"
    cfg.write_text(json.dumps(tiny("qwen3_moe")))
    path = folder / "moe.json"
    assert main(["calibrate", "-o", str(path), "--model", str(cfg), "-s", str(S), "--repeat", "1", "--quick"]) == 0
    return cfg, path, json.loads(path.read_text())


def _passes(table: dict, m: int, k: int, n: int) -> float:
    """A dense GEMM's three measured passes, keyed as SimuMax keys them."""
    rows = {tuple(r[:4]): r[4] for r in table["gemm"]}
    return rows[("TN", m, k, n)] + rows[("NN", m, n, k)] + rows[("NT", n, m, k)]


def _grouped(table: dict, experts: int, tokens: int, n: int, k: int) -> float:
    rows = {tuple(r[:5]): r[5] for r in table["grouped_gemm"]}
    return sum(rows[(stage, experts, tokens, n, k)] for stage in ("fwd", "bwd_grad_act", "bwd_grad_w"))


def test_the_table_holds_the_models_own_shapes(moe):
    _cfg, _path, raw = moe
    table = raw["kernels"]
    # by hand from the config: q, k and v one product of n = 6 x 10 + 2 x 2 x 10; the output 60 -> 48; the dense
    # MLP's gate and up 48 -> 2 x 36, its down 36 -> 48; the router 48 -> 6; the head 48 -> 97; m = 24 tokens
    assert {tuple(r[1:4]) for r in table["gemm"] if r[0] == "TN"} == {
        (S, 48, 100), (S, 60, 48), (S, 48, 72), (S, 36, 48), (S, 48, 6), (S, 48, 97)}
    # the experts: 6 local, 8 tokens each, gate and up 48 -> 2 x 20, down 20 -> 48, keyed (experts, tokens, n, k),
    # each in its three passes
    assert sorted(tuple(r[:5]) for r in table["grouped_gemm"]) == sorted(
        (stage, 6, 8, n, k) for stage in ("fwd", "bwd_grad_act", "bwd_grad_w") for n, k in ((40, 48), (48, 20)))
    assert all(r[5] > 0 for r in table["grouped_gemm"])
    assert [1, S, 6, 2, 10, 10] in [r[:6] for r in table["attention"]]
    assert "own kernels on one GPU: TP 1, CP 1, EP 1, ETP 1, micro-batch 1, sequence 24" in table["shapes_from"]


def test_the_step_takes_the_measured_seconds(moe, capsys):
    """Every GEMM of the step at its own measured row: five layers' attention products, two dense MLPs, three
    routers and three experts' grouped GEMMs, and the head; the attention of each layer forward and backward."""
    cfg, path, raw = moe
    assert main(["memory", "--model", str(cfg), "-s", str(S), "--gpu", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    step = out["step"]
    assert step["model"] == "measured kernels" and out["profile_notes"] == []  # every shape measured
    t = raw["kernels"]
    gemm = (5 * (_passes(t, S, 48, 100) + _passes(t, S, 60, 48)) + 2 * (_passes(t, S, 48, 72) + _passes(t, S, 36, 48))
            + 3 * (_passes(t, S, 48, 6) + _grouped(t, 6, 8, 40, 48) + _grouped(t, 6, 8, 48, 20))
            + _passes(t, S, 48, 97))
    assert step["seconds_by_part"]["gemm"] == pytest.approx(gemm, rel=1e-9)
    fwd, bwd = next(r[6:] for r in t["attention"] if r[:6] == [1, S, 6, 2, 10, 10])
    assert step["seconds_by_part"]["attention"] == pytest.approx(5 * (fwd + bwd), rel=1e-9)


def test_expert_parallel_shapes_are_the_local_experts(moe, tmp_path):
    """At EP 2 each GPU holds 3 of the 6 experts; DP is set to the least the layout needs (it changes no shape); MoE
    sequence parallelism splits the experts' tokens over TP."""
    import argparse

    from symmem.calibrate_shapes import model_kernels
    from symmem.cli.calibrate import _add_model_args, _scenario

    cfg, _path, _raw = moe
    p = argparse.ArgumentParser()
    _add_model_args(p)
    scn = _scenario(p.parse_args(["--model", str(cfg), "-s", str(S), "--ep", "2"]))
    assert scn.parallel.dp == 2 and model_kernels(scn).grouped == ((3, 8, 40, 48), (3, 8, 48, 20))
    # the MoE block sequence-sharded over TP 2 (a vocabulary TP divides): 24 / 2 x 2 / 6 = 4 tokens an expert
    even = tmp_path / "even.json"
    even.write_text(json.dumps(tiny("qwen3_moe", vocab_size=96)))
    scn = _scenario(p.parse_args(["--model", str(even), "-s", str(S), "--tp", "2", "--sequence-parallel",
                                  "--moe-sequence-parallel"]))
    assert model_kernels(scn).grouped == ((6, 4, 40, 48), (6, 4, 48, 20))
    # dynamic routing at EP 2: the busiest rank at 1.5 x the balanced load, each expert receiving from both EP ranks:
    # 1.5 x 2 x 8 = 24 tokens
    scn = _scenario(p.parse_args(["--model", str(cfg), "-s", str(S), "--ep", "2", "--routing", "dynamic",
                                  "--rank-load", "1.5"]))
    assert model_kernels(scn).grouped == ((3, 24, 40, 48), (3, 24, 48, 20))


def test_a_bad_grouped_table_is_one_line(moe, tmp_path, capsys):
    cfg, path, raw = moe
    for change, words in ((lambda g: g[0].__setitem__(0, "bwd"), "grouped_gemm[0][0] = 'bwd': must be one of"),
                          (lambda g: g.__setitem__(slice(None), [r for r in g if r[0] != "bwd_grad_w"]),
                           "grouped_gemm: no bwd_grad_w pass measured"),
                          (lambda g: g[1].__setitem__(2, 0.5), "grouped_gemm[1][2] = '0.5': must be a whole number")):
        bad = json.loads(json.dumps(raw))
        change(bad["kernels"]["grouped_gemm"])
        where = tmp_path / "bad.json"
        where.write_text(json.dumps(bad))
        assert main(["memory", "--model", str(cfg), "-s", str(S), "--gpu", str(where)]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


@pytest.mark.parametrize(("argv", "words"), [
    (["--tp", "2"], "--tp: sets a model's shapes; give --model (or --scenario) too"),
    (["--model", "llama-3-8b", "-s", "64", "--budget", "1e-9"], "more than --budget 1e-09 s"),
    (["--model", "llama-3-8b", "-s", "64", "--budget", "soon"], "--budget soon: must be seconds above 0"),
    (["--model", "llama-3-8b", "-b", "512", "-s", "4096"], "a dimension of 2,097,152 is above 1,048,576"),
    (["--model", "llama-3-8b", "-s", "131072"], "more than half the"),
    (["--model", "llama-3-8b", "-s", "48", "--cp", "3", "--cp-comm-type", "a2a"],
     "cp = 3 (--cp-comm-type a2a): must divide the heads a TP rank holds, num_attention_heads / TP = 32 / 1 = 32"),
])
def test_what_cannot_be_timed_within_bounds_is_one_line(tmp_path, capsys, argv, words):
    out = tmp_path / "x.json"
    assert main(["calibrate", "-o", str(out), "--quick", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and not out.exists(), err


def test_a_fractional_expert_load_is_timed_at_its_whole_tokens(moe, tmp_path, capsys):
    """At s 25 an expert's mean load is 25 x 2 / 6 = 8.33 tokens: calibrate measures 8 (a kernel runs whole rows),
    the step looks the efficiency up at 8 and counts the FLOPs at 8.33, so each grouped GEMM takes its measured
    seconds x 8.33 / 8 (a review's finding: it was looked up at 8.33, read off a blend of neighbours)."""
    cfg, _path, _raw = moe
    path = tmp_path / "s25.json"
    argv = ["--model", str(cfg), "-s", "25"]
    assert main(["calibrate", "-o", str(path), *argv, "--repeat", "1", "--quick"]) == 0
    capsys.readouterr()
    t = json.loads(path.read_text())["kernels"]
    assert {tuple(r[1:5]) for r in t["grouped_gemm"]} == {(6, 8, 40, 48), (6, 8, 48, 20)}
    assert main(["memory", *argv, "--gpu", str(path), "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["step"]
    m = 25 * 2 / 6
    gemm = (5 * (_passes(t, 25, 48, 100) + _passes(t, 25, 60, 48))
            + 2 * (_passes(t, 25, 48, 72) + _passes(t, 25, 36, 48))
            + 3 * (_passes(t, 25, 48, 6) + (_grouped(t, 6, 8, 40, 48) + _grouped(t, 6, 8, 48, 20)) * m / 8)
            + _passes(t, 25, 48, 97))
    assert step["seconds_by_part"]["gemm"] == pytest.approx(gemm, rel=1e-9)


def test_a_flag_that_changes_nothing_is_named(moe, tmp_path, capsys):
    """As symmem memory names them (issue 45: nothing silently ignored): all-to-all CP at CP 1."""
    cfg, _path, _raw = moe
    assert main(["calibrate", "-o", str(tmp_path / "n.json"), "--model", str(cfg), "-s", str(S), "--cp-comm-type",
                 "a2a", "--repeat", "1", "--quick"]) == 0
    assert "note: --cp-comm-type a2a changes nothing here: at CP 1 there is no context parallelism (--cp)" in \
        capsys.readouterr().err


def test_timing_stops_at_the_budget():
    """The estimate can miss a kernel far slower than its FLOPs and bytes imply (a CPU's grouped GEMM of one token an
    expert): past --budget seconds the calibration stops in one line before the next call."""
    import torch

    from symmem.cli.calibrate import _timer
    from symmem.errors import SymmemError

    assert _timer(torch, "cpu", 60)(lambda: None, 3) >= 0
    with pytest.raises(SymmemError, match=r"still timing after --budget 0 s; nothing written"):
        _timer(torch, "cpu", 0)(lambda: None, 3)


def test_a_step_the_table_was_not_calibrated_for_is_named(moe, capsys):
    """At s 25 on the table calibrated at s 24 the six GEMMs (m 25) and the attention were not measured, the experts
    (8 tokens either way) were: 7 of 9 shapes read off the nearest measured ones, and a note says so."""
    cfg, path, _raw = moe
    assert main(["memory", "--model", str(cfg), "-s", "25", "--gpu", str(path), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["profile_notes"]
    assert len(notes) == 1 and notes[0].startswith("note: 7 of this step's 9 kernel shapes were not measured on ")
    assert "sequence 24 (symmem.calibrate_shapes)" in notes[0]
