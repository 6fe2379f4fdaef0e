"""The caching-allocator replay (symmem/accounting/allocator.py) against the rules of PyTorch's
c10/cuda/CUDACachingAllocator.cpp, on sequences whose segments and blocks can be worked out by hand."""

from hypothesis import given, settings
from hypothesis import strategies as st

from symmem.accounting.allocator import CachingAllocator, allocation_size, replay, round_size

MiB = 1 << 20


def test_rounding_and_segment_sizes():
    # round_size: multiples of 512, at least 512; get_allocation_size: 2 MiB small segments, 20 MiB for 1-10 MiB
    # requests, larger ones rounded up to 2 MiB
    assert [round_size(n) for n in (1, 512, 513, 1000)] == [512, 512, 1024, 1024]
    assert allocation_size(MiB) == 2 * MiB and allocation_size(MiB + 512) == 20 * MiB
    assert allocation_size(10 * MiB - 512) == 20 * MiB and allocation_size(10 * MiB) == 10 * MiB
    assert allocation_size(11 * MiB + 1) == 12 * MiB


def test_small_requests_share_a_2_mib_segment():
    a = replay([("malloc", i, 1000) for i in range(2048)])  # 1,024 bytes each: 2,048 per 2 MiB segment
    assert a.segments == 1 and a.reserved == 2 * MiB and a.allocated == 2048 * 1024
    a.malloc("one more", 1)
    assert a.segments == 2 and a.reserved == 4 * MiB


def test_mid_size_requests_carve_a_20_mib_segment():
    # 3 MiB requests: the first makes a 20 MiB segment and is split off its front (17 MiB remain, > 1 MiB);
    # the next five fit in the remainder (17 -> 14 -> ... -> 2 MiB); the sixth leaves 2 - 3 < 0: a new segment.
    a = replay([("malloc", i, 3 * MiB) for i in range(6)])
    assert a.segments == 1 and a.reserved == 20 * MiB and a.allocated == 18 * MiB
    a.malloc(6, 3 * MiB)
    assert a.segments == 2 and a.reserved == 40 * MiB


def test_large_block_not_split_for_a_remainder_of_1_mib_or_less():
    # a 12 MiB segment (12 MiB request), freed; an 11 MiB request takes it whole: the remainder, 1 MiB, is not
    # more than kSmallSize, so the block is not split and counts as 12 MiB allocated
    a = replay([("malloc", "x", 12 * MiB), ("free", "x"), ("malloc", "y", 11 * MiB)])
    assert a.segments == 1 and a.allocated == 12 * MiB
    # with 2 MiB left over it is split: 10 MiB allocated, and the 2 MiB rest serves a 2 MiB request
    b = replay([("malloc", "x", 12 * MiB), ("free", "x"), ("malloc", "y", 10 * MiB), ("malloc", "z", 2 * MiB)])
    assert b.segments == 1 and b.allocated == 12 * MiB and b.reserved == 12 * MiB


def test_best_fit_and_coalescing():
    # three 4 MiB blocks of one 20 MiB segment (8 MiB left); free the middle one and the last: they merge with the
    # free tail into 4 + 4 + 8 = 16 MiB, which a 14 MiB request then reuses (no new segment)
    ev = [("malloc", k, 4 * MiB) for k in "abc"] + [("free", "b"), ("free", "c"), ("malloc", "d", 14 * MiB)]
    a = replay(ev)
    assert a.segments == 1 and a.reserved == 20 * MiB
    # without the merge (only "b" freed) a 6 MiB request finds no block: 4 MiB and 8 MiB free -> the 8 MiB one
    b = replay([("malloc", k, 4 * MiB) for k in "abc"] + [("free", "b"), ("malloc", "d", 6 * MiB)])
    assert b.segments == 1
    c = replay([("malloc", k, 4 * MiB) for k in "abc"] + [("free", "b"), ("malloc", "d", 9 * MiB)])
    assert c.segments == 2 and c.reserved == 40 * MiB  # 9 MiB fits neither 4 nor 8: a new 20 MiB segment


def test_freed_segments_stay_reserved():
    a = replay([("malloc", "w", 100 * MiB), ("free", "w"), ("malloc", "x", 200 * MiB)])
    assert a.peak_reserved == a.reserved == 300 * MiB and a.allocated == 200 * MiB and a.peak_allocated == 200 * MiB


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30), st.integers(1, 64 * MiB)), max_size=120))
def test_invariants(ops):
    a = CachingAllocator()
    live: dict = {}
    for alloc, key, nbytes in ops:
        if alloc and key not in live:
            a.malloc(key, nbytes)
            live[key] = round_size(nbytes)
        elif not alloc and key in live:
            a.free(key)
            del live[key]
        assert a.allocated >= sum(live.values())  # a block handed out whole may exceed the rounded request
        assert a.reserved >= a.allocated and a.peak_reserved >= a.reserved and a.peak_allocated >= a.allocated
    for key in list(live):
        a.free(key)
    assert a.allocated == 0 and a.live() == 0 and a.reserved == a.peak_reserved  # segments stay cached
    free = sum(size for pool in a._free.values() for size, _, _ in pool)
    assert free == a.reserved  # every byte of every segment is back in a free block, merged


def test_replay_over_budget_is_refused_not_run(capsys, monkeypatch):
    # 100,000 micro-batches replay the warm-up and REPLAYED_PAIRS pairs (issue 45; they were refused as over the
    # budget when the replay walked every micro-batch); a replay over the budget is still refused, not run
    import json

    import symmem.accounting.reserved as R
    from symmem.cli.main import main

    argv = ["memory", "--model", "llama-3-8b", "--profile", "megatron-te", "--pp", "4", "--microbatches", "100000",
            "--json"]
    assert main(argv) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert all(isinstance(r["reserved"], int) and r["reserved_not_replayed"] is None for r in stages)
    monkeypatch.setattr(R, "REPLAY_BUDGET", 1000)
    R._replay.cache_clear()
    assert main(argv) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert all(r["reserved"] is None and "over the budget" in r["reserved_not_replayed"] for r in stages)
    monkeypatch.undo()
    # a small run replays, and says nothing
    assert main(["memory", "--model", "llama-3-8b", "--profile", "megatron-te", "--pp", "2", "--microbatches",
                 "4", "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert all(isinstance(r["reserved"], int) and r["reserved_not_replayed"] is None for r in stages)
