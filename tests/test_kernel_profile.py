"""The kernel profile (symmem/data/kernels/B200.json, from SimuMax's published B200 measurements): what it reads at
a measured shape is the measurement, between measured shapes a weighted mean of its neighbours, and the attention's
time follows the convention the measurements were taken with. The extractor keeps only the entries SimuMax's
simulator reads."""

from __future__ import annotations

import json
import math
from importlib import resources

import pytest

from symmem.steptime import kernels


def _raw() -> dict:
    return json.loads(resources.files("symmem.data").joinpath("kernels", "B200.json").read_text())


def test_profile_cites_its_source():
    src = _raw()["source"]
    assert src["repository"] == "github.com/MooreThreads/SimuMax" and len(src["commit"]) == 40
    assert src["path"].startswith("configs/system/") and "measured_by" in src


def test_a_measured_gemm_reads_its_measurement():
    p = kernels.profile("B200")
    rows = _raw()["gemm"]["rows"]
    for layout, m, k, n, eff in rows[:: max(1, len(rows) // 40)]:
        assert kernels.gemm_efficiency(p, layout, m, k, n) == eff
    # one GEMM's three passes: forward TN (m, k, n), data gradient NN (m, n, k), weight gradient NT (n, m, k)
    by_key = {(r[0], r[1], r[2], r[3]): r[4] for r in rows}
    m, k, n = 4096, 8192, 10240
    want = sum(2 * m * k * n / (2250e12 * by_key[key]) for key in
               (("TN", m, k, n), ("NN", m, n, k), ("NT", n, m, k)))
    assert kernels.gemm_seconds(p, m, k, n, 1, False) == pytest.approx(want, rel=1e-12)


def test_the_nearest_shapes_weighted_by_inverse_distance():
    """Between measured shapes: the NEAREST ones, weighted by 1 / distance in log space (known answer on made-up
    points), and a shape close to a measured one reads close to its figure."""
    points = ((0.0,), (1.0,), (3.0,), (10.0,), (20.0,), (30.0,))
    values = (0.5, 0.6, 0.9, 0.1, 0.1, 0.1)
    at = (0.5,)  # distances 0.5, 0.5, 2.5, 9.5 (the four nearest); the others left out
    w = (2.0, 2.0, 0.4, 1 / 9.5)
    want = (w[0] * 0.5 + w[1] * 0.6 + w[2] * 0.9 + w[3] * 0.1) / sum(w)
    assert kernels._nearest(points, values, at) == pytest.approx(want, rel=1e-12)
    # ties: midway between measured shapes the fourth-nearest is tied with a fifth; both are taken (whichever a cut
    # at four kept would turn on the last bit of a logarithm)
    points = ((0.0, 0.0), (2.0, 0.0), (0.0, 2.0), (2.0, 2.0), (1.0, 3.0), (9.0, 9.0))
    values = (0.1, 0.2, 0.3, 0.4, 0.5, 0.9)
    at = (1.0, 1.0)  # four at sqrt 2, one at 2 (the fifth taken only if tied), one far
    assert kernels._nearest(points, values, at) == pytest.approx(0.25, rel=1e-12)
    tied = ((0.0, 0.0), (2.0, 0.0), (0.0, 2.0), (2.0, 2.0), (1.0, 1.0 + 2**0.5), (9.0, 9.0))
    assert kernels._nearest(tied, values, at) == pytest.approx(1.5 / 5, rel=1e-9)  # five at sqrt 2, equal weights
    p = kernels.profile("B200")
    layout, m, k, n, eff = _raw()["gemm"]["rows"][0]
    assert kernels.gemm_efficiency(p, layout, m * 1.0001, k, n) == pytest.approx(eff, rel=1e-3)


def test_attention_time_follows_the_measurement_convention():
    """At every measured shape: the FLOP convention over the efficiencies, each the best measured for these heads and
    dims at this sequence or a shorter one (the table's rows, read here by hand)."""
    p = kernels.profile("B200")
    rows = _raw()["attention"]["rows"]
    for b, s, h, kv, qk, v, _ef, _eb in rows:
        same = [r for r in rows if r[2:6] == [h, kv, qk, v] and r[1] <= s]
        ef, eb = max(r[6] for r in same), max(r[7] for r in same)
        base = b * s * s * max(h, kv) * (qk + v)
        want = (2 * base / ef + 5 * base / eb) / 2250e12
        assert kernels.attention_seconds(p, b, s, h, kv, qk, v, False) == pytest.approx(want, rel=1e-12)
        again = (4 * base / ef + 5 * base / eb) / 2250e12  # the forward once more when recomputed
        assert kernels.attention_seconds(p, b, s, h, kv, qk, v, True) == pytest.approx(again, rel=1e-12)


def test_grouped_gemm_reads_the_grouped_table():
    p = kernels.profile("B200")
    rows = {(r[0], r[1], r[2], r[3], r[4]): r[5] for r in _raw()["grouped_gemm"]["rows"]}
    e, m, n, k = 20, 1232, 3072, 5120
    want = sum(2 * m * k * n * e / (2250e12 * rows[(st, e, m, n, k)]) for st in ("fwd", "bwd_grad_act", "bwd_grad_w"))
    assert kernels.gemm_seconds(p, m, k, n, e, False) == pytest.approx(want, rel=1e-12)


def test_no_profile_for_an_unprofiled_gpu():
    assert kernels.profile("A100") is None


def test_the_extractor_keeps_what_the_simulator_reads():
    from tools.simumax_kernels import extract

    gemm = {"b=1, m=64, k=32, n=16, layout=TN, accumulate=False, out_dtype=bf16": 0.5,
            "b=1, m=64, k=32, n=16, layout=TN, accumulate=True, out_dtype=fp32": 0.9,  # not a forward's
            "b=2, m=64, k=16, n=32, layout=NN, accumulate=False, out_dtype=bf16": 0.4,
            "b=1, m=16, k=64, n=32, layout=NT, accumulate=True, out_dtype=fp32": 0.3}
    grouped = {"ng=4, M=8, N=16, K=32, dtype=bf16, out_dtype=bf16, main_grad_dtype=fp32, stage=fwd, grad=False, "
               "accumulate=False, use_split_accumulator=False, single_output=True": 0.2,
               "ng=4, M=8, N=16, K=32, dtype=bf16, out_dtype=bf16, main_grad_dtype=bf16, stage=fwd, grad=False, "
               "accumulate=False, use_split_accumulator=False, single_output=True": 0.7}
    att = "batch=1, seq_len=128, head_num=4, kv_head_num=1, qk_head_dim=64, v_head_dim=64, qkv_contiguous="
    system = {"accelerator": {"op": {
        "matmul": {"tflops": 100.0, "accurate_efficient_factor": gemm},
        "group_matmul": {"tflops": 100.0, "accurate_efficient_factor": grouped},
        "sdp_fwd": {"accurate_efficient_factor": {att + "True": 0.6, att + "False": 0.1}},
        "sdp_bwd": {"accurate_efficient_factor": {att + "True": 0.7, att + "False": 0.1}}},
        "bandwidth": {"default": {"efficient_factor": 0.5}}},
        "networks": {"high_intra_node": {"bandwidth": {"gbps": 900.0, "efficient_factor": 1.0},
                                         "op": {"all_gather": {"efficient_factor": 0.6, "latency_us": 9.0,
                                                               "scale": 1},
                                                "all2all": {"efficient_factor": 0.5, "latency_us": 7.0,
                                                            "fixed_latency_us_by_comm_num": {"2": 51.0}}}}}}
    out = extract(system, "X", "0" * 40, "configs/system/x.json")
    assert out["gemm"]["rows"] == [["NN", 128, 16, 32, 0.4], ["NT", 16, 64, 32, 0.3], ["TN", 64, 32, 16, 0.5]]
    assert out["grouped_gemm"]["rows"] == [["fwd", 4, 8, 16, 32, 0.2]]
    assert out["attention"]["rows"] == [[1, 128, 4, 1, 64, 64, 0.6, 0.7]]
    assert out["collectives"]["all_gather"] == {"efficient_factor": 0.6, "latency_us": 9.0}
    assert out["collectives"]["all2all"]["fixed_latency_us_by_comm_num"] == {"2": 51.0}
    assert out["collectives"]["link_gib_per_s"] == 900.0  # what the efficiencies are fractions of (GiB/s)
    assert out["memory_bound"]["default"] == 0.5 and out["peak_tflops"] == 100.0


def test_kernel_tables_report_what_they_compute():
    """The kernel-profile model's figures in paper_tables/kernel_step_times (a golden file, compared elsewhere) are
    its errors: checked here against a direct evaluation of one held-out kind."""
    from derivations.measured_step_times import kernel_by_kind, kernel_rows
    from symmem.steptime.model import seconds

    kinds = kernel_by_kind()
    every = kinds[-1]
    runs = kernel_rows()
    direct = [100 * (seconds(f, g, every["constants"]) - m) / m for rs in runs.values() for f, g, m in rs]
    assert direct == every["errors"] and len(direct) == 22
    assert all(math.isfinite(e) for r in kinds for e in r["errors"])
    # an efficiency is at most 1: the link's; the slowdowns' inverse factors too (a kernel in an iteration is not
    # faster than alone)
    assert all(0 < r["constants"].link_efficiency <= 1 for r in kinds)
    assert all(0 < getattr(r["slowed_constants"], e) <= 1 for r in kinds
               for e in ("gemm_efficiency", "attention_efficiency", "link_efficiency"))
    slowed = [100 * (seconds(f, g, every["slowed_constants"]) - m) / m for rs in runs.values() for f, g, m in rs]
    assert slowed == every["slowed"]


def test_the_attention_never_runs_slower_per_flop_at_a_longer_sequence():
    """SimuMax's B200 table reads Llama-3 70B's a2a-CP shape (8 heads, 1 KV head) below its 32,768-token figure at
    131,072 tokens; the model times 131,072 at the 32,768-token figures and says the table's own beside them.
    Where the longer sequence measured higher (4,096 to 32,768) the table's figure stands."""
    p = kernels.profile("B200")
    rows = {(r[1], r[2], r[3], r[4], r[5]): (r[6], r[7]) for r in _raw()["attention"]["rows"]}
    long, mid, short = rows[(131072, 8, 1, 128, 128)], rows[(32768, 8, 1, 128, 128)], rows[(4096, 8, 1, 128, 128)]
    assert long[0] < mid[0] and long[1] < mid[1] and short[0] < mid[0]  # the table's own non-monotone reading
    assert kernels.measured_attention_efficiency(p, 131072, 8, 1, 128, 128) == long
    assert kernels.attention_efficiency(p, 131072, 8, 1, 128, 128) == mid
    assert kernels.attention_efficiency(p, 32768, 8, 1, 128, 128) == mid
    # between measured sequences: at least the shorter one's, and the table's reading where that is higher
    for s in (8192, 65536, 262144):
        got = kernels.attention_efficiency(p, s, 8, 1, 128, 128)
        read = kernels.measured_attention_efficiency(p, s, 8, 1, 128, 128)
        below = [kernels.measured_attention_efficiency(p, t, 8, 1, 128, 128) for t in (4096, 32768, 131072) if t < s]
        assert got == (max([read[0]] + [x[0] for x in below]), max([read[1]] + [x[1] for x in below]))
    # MLA's 64 heads: the 4,096-token figure (0.885 forward) holds at every longer sequence
    assert kernels.attention_efficiency(p, 131072, 64, 64, 192, 128)[0] == rows[(4096, 64, 64, 192, 128)][0]
