"""The collectives of `symmem calibrate --devices N`: all-gather, reduce-scatter, all-reduce, all-to-all and a
point-to-point send (a round trip between two processes, halved) timed among N processes of this machine under
torch.distributed (NCCL on CUDA GPUs, one a process; gloo on the CPU), and the link they imply, in the step-time
model's own terms (symmem.comm counts a ring collective or an all-to-all over n GPUs as n - 1 steps sending
(n - 1)/n of the tensor, an all-reduce twice that, a send one step of the whole):

    seconds = steps x step latency + bytes sent / link bandwidth

fitted by least squares on the relative error: once over the ring collectives at every size (`link`: the
fitted model's form), and once per kind over that kind's sizes (`by_kind`: the measured-kernels model times each
kind of collective by its own, as it does the B200's by SimuMax's per-kind figures). Two numbers a fit, from
measured collectives, none from iteration times. One machine: the link between machines is not measured, and a
step whose groups span machines is refused.
"""

from __future__ import annotations

import math
import os
import socket
import time

KINDS = ("all_gather", "reduce_scatter", "all_reduce")  # the link's one fit (the fitted model's form reads it)
OWN_FIT = KINDS + ("all_to_all", "p2p")  # each also fitted on its own rows (the measured-kernels model's form)
SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)  # bytes of the whole (gathered, or reduced) tensor
QUICK_SIZES = (256 << 10, 1 << 20, 4 << 20)


def steps_and_bytes(kind: str, size: int, n: int) -> tuple[int, float]:
    """(ring steps, bytes one process sends) of one collective over `n` of a `size`-byte tensor, as symmem.comm
    counts them."""
    if kind == "p2p":  # one send of the whole tensor to one peer
        return 1, float(size)
    share = size * (n - 1) / n
    return (2 * (n - 1), 2 * share) if kind == "all_reduce" else (n - 1, share)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STOPPED = "stopped"  # what rank 0 puts on the queue when the deadline passed


def _worker(rank: int, world: int, port: int, sizes: tuple, repeat: int, device: str, queue,
            deadline: float = math.inf) -> None:
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
        for kind in OWN_FIT:
            for size in sizes:
                elements = max(world, size // 4 // world * world)  # FP32, a multiple of the group
                whole = torch.ones(elements, device=device)
                part = torch.ones(elements // world, device=device)
                other = torch.empty_like(whole)

                def run(kind=kind, whole=whole, part=part, other=other):
                    if kind == "all_gather":
                        gather(whole, part)
                    elif kind == "reduce_scatter":
                        scatter(part, whole)
                    elif kind == "all_reduce":
                        dist.all_reduce(whole)
                    elif kind == "all_to_all":  # each process sends 1/n of the tensor to each other one
                        dist.all_to_all_single(other, whole)
                    elif rank == 0:  # p2p: a round trip between the first two, half of it one send
                        dist.send(whole, 1)
                        dist.recv(other, 1)
                    elif rank == 1:
                        dist.recv(other, 0)
                        dist.send(other, 0)
                    if device == "cuda":
                        torch.cuda.synchronize()
                run()
                times = []
                for _ in range(repeat):
                    # past the deadline on any process's clock, every process stops here together: the flag's
                    # all-reduce is the barrier before each timed run
                    late = torch.tensor([1.0 if time.time() > deadline else 0.0], device=device)
                    dist.all_reduce(late, op=dist.ReduceOp.MAX)
                    if late.item() > 0:
                        if rank == 0:
                            queue.put(STOPPED)
                        return
                    t0 = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - t0)
                t = min(times) / (2 if kind == "p2p" else 1)
                rows.append({"kind": kind, "bytes": 4 * elements, "seconds": t})
        if rank == 0:
            queue.put(rows)
    finally:
        dist.destroy_process_group()


def measure(world: int, quick: bool, repeat: int, device: str, deadline: float = math.inf,
            budget: float = math.inf) -> list[dict]:
    """Every kind at every size among `world` processes: [{kind, bytes, seconds}] (rank 0's clock, the fastest of
    `repeat` runs, each after a barrier: a busy machine only adds time); stopped in one line past `deadline`
    (time.time(), calibrate's --budget `budget` seconds from its start)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    sizes = QUICK_SIZES if quick else SIZES
    try:  # (every process is joined before this returns or raises)
        mp.start_processes(_worker, args=(world, _free_port(), sizes, repeat, device, queue, deadline),
                           nprocs=world, start_method="spawn")
    except (mp.ProcessRaisedException, mp.ProcessExitedException, RuntimeError) as e:
        from symmem.errors import SymmemError

        first = (str(e).strip().splitlines() or [type(e).__name__])[-1][:160]
        raise SymmemError(f"calibrate --devices {world}: the collectives failed ({first})") from None
    rows = queue.get()
    if rows == STOPPED:
        from symmem.errors import SymmemError

        raise SymmemError(f"calibrate: still timing the collectives after --budget {budget:g} s; nothing written "
                          "(fewer --repeat or --devices, --quick, or a larger --budget)")
    return rows


def link(rows: list[dict], n: int) -> tuple[float, float]:
    """(bytes/s, seconds per ring step) of the link `rows` measured among `n` processes: least squares on the
    relative error of seconds = steps x latency + bytes / bandwidth over the ring collectives (`KINDS`); the
    latency at least 0."""
    return _fit([r for r in rows if r["kind"] in KINDS], n)


def by_kind(rows: list[dict], n: int) -> dict[str, dict]:
    """Each kind's own link from its own rows (`OWN_FIT`: the ring collectives, all-to-all and the point-to-point
    send): {kind: {bytes_per_s, step_latency_s, fit}}; a kind whose rows do not grow with their size (a noisy
    moment) takes the ring collectives' one fit, and says so in `fit`."""
    from symmem.errors import SymmemError

    common = link(rows, n)
    out = {}
    for kind in OWN_FIT:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        try:
            (bw, lat), fit = _fit(mine, n), "its own rows"
        except SymmemError:
            (bw, lat), fit = common, "the ring collectives' fit (its own rows did not grow with their size)"
        out[kind] = {"bytes_per_s": bw, "step_latency_s": lat, "fit": fit}
    return out


def _fit(rows: list[dict], n: int) -> tuple[float, float]:
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
