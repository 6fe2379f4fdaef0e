"""Megatron-Core's DDP buffer layout: where each parameter sits in a contiguous parameter (and gradient) buffer,
how the buffer is cut into buckets, how much padding that adds, and which pieces of which parameters one data-
parallel rank's distributed-optimizer shard holds. One implementation for every user (the megatron profiles'
buffers and reserved-memory replay, the DP traffic, the megatron-local rule module, the page's tables).

From megatron-core 0.16.1, megatron/core/distributed/:

* param_and_grad_buffer.py:701-735 (`_ParamAndGradBuffer.__init__`): the parameters are laid out in *reverse*
  registration order ("to roughly follow backprop order"); with the distributed optimizer each parameter's start is
  padded to a multiple of 64 elements (`_pad_start_of_param_if_needed`, :658-666). A bucket closes once it holds
  at least `bucket_size` elements (:719-724), and the last one holds what is left (:727-729); with the distributed
  optimizer each bucket's end is padded to a multiple of lcm(DP, 128) (`_pad_end_of_bucket_if_needed`, :638-656),
  so that each bucket splits evenly over the data-parallel ranks.
* distributed_data_parallel.py:63-67: `bucket_size` defaults to max(40,000,000, 1,000,000 x the data-parallel
  group's size) parameters, and is None (one bucket) unless `overlap_grad_reduce` is on; :94-100: only the first
  pipeline stage's first model chunk is bucketed (on the other stages the gradient reduction is off the critical
  path).
* optimizer/distrib_optimizer.py:112-171 (`_build_model_gbuf_range`): each bucket is sharded on its own, DP rank
  r holding elements [r x size/DP, (r + 1) x size/DP) of it; the optimizer keeps one main parameter (and Adam state)
  per piece of a parameter inside that range.

Held against Megatron-Core 0.16.1 on the CPU with several buckets (tests/validate/test_megatron_comm.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PARAM_ALIGN = 64  # param_and_grad_buffer.py:658-666: each param start, in elements (distributed optimizer)
BUCKET_ALIGN = 128  # param_and_grad_buffer.py:638-656: each bucket end to a multiple of lcm(DP, 128)
DEFAULT_BUCKET = 40_000_000  # distributed_data_parallel.py:64-65: max(40M, 1M x DP) parameters
DEFAULT_BUCKET_PER_DP = 1_000_000


@dataclass(frozen=True)
class DDP:
    """Megatron's DistributedDataParallelConfig settings symmem models (megatron profiles): `--overlap-grad-reduce`,
    `--overlap-param-gather`, `--ddp-bucket-size` (None: Megatron's default, `default_bucket_size`)."""

    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    bucket_size: int | None = None

    @property
    def flags(self) -> str:
        """The flags that set these, as the user typed them."""
        out = ["--overlap-grad-reduce"] if self.overlap_grad_reduce else []
        out += ["--overlap-param-gather"] if self.overlap_param_gather else []
        out += [f"--ddp-bucket-size {self.bucket_size}"] if self.bucket_size is not None else []
        return ", ".join(out)

    def check(self, scn) -> None:
        """Megatron's own rules for these flags (Megatron-LM megatron/training/arguments.py:1024-1029 at d98e8a6)
        and what symmem models of them, each refusal one line naming the flag."""
        from symmem.errors import SymmemError

        if self == DDP():
            return
        if not scn.profile.ddp_padding:
            raise SymmemError(f"{self.flags}: Megatron-Core's DDP settings; they apply under --profile megatron-te "
                              "or megatron-local")
        if self.overlap_param_gather and not self.overlap_grad_reduce:
            raise SymmemError("--overlap-param-gather: Megatron requires --overlap-grad-reduce with it "
                              "(arguments.py:1029)")
        if self.overlap_param_gather and int(scn.zero) not in (1, 2):
            raise SymmemError(f"--overlap-param-gather: only with the distributed optimizer (ZeRO 1 or 2; --zero = "
                              f"{int(scn.zero)}), arguments.py:1027")
        if self.bucket_size is not None and not self.overlap_grad_reduce:
            raise SymmemError(f"--ddp-bucket-size = {self.bucket_size}: without --overlap-grad-reduce Megatron makes "
                              "one bucket whatever the size (distributed_data_parallel.py:66-67); add "
                              "--overlap-grad-reduce")
        if int(scn.zero) > 2:
            raise SymmemError(f"{self.flags}: Megatron's DDP buckets; --zero 3 is not Megatron's DDP (use --zero 0, "
                              "1 or 2)")
        if scn.parallel.pp > 1 and scn.schedule.name != "1f1b":
            raise SymmemError(f"{self.flags} with --schedule {scn.schedule.name}: the overlap is modelled under "
                              "1F1B only (the interleaved schedule's model chunks have their own buckets)")


def default_bucket_size(dp: int) -> int:
    """Megatron's bucket size when `--ddp-bucket-size` is not given (distributed_data_parallel.py:64-65); `dp` the
    data-parallel group's size (without context parallelism)."""
    return max(DEFAULT_BUCKET, DEFAULT_BUCKET_PER_DP * dp)


@dataclass(frozen=True)
class BufferLayout:
    """One DDP buffer: (start, numel) of each parameter in registration order; the buckets' (start, end), end
    padded, in buffer order."""

    spans: tuple[tuple[int, int], ...]
    buckets: tuple[tuple[int, int], ...]

    @property
    def numel(self) -> int:
        return self.buckets[-1][1] if self.buckets else 0

    @property
    def padding(self) -> int:
        return self.numel - sum(n for _s, n in self.spans)


def layout(params: list[int], dp: int, bucket_size: int | None = None, distributed: bool = True) -> BufferLayout:
    """The buffer of parameters of `params` elements (registration order) over `dp` ranks, buckets of at least
    `bucket_size` elements (None: one bucket), padded as the distributed optimizer pads (`distributed`)."""
    step = math.lcm(dp, BUCKET_ALIGN)

    def end_pad(n: int) -> int:
        return -(-n // step) * step if distributed else n

    spans: list[tuple[int, int]] = [(0, 0)] * len(params)
    buckets: list[tuple[int, int]] = []
    at = bucket_start = end = 0
    open_bucket = False
    for i in range(len(params) - 1, -1, -1):  # reverse registration order (:711)
        if distributed:
            at = -(-at // PARAM_ALIGN) * PARAM_ALIGN
        end = at + params[i]
        spans[i] = (at, params[i])
        open_bucket = True
        if bucket_size is not None and end - bucket_start >= bucket_size:
            at = end_pad(end)
            buckets.append((bucket_start, at))
            bucket_start, open_bucket = at, False
        else:
            at = end
    if open_bucket:
        buckets.append((bucket_start, end_pad(end)))
    return BufferLayout(tuple(spans), tuple(buckets))


def shard(lay: BufferLayout, dp: int, rank: int) -> list[tuple[int, int]]:
    """(parameter index in registration order, elements) of each parameter piece inside DP rank `rank`'s shard of
    every bucket, in buffer order."""
    ordered = sorted((start, n, i) for i, (start, n) in enumerate(lay.spans))
    pieces = []
    for lo_b, hi_b in lay.buckets:
        size = hi_b - lo_b
        lo, hi = lo_b + rank * size // dp, lo_b + (rank + 1) * size // dp
        for start, n, i in ordered:
            if start >= hi:
                break
            k = min(hi, start + n) - max(lo, start)
            if k > 0:
                pieces.append((i, k))
    return pieces


def shard_pieces(lay: BufferLayout, dp: int, rank: int) -> list[int]:
    """Elements of each parameter piece inside DP rank `rank`'s shard (`shard`), in buffer order."""
    return [k for _i, k in shard(lay, dp, rank)]


def bucket_size_for(scn, stage_index: int) -> int | None:
    """The bucket size Megatron gives a stage's buffers under the scenario's DDP settings: None (one bucket)
    without `--overlap-grad-reduce` and on every pipeline stage but the first (distributed_data_parallel.py:66-67,
    :94-100)."""
    ddp = scn.ddp
    if not ddp.overlap_grad_reduce or stage_index != 0:
        return None
    return ddp.bucket_size or default_bucket_size(scn.parallel.dp)
