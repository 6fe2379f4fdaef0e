"""Megatron's DDP buckets and overlap (`--overlap-grad-reduce`, `--overlap-param-gather`, `--ddp-bucket-size`):
the buffer layout by hand (symmem.parallel.ddp_buckets; held against Megatron-Core on the CPU in
tests/validate/test_megatron_comm.py), what the flags change in memory and in the step time, and Megatron's own
refusals, one line each."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from symmem.cli.main import main
from symmem.parallel.ddp_buckets import default_bucket_size, layout, shard, shard_pieces

BASE = ["memory", "--model", "llama-3-8b", "--profile", "megatron-te", "-s", "4096", "--gpu", "H100", "--json"]


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_layout_by_hand():
    # registered a, b, c (100, 30, 200 elements), laid out from the last: c at 0, b at pad64(200) = 256, a at
    # pad64(286) = 320; buckets of at least 250: c (200) is not enough, c + b ends at 286 >= 250: the bucket
    # closes at pad(286, lcm(2, 128)) = 384, a starts it again and ends at 484, padded to 512
    lay = layout([100, 30, 200], 2, 250)
    assert lay.spans == ((384, 100), (256, 30), (0, 200))
    assert lay.buckets == ((0, 384), (384, 512)) and lay.numel == 512 and lay.padding == 512 - 330
    # one bucket (no --overlap-grad-reduce): c at 0, b at 256, a at 320, ending at 420, padded to 512
    one = layout([100, 30, 200], 2)
    assert one.spans == ((320, 100), (256, 30), (0, 200)) and one.buckets == ((0, 512),)
    # each bucket is sharded on its own: rank 0 holds [0, 192) of the first and [384, 448) of the second
    assert shard(lay, 2, 0) == [(2, 192), (0, 64)]
    assert shard(lay, 2, 1) == [(2, 8), (1, 30), (0, 36)]
    # the whole buffer's shards: [0, 256) and [256, 512)
    assert shard_pieces(one, 2, 0) == [200] and shard_pieces(one, 2, 1) == [30, 100]
    # without the distributed optimizer nothing is padded: c + b reach 230 >= 220
    assert layout([100, 30, 200], 2, 220, distributed=False).buckets == ((0, 230), (230, 330))


def test_default_bucket_size():
    # distributed_data_parallel.py:64-65: max(40M, 1M x DP)
    assert default_bucket_size(8) == 40_000_000 and default_bucket_size(64) == 64_000_000


@pytest.mark.parametrize("flags, words", [
    (["--overlap-grad-reduce", "--profile", "paper"], "--overlap-grad-reduce: Megatron-Core's DDP settings"),
    (["--overlap-param-gather"], "--overlap-param-gather: Megatron requires --overlap-grad-reduce"),
    (["--ddp-bucket-size", "1000"], "--ddp-bucket-size = 1000: without --overlap-grad-reduce"),
    (["--overlap-grad-reduce", "--overlap-param-gather", "--zero", "0"], "only with the distributed optimizer"),
    (["--overlap-grad-reduce", "--pp", "2", "--schedule", "interleaved:2"], "--schedule interleaved"),
    (["--overlap-grad-reduce", "--pp", "2", "--schedule", "gpipe"], "modelled under 1F1B only"),
    (["--overlap-grad-reduce", "--zero", "3", "--dp", "2"], "--zero 3 is not Megatron's DDP"),
])
def test_refusals_are_one_line(flags, words):
    code, out, err = _run([*BASE, *flags])
    assert code == 2 and words in err and err.count("\n") == 1 and not out


@pytest.mark.parametrize("command", [["sweep", "--gpus", "64"], ["html", "-o", "-"]])
def test_sweep_and_page_refuse_them(command):
    code, out, err = _run([command[0], "--model", "llama-3-8b", "--profile", "megatron-te", *command[1:],
                           "--overlap-grad-reduce"])
    assert code == 2 and "--overlap-grad-reduce: Megatron's DDP buckets are not modelled" in err and not out


def _memory(*flags):
    code, out, err = _run([*BASE, *flags])
    assert code == 0, err
    return json.loads(out)


def test_only_the_first_stage_is_bucketed():
    """PP 2: stage 0's buffers are cut into buckets of 40M parameters, each end padded to lcm(DP, 128); stage 1's
    are one bucket as before (distributed_data_parallel.py:94-100)."""
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.profiles import ddp_layouts

    flags = ["--tp", "2", "--pp", "2", "--dp", "4"]
    plain, over = _memory(*flags), _memory(*flags, "--overlap-grad-reduce")
    assert plain["stages"][1] == over["stages"][1]
    assert plain["stages"][0] != over["stages"][0]
    scn = scenario_from_args(build_parser().parse_args([*BASE[:-1], *flags, "--overlap-grad-reduce"]))
    (group, lay), = ddp_layouts(scn, scn.stages[0])
    sizes = [e - s for s, e in lay.buckets]
    assert group == 4 and len(sizes) > 10 and all(n % 128 == 0 for n in sizes)
    assert all(n >= 40_000_000 for n in sizes[:-1])
    (_, last), = ddp_layouts(scn, scn.stages[1])
    assert len(last.buckets) == 1


def test_overlap_time_by_hand():
    """PP 1, M 8: the gradient reduction (4 of the 6 bytes a parameter moves: FP32 gradient, BF16 parameter) runs
    beside the last micro-batch's backward (two thirds of a slot's compute), the parameter gather beside the first
    one's forward (a third), each at least its last bucket's share; the collectives one per bucket."""
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.hardware import gpu
    from symmem.profiles import ddp_layouts
    from symmem.steptime import CONSTANTS, features
    from symmem.steptime.model import _dot, _once

    flags = ["--tp", "2", "--dp", "4", "--microbatches", "8"]
    plain = _memory(*flags)["step"]["seconds_by_part"]
    both = _memory(*flags, "--overlap-grad-reduce", "--overlap-param-gather")["step"]["seconds_by_part"]
    grads = _memory(*flags, "--overlap-grad-reduce")["step"]["seconds_by_part"]
    scn = scenario_from_args(build_parser().parse_args([*BASE[:-1], *flags, "--overlap-grad-reduce"]))
    (_, lay), = ddp_layouts(scn, scn.stages[0])
    floor = (lay.buckets[-1][1] - lay.buckets[-1][0]) / lay.numel
    slot = sum(plain[k] for k in ("gemm", "attention", "memory_bound", "launches")) / 8
    assert both["gemm"] == plain["gemm"]
    f = features(scn, gpu("H100"))
    assert f.dp_calls == 2 * len(lay.buckets) and not f.dp_network  # one reduce-scatter, one all-gather a bucket
    dp = _dot(*_once(f, gpu("H100"))["comm_dp"], CONSTANTS)  # its whole traffic, padding of every bucket in
    assert dp > plain["comm_dp"]  # (more calls, more padding)
    want = max(dp * 4 / 6 - slot * 2 / 3, dp * 4 / 6 * floor) + max(dp * 2 / 6 - slot / 3, dp * 2 / 6 * floor)
    assert both["comm_dp"] == pytest.approx(want, rel=1e-9) and both["comm_dp"] < plain["comm_dp"]
    want = max(dp * 4 / 6 - slot * 2 / 3, dp * 4 / 6 * floor) + dp * 2 / 6  # the gather after the step, whole
    assert grads["comm_dp"] == pytest.approx(want, rel=1e-9)


def test_megatron_dp_over_the_pipeline():
    """Made-up figures, the wait by hand: stage i's reduction ends i backward slots before the first stage's
    backward; a later stage's gather (one bucket) delays the first micro-batch's way through the pipeline whole,
    under --overlap-param-gather; without it every stage gathers after the step, at once."""
    from symmem.steptime.model import _megatron_dp

    # one stage: 10 s of traffic, 6 of it reduced beside 4 s of backward (floor 0.1), 4 gathered beside 2 s
    assert _megatron_dp(10.0, 6.0, ((1.0, 0, 0.6, 0.1, 0.4, 0.1),)) == pytest.approx((6 - 4) + (4 - 2))
    # without --overlap-param-gather the gather waits whole
    assert _megatron_dp(10.0, 6.0, ((1.0, 0, 0.6, 0.1, 0.4, None),)) == pytest.approx(2 + 4)
    # a second stage with one bucket (floor 1) and 80 % of the traffic: 4.8 s reduced, 4 s of slack, so the first
    # stage's 2 s waits; its 3.2 s gather adds to the first stage's 2 s unhidden
    two = ((1.0, 0, 0.6, 0.1, 0.4, 0.1), (0.8, 1, 0.6, 1.0, 0.4, 1.0))
    assert _megatron_dp(10.0, 6.0, two) == pytest.approx(max(2.0, 4.8 - 4) + (2.0 + 3.2))
    # a third stage: its gather adds too; the gathers after the step instead: the largest, 4 s
    three = two + ((0.5, 2, 0.6, 1.0, 0.4, 1.0),)
    assert _megatron_dp(10.0, 6.0, three) == pytest.approx(2.0 + (2.0 + 3.2 + 2.0))
    after = tuple((*o[:5], None) for o in three)
    assert _megatron_dp(10.0, 6.0, after) == pytest.approx(2.0 + 4.0)
    # the floor binds when the compute is long: 20 s of backward would hide all 6 s, the last bucket's 6 x 0.5 = 3
    # do not hide; and when it is short, the traffic beyond it: 6 - 0.2
    assert _megatron_dp(10.0, 30.0, ((1.0, 0, 0.6, 0.5, 0.4, None),)) == pytest.approx(3 + 4)
    assert _megatron_dp(10.0, 0.3, ((1.0, 0, 0.6, 0.5, 0.4, None),)) == pytest.approx(5.8 + 4)


def test_the_fit_refuses_overlapped_rows():
    from symmem.errors import SymmemError
    from symmem.hardware import gpu
    from symmem.steptime.model import StepFeatures, coefficients

    f = StepFeatures(1.0, 0.0, "bf16", 0.0, 0.0, 0.0, (), 0.0, 1.0, 1.0, 2, False, 0.0,
                     dp_overlap=((1.0, 0, 1.0, 0.5, 0.0, None),))
    with pytest.raises(SymmemError, match="overlapped data-parallel traffic"):
        coefficients(f, gpu("B200"))
