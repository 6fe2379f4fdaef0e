"""PyTorch's CUDA caching allocator, replayed: what a GPU *reserves* (the segments cudaMalloc'd) for a sequence of
allocations and frees, beside what it allocates.

A job fails when the allocator cannot reserve a segment, not when the sum of live tensors reaches the capacity:
freed blocks stay cached in their segments, a request rounds up, and a segment can only serve requests that fit
in one of its free blocks. This module follows c10/cuda/CUDACachingAllocator.cpp (PyTorch, read at commit
001074d25084fdb87a799823e395a50f5ec044d3; the rules below have not changed in substance since the expandable
segments of PyTorch 2.1, so they are those of the measured runs' PyTorch 2.10), with its default settings
(`PYTORCH_CUDA_ALLOC_CONF` unset: no expandable segments, no `max_split_size_mb`, no garbage-collection threshold,
no `roundup_power2_divisions`), one stream, no out-of-memory retry (a capacity is never reached here):

* `round_size`: a request rounds up to a multiple of kMinBlockSize = 512 bytes (and at least 512);
* `get_pool`: rounded sizes up to kSmallSize = 1 MiB go to the small pool, larger ones to the large pool;
* `get_free_block`: the smallest cached free block of the pool at least as large (ties: the lowest address;
  `BlockComparatorSize` orders by stream, size, address);
* `get_allocation_size`: with no such block a new segment is cudaMalloc'd: kSmallBuffer = 2 MiB for the small pool,
  kLargeBuffer = 20 MiB for requests under kMinLargeAlloc = 10 MiB, else the request rounded up to kRoundLarge =
  2 MiB;
* `should_split` / `alloc_found_block`: a block larger than the request is split, the request taking its front, when
  the remainder is at least kMinBlockSize (small pool) or more than kSmallSize (large pool); otherwise the whole block
  is handed out (its extra bytes count as allocated: `allocated_bytes` adds the block's size);
* `free_block` / `try_merge_blocks`: a freed block merges with its free neighbours of the same segment; segments are
  never returned to the device (no `empty_cache`).

`allocated` below is what `torch.cuda.max_memory_allocated()` reports (block sizes, so rounded), `reserved` what
`max_memory_reserved()` reports (segment sizes).
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field

from symmem.errors import SymmemError

MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 << 20  # kSmallSize: the largest small-pool request
SMALL_BUFFER = 2 << 20  # kSmallBuffer: a small-pool segment
LARGE_BUFFER = 20 << 20  # kLargeBuffer: the segment of a 1-10 MiB request
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge


def round_size(size: int) -> int:
    """`round_size`: at least 512 bytes, a multiple of 512."""
    return MIN_BLOCK if size < MIN_BLOCK else -(-size // MIN_BLOCK) * MIN_BLOCK


def request(key: object, nbytes: int) -> int:
    """An allocation of `nbytes` as `CachingAllocator.run` takes it: checked, then rounded (`round_size`)."""
    if nbytes.__class__ is not int or nbytes < 0:  # (bool is no int here)
        raise SymmemError(f"allocation {key!r}: {nbytes!r} bytes: must be a non-negative integer")
    return round_size(nbytes)


def allocation_size(size: int) -> int:
    """`get_allocation_size`: the segment cudaMalloc'd for a rounded request no cached block serves."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass(eq=False, slots=True)
class _Block:
    address: int
    size: int
    small: bool
    allocated: bool = False
    prev: _Block | None = field(default=None, repr=False)
    next: _Block | None = field(default=None, repr=False)


def _unlist(pool: list, block: _Block) -> None:
    """Take a free block out of its pool (sorted (size, address, block))."""
    i = bisect.bisect_left(pool, (block.size, block.address))
    if i >= len(pool) or pool[i][2] is not block:
        raise AssertionError("a free block missing from its pool")  # a bug of this module, never input
    pool.pop(i)


def _split(block: _Block, size: int, remaining: int) -> _Block:
    """`alloc_found_block`'s split: `block` keeps its first `size` bytes, a new free block after it the
    `remaining` (returned, not yet in its pool)."""
    after = block.next
    rest = _Block(block.address + size, remaining, block.small, False, block, after)
    if after is not None:
        after.prev = rest
    block.next = rest
    block.size = size
    return rest


def _release(pool: list, block: _Block) -> _Block | None:
    """`free_block` of a block just marked free: `try_merge_blocks` with its free neighbours of the same segment
    (each taken out of the pool), then the merged block put in the pool; the free block after it that it absorbed,
    if any. One function for both allocators, called once per free (where each free made up to four calls)."""
    before = block.prev
    if before is not None and not before.allocated:
        _unlist(pool, before)
        block.address = before.address
        block.size += before.size
        block.prev = before = before.prev
        if before is not None:
            before.next = block
    after = block.next
    if after is not None and not after.allocated:
        _unlist(pool, after)
        block.size += after.size
        block.next = nxt = after.next
        if nxt is not None:
            nxt.prev = block
    else:
        after = None
    bisect.insort(pool, (block.size, block.address, block))
    return after


@dataclass
class CachingAllocator:
    """One device's caching allocator: `malloc(key, nbytes)`, `free(key)`; `allocated`, `reserved` and their
    peaks in bytes."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments: int = 0
    _free: dict = field(default_factory=lambda: {True: [], False: []})  # pool -> sorted [(size, address, block)]
    _live: dict = field(default_factory=dict)  # key -> block
    _top: int = 0  # the next segment's address (segments are laid out one after the other)

    def malloc(self, key: object, nbytes: int) -> None:
        self.run(((key, request(key, nbytes)),))

    def free(self, key: object) -> None:
        self.run(((key, 0),))

    def run_packed(self, packed, by: int = 0) -> None:
        """`run` over `pack(ops)` (the C allocator's fast path; here the same ops unpacked), with its checks: every
        key a storage id, moved on by `by` >= 0, every size >= 0."""
        if by < 0 or any(x < 0 for x in packed):
            raise ValueError("run_packed: a negative key, size or `by`")
        self.run(list(zip(packed[0::2], packed[1::2], strict=True)), by)

    def run(self, ops, by: int = 0) -> None:
        """Replay `ops` in order: `(key, size)` allocates a request of `size` bytes, already rounded by
        `request` (at least 512), `(key, 0)` frees `key`; integer keys are moved on by `by` (a micro-batch slot's
        storage ids: `symmem.accounting.reserved._Phases`). One loop with the state in locals: the replays of
        `symmem paper` make about 350,000 calls, and a method call with its attribute lookups per call was most of
        their time."""
        live, pools = self._live, self._free
        allocated, peak = self.allocated, self.peak_allocated
        bisect_left, insort, split, release = bisect.bisect_left, bisect.insort, _split, _release
        if by:
            ops = [(key + by if key.__class__ is int else key, size) for key, size in ops]
        try:
            for key, size in ops:
                if size:
                    if key in live:
                        raise SymmemError(f"allocation {key!r}: allocated twice without a free")
                    small = size <= SMALL_SIZE
                    pool = pools[small]
                    i = bisect_left(pool, (size, -1))
                    block = pool.pop(i)[2] if i < len(pool) else self._segment(size, small)
                    remaining = block.size - size
                    if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
                        rest = split(block, size, remaining)
                        insort(pool, (remaining, rest.address, rest))
                    block.allocated = True
                    live[key] = block
                    allocated += block.size
                    if allocated > peak:
                        peak = allocated
                    continue
                block = live.pop(key, None)
                if block is None:
                    raise SymmemError(f"allocation {key!r}: freed but not allocated")
                block.allocated = False
                allocated -= block.size
                release(pools[block.small], block)
        finally:  # the state stays whole when a call is refused
            self.allocated, self.peak_allocated = allocated, peak

    def _segment(self, size: int, small: bool) -> _Block:
        """`get_allocation_size` and cudaMalloc: a new segment after the last, as one free block."""
        seg = allocation_size(size)
        block = _Block(self._top, seg, small)
        self._top += seg
        self.reserved += seg
        self.segments += 1
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        return block

    def live(self) -> int:
        """Allocations not yet freed."""
        return len(self._live)


def pack(ops) -> array | None:
    """`(key, size)` ops as one int64 array of key, size pairs for `run_packed`, or None when a key is not a
    storage id (a non-negative int): the replays' per-micro-batch phases, run thousands of times, cost no Python
    object per op in the C allocator."""
    flat = array("q")
    for key, size in ops:
        if key.__class__ is not int or key < 0:
            return None
        flat.append(key)
        flat.append(size)
    return flat


def fast_allocator():
    """A new allocator for long replays: the C one (symmem/accounting/_callocator.c, built at install when a C
    compiler is there) when it is, else `CachingAllocator`. The same rules and figures (tests/test_callocator.py);
    `run`, `live()` and the figures' attributes, no `malloc`/`free`. `SYMMEM_PURE_PYTHON=1` takes the Python one."""
    import os

    if os.environ.get("SYMMEM_PURE_PYTHON") != "1":
        try:
            from symmem.accounting._callocator import Allocator
        except ImportError:
            pass
        else:
            return Allocator()
    return CachingAllocator()


def replay(events) -> CachingAllocator:
    """Replay `("malloc", key, nbytes)` and `("free", key)` events in order; the allocator after them."""
    alloc = CachingAllocator()
    for ev in events:
        if ev[0] == "malloc":
            alloc.malloc(ev[1], ev[2])
        elif ev[0] == "free":
            alloc.free(ev[1])
        else:
            raise SymmemError(f"allocator event {ev[0]!r}: must be 'malloc' or 'free'")
    return alloc


# ------------------------------------------------------------------------------------------ expandable segments
SMALL_PAGE = SMALL_BUFFER  # an expandable segment of the small pool grows by kSmallBuffer
LARGE_PAGE = LARGE_BUFFER  # of the large pool by kLargeBuffer (the segment size `ExpandableSegment` maps in)


@dataclass(eq=False, slots=True)
class _Segment:
    """One expandable segment: a virtual range mapped from its start up to `mapped` bytes; `last` its block at the
    end of the mapped range."""

    mapped: int = 0
    last: _Block | None = None


@dataclass
class ExpandableAllocator:
    """The caching allocator under `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (c10/cuda/
    CUDACachingAllocator.cpp, `ExpandableSegment`, `find_expandable_block`, `try_allocate_expandable_block`,
    `map_block`; the rules as the default allocator's above otherwise):

    * one segment per stream and pool (small: requests up to 1 MiB; large), each a virtual range mapped in pages of
      2 MiB (small) or 20 MiB (large) from its start;
    * a request takes the smallest cached free block of its stream and pool that fits (`get_free_block`), the free
      block at the mapped end last (ranked by what it can grow to, `expandable_size`); a larger block is split
      whenever 512 bytes or more remain (`should_split` with expandable segments);
    * with none, the segment grows at its end: a free block at the end of the mapped range is extended by the pages
      it lacks, else new pages are mapped after the last block (`try_allocate_expandable_block`);
    * freed blocks merge with free neighbours and stay mapped: `reserved` (`max_memory_reserved()`) is the mapped
      bytes of all segments, never lowered without `empty_cache`.

    Streams are names (`malloc(key, nbytes, stream)`): memory freed on one stream serves only that stream."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    _free: dict = field(default_factory=dict)  # (stream, small) -> sorted [(size, address, block)]
    _segments: dict = field(default_factory=dict)  # (stream, small) -> _Segment
    _live: dict = field(default_factory=dict)  # key -> (block, its pool, its segment)
    tag: object = None  # what the caller is doing (its to set): noted as `peak_tag` whenever the peak reserved rises
    peak_tag: object = None

    def malloc(self, key: object, nbytes: int, stream: str = "default") -> None:
        # (written for speed, as CachingAllocator.run: the FSDP2 replays of `symmem paper` make ~100,000 calls)
        size = request(key, nbytes)
        live = self._live
        if key in live:
            raise SymmemError(f"allocation {key!r}: allocated twice without a free")
        small = size <= SMALL_SIZE
        pool_key = (stream, small)
        pool = self._free.get(pool_key)
        if pool is None:
            pool = self._free[pool_key] = []
        i = bisect.bisect_left(pool, (size, -1))
        seg = self._segments.get(pool_key)
        n = len(pool)
        if i < n and seg is not None and pool[i][2] is seg.last and i + 1 < n:
            # `get_free_block` ranks the free block at the mapped end by the size it can grow to (its own and the
            # unmapped range after it, `expandable_size`): any other block that fits comes first
            i += 1
        if i < n:
            block = pool.pop(i)[2]
        else:
            block = self._grow(pool_key, size, small)
            seg = self._segments[pool_key]
        remaining = block.size - size
        if remaining >= MIN_BLOCK:
            rest = _split(block, size, remaining)
            if seg.last is block:
                seg.last = rest
            bisect.insort(pool, (remaining, rest.address, rest))
        block.allocated = True
        live[key] = (block, pool, seg)
        allocated = self.allocated = self.allocated + block.size
        if allocated > self.peak_allocated:
            self.peak_allocated = allocated

    def _grow(self, pool_key, size: int, small: bool) -> _Block:
        """Map the pages the request lacks at the segment's end; the (free, unlisted) block that serves it."""
        page = SMALL_PAGE if small else LARGE_PAGE
        seg = self._segments.setdefault(pool_key, _Segment())
        tail = seg.last if seg.last is not None and not seg.last.allocated else None
        have = tail.size if tail is not None else 0
        more = -(-(size - have) // page) * page
        seg.mapped += more
        self.reserved += more
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
            self.peak_tag = self.tag
        if tail is not None:
            _unlist(self._free[pool_key], tail)
            tail.size += more
            return tail
        block = _Block(seg.mapped - more, more, small, prev=seg.last)
        if seg.last is not None:
            seg.last.next = block
        seg.last = block
        return block

    def free(self, key: object) -> None:
        entry = self._live.pop(key, None)
        if entry is None:
            raise SymmemError(f"allocation {key!r}: freed but not allocated")
        block, pool, seg = entry
        block.allocated = False
        self.allocated -= block.size
        after = _release(pool, block)
        if after is not None and after is seg.last:  # the merged block now ends the mapped range
            seg.last = block

    def live(self) -> int:
        return len(self._live)

    def mapped(self, stream: str) -> int:
        """Bytes mapped by one stream's segments."""
        return sum(seg.mapped for (st, _), seg in self._segments.items() if st == stream)

