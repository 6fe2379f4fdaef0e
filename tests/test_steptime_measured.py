"""The measured-kernels step-time model (symmem/steptime/measured.py): its constants are its fit, it meets the
issue's leave-one-kind-out targets on the measured iterations, a collective's time is SimuMax's formula by hand,
`symmem memory --gpu B200` uses it exactly where it applies, and the sweep ranks by the same times."""

from __future__ import annotations

import pytest

from derivations.measured_step_times import measured_kernel_by_kind, measured_kernel_rows
from symmem.hardware import gpu
from symmem.steptime import measured, step_time
from symmem.steptime.kernels import profile


def test_constants_are_the_fit():
    k = measured.fit([r for rs in measured_kernel_rows().values() for r in rs])
    digits = {"gemm_slowdown": 5, "attention_slowdown": 5, "launch_s": 3, "fixed_s": 4}  # as KERNEL_CONSTANTS shows
    for name, value in measured.KERNEL_CONSTANTS["B200"].as_dict().items():
        assert float(f"{getattr(k, name):.{digits[name]}g}") == value, name
    assert k.gemm_slowdown >= 1 and k.attention_slowdown >= 1 and k.launch_s >= 0 and k.fixed_s >= 0


def test_each_kind_held_out_meets_the_targets():
    # issue 46: each kind of run held out whole, the mean of the kinds' mean errors at most 3 %, the worst
    # iteration at most 6 % (the iterations: SimuMax's published B200 measurements); ahead of the peer on both
    from derivations.measured_step_times import KINDS
    from symmem.scenario import load_scenario

    kinds = measured_kernel_by_kind()
    held = kinds[:-1]
    assert [len(r["errors"]) for r in held] == [4, 6, 14, 2, 6, 3]  # CP, MoE, 70B, 405B, PP 2, TP 8 iterations
    runs = measured_kernel_rows()
    for (kind, is_kind), r in zip(KINDS, held, strict=True):  # each kind's constants fitted without its runs
        assert r["kind"] == kind
        rest = [row for case, rs in runs.items() if not is_kind(load_scenario(case)) for row in rs]
        assert r["constants"] == measured.fit(rest)
    means = [sum(map(abs, r["errors"])) / len(r["errors"]) for r in held]
    worst = max(max(map(abs, r["errors"])) for r in held)
    assert sum(means) / len(means) <= 3 and worst <= 6, (means, worst)
    peer = [max(map(abs, r["peer"])) for r in held]
    assert worst < max(peer)


def _simumax(op: dict, size: float, n: int, scale: int, offset: int) -> float:
    """SimuMax's `compute_net_op_time` (simumax/core/config.py at 4dcaae5) within a node, in seconds: `size` the
    buffer (an all-gather's output, an all-reduce's input), scale and offset its op's."""
    actual = size * scale + size * scale / n * offset
    fixed = (op.get("fixed_latency_us_by_comm_num") or {}).get(str(n), op.get("fixed_latency_us", 0.0))
    return actual / (900 * 2**30 * op["efficient_factor"]) + (op["latency_us"] * (n + offset) * scale + fixed) / 1e6


def test_a_collective_is_simumaxs_formula():
    # symmem's bytes are what one GPU sends (a ring's (n - 1)/n of the buffer, twice for an all-reduce): the same
    # time as SimuMax's formula on the buffer itself
    p = profile("B200")
    size = 64 * 2**20
    for kind, key, scale, offset in (("all-gather", "all_gather", 1, -1), ("reduce-scatter", "reduce_scatter", 1, -1),
                                     ("all-reduce", "all_reduce", 2, -1), ("all-to-all", "all2all", 1, -1)):
        for n in (2, 3, 4, 8):
            sent = size * scale * (n - 1) / n
            assert measured.collective_seconds(p, kind, sent, n) == pytest.approx(
                _simumax(p.collectives[key], size, n, scale, offset), rel=1e-12), (kind, n)
    # the all-to-all's fixed latency by group size: 51.0578 us among 2, 19.2102 among 4, 0 among 8 and 3 (no entry)
    a2a = p.collectives["all2all"]
    assert a2a["fixed_latency_us_by_comm_num"] == {"2": 51.0578, "4": 19.2102, "8": 0.0}
    assert measured.p2p_seconds(p, size) == pytest.approx(size / (900 * 2**30 * 1.4517) + 16.0668e-6, rel=1e-12)
    assert measured.collective_seconds(p, "all-gather", size, 1) == 0.0


def _scn(**changes):
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario

    kw = {"profile_name": "megatron-te", "precision": recipe("megatron"), "zero": zero_stage(1),
          "parallel": Parallel(tp=8, sequence_parallel=True), "b": 1, "s": 4096, "gpu_name": "B200", **changes}
    return model_scenario(load_model("llama-3-70b")).replace(**kw)


def test_memory_uses_the_measured_kernels_where_they_apply():
    from symmem.accounting.states import recipe
    from symmem.parallel.sizes import Parallel

    st = step_time(_scn())
    assert st.model == "measured kernels" and st.model_note == ""
    assert st.time_s == pytest.approx(sum(st.seconds_by_part.values()), rel=1e-12)
    assert st.constants == measured.KERNEL_CONSTANTS["B200"].as_dict()
    it = measured.iteration(_scn(), gpu("B200"))
    assert st.time_s == pytest.approx(measured.seconds(it, measured.KERNEL_CONSTANTS["B200"]), rel=1e-12)
    # the fitted model elsewhere, saying why
    from symmem.accounting.states import zero_stage

    for scn, why in ((_scn(parallel=Parallel(tp=8, dp=4, sequence_parallel=True)), "spans nodes"),
                     (_scn(precision=recipe("te-current")), "BF16"),
                     (_scn(gpu_name="H100"), "no kernel profile"),
                     (_scn(parallel=Parallel(tp=4, cp=2, sequence_parallel=True)), "P2P ring"),
                     (_scn(parallel=Parallel(tp=4, dp=2, sequence_parallel=True), zero=zero_stage(3)), "ZeRO-3"),
                     (_scn(profile_name="torchtitan", parallel=Parallel(dp=8)), "FSDP2")):
        st = step_time(scn)
        assert st.model == "fitted" and why in st.model_note, (st.model, st.model_note)
    a2a = Parallel(tp=4, cp=2, sequence_parallel=True, cp_comm_type="a2a")
    assert step_time(_scn(parallel=a2a)).model == "measured kernels"


def test_the_sweep_ranks_by_the_times_memory_gives():
    # on 8 GPUs every arrangement sits in one node (the measured kernels, but over the P2P CP ring); on 16 one group
    # at least spans two (the fitted model): each row at `symmem memory`'s time, whichever model times it
    from symmem.config import load_model
    from symmem.parallel.schedule import Schedule
    from symmem.sweep.space import Space, microbatch_candidates, sweep
    from symmem.sweep.timing import scenario_of

    base = _scn(model=load_model("llama-3-8b"), gpu_memory=200 * 2**30)
    kw = {"tp": (1, 2, 4, 8), "cp": (1, 2), "pp": (1, 2), "ep": (1,), "etp": (1,), "recompute": ("none", "full"),
          "schedule": (Schedule("1f1b"),), "zero": (1,)}
    for gpus in (8, 16):
        m = microbatch_candidates(gpus, kw["tp"], kw["cp"], kw["pp"], (1, 2), 64)
        space = Space(base, gpus, s=(4096,), b=(1, 2), microbatches=m, global_batch=64, **kw)
        summary = sweep(space, top=0, rank_by="time")
        assert summary.fits > 10
        for r in summary.ranked:
            st = step_time(scenario_of(space, r))
            want = "fitted" if gpus > 8 or r["cp"] > 1 else "measured kernels"
            assert st.model == want, (gpus, r["cp"], st.model_note)
            assert r["time_s"] == pytest.approx(st.time_s, rel=1e-9), r
        times = [(r["time_s"], r["ordinal"]) for r in summary.ranked]
        assert times == sorted(times)


def test_an_moe_sweep_with_all_to_all_cp_and_zero_0():
    # DeepSeek-V2-Lite on 8 GPUs: expert parallelism (the all-to-all dispatch, the experts' data-parallel group),
    # all-to-all CP, ZeRO 0 and 1: every row at `symmem memory`'s time, by the measured kernels
    from symmem.config import load_model
    from symmem.parallel.schedule import Schedule
    from symmem.parallel.sizes import Parallel
    from symmem.sweep.space import Space, microbatch_candidates, sweep
    from symmem.sweep.timing import scenario_of

    base = _scn(model=load_model("deepseek-v2-lite"), gpu_memory=200 * 2**30,
                parallel=Parallel(sequence_parallel=True, moe_sequence_parallel=True, cp_comm_type="a2a"))
    kw = {"tp": (1, 2), "cp": (1, 2), "pp": (1, 2), "ep": (1, 2, 4, 8), "etp": (1,), "recompute": ("none",),
          "schedule": (Schedule("1f1b"),), "zero": (0, 1)}
    m = microbatch_candidates(8, kw["tp"], kw["cp"], kw["pp"], (1,), 16)
    space = Space(base, 8, s=(2048,), b=(1,), microbatches=m, global_batch=16, **kw)
    summary = sweep(space, top=0, rank_by="time")
    assert summary.fits > 10
    seen = set()
    for r in summary.ranked:
        st = step_time(scenario_of(space, r))
        assert st.model == "measured kernels", st.model_note
        assert r["time_s"] == pytest.approx(st.time_s, rel=1e-9), r
        seen.add((r["ep"] > 1, r["cp"] > 1, r["zero"]))
    assert (True, True, 0) in seen and (True, False, 1) in seen


def test_a_step_longer_than_the_fitted_iterations_carries_a_caveat():
    """Beyond the longest sequence of the iterations the constants were fitted on, the step says what it carries
    over (docs/step_time.md: the attention's slowdown, fitted at 4,096-32,768 tokens); within them, nothing."""
    from derivations.measured_step_times import measured_iterations

    lengths = {scn.s for _case, scn, _sec, _r in measured_iterations()}  # the scenario files' own sequences
    assert measured.fitted_sequences() == (min(lengths), max(lengths)) == (4096, 32768)
    assert step_time(_scn(s=32768)).caveat == ""
    long = step_time(_scn(s=65536))
    assert long.model == "measured kernels" and long.as_dict()["caveat"] == (
        "s = 65,536 is longer than any iteration the constants were fitted on (4,096 to 32,768 tokens): the "
        "attention's slowdown over its measured kernel is carried over, which may make the step slow "
        "(docs/step_time.md)")
    assert step_time(_scn(s=65536, gpu_name="H100")).caveat == ""  # the fitted model: not this model's caveat
