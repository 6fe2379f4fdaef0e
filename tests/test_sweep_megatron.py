"""The planner on the validated profile (issue 18): `symmem sweep --profile megatron-te` gives, configuration by
configuration, the bytes `symmem memory --profile megatron-te` gives (framework buffers, padded vocabulary, the
pipeline's gradient buffers, context parallelism), for every model family."""

import json
import random

import pytest

from symmem.accounting.states import recipe, zero_stage
from symmem.cli import commands
from symmem.cli import sweep as sweep_cli
from symmem.cli.main import main
from symmem.config import load_model
from symmem.parallel.schedule import Schedule
from symmem.parallel.sizes import Parallel
from symmem.scenario import model_scenario
from symmem.sweep.space import Space, compiled_records, reference_records


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    monkeypatch.setitem(commands.COMMANDS, "sweep", sweep_cli.COMMAND)


def megatron_base(model):
    """What `--model M --profile megatron-te` sets: the profile, its precision, sequence parallelism (MoE too)."""
    m = load_model(model)
    conv = "megatron" if "megatron" in m.family.conventions else "paper"
    return model_scenario(m).replace(
        profile_name="megatron-te", precision=recipe("megatron"), zero=zero_stage(1), convention=conv,
        parallel=Parallel(sequence_parallel=True, moe_sequence_parallel=True))


CASES = [  # model, GPUs, EP values, s values (V3.2's sizes are step functions of s: one derivation per s)
    ("llama-3-8b", 16, (1,), (2048, 4096)),
    ("gpt2", 8, (1,), (512, 1024)),
    ("deepseek-v2-lite", 16, (1, 4), (2048, 4096)),
    ("deepseek-v3.2", 64, (8,), (4096,)),
]


@pytest.mark.parametrize("model, gpus, eps, ss", CASES, ids=[c[0] for c in CASES])
def test_compiled_equals_memory_under_megatron_te(model, gpus, eps, ss):
    pps = (4, 8) if model == "deepseek-v3.2" else (1, 2, 4)
    space = Space(base=megatron_base(model), gpus=gpus, tp=(1, 2, 4), cp=(1, 2), pp=pps, ep=eps, etp=(1,),
                  recompute=("none", "selective", "full"),
                  schedule=(Schedule("1f1b"), Schedule("interleaved", 2)), zero=(1,), microbatches=(None, 8),
                  s=ss, b=(1, 2))
    valid = sorted(compiled_records(space, chunk=7, ordinals=())[0])
    n = 6 if model == "deepseek-v3.2" else 24
    sample = sorted(random.Random(18).sample(valid, min(n, len(valid))))
    compiled, _ = compiled_records(space, chunk=7, ordinals=sample)
    ref, _ = reference_records(space, sample)
    assert len(ref) == len(sample) and any(r["cp"] == 2 for r in ref.values())
    for o, rec in ref.items():
        assert compiled[o] == rec, o


def test_issue_command_first_ranked_equals_memory(capsys):
    # issue 18: the Llama-3-70B / 64 GPUs / 8K sweep on the validated profile; its first ranked configuration's
    # peak_allocated is what `symmem memory` derives for the same settings, to the byte
    code = main(["sweep", "--model", "llama-3-70b", "--gpus", "64", "--gpu-memory", "80GB", "-s", "8192",
                 "--profile", "megatron-te", "--top", "3", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    d = json.loads(out)
    assert d["profile"] == "megatron-te" and d["ranked"]
    r = d["ranked"][0]
    code = main(["memory", "--model", "llama-3-70b", "--profile", "megatron-te", "--tp", str(r["tp"]),
                 "--cp", str(r["cp"]), "--pp", str(r["pp"]), "--dp", str(r["dp"]), "--recompute", r["recompute"],
                 "--schedule", r["schedule"].split(":")[0], "--microbatches", str(r["microbatches"]),
                 "-b", str(r["b"]), "-s", str(r["s"]), "--zero", str(r["zero"]), "--json"]
                + (["--chunks", r["schedule"].split(":")[1]] if ":" in r["schedule"] else []))
    out, err = capsys.readouterr()
    assert code == 0, err
    mem = json.loads(out)
    assert max(st["peak_allocated"] for st in mem["stages"]) == r["peak_allocated"]


def test_cp_must_divide_every_s(capsys):
    code = main(["sweep", "--model", "llama-3-8b", "--gpus", "8", "--cp", "1,3", "-s", "4096"])
    _, err = capsys.readouterr()
    assert code == 2 and "--cp 3: must divide" in err and err.count("\n") == 1  # the value refused, as a flag


def test_rank_by_time(capsys):
    # issue 19: with a GPU named the sweep ranks what fits by estimated iteration time, fastest first; each row's
    # time is what `symmem memory --gpu` estimates for the same settings
    code = main(["sweep", "--model", "llama-3-70b", "--gpus", "64", "--gpu", "H100", "-s", "8192", "--profile",
                 "megatron-te", "--top", "5", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    d = json.loads(out)
    assert d["rank_by"] == "time" and len(d["ranked"]) == 5
    times = [r["time_s"] for r in d["ranked"]]
    assert times == sorted(times)
    r = d["ranked"][0]
    argv = ["memory", "--model", "llama-3-70b", "--profile", "megatron-te", "--gpu", "H100", "--tp", str(r["tp"]),
            "--cp", str(r["cp"]), "--pp", str(r["pp"]), "--dp", str(r["dp"]), "--recompute", r["recompute"],
            "--microbatches", str(r["microbatches"]), "-b", str(r["b"]), "-s", str(r["s"]), "--zero", str(r["zero"]),
            "--json"]
    assert main(argv) == 0
    mem = json.loads(capsys.readouterr().out)
    assert mem["step"]["time_s"] == r["time_s"]
    # the listed rows carry the derived reserved (the caching allocator replayed): symmem memory's, stage by stage
    assert r["reserved"] == max(st["reserved"] for st in mem["stages"])
    assert all(isinstance(x["reserved"], int) for x in d["ranked"])
    # without a GPU's name: by headroom; asking for time then is one line
    assert main(["sweep", "--model", "gpt2", "--gpus", "8", "--top", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["rank_by"] == "headroom" and "reserved" not in d["ranked"][0]  # torch-eager says no allocation order
    assert main(["sweep", "--model", "gpt2", "--gpus", "8", "--rank-by", "time"]) == 2
    assert "needs a GPU by name" in capsys.readouterr().err
