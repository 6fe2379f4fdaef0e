"""Global batch as the planner's unit of work (issue 27): Megatron's --global-batch-size, M = global batch /
(micro-batch x DP) where it divides (megatron/core/num_microbatches_calculator.py), in `memory`, `sweep`, TOML and
the Python API; ranking by time at a fixed global batch is ranking by tokens/s."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symmem.cli.main import main
from symmem.errors import SymmemError
from symmem.scenario import load_scenario, with_global_batch


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_memory_derives_m_from_the_global_batch(capsys):
    # TP 2 x DP 4 at micro-batch 2: 64 sequences are 64 / (2 x 4) = 8 micro-batches
    d = _json(capsys, ["memory", "--model", "llama-3-8b", "--tp", "2", "--dp", "4", "-b", "2",
                       "--global-batch-size", "64", "--json"])
    assert d["microbatches"] == 8 and d["global_batch_size"] == 64


@pytest.mark.parametrize("argv, words", [
    (["--global-batch-size", "60"], "--global-batch-size = 60: not a multiple of micro-batch 1 x DP 8 = 8"),
    (["--global-batch-size", "64", "--microbatches", "4"], "means 8 micro-batches"),
    (["--global-batch-size", "0"], "--global-batch-size"),
])
def test_memory_refuses_a_global_batch_it_cannot_divide(capsys, argv, words):
    assert main(["memory", "--model", "llama-3-8b", "--dp", "8", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_python_api_and_toml(tmp_path):
    scn = with_global_batch(load_scenario("llama3_70b_l12_tp1_pp2_dp4_mbc4_cef"), 32)
    assert scn.m == 8
    with pytest.raises(SymmemError, match="not a multiple"):
        with_global_batch(scn, 30)
    from importlib import resources

    text = resources.files("symmem.scenarios").joinpath("llama3_70b_l12_tp1_pp2_dp4_mbc4_cef.toml").read_text()
    path = tmp_path / "gbs.toml"
    path.write_text(text.replace("microbatches = 4", "global_batch_size = 128"))
    assert load_scenario(str(path)).m == 32
    path.write_text(text.replace("microbatches = 4", "global_batch_size = 130"))
    with pytest.raises(SymmemError, match="global_batch_size = 130"):
        load_scenario(str(path))


LLAMA_8B_64 = ["sweep", "--model", "llama-3-8b", "--gpus", "64", "--gpu-memory", "80GB", "-s", "8192",
               "--profile", "megatron-te", "--gpu", "H100", "--json"]


def test_the_issues_question_at_a_global_batch_of_64(capsys):
    # issue 27: Llama-3-8B on 64 x 80 GB at 8K, ranked by time at --global-batch-size 64: every listed layout
    # trains on 64 sequences, the first has the most tokens/s of all that fit, and no TP 8 layout at a global
    # batch of 8 can be among them
    d = _json(capsys, [*LLAMA_8B_64, "--rank-by", "time", "--global-batch-size", "64", "--top", "0", "--replay", "0"])
    rows = d["ranked"]
    assert rows and all(r["b"] * r["microbatches"] * r["dp"] == 64 == r["global_batch_size"] for r in rows)
    assert rows[0]["tokens_per_s"] == max(r["tokens_per_s"] for r in rows)
    assert len(rows) == d["counts"]["fit"]
    rejected = _json(capsys, [*LLAMA_8B_64, "--global-batch-size", "64", "--top", "1", "--replay", "0",
                              "--rejected"])["rejected"]
    assert sum(r["configurations"] for r in rejected if r["rule"] == "global batch") > 0


def test_rank_by_time_states_its_default_global_batch_and_refuses_a_fixed_m(capsys):
    argv = ["sweep", "--model", "gpt2", "--gpus", "8", "--gpu", "H100", "--tp", "1,2", "--pp", "1", "-b", "1,2",
            "--recompute", "none", "--replay", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "global batch 8 sequences per iteration (the default under --rank-by time: the GPU count" in out
    assert main([*argv, "--microbatches", "2"]) == 2
    assert "--rank-by time with --microbatches" in capsys.readouterr().err
    assert main([*argv, "--global-batch-size", "8", "--microbatches", "2"]) == 2
    assert main([*argv, "--global-batch-size", "3"]) == 2  # b x DP (at least 4) divides no 3
    assert "no layout of the sweep divides it" in capsys.readouterr().err


def test_compiled_and_per_configuration_paths_agree_under_a_global_batch():
    from symmem.cli.main import build_parser
    from symmem.cli.sweep import space_from_args
    from symmem.sweep.space import compiled_records, reference_records

    args = build_parser().parse_args(["sweep", "--model", "llama-3-8b", "--gpus", "16", "--tp", "1,2,4",
                                      "--pp", "1,2", "-b", "1,2", "--recompute", "none,full", "--zero", "1",
                                      "--global-batch-size", "32", "-s", "2048"])
    space = space_from_args(args)
    compiled, _ = compiled_records(space)
    reference, _ = reference_records(space)
    assert set(compiled) == set(reference) and compiled
    for o, r in reference.items():
        assert compiled[o]["peak_allocated"] == r["peak_allocated"]
        assert r["b"] * r["microbatches"] * r["dp"] == 32


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpus=st.sampled_from([8, 16]), per_gpu=st.sampled_from([1, 2, 4]), model=st.sampled_from(["gpt2", "llama-3-8b"]))
def test_time_order_is_tokens_per_second_order(capsys, gpus, per_gpu, model):
    # at a fixed global batch every row trains on the same tokens, so fastest first is most tokens/s first
    d = _json(capsys, ["sweep", "--model", model, "--gpus", str(gpus), "--gpu", "H100", "-s", "1024",
                       "--tp", "1,2,4", "--pp", "1,2", "-b", "1,2", "--recompute", "none,full", "--replay", "0",
                       "--global-batch-size", str(gpus * per_gpu), "--top", "0", "--json"])
    rows = d["ranked"]
    times = [r["time_s"] for r in rows]
    assert times == sorted(times)
    tps = [r["tokens_per_s"] for r in rows]
    assert tps == sorted(tps, reverse=True)
    assert all(r["tokens_per_s_per_gpu"] == pytest.approx(r["tokens_per_s"] / gpus) for r in rows)
    assert {r["global_batch_size"] for r in rows} <= {gpus * per_gpu}
