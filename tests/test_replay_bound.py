"""Megatron's allocator replay walks a bounded number of micro-batches (issue 45): the warm-up forwards and at most
`REPLAYED_PAIRS` steady 1F1B pairs, then the cool-down; its events are one chunk per micro-batch slot, so neither
its time nor its memory grows with M, and what it walked is said (JSON field and a printed line)."""

from __future__ import annotations

import json

import pytest

import symmem.accounting.reserved as R
from symmem.accounting.allocator import CachingAllocator
from symmem.cli.args import scenario_from_args
from symmem.cli.main import build_parser, main

ARGS = ["--model", "llama-3-8b", "--profile", "megatron-te", "--pp", "4", "-s", "1024"]


def _scn(m: int):
    return scenario_from_args(build_parser().parse_args(["memory", *ARGS, "--microbatches", str(m)]))


def _calls(monkeypatch, scn) -> tuple[int, list[int]]:
    """Allocator runs (one per chunk) the replays of `scn`'s stages make, and their figures."""
    R._replay.cache_clear()
    R._iteration_phases.cache_clear()
    monkeypatch.setenv("SYMMEM_PURE_PYTHON", "1")  # the Python allocator, whose calls are counted here
    count = [0]
    real = CachingAllocator.run

    def counted(self, ops, by=0):
        count[0] += 1
        return real(self, ops, by)

    monkeypatch.setattr(CachingAllocator, "run", counted)
    figures = [R.stage_reserved(scn, st) for st in scn.stages]
    monkeypatch.setattr(CachingAllocator, "run", real)
    R._replay.cache_clear()
    return count[0], figures


def test_replay_walks_the_same_whatever_m_past_the_bound(monkeypatch):
    # M 64 and M 1,048,576 (the cap) make the same allocator calls and give the same figures: the replay stops at
    # the warm-up and REPLAYED_PAIRS pairs; M 8 walks every micro-batch (fewer calls)
    small, _ = _calls(monkeypatch, _scn(8))
    calls, figures = _calls(monkeypatch, _scn(64))
    assert (calls, figures) == _calls(monkeypatch, _scn(1 << 20))
    assert small < calls
    scn = _scn(1 << 20)
    assert [R.replayed_microbatches(scn, st) for st in scn.stages] == [3 + 32, 2 + 32, 1 + 32, 0 + 32]


def test_below_the_bound_every_micro_batch_is_replayed(monkeypatch):
    # at M <= warm-up + REPLAYED_PAIRS the replay is the whole step: one more pair (a smaller bound) changes the
    # walk, so the bound is what cuts it
    scn = _scn(20)
    assert [R.replayed_microbatches(scn, st) for st in scn.stages] == [20] * 4
    full, _ = _calls(monkeypatch, scn)
    monkeypatch.setattr(R, "REPLAYED_PAIRS", 4)
    assert [R.replayed_microbatches(scn, st) for st in scn.stages] == [7, 6, 5, 4]
    cut, _ = _calls(monkeypatch, scn)
    assert cut < full
    R._replay.cache_clear()


def test_what_was_replayed_is_said(capsys):
    assert main(["memory", *ARGS, "--microbatches", "100", "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert [s["reserved_replayed_microbatches"] for s in stages] == [35, 34, 33, 32]
    assert main(["memory", *ARGS, "--microbatches", "100"]) == 0
    out = capsys.readouterr().out
    assert "of M = 100 micro-batches, every stage replays the warm-up and 32 steady 1F1B pairs" in out
    assert main(["memory", *ARGS, "--microbatches", "8"]) == 0
    assert "steady 1F1B pairs" not in capsys.readouterr().out


@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_few_micro_batches_replay_whole(m, capsys):
    # M below the pipeline depth: fewer in flight than stages; every stage replays all M
    assert main(["memory", *ARGS, "--microbatches", str(m), "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert all(s["reserved_replayed_microbatches"] == m and s["reserved"] > 0 for s in stages)
