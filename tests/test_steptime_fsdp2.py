"""The step time under FSDP2 (the torchtitan profiles): its all-gathers and reduce-scatters run beside the compute,
one unit's share and what exceeds the compute waited for (`steptime.model._dp_exposed`), and the attention timed as
SDPA's fused kernel, whose s x s scores are never written (`steptime.costs.fused_tags`)."""

from __future__ import annotations

import pytest

from symmem.cli.args import scenario_from_args
from symmem.cli.main import build_parser
from symmem.errors import SymmemError
from symmem.hardware import gpu
from symmem.steptime import CONSTANTS, breakdown, features, fsdp_floor
from symmem.steptime.model import COMPUTE, _dp_exposed, coefficients


def _scn(args: str):
    return scenario_from_args(build_parser().parse_args(["memory", *args.split()]))


TITAN = "--model llama-3-8b --profile torchtitan-2412 -s 8192 -b 2 --recompute selective-op --gpu H100"


def test_exposed_traffic_by_hand():
    assert _dp_exposed(1.0, 10.0, 0.13) == pytest.approx(0.13)  # far less traffic than compute: the first unit's
    assert _dp_exposed(10.0, 4.0, 0.13) == pytest.approx(6.0)  # more: what exceeds the compute
    assert _dp_exposed(2.0, 5.0, 0.0) == 2.0  # no prefetching: all of it


# Llama-3-8B's parameters (the Hugging Face checkpoint's count) and those outside its 32 blocks: the embedding and
# the output, 128,256 x 4,096 each, and the final norm's 4,096
LLAMA3_8B = 8_030_261_248
EMBEDDING = 128_256 * 4_096


@pytest.mark.parametrize("profile, unit", [("torchtitan-2412", 2 * EMBEDDING + 4_096), ("torchtitan", EMBEDDING)])
def test_the_first_unit_is_the_embedding_s(profile, unit):
    """9dec370's first and last unit is the root (the embedding, the final norm and the output); 0.3.0 wraps the
    embedding alone."""
    scn = _scn(f"--model llama-3-8b --profile {profile} -s 1024 --dp 8")
    assert fsdp_floor(scn, scn.stages[0]) == pytest.approx(unit / LLAMA3_8B, rel=1e-12)


@pytest.mark.parametrize("dp", [8, 128])
def test_fsdp2_traffic_overlapped_with_the_compute(dp):
    scn = _scn(f"{TITAN} --dp {dp}")
    g = gpu("H100")
    f = features(scn, g)
    share = (2 * EMBEDDING + 4_096) / LLAMA3_8B
    assert f.dp_floor == pytest.approx(share, rel=1e-12)
    parts = breakdown(f, g, CONSTANTS)
    k = CONSTANTS
    link = g.network if f.dp_network else g.nvlink
    raw = f.dp_bytes / (link * k.link_efficiency) + f.dp_calls * k.latency_s  # the traffic, nothing overlapped
    compute = sum(parts[c] for c in COMPUTE)
    assert parts["comm_dp"] == pytest.approx(max(raw - compute, raw * share), rel=1e-12)
    assert raw * share == pytest.approx(parts["comm_dp"])  # here the traffic is far below the compute: the floor
    assert (dp == 128) == f.dp_network  # FSDP 128 spans 16 nodes: the network


def test_megatron_traffic_is_not_overlapped():
    scn = _scn("--model llama-3-8b --profile megatron-te -s 4096 --tp 2 --dp 4 --gpu H100")
    g = gpu("H100")
    f = features(scn, g)
    assert fsdp_floor(scn, scn.stages[0]) == 0 and f.dp_floor == 0
    parts = breakdown(f, g, CONSTANTS)
    link = g.network if f.dp_network else g.nvlink
    raw = f.dp_bytes / (link * CONSTANTS.link_efficiency) + f.dp_calls * CONSTANTS.latency_s
    assert parts["comm_dp"] == pytest.approx(raw, rel=1e-12)


def test_the_fit_refuses_overlapped_rows():
    scn = _scn(f"{TITAN} --dp 8")
    with pytest.raises(SymmemError, match="not linear"):
        coefficients(features(scn, gpu("H100")), gpu("H100"))


def test_sdpa_attention_moves_no_scores():
    """The memory-bound bytes of a torchtitan step grow as s, not s^2: the convention's softmax over the scores is
    inside SDPA's fused kernel (it counted 17 GB a layer at s 8,192 before)."""
    from symmem.steptime import _stage_costs
    from symmem.steptime.costs import fused_tags

    one, two = (_scn(f"--model llama-3-8b --profile torchtitan-2412 -s {s} -b 2 --dp 8") for s in (4096, 8192))
    assert "core_attention" in fused_tags(one)
    a, b = (next(iter(_stage_costs(x).values())).memory_bytes for x in (one, two))
    assert b == pytest.approx(2 * a, rel=1e-9)
    eager = _scn("--model llama-3-8b --profile torch-eager -s 4096 --dp 8")  # transformers' eager attention
    assert "core_attention" not in fused_tags(eager)
