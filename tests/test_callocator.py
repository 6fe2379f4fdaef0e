"""The C allocator (symmem/accounting/_callocator.c) against the Python one it transcribes
(symmem/accounting/allocator.py: CachingAllocator, itself held to PyTorch's rules by tests/test_allocator.py):
the same figures and the same free blocks after every call, on random sequences that exercise splits, merges,
both pools and new segments; and the same replayed reserved memory for whole Megatron steps."""

from __future__ import annotations

import random

import pytest

from symmem.accounting.allocator import CachingAllocator, request
from symmem.errors import SymmemError

callocator = pytest.importorskip("symmem.accounting._callocator",
                                 reason="the C allocator is not built (no C compiler at install)")


def _state(a) -> tuple:
    blocks = (sorted((small, size, address) for small, pool in a._free.items() for size, address, _ in pool)
              if isinstance(a, CachingAllocator) else sorted(a.free_blocks()))
    return a.allocated, a.reserved, a.peak_allocated, a.peak_reserved, a.segments, a.live(), blocks


@pytest.mark.parametrize("seed", range(12))
def test_random_sequences_match_the_python_allocator(seed):
    rng = random.Random(seed)
    py, c = CachingAllocator(), callocator.Allocator()
    live: list = []
    sizes = [rng.choice([512, 4096, 1 << 20, (1 << 20) + 512, 3 << 20, 12 << 20, 50 << 20])
             for _ in range(40)] + [rng.randrange(1, 64 << 20) for _ in range(40)]
    for step in range(3000):
        if live and (rng.random() < 0.45 or len(live) > 300):
            key, by = live.pop(rng.randrange(len(live)))
            size = 0
        else:
            # small int keys (the C fast path; some moved on by 3, as a micro-batch slot's ids are, which never
            # meets another key: those are multiples of 10) and others (its dict)
            key = rng.choice([10 * step, ("t", step)])
            by = rng.choice([0, 3]) if isinstance(key, int) else 0
            live.append((key, by))
            size = request(key, rng.choice(sizes))
        py.run([(key, size)], by)
        c.run([(key, size)], by)
        assert _state(py) == _state(c), step


def test_refusals_match():
    for a in (CachingAllocator(), callocator.Allocator()):
        a.run([(1, 512), (("x",), 1024)])
        with pytest.raises(SymmemError, match="allocated twice"):
            a.run([(1, 512)])
        with pytest.raises(SymmemError, match="freed but not allocated"):
            a.run([(2, 0)])
        with pytest.raises(SymmemError, match="allocated twice"):
            a.run([(("x",), 512)])
        assert a.live() == 2 and a.allocated == 1536  # the state stays whole after a refusal


def test_whole_replays_match(monkeypatch):
    # every stage of a Megatron step under megatron-te, replayed with each allocator
    import symmem.accounting.reserved as R
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    scn = scenario_from_args(build_parser().parse_args(
        "memory --model deepseek-v2-lite -s 2048 --profile megatron-te --tp 2 --pp 4 --ep 2 --dp 2 "
        "--microbatches 12".split()))
    figures = {}
    for pure in ("0", "1"):
        monkeypatch.setenv("SYMMEM_PURE_PYTHON", pure)
        R._replay.cache_clear()
        figures[pure] = [R.replay_stage(scn, st, r) for st in scn.stages for r in R._ranks(scn)]
    R._replay.cache_clear()
    assert figures["0"] == figures["1"]
    assert len({f.peak_reserved for f in figures["0"]}) > 1  # the stages differ: a comparison of something


@pytest.mark.parametrize("seed", range(4))
def test_packed_runs_match_the_python_allocator(seed):
    """`run_packed` (the replays' steady phases, int64 (key, size) pairs) leaves both allocators as `run` does:
    a phase of storage ids run at several slots, moved on by `by`, in an interleaved order."""
    from symmem.accounting.allocator import pack

    rng = random.Random(seed)
    sizes = [512, 4096, 1 << 20, 3 << 20, 12 << 20, 50 << 20] + [rng.randrange(1, 64 << 20) for _ in range(10)]
    ids = 60
    phase = [(i, request(i, rng.choice(sizes))) for i in range(ids)]
    order = list(range(ids))
    rng.shuffle(order)
    phase += [(i, 0) for i in order]  # every id freed again, in another order
    packed = pack(phase)
    assert len(packed) == 2 * len(phase)
    runs = [(packed, 0), (packed, ids), (pack(phase[:ids]), 2 * ids), (pack(phase[ids:]), 2 * ids)]
    py, c, plain = CachingAllocator(), callocator.Allocator(), callocator.Allocator()
    for buf, by in runs:
        py.run_packed(buf, by)
        c.run_packed(buf, by)
        plain.run(list(zip(buf[0::2], buf[1::2], strict=True)), by)
        assert _state(py) == _state(c) == _state(plain)
    assert c.peak_reserved > 0 and c.live() == 0


def test_pack_refuses_keys_that_are_not_storage_ids():
    from symmem.accounting.allocator import pack

    assert pack([(("wgrad", (4, 4)), 512)]) is None and pack([(-1, 512)]) is None
    a = callocator.Allocator()
    from array import array

    with pytest.raises(ValueError, match="negative size"):
        a.run_packed(array("q", [1, -5]))
    with pytest.raises(SymmemError, match="freed but not allocated"):
        a.run_packed(pack([(3, 0)]))
    for alloc in (a, CachingAllocator()):  # a negative move: one error, never a read outside the ids (it crashed)
        with pytest.raises(ValueError):
            alloc.run_packed(pack([(0, 512)]), -1)
    with pytest.raises(ValueError, match="beyond the storage ids"):
        a.run_packed(pack([(0, 512)]), -10**9)
    with pytest.raises(ValueError, match="int64"):  # a buffer of other items than int64 pairs
        a.run_packed(array("d", [0.0, 512.0]))
    assert a.live() == 0 and a.allocated == 0  # every refusal before any allocation
