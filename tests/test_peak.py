"""The peak, not the sum: the timeline against ten measured Megatron-LM runs (six at 4K, four long-context runs
under all-to-all context parallelism at 32K), and its invariants.

Facts and their sources: the measured max allocated per stage are SimuMax's published measurements of real
Megatron-LM runs on 8x B200 (github.com/MooreThreads/SimuMax, docs/b200/b200_release_v1.2_summary.md), shipped in
symmem/data/megatron_b200.json and read here from the project's own copy; nothing else in this file is a number
copied from symmem's output.
"""

from __future__ import annotations

import json
from fractions import Fraction
from importlib import resources

import pytest

from symmem.accounting.analysis import memory, stage_step_series, values
from symmem.accounting.evaluate import ceil_int, evaluate
from symmem.accounting.reserved import stage_reserved
from symmem.accounting.timeline import GATHERED
from symmem.cli.main import main
from symmem.parallel.schedule import Schedule
from symmem.scenario import load_scenario

RUNS = json.loads(resources.files("symmem.data").joinpath("megatron_b200.json").read_text())["runs"]
GIB = 2**30


@pytest.mark.parametrize("run", RUNS, ids=[r["case"] for r in RUNS])
def test_measured_runs_allocated_within_half_a_percent_and_reserved_within_three(run):
    # issue 18: allocated within 0.5 %, reserved (the caching allocator replayed) within 3 % of the measured max
    # over the stage's ranks; the per-rank figures are SimuMax's too
    measured = run["measured"]["per_stage_alloc_gib_derived"]
    reserved = run["measured"]["per_stage_reserved_gib_derived"]
    per_rank = run["measured"]["per_rank_mb"]
    per_stage = run["parallelism"]["world_size"] // run["parallelism"]["pp"]
    stages = memory(load_scenario(run["case"]))
    assert len(stages) == len(measured)
    for i, (key, st) in enumerate(zip(measured, stages, strict=True)):
        ours = st.peak_allocated / GIB
        assert abs(ours - measured[key]) / measured[key] < 0.005, (key, ours, measured[key])
        ranks = [per_rank[str(r)]["max_reserved_mb"] / 1024 for r in range(i * per_stage, (i + 1) * per_stage)]
        assert max(ranks) == pytest.approx(reserved[key], abs=1e-3)  # the per-stage figure is the ranks' maximum
        derived = stage_reserved(st.scenario, st.stage) / GIB
        assert abs(derived - reserved[key]) / reserved[key] < 0.03, (key, derived, reserved[key])
        low, high = st.reserved
        assert low / GIB <= reserved[key] <= high / GIB, (key, low / GIB, reserved[key], high / GIB)


def test_405b_cp8_reserved_per_rank():
    """Llama-3.1-405B at TP 1, CP 8: each rank holds its own eighth of the DDP buffers (rank 0 the output layer's,
    rank 7 the embedding's 2.1 billion elements), so the ranks differ in reserved memory. Every rank's replay is
    within 3 % of its own measurement, and the replay reproduces the measured differences between ranks whose
    peak is the first optimizer step (Adam's moments): 6,534 MiB between rank 0 and rank 3, 384 MiB between rank 6
    and rank 3 (measured, MiB as Megatron's report_memory prints them)."""
    from symmem.accounting.reserved import replay_stage

    run = next(r for r in RUNS if r["case"] == "llama3_405b_l4_tp1_cp8_pp1_dp1_seq32768_mbc4_cef")
    scn = load_scenario(run["case"])
    measured = {int(r): v["max_reserved_mb"] for r, v in run["measured"]["per_rank_mb"].items()}
    ours = {r: replay_stage(scn, scn.stages[0], r).peak_reserved / 2**20 for r in measured}
    for r in measured:
        assert abs(ours[r] - measured[r]) / measured[r] < 0.03, (r, ours[r], measured[r])
    for a, b in ((0, 3), (6, 3), (7, 3)):
        assert abs((ours[a] - ours[b]) - (measured[a] - measured[b])) <= 16, (a, b)


def test_cp_a2a_runs_allocated_within_a_tenth_of_a_percent():
    # issue 27: TE >= 2.8 keeps the attention output before the post-all-to-all under --cp-comm-type a2a; with it
    # the four long-context runs are within 0.1 % (without it they were 0.3 to 1.1 % low)
    for run in (r for r in RUNS if r["parallelism"]["cp"] > 1):
        assert run["parallelism"]["cp_comm_type"] == "a2a"
        (st,) = memory(load_scenario(run["case"]))
        measured = run["measured"]["per_stage_alloc_gib_derived"]["all_ranks"]
        assert abs(st.peak_allocated / GIB - measured) / measured < 0.001, (run["case"], st.peak_allocated / GIB)


def _series_max(scn, st) -> int:
    vals, known = values(scn), {}
    best = 0
    for ev in stage_step_series(scn, st):
        total = Fraction(0)
        for a in ev.amounts:
            if a.nbytes not in known:
                known[a.nbytes] = evaluate(a.nbytes, vals)
            total += known[a.nbytes]
        best = max(best, ceil_int(total))
    return best


@pytest.mark.parametrize("name, changes", [
    ("llama3_70b_l12_tp1_pp2_dp4_mbc4_cef", {}),
    ("deepseekv2_tp1_ep4_pp2_dp4_l4_mbc4_cef", {}),
    ("paper", {"recompute_name": "full", "zero": 3}),
    # the schedules' own orders (issue 22): GPipe holds every micro-batch, interleaving walks chunk by chunk
    ("llama3_70b_l12_tp1_pp2_dp4_mbc4_cef", {"schedule": Schedule("gpipe")}),
    ("llama3_70b_l12_tp1_pp2_dp4_mbc4_cef", {"schedule": Schedule("interleaved", 2)}),
    ("llama3_70b_l12_tp1_pp2_dp4_mbc4_cef", {"schedule": Schedule("interleaved", 3), "microbatches": 6}),
])
def test_candidate_peak_is_the_largest_event_of_the_whole_step(name, changes):
    """The peak is derived from candidate events (the last micro-batch in flight); walking every op of every
    micro-batch of the step in the schedule's own order finds no larger moment."""
    from symmem.accounting.states import zero_stage

    scn = load_scenario(name)
    if "zero" in changes:
        changes = {**changes, "zero": zero_stage(changes["zero"])}
    scn = scn.replace(**changes)
    for st in memory(scn)[:2]:
        walked = _series_max(scn, st.stage) + sum(st.peak.static.values())
        if scn.schedule.name != "interleaved":
            assert walked == st.peak_allocated
        else:  # the candidates count each chunk as 1/v of the stage; the walk has the real chunks, which differ by
            # what the embedding (chunk 0, tens of KiB above) and the head (chunk v-1: its 1 GiB of logits is held
            # by fewer chunks in flight than 1/v of every one: 0.8-1.1 % below at v = 3) keep. The candidate is an
            # upper bound but for the embedding's few KiB; how loose is named in docs/sweep.md and this test
            assert walked <= st.peak_allocated + 2**20, (walked, st.peak_allocated)
            assert st.peak_allocated - walked < 0.02 * st.peak_allocated, (walked, st.peak_allocated)


def test_peak_holds_at_least_the_sum_under_the_paper_rules():
    for st in memory(load_scenario("paper")):
        assert st.peak_allocated >= st.allocated


def test_zero3_gathers_the_layer_being_run():
    """Under ZeRO-3 the peak holds the current layer's parameters (and the next one's, prefetched) in full."""
    from symmem.accounting.params import weight_uses
    from symmem.accounting.states import ZeroStage
    from symmem.graph import local_size
    from symmem.model import stage_parts

    scn = load_scenario("paper").replace(zero=ZeroStage.OS_G_P)
    st = memory(scn)[1]
    part = next(p for p in stage_parts(scn.model, st.stage, scn.convention) if p.name == st.peak.event.part)
    layer = sum(local_size(u.weight.dims, scn.parallel.axis_sizes()) for u in weight_uses([part]))
    expected = 2 * scn.precision.weight_bytes * ceil_int(evaluate(layer, values(scn)))  # current + prefetched
    assert st.peak.dynamic[GATHERED] == expected


def test_full_recomputation_holds_the_recomputed_layer():
    """Under full recomputation the peak holds, besides the checkpoints, the whole working set of the layer being
    recomputed: at least its saved tensors without recomputation."""
    from symmem.accounting.analysis import stage_activation_expr, to_int

    full = load_scenario("paper").replace(recompute_name="full")
    none = load_scenario("paper")
    st_full, st_none = memory(full)[1], memory(none)[1]
    per_layer = to_int(stage_activation_expr(none, st_none.stage, "moe"), values(none)) // 4
    assert st_full.peak_allocated - st_full.allocated >= per_layer


def _json(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("flags", [
    [], ["--tp", "2", "--dp", "2"], ["--pp", "1", "--dp", "8"], ["--microbatches", "8"], ["-s", "8192"],
    ["--cp", "2", "--dp", "2"], ["--model", "llama-3-8b", "--dp", "4"],
])
def test_memory_json_for_a_run_and_changed_flags(capsys, flags):
    code, out, err = _json(capsys, "memory", "--scenario", "llama3_70b_l12_tp1_pp2_dp4_mbc4_cef", "--json", *flags)
    assert code == 0, err
    for st in json.loads(out)["stages"]:
        assert isinstance(st["peak_allocated"], int) and st["peak_allocated"] > 0
        assert st["reserved_low"] <= st["reserved_high"]
        assert set(st["peak_event"]) >= {"phase", "part", "op"}


def test_memory_json_for_a_moe_run_with_flags(capsys):
    for flags in ([], ["--ep", "8", "--dp", "8", "--pp", "1"],
                  ["--model", "deepseek-v2-lite", "--pp", "1", "--dp", "8"]):
        code, out, err = _json(capsys, "memory", "--scenario", "deepseekv2_tp1_ep4_pp2_dp4_l4_mbc4_cef", "--json",
                               *flags)
        assert code == 0, (flags, err)


@pytest.mark.parametrize("flags, words", [
    (["--cp", "3", "--dp", "4"], "must divide the sequence length"),
    (["--cp", "2", "--dp", "16", "--rules", "torch-eager"], "no context-parallel rule"),
    (["--profile", "nonesuch"], "profile = 'nonesuch': unknown"),
])
def test_bad_profile_and_cp_input(capsys, flags, words):
    code, out, err = _json(capsys, "memory", *flags)
    assert code == 2 and err.count("\n") == 1 and words in err, err


def test_timeline_figure(capsys, tmp_path):
    out = tmp_path / "step.png"
    code, stdout, err = _json(capsys, "timeline", "--scenario", "deepseekv2_tp1_ep4_pp2_dp4_l4_mbc4_cef",
                              "--stage", "0", "--out", str(out), "--json")
    assert code == 0, err
    data = json.loads(stdout)
    st = memory(load_scenario("deepseekv2_tp1_ep4_pp2_dp4_l4_mbc4_cef"))[0]
    assert data["peak_allocated"] == st.peak_allocated
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _walked(scn, i: int) -> int:
    """Stage i's dynamic bytes at the largest event of the step walked in the schedule's real order, by component
    as symmem memory's peak breakdown adds them."""
    from symmem.accounting.timeline import stage_peak

    return sum(stage_peak(stage_step_series(scn, scn.stages[i]), {}, values(scn), Fraction(1)).dynamic.values())


def test_zb1p_peak_is_the_walk_of_its_real_order():
    # ZB-H1's stages after the first keep deferred weight-gradient operands from B to W (symmem/accounting/
    # deferred.py); a count of micro-batches between F and B leaves them out. symmem memory's peak of every stage
    # is the walk of the real order (symmem timeline's), and walking more micro-batches than 2·PP + 2 changes no
    # stage's peak (the order repeats one F, B, W step from the (PP + 1)-th micro-batch on)
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    def scn(m):
        return scenario_from_args(build_parser().parse_args(
            ["memory", "--model", "llama-3-8b", "--profile", "megatron-te", "--pp", "4", "--schedule", "zb1p",
             "--microbatches", str(m), "-s", "1024"]))

    walked = _walked
    big = scn(16)
    mems = memory(big)
    for i in range(4):
        assert sum(mems[i].peak.dynamic.values()) == walked(big, i)  # wiring: memory's zb1p peak is the walk
        assert walked(scn(4), i) == walked(scn(10), i) == walked(big, i)  # the cap at 2·PP + 2 loses nothing
    # the last stage holds one micro-batch between F and B but three micro-batches' weight-gradient operands
    assert mems[3].in_flight == 1 and sum(mems[3].peak.dynamic.values()) > sum(mems[0].peak.dynamic.values())


def test_dualpipe_holds_its_stage_and_the_mirror_stage():
    # DualPipe: GPU i runs stage i and stage PP - 1 - i (deepseek-ai/DualPipe); its model states are both stages'
    # (the first GPU holds the embedding and the head once each), its peak the walk of the real order, which more
    # micro-batches than 2·PP + 2 do not change
    from symmem.accounting.analysis import stage_params, stage_states
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    def scn(schedule, m):
        return scenario_from_args(build_parser().parse_args(
            ["memory", "--model", "llama-3-8b", "--pp", "4", "--schedule", schedule, "--microbatches", str(m),
             "-s", "1024"]))

    plain = scn("1f1b", 8)
    one = [stage_states(plain, stage_params(plain, st)) for st in plain.stages]
    dual = scn("dualpipe", 16)
    mems = memory(dual)
    for i, m in enumerate(mems):
        a, b = one[i], one[3 - i]
        assert (m.states.weights, m.states.optimizer) == (a.weights + b.weights, a.optimizer + b.optimizer)
        walked = _walked(dual, i)
        assert sum(m.peak.dynamic.values()) == walked  # wiring: memory's DualPipe peak is the walk
        # the least M DualPipe runs: more micro-batches change no peak
        assert _walked(scn("dualpipe", 8), i) == walked
    assert mems[0].states.weights != 2 * one[0].weights  # not two copies of stage 0: the head is not the embedding


@pytest.mark.parametrize("zero", [2, 3])
def test_reserved_is_not_replayed_under_zero_2_or_3(zero):
    # issues 27 and 29: the replay writes Megatron's DDP and distributed optimizer (ZeRO 1); under ZeRO 2/3 it
    # gave ZeRO 1's reserved figure unchanged (79.2 GB for a 32.6 GB peak); now it says why it gives none
    from symmem.accounting.reserved import replay_refusal
    from symmem.accounting.states import zero_stage

    scn = load_scenario("llama3_70b_l12_tp8_pp1_dp1_mbc4_cef").replace(zero=zero_stage(zero))
    st = scn.stages[0]
    assert stage_reserved(scn, st) is None
    assert replay_refusal(scn, st).startswith(f"ZeRO {zero}: the replay writes Megatron-LM's DDP")
    assert stage_reserved(scn.replace(zero=zero_stage(1)), st) is not None
