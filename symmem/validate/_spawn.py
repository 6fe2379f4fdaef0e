"""Spawning one process per rank for the CPU runners (`megatron_core.runner`, `fsdp2.runner`): torch's `spawn`
start method, a free local port for gloo's rendezvous, each rank's result through one queue, ordered by rank; a
rank's failure raised as SymmemError with its traceback."""

from __future__ import annotations

import socket

from symmem.errors import SymmemError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(body, rank: int, st, world: int, port: int, queue) -> None:
    """One process: a gloo group of `world` on the local port, one thread, `body(rank, st)`; the result (or the
    error, as one line and its traceback) to the parent."""
    try:
        import os

        from symmem.validate._quiet import quiet

        quiet()  # before torch, torchao and Megatron are imported in this process
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        try:
            result = body(rank, st)
        finally:
            dist.destroy_process_group()
        queue.put((rank, result))
    except BaseException as exc:  # reported to the parent as one line
        import traceback

        queue.put((rank, {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}))


def spawn(body, st, world: int, what: str) -> list[dict]:
    """Run `body(rank, st)` (a module-level function) in `world` processes of one gloo group."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(body, r, st, world, port, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    errors = [r for r in results.values() if "error" in r]
    if errors:
        raise SymmemError(f"{what} run failed on a rank: {errors[0]['error']}\n{errors[0]['trace']}")
    return [results[r] for r in range(world)]
