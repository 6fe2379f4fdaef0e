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
    kinds = measured_kernel_by_kind()
    held = kinds[:-1]
    assert len(held) == 6 and sum(len(r["errors"]) for r in held) > 22  # (a run is of several kinds)
    means = [sum(map(abs, r["errors"])) / len(r["errors"]) for r in held]
    worst = max(max(map(abs, r["errors"])) for r in held)
    assert sum(means) / len(means) <= 3 and worst <= 6, (means, worst)
    peer = [max(map(abs, r["peer"])) for r in held]
    assert worst < max(peer)
    # each kind's iterations are predicted without any of its runs in the fit
    assert all(r["constants"] != kinds[-1]["constants"] for r in held)


def test_a_collective_by_hand():
    p = profile("B200")
    gib = 900 * 2**30
    # an all-gather of 7/8 of 64 MiB among 8: bytes at 0.6735 of 900 GiB/s, 7 ring steps of 9.1828 us, 23.1049 us
    nb = 7 / 8 * 64 * 2**20
    assert measured.collective_seconds(p, "all-gather", nb, 8) == pytest.approx(
        nb / (0.6735 * gib) + (7 * 9.1828 + 23.1049) * 1e-6, rel=1e-12)
    # an all-reduce: 2(n - 1) steps of 5.5183 us; an all-to-all among 2: SimuMax's 51.0578 us for that group size
    assert measured.collective_seconds(p, "all-reduce", nb, 4) == pytest.approx(
        nb / (0.7424 * gib) + (6 * 5.5183 + 22.2316) * 1e-6, rel=1e-12)
    assert measured.collective_seconds(p, "all-to-all", nb, 2) == pytest.approx(
        nb / (0.5968 * gib) + (7.3039 + 51.0578) * 1e-6, rel=1e-12)
    assert measured.collective_seconds(p, "all-gather", nb, 1) == 0.0


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
    for scn, why in ((_scn(parallel=Parallel(tp=8, dp=4, sequence_parallel=True)), "spans nodes"),
                     (_scn(precision=recipe("te-current")), "BF16"),
                     (_scn(gpu_name="H100"), "no kernel profile")):
        st = step_time(scn)
        assert st.model == "fitted" and why in st.model_note, (st.model, st.model_note)


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
