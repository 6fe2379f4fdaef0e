"""Ranking by time on the compiled path (symmem/sweep/timetable.py, issue 27): every configuration that fits is
timed on its tile's arrays, and that time is `symmem.steptime.step_time`'s, configuration by configuration (the
figure `symmem memory --gpu` prints), to float rounding."""

import dataclasses

import pytest

from symmem.accounting.states import recipe, zero_stage
from symmem.config import load_model
from symmem.parallel.schedule import Schedule
from symmem.parallel.sizes import Parallel
from symmem.scenario import model_scenario
from symmem.steptime import step_time
from symmem.sweep.space import Space, microbatch_candidates, sweep
from symmem.sweep.timing import scenario_of

REL = 1e-9


def _space(s, b, gpus=32, gbs=128, model="llama-3-8b", **axes) -> Space:
    base = model_scenario(load_model(model)).replace(
        profile_name="megatron-te", precision=recipe("megatron"), zero=zero_stage(1), gpu_name="H100",
        parallel=Parallel(sequence_parallel=True, moe_sequence_parallel=True))
    kw = {"tp": (1, 2, 4), "cp": (1, 2), "pp": (1, 2, 4), "ep": (1,), "etp": (1,),
          "recompute": ("none", "selective", "full"),
          "schedule": (Schedule("1f1b"), Schedule("interleaved", 2)), "zero": (1,), **axes}
    m = microbatch_candidates(gpus, kw["tp"], kw["cp"], kw["pp"], b, gbs)
    return Space(base, gpus, s=s, b=b, microbatches=m, global_batch=gbs, **kw)


def _check_every_fitting_configuration(space):
    summary = sweep(space, top=0, rank_by="time")
    assert summary.fits > 20 and len(summary.ranked) == summary.fits
    for r in summary.ranked:
        st = step_time(scenario_of(space, r))
        for key, want in (("time_s", st.time_s), ("tokens_per_s", st.tokens_per_s),
                          ("tokens_per_s_per_gpu", st.tokens_per_s_per_gpu), ("mfu", st.mfu)):
            assert r[key] == pytest.approx(want, rel=REL), (key, r)
    times = [(r["time_s"], r["ordinal"]) for r in summary.ranked]
    assert times == sorted(times)  # fastest first, ties in sweep order
    return summary


def test_through_the_forms_equals_step_time():
    # 4 sequence lengths x 3 micro-batch sizes: more points than are read directly, so the costs go through the
    # forms read at six (b, s) points (steptime/forms.py), extrapolated here to 4x the first s
    _check_every_fitting_configuration(_space(s=(2048, 4096, 6144, 8192), b=(1, 2, 4)))


def test_read_directly_equals_step_time():
    summary = _check_every_fitting_configuration(_space(s=(4096,), b=(1, 2, 4)))
    assert {r["schedule"] for r in summary.ranked} == {"1f1b", "interleaved:2"}


def test_moe_with_expert_parallelism_equals_step_time():
    space = _space(s=(1024, 2048, 4096), b=(1, 2, 4), gpus=16, gbs=64, model="deepseek-v2-lite", tp=(1, 2),
                   cp=(1,), pp=(1, 2), ep=(1, 2, 4), recompute=("none", "full"), schedule=(Schedule("1f1b"),))
    space = dataclasses.replace(space, base=space.base.replace(gpu_memory=200 * 2**30))
    _check_every_fitting_configuration(space)


def test_top_k_is_the_head_of_the_whole_ranking():
    space = _space(s=(2048, 4096, 8192), b=(1, 2))
    whole = sweep(space, top=0, rank_by="time").ranked
    top = sweep(space, top=7, rank_by="time").ranked
    assert [r["ordinal"] for r in top] == [r["ordinal"] for r in whole[:7]]
    assert [r["time_s"] for r in top] == [r["time_s"] for r in whole[:7]]


def test_step_time_of_1f1b_is_not_taken_from_an_interleaved_run():
    # the per-stage costs were cached without the schedule, so a 1F1B configuration timed after the same
    # arrangement interleaved got the interleaved pipeline's sends (one per chunk, comm.pipeline_bytes)
    from symmem import steptime

    space = _space(s=(4096,), b=(1,))
    rec = {"tp": 2, "cp": 1, "pp": 4, "ep": 1, "etp": 1, "recompute": "none", "zero": 1, "microbatches": 8,
           "s": 4096, "b": 1}
    one, inter = (scenario_of(space, {**rec, "schedule": sch}) for sch in ("1f1b", "interleaved:2"))
    steptime._COSTS.clear()
    alone = step_time(one)
    steptime._COSTS.clear()
    step_time(inter)
    after = step_time(one)
    assert after.comm_bytes["pp"] == alone.comm_bytes["pp"] < step_time(inter).comm_bytes["pp"]
    assert after.time_s == alone.time_s


def test_ranking_by_time_needs_a_gpu_with_speeds():
    from symmem.errors import SymmemError

    space = _space(s=(4096,), b=(1,))
    for name, words in ((None, "needs a GPU by name"), ("MI300X", "no speed figures")):
        bad = dataclasses.replace(space, base=space.base.replace(gpu_name=name))
        with pytest.raises(SymmemError, match=words):
            sweep(bad, rank_by="time")


def test_two_processes_rank_by_time_as_one(monkeypatch):
    # the pipeline depths shared with a forked child (symmem/_twocores.py): the child's records come back with
    # their binding events found (no closure crosses the pipe), the same ranking and records as one process
    from symmem import _twocores
    from symmem.sweep.compile import clear_cache
    from symmem.sweep.evaluate import finish_events

    space = _space(s=(2048, 4096), b=(1, 2))
    results = []
    for cores in (1, 2):
        monkeypatch.setattr(_twocores, "_cores", lambda cores=cores: cores)
        clear_cache()
        results.append(finish_events(sweep(space, top=9, lazy_events=True, rank_by="time").ranked))
    assert len(results[0]) == 9 and results[0] == results[1]
