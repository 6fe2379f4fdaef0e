"""The sweep planner: the compiled path against the per-configuration loop, the rules, ranking, CLI, bad input."""

import json
import math
import random
from fractions import Fraction

import numpy as np
import pytest

from symmem.cli import commands
from symmem.cli import sweep as sweep_cli
from symmem.cli.main import _Parser, main
from symmem.config import load_model
from symmem.errors import SymmemError
from symmem.parallel.layout import LayoutSpec
from symmem.parallel.routing import Routing
from symmem.parallel.schedule import SCHEDULES, Schedule
from symmem.parallel.sizes import Parallel
from symmem.scenario import load_scenario
from symmem.sweep.compile import Poly, compile_case
from symmem.sweep.space import RULES, Space, compiled_records, reference_records, sweep
from symmem.symbols import sym


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    monkeypatch.setitem(commands.COMMANDS, "sweep", sweep_cli.COMMAND)


def base_of(name="paper", model=None, **changes):
    scn = load_scenario(name)
    par = scn.parallel
    ch = {"parallel": Parallel(sequence_parallel=par.sequence_parallel,
                               moe_sequence_parallel=par.moe_sequence_parallel),
          "layout": LayoutSpec(), "schedule": Schedule(), "microbatches": None, **changes}
    if model:
        ch["model"] = load_model(model)
    return scn.replace(**ch)


def lite_space(**changes):
    kw = dict(base=base_of(model="deepseek-v2-lite"), gpus=16, tp=(1, 2, 4), pp=(1, 2, 3, 8), ep=(1, 8, 128),
              etp=(1, 2), recompute=("none", "full", "selective"),
              schedule=(Schedule("1f1b"), Schedule("interleaved", 2), Schedule("gpipe")),
              zero=(0, 1, 3), microbatches=(None, 4, 6), s=(512, 4096), b=(1, 3))
    kw.update(changes)
    return Space(**kw)


def v3_space(**changes):
    hist = tuple(str(1 + (i * 37) % 11) for i in range(256))
    kw = dict(base=base_of("paper-megatron", mtp=True, routing=Routing("histogram", histogram=hist)), gpus=1024,
              tp=(2, 8), pp=(16, 32), ep=(8, 64), etp=(1,), recompute=("none", "deepseek"),
              schedule=(Schedule("1f1b"), Schedule("interleaved", 3)), zero=(0, 2), microbatches=(None, 48),
              s=(4096, 32768), b=(1, 2, 7))
    kw.update(changes)
    return Space(**kw)


def first_rule(rejections, config):
    hits = sorted((r for r in rejections if r.matches(config)), key=lambda r: RULES.index(r.rule))
    return hits[0].reason if hits else None


@pytest.mark.parametrize("make,n", [(lite_space, 260), (v3_space, 48)])  # V3: 16-32 stage timelines each
def test_compiled_equals_reference(make, n):
    space = make()
    valid = sorted(compiled_records(space, chunk=7, ordinals=())[0])  # small tiles: every tiling path runs
    rng = random.Random(6)
    rejected = sorted(set(range(space.size)) - set(valid))
    sample = sorted(rng.sample(valid, min(n, len(valid))) + rng.sample(rejected, min(n // 4, len(rejected))))
    compiled, rejections = compiled_records(space, chunk=7, ordinals=sample)  # full records of the sample
    ref, ref_rej = reference_records(space, sample)
    assert len(ref) >= min(n, len(valid)) and ref_rej
    for o, rec in ref.items():
        assert compiled[o] == rec, o
    for o, reason in ref_rej.items():
        assert o not in compiled
        assert first_rule(rejections, space.config(o)) == reason
    assert sum(r.count for r in rejections) + len(compiled) == space.size


def test_hundreds_identical_all_paths_small_space():
    # every configuration of a space, both paths, identical numbers (and identical rejections)
    space = lite_space(tp=(2,), etp=(1,), ep=(1, 8), recompute=("full", "none"), zero=(0, 3), b=(1, 2),
                       s=(1024, 2048), microbatches=(None, 4))
    compiled, rejections = compiled_records(space, chunk=5)
    ref, ref_rej = reference_records(space)
    assert len(ref) >= 200 and compiled == ref
    assert {o: first_rule(rejections, space.config(o)) for o in ref_rej} == ref_rej


@pytest.mark.parametrize("impl", [{}, {"attn_impl": "sdpa", "experts_impl": "grouped_mm"}])
def test_hf_dataflow_derived_apart_at_b_1_and_s_1(impl):
    # torch-eager follows Hugging Face's dataflows, which differ at b = 1 and s = 1 (reshapes become views)
    space = lite_space(base=base_of(model="deepseek-v2-lite", rules_name="torch-eager", **impl), tp=(1, 2),
                       pp=(1, 3), ep=(1, 8), etp=(1,), recompute=("none", "full"), schedule=(Schedule("1f1b"),),
                       zero=(0,), microbatches=(None,), s=(1, 64, 4096), b=(1, 2, 3))
    compiled, _ = compiled_records(space, chunk=5)
    ref, _ = reference_records(space)
    # 72 valid of the space's 144: a regression value of the sweep's rejection rules at c51ecda (the test's fact is
    # compiled == ref, two paths agreeing)
    assert len(ref) == 72 and compiled == ref


def test_summary_ranks_and_counts_match_records():
    space = lite_space()
    recs, _ = compiled_records(space)
    s = sweep(space, top=15, chunk=11)
    assert s.valid == len(recs)
    assert s.fits == sum(r["verdict"] == "fits" for r in recs.values())
    assert s.marginal == sum(r["verdict"].startswith("fits only") for r in recs.values())
    expect = sorted((r for r in recs.values() if r["verdict"] == "fits"), key=lambda r: (-r["headroom"], r["ordinal"]))
    assert s.ranked == expect[:15]
    assert sweep(space, top=0).ranked == expect
    with_marginal = sweep(space, top=0, marginal=True).ranked
    assert len(with_marginal) == s.fits + s.marginal
    assert [r["ordinal"] for r in with_marginal[: len(expect)]] == [r["ordinal"] for r in expect]


def test_chunk_size_does_not_change_results():
    space = v3_space()
    a = sweep(space, top=0, region=True, chunk=3)
    b = sweep(space, top=0, region=True, chunk=1 << 20)
    assert a.ranked == b.ranked and (a.valid, a.fits, a.marginal) == (b.valid, b.fits, b.marginal)
    assert a.rejections == b.rejections
    assert all((x == y).all() for k in a.region for x, y in zip(a.region[k], b.region[k], strict=True))


def test_derived_once_per_structural_case(monkeypatch):
    import symmem.accounting.analysis as A
    from symmem import _twocores
    from symmem.sweep import compile as sweep_compile

    calls = []
    real = A.stage_activation_expr
    monkeypatch.setattr(A, "stage_activation_expr", lambda *a, **k: calls.append(a[1].index) or real(*a, **k))
    monkeypatch.setattr(_twocores, "_cores", lambda: 1)  # (calls counted in this process: no depth in a child)
    sweep_compile.clear_cache()
    space = lite_space(pp=(2, 4), recompute=("none", "full"))
    s = sweep(space)
    assert s.valid > 500 and s.cases == 4  # PP x recompute; TP, EP, ETP, ZeRO, schedule, M, s, b never re-derive
    assert len(calls) == 2 * (2 + 4)  # each stage of each case, once


def test_stage_classes_and_layout_depend_on_pp():
    base = base_of()
    scn = base.replace(parallel=Parallel(tp=2, pp=16, ep=8, dp=32, sequence_parallel=True))
    case = compile_case(scn)
    assert [c.index for c in case.classes] == [0, 1, 15] and case.classes[1].members == tuple(range(1, 15))
    # CP = 1 here: CP is a variable of the polynomials only where it is above 1
    assert case.classes[1].activation.variables == {"b", "s", "t", "ep", "etp"}
    assert all(p.variables <= {"t", "ep", "etp"} for p in case.classes[1].params)


@pytest.mark.parametrize("name", SCHEDULES)
def test_in_flight_never_grows_with_stage(name):
    # what lets a class of identical stages be represented by its lowest stage
    sched = Schedule(name, 3 if name == "interleaved" else 1)
    for pp in (2, 4, 6, 16):
        for m in range(sched.default_microbatches(pp), 4 * pp + 1, pp if name == "interleaved" else 2):
            k = [sched.in_flight(i, pp, m) for i in range(pp)]
            assert all(a >= b for a, b in zip(k[:-1], k[1:], strict=True))


# ------------------------------------------------------------------------------------------- exactness
def test_poly_exact_above_2_53_and_past_int64():
    b, s, t = sym("b"), sym("s"), sym("t")
    p = Poly.compile(Fraction(7, 3) * b * s**2 / t + 5 * b * s + 1, {}, ("b", "s", "t"))
    bs = np.array([1, 3, 1000, 4096])[:, None]
    ss = np.array([4096, 10**6 + 1, 2**22 + 3])[None, :]
    got = p.ceil_array({"b": bs, "s": ss, "t": 3})
    assert got.dtype == np.int64 and got.max() > 2**53
    for i, bv in enumerate(bs[:, 0]):
        for j, sv in enumerate(ss[0]):
            exact = Fraction(7, 3) * int(bv) * int(sv) ** 2 / 3 + 5 * int(bv) * int(sv) + 1
            assert got[i, j] == math.ceil(exact)
    huge = p.ceil_array({"b": np.array([2**20]), "s": np.array([2**40]), "t": np.array([1])})
    assert huge.dtype == object and huge[0] == math.ceil(Fraction(7, 3) * 2**100 + 5 * 2**60 + 1)


def test_sweep_past_int64_saturates_as_does_not_fit():
    space = lite_space(tp=(1,), pp=(1,), ep=(1,), etp=(1,), recompute=("none",), schedule=(Schedule("gpipe"),),
                       zero=(0,), microbatches=(10**6,), s=(2**33,), b=(2**20,))
    s = sweep(space, top=0)
    assert s.valid == 1 and s.fits == 0 and s.marginal == 0


# ------------------------------------------------------------------------------------------------- CLI
def cli(capsys, *args):
    code = main(["sweep", *args])
    out, err = capsys.readouterr()
    return code, out, err


SMALL = ("--model", "deepseek-v2-lite", "--gpus", "16", "--tp", "1,2", "--pp", "1-4", "--ep", "1-64:x4",
         "-b", "1-2", "--zero", "0,3")


def test_cli_json(capsys):
    code, out, err = cli(capsys, *SMALL, "--json", "--rejected", "--top", "5")
    assert code == 0, err
    d = json.loads(out)
    c = d["counts"]
    # TP 2, PP 4, EP 4, recompute 3 (the default none,selective,full), b 2, ZeRO 2
    assert c["valid"] + c["rejected"] == c["configurations"] == 2 * 4 * 4 * 3 * 2 * 2
    assert c["fit"] + c["fit_only_at_low_end"] + c["do_not_fit"] == c["valid"]
    assert len(d["ranked"]) == 5 and d["ranked"][0]["rank"] == 1
    assert [r["headroom"] for r in d["ranked"]] == sorted((r["headroom"] for r in d["ranked"]), reverse=True)
    first = d["ranked"][0]
    assert first["binding"] in ("weights", "gradients", "optimizer", "dynamic")
    assert first["event"].split()[0] in ("forward", "backward") and first["peak_allocated"] < first["low"]
    assert first["high"] <= d["gpu_memory"] and first["verdict"] == "fits"
    assert {r["rule"] for r in d["rejected"]} <= set(RULES) and all(r["reason"] for r in d["rejected"])
    assert sum(r["configurations"] for r in d["rejected"]) == c["rejected"]


def test_cli_text_csv_progress(capsys):
    code, out, err = cli(capsys, *SMALL, "--rejected", "--progress")
    assert code == 0 and "ranked by headroom" in out and "rejected:" in out and "layout" in out
    assert "sweep [" in err and "configurations" in err
    code, out, _ = cli(capsys, *SMALL, "--csv")
    lines = out.splitlines()
    assert lines[0].startswith("rank,tp,cp,pp,ep,etp") and len(lines) == 21
    code, out, _ = cli(capsys, *SMALL, "--csv", "--rejected")
    assert out.splitlines()[0] == ",".join(sweep_cli.REJECT_COLUMNS)


@pytest.mark.parametrize("ext", ["png", "pdf"])
def test_plot_is_deterministic(capsys, tmp_path, ext):
    paths = [tmp_path / f"a.{ext}", tmp_path / f"b.{ext}"]
    for p in paths:
        code, _, err = cli(capsys, *SMALL, "--plot", str(p))
        assert code == 0, err
    data = [p.read_bytes() for p in paths]
    assert data[0] == data[1] and len(data[0]) > 1000
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".symmem-")]


@pytest.mark.parametrize("size", ["80GB", "80GiB", "80e9"])
def test_sizes_accepted(capsys, size):
    code, out, err = cli(capsys, *SMALL, "--gpu-memory", size, "--json")
    assert code == 0, err
    assert json.loads(out)["gpu_memory"] == {"80GB": 80 * 10**9, "80GiB": 80 * 2**30, "80e9": 80 * 10**9}[size]


BAD = [
    (("-b", "8-4"), "is empty"),
    (("-s", ""), "empty"),
    (("--tp", "1,,x"), "not an integer or a range"),
    (("--gpus", "6", "--tp", "4", "--pp", "4"), "no TP·PP of the sweep divides it"),
    (("--gpus", "0"), "must be a positive integer"),
    (("--gpu-memory", "eighty"), "not a size"),
    (("--recompute", "sometimes"), "unknown policy"),
    (("--schedule", "zigzag"), "unknown schedule"),
    (("--zero", "0-4"), "ZeRO stage must be"),
    (("--plot", "x.gif"), "unknown figure format"),
    (("--top", "-1"), "positive integer"),
    (("--activation-dtype", "fp8"), "--activation-dtype = 'fp8'"),
]


def test_fixed_settings_are_every_commands_flags(capsys):
    # the sweep's fixed settings go through cli/args.py like every other command's: --profile, --activation-dtype,
    # --dataflow are accepted, and a preset of any family, with its help listing them all
    code, out, err = cli(capsys, *SMALL, "--profile", "torch-eager", "--activation-dtype", "fp32", "--json")
    assert code == 0, err
    settings = json.loads(out)
    assert (settings["rules"], settings["profile"], settings["activation_bytes"]) == ("torch-eager", "torch-eager", 4)
    code, out, err = cli(capsys, *SMALL, "--model", "gpt2", "--json")
    assert code == 0 and json.loads(out)["model"] == "gpt2", err
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    help_text = capsys.readouterr().out
    for preset in ("deepseek-v3", "deepseek-v4-flash", "llama-3-8b", "gpt2", "korthikanti"):
        assert preset in help_text


@pytest.mark.parametrize("extra,needle", BAD)
def test_bad_input_one_line_exit_2(capsys, extra, needle):
    args = list(SMALL)
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    code, out, err = cli(capsys, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("symmem: error: ") and needle in err, err


def test_parse_ints_ranges():
    assert sweep_cli.parse_ints("1-4", "x") == (1, 2, 3, 4)
    assert sweep_cli.parse_ints("1024-4096:1024,1", "x") == (1, 1024, 2048, 3072, 4096)
    assert sweep_cli.parse_ints("1-256:x2", "x") == tuple(2**i for i in range(9))
    assert sweep_cli.parse_microbatches("pp,8-16:8") == (None, 8, 16)
    assert sweep_cli.parse_recompute("none,custom:rmsnorm,core_attention,full") == (
        "none", "custom:rmsnorm,core_attention", "full")
    with pytest.raises(SymmemError):
        sweep_cli.parse_ints("3-1", "x")


def test_parser_built_in_tests_runs(capsys):
    p = _Parser(prog="symmem sweep")
    sweep_cli.add_args(p)
    args = p.parse_args([*SMALL, "--top", "3"])
    assert sweep_cli.run(args) == 0
    assert "top 3 that fit" in capsys.readouterr().out


# ------------------------------------------------------------------------------------- ranked by the peak
def test_pruned_candidates_keep_the_maximum():
    # dropping dominated events never changes the maximum: checked at random positive points
    from symmem.sweep.compile import dominates, prune

    scn = base_of().replace(parallel=Parallel(tp=2, pp=16, ep=8, dp=32, sequence_parallel=True))
    rng = random.Random(3)
    for c in compile_case(scn).classes:
        assert c.events and sum(len(g.candidates) for g in c.groups) < len(c.events)
        for g in c.groups:
            members = [e.own for e in c.events if (e.zero2, e.zero3) == (g.zero2, g.zero3)]
            assert prune(members) == g.candidates
            assert all(any(dominates(q, p) for q in g.candidates) for p in members)
            for _ in range(5):
                at = {"b": rng.randint(1, 8), "s": rng.choice((512, 4096, 8192)), "t": rng.choice((1, 2, 8)),
                      "ep": rng.choice((1, 8, 64)), "etp": 1, "cp": rng.choice((1, 2, 4))}
                assert max(p.value(at) for p in g.candidates) == max(p.value(at) for p in members)


def test_zero3_and_full_recompute_ranked_by_the_peak():
    # the gathered layer and the recomputed working set are in the ranked figure, not only the sum
    from symmem.accounting.analysis import memory

    space = v3_space(base=base_of(), gpus=1024, tp=(4,), pp=(2,), ep=(1,), recompute=("full",),
                     schedule=(Schedule("1f1b"),), zero=(3,), microbatches=(None,), s=(4096,), b=(1,))
    (rec,) = compiled_records(space)[0].values()
    assert reference_records(space)[0] == {rec["ordinal"]: rec}
    from symmem.sweep.space import make_parallel, pipeline_layout

    scn = space.base.replace(parallel=make_parallel(space.base, 1024, 4, 2, 1, 1), recompute_name="full", zero=3,
                             layout=pipeline_layout(space.base, 2))
    stage = max(memory(scn), key=lambda m: m.peak_allocated)
    assert rec["peak_allocated"] == stage.peak_allocated > stage.allocated + 20 * 2**30
    assert rec["event"].startswith("backward") and rec["binding"] == "dynamic"


@pytest.mark.parametrize("name,layers", [("deepseek-v3.2", 4), ("deepseek-v4-flash", 4)])
def test_stepwise_models_compiled_per_s_equal_reference(name, layers):
    # V3.2's Min(k_I, s) selected keys and V4's floor(s/m_C), floor(s/m_H), Min(s_w, s) are step functions of s:
    # no polynomial, so the sweep compiles each s on its own (this used to be an internal error, exit 3). The s
    # values straddle the steps: below and above the window s_w = 128 and the indexer's k_I = 2048 selections.
    from importlib import resources

    # the first layers, per-layer lists cut to match (V4's first 4: every attention kind, hash-routed and top-k
    # MoE layers; V3.2's: dense and sparse MLPs)
    raw = json.loads(resources.files("symmem.presets").joinpath(f"{name}.json").read_text())
    overrides = {k: v[:layers] for k, v in raw.items() if isinstance(v, list) and len(v) == raw["num_hidden_layers"]}
    overrides["num_hidden_layers"] = layers
    model = load_model(name, overrides)
    space = Space(base=base_of().replace(model=model), gpus=8, tp=(1, 2), pp=(1, 2), ep=(1, 8), etp=(1,),
                  recompute=("none", "full"), schedule=(Schedule("1f1b"),), zero=(0, 3), microbatches=(None,),
                  s=(64, 1000, 12288), b=(1, 2))
    compiled, _ = compiled_records(space, chunk=5)
    ref, _ = reference_records(space)
    assert len(ref) >= 40 and compiled == ref
    assert {r["s"] for r in ref.values()} == {64, 1000, 12288}  # each s compiled on its own, each compared


@pytest.mark.parametrize("schedule", ["zb1p", "dualpipe"])
def test_walked_schedules_sweep_configuration_by_configuration(capsys, schedule):
    # ZB-H1's and DualPipe's peaks are walked in their real order (symmem memory), which the compiled path does not
    # do: a sweep with them evaluates one by one, so each row is symmem memory's
    import json

    from symmem.cli.main import main

    argv = ["--model", "gpt2", "--gpus", "4", "--schedule", schedule, "--pp", "2,4", "--tp", "1", "--recompute",
            "none", "--zero", "1", "-s", "1024"]
    assert main(["sweep", *argv, "--top", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["ranked"][0]
    assert main(["memory", "--model", "gpt2", "--schedule", schedule, "--pp", str(r["pp"]), "--dp", str(r["dp"]),
                 "--recompute", "none", "--zero", "1", "-s", "1024", "--microbatches", str(r["microbatches"]),
                 "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert max(st["peak_allocated"] for st in mem["stages"]) == r["peak_allocated"]
    assert main(["sweep", *argv, "--plot", "x.png"]) == 2
    assert schedule in capsys.readouterr().err


@pytest.mark.parametrize("kw", [dict(top=7), dict(top=0, marginal=True, region=True)])
def test_two_processes_sweep_as_one(monkeypatch, kw):
    # the pipeline depths shared with a forked child (symmem/_twocores.py) and merged in sweep order: the same
    # counts, records (their order, ties in sweep order), rejections (their order too) and plot region as one
    # process
    from symmem import _twocores
    from symmem.sweep.compile import clear_cache

    space = lite_space()
    results = []
    for cores in (1, 2):
        monkeypatch.setattr(_twocores, "_cores", lambda cores=cores: cores)
        clear_cache()  # (each derives its cases afresh)
        results.append(sweep(space, **kw))
    one, two = results
    assert len(space.pp) > 2 and one.valid > 500 and one.ranked
    for name in ("total", "valid", "fits", "marginal", "cases", "rejections", "ranked"):
        assert getattr(one, name) == getattr(two, name), name
    assert one.region.keys() == two.region.keys()
    for key, rows in one.region.items():
        assert all(np.array_equal(a, b) for a, b in zip(rows, two.region[key], strict=True))

