"""The collectives of `symmem calibrate --devices N`: all-gather, reduce-scatter and all-reduce timed among N
processes of this machine under torch.distributed (NCCL on CUDA GPUs, one a process; gloo on the CPU), and the
link they imply, in the step-time model's own terms (symmem.comm counts a ring collective over n GPUs as n - 1
steps sending (n - 1)/n of the tensor, an all-reduce twice that):

    seconds = steps x step latency + bytes sent / link bandwidth

fitted by least squares on the relative error over every size and kind measured (two numbers from measured
collectives, none from iteration times). One machine: the link between machines is not measured, and a step whose
groups span machines is refused.
"""

from __future__ import annotations

import os
import socket
import time

KINDS = ("all_gather", "reduce_scatter", "all_reduce")
SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)  # bytes of the whole (gathered, or reduced) tensor
QUICK_SIZES = (256 << 10, 1 << 20, 4 << 20)


def steps_and_bytes(kind: str, size: int, n: int) -> tuple[int, float]:
    """(ring steps, bytes one process sends) of one collective over `n` of a `size`-byte tensor, as symmem.comm
    counts them."""
    share = size * (n - 1) / n
    return (2 * (n - 1), 2 * share) if kind == "all_reduce" else (n - 1, share)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, sizes: tuple, repeat: int, device: str, queue) -> None:
    import torch
    import torch.distributed as dist

    if device == "cuda":
        torch.cuda.set_device(rank)
    else:  # (this process's own environment: gloo over the loopback, whatever interfaces the machine has)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=world,
                            init_method=f"tcp://127.0.0.1:{port}")
    # torch 2.13's names (the *_into_tensor / *_tensor ones warn that they are deprecated); older torch's
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    try:
        rows = []
        for kind in KINDS:
            for size in sizes:
                elements = max(world, size // 4 // world * world)  # FP32, a multiple of the group
                whole = torch.ones(elements, device=device)
                part = torch.ones(elements // world, device=device)

                def run(kind=kind, whole=whole, part=part):
                    if kind == "all_gather":
                        gather(whole, part)
                    elif kind == "reduce_scatter":
                        scatter(part, whole)
                    else:
                        dist.all_reduce(whole)
                    if device == "cuda":
                        torch.cuda.synchronize()
                run()
                times = []
                for _ in range(repeat):
                    dist.barrier()
                    t0 = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - t0)
                rows.append({"kind": kind, "bytes": 4 * elements, "seconds": min(times)})
        if rank == 0:
            queue.put(rows)
    finally:
        dist.destroy_process_group()


def measure(world: int, quick: bool, repeat: int, device: str) -> list[dict]:
    """Every kind at every size among `world` processes: [{kind, bytes, seconds}] (rank 0's clock, the fastest of
    `repeat` runs, each after a barrier: a busy machine only adds time)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    sizes = QUICK_SIZES if quick else SIZES
    try:  # (every process is joined before this returns or raises)
        mp.start_processes(_worker, args=(world, _free_port(), sizes, repeat, device, queue), nprocs=world,
                           start_method="spawn")
    except (mp.ProcessRaisedException, mp.ProcessExitedException, RuntimeError) as e:
        from symmem.errors import SymmemError

        first = (str(e).strip().splitlines() or [type(e).__name__])[-1][:160]
        raise SymmemError(f"calibrate --devices {world}: the collectives failed ({first})") from None
    return queue.get()


def link(rows: list[dict], n: int) -> tuple[float, float]:
    """(bytes/s, seconds per ring step) of the link `rows` measured among `n` processes: least squares on the
    relative error of seconds = steps x latency + bytes / bandwidth; the latency at least 0."""
    import numpy as np

    a, y = [], []
    for r in rows:
        steps, sent = steps_and_bytes(r["kind"], r["bytes"], n)
        a.append([steps / r["seconds"], sent / r["seconds"]])
        y.append(1.0)
    a, y = np.array(a), np.array(y)
    latency, per_byte = np.linalg.lstsq(a, y, rcond=None)[0]
    if latency < 0:  # (the sizes measured are bandwidth-bound: no latency to read off them)
        latency, per_byte = 0.0, float(np.linalg.lstsq(a[:, 1:], y, rcond=None)[0][0])
    if per_byte <= 0:
        from symmem.errors import SymmemError

        raise SymmemError("calibrate --devices: the collectives' times do not grow with their size; measure again "
                          "(a busy machine?) or with larger sizes")
    return 1.0 / float(per_byte), float(latency)
