"""`map_on_two_cores(work, items)`: `[work(x) for x in items]` shared with one forked child where there are two
cores, each process taking the next item as it finishes one (the sweep's pipeline depths and the listed rows'
replays cost unevenly: the rows' replays took 0.92 s in one process and 0.80 s in the other split every other).

The items' indices are written to a pipe before the fork, two bytes each, in one write; each process reads the next
two bytes when it is free. A pipe's reads are serialized by the kernel and every write here is of whole indices, so
each index is read by exactly one process. The child sends its results back pickled and leaves with `os._exit`
(nothing of the parent's state is torn down twice). A child that fails leaves its items to this process, so the
answer never depends on the fork; an error of `work` is raised here, as without it.
"""

from __future__ import annotations

import os
import pickle

_INDEX_BYTES = 2
_MAX_ITEMS = 2048  # their indices in one write of at most PIPE_BUF (4,096 bytes on Linux): atomic, never blocks


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


def _next(fd: int) -> int | None:
    data = os.read(fd, _INDEX_BYTES)
    return int.from_bytes(data, "little") if len(data) == _INDEX_BYTES else None


def map_on_two_cores(work, items: list, child_work=None, take_order: list[int] | None = None) -> list:
    """[work(x) for x in items], in that order (results, and the first error in that order), the items shared with a
    forked child where there are two cores. `take_order`: the order the item indices are handed out in (the costliest
    first balances best), by default the items' own. `child_work(x)`, when given, is what the child runs instead of
    `work` (a result it can pickle, e.g. without the closures a parent-side result may keep); its results are
    returned as they are."""
    if len(items) < 2 or len(items) > _MAX_ITEMS or _cores() < 2 or not hasattr(os, "fork"):
        return [work(x) for x in items]
    order = list(range(len(items))) if take_order is None else list(take_order)
    if sorted(order) != list(range(len(items))):
        raise ValueError("take_order: each item's index once")
    tasks_r, tasks_w = os.pipe()
    try:
        os.write(tasks_w, b"".join(i.to_bytes(_INDEX_BYTES, "little") for i in order))
    finally:
        os.close(tasks_w)  # (read to its end, the pipe says so: each process stops there)
    try:
        results_r, results_w = os.pipe()
    except OSError:
        os.close(tasks_r)
        raise
    try:
        pid = os.fork()
    except OSError:  # (no fork: every pipe closed, the items worked here)
        for fd in (tasks_r, results_r, results_w):
            os.close(fd)
        return [work(x) for x in items]
    if pid == 0:  # the child: the items it takes, their results through the pipe, then gone
        code = 0
        try:
            os.close(results_r)
            done = {}
            while (i := _next(tasks_r)) is not None:
                done[i] = (child_work or work)(items[i])
            data = pickle.dumps(done)
            with os.fdopen(results_w, "wb") as f:
                f.write(data)
        except BaseException:  # noqa: BLE001 - the parent works these items itself and raises what it raises
            code = 1
        os._exit(code)
    os.close(results_w)
    mine: dict = {}
    failed: tuple | None = None  # (index, error): this process stops taking items at its first error
    try:
        while (i := _next(tasks_r)) is not None:
            try:
                mine[i] = work(items[i])
            except Exception as e:  # noqa: BLE001 - raised below, after the items before it, as without the fork
                failed = (i, e)
                break
    finally:  # (the child waited for, whatever this process's work did: no process outlives the command)
        os.close(tasks_r)
        with os.fdopen(results_r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
    theirs = pickle.loads(data) if status == 0 and data else {}
    out = []
    for i in range(len(items)):  # in order; what neither answered (the child failed) worked here
        if failed is not None and i == failed[0]:
            raise failed[1]
        out.append(mine[i] if i in mine else theirs[i] if i in theirs else work(items[i]))
    return out
