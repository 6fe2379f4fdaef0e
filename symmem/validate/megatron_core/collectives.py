"""Every c10d collective one rank issues in the measured iteration: kind, Megatron group, phase, bytes.

`Recorder` is a `TorchDispatchMode` entered inside the runner's `StorageTracker` (`runner.Settings.collectives`).
c10d's collectives reach the dispatcher as ops (`c10d.allreduce_`, `c10d._allgather_base_`,
`c10d._reduce_scatter_base_`, `c10d.send`, `c10d.recv_`, ...); their process-group argument is a ScriptObject
that `ProcessGroup.unbox` turns into the group, named here by matching its `group_name` against
`megatron.core.parallel_state`'s getters. A record's `nbytes` is the logical tensor: numel x element size of the
data argument, for an all-gather the input shard, for a reduce-scatter the full input, for an all-reduce, send or
receive the tensor itself (not the bytes on the wire; `wire` converts with ring factors).

Phase: `pipeline` for sends and receives; else `forward` or `backward` inside the schedule (backward: an autograd
graph task is running), `gradient reduction` inside Megatron's `finalize_model_grads` (found on the Python stack),
`optimizer step` when the tracker says so.
"""

from __future__ import annotations

import sys
from fractions import Fraction

KINDS = {  # c10d op -> kind
    "allreduce_": "all-reduce",
    "_allgather_base_": "all-gather",
    "allgather_": "all-gather",
    "allgather_into_tensor_coalesced_": "all-gather",
    "_reduce_scatter_base_": "reduce-scatter",
    "reduce_scatter_tensor_coalesced_": "reduce-scatter",
    "send": "send",
    "recv_": "recv",
    "alltoall_base_": "all-to-all",
    "broadcast_": "broadcast",
}

# parallel_state getters in order of preference: a group's label is the first getter that returns it
GETTERS = (
    ("tp", "get_tensor_model_parallel_group", {}),
    ("pp", "get_pipeline_model_parallel_group", {}),
    ("dp", "get_data_parallel_group", {}),
    ("dp-cp", "get_data_parallel_group", {"with_context_parallel": True}),
    ("cp", "get_context_parallel_group", {}),
    ("embedding", "get_embedding_group", {}),
    ("position-embedding", "get_position_embedding_group", {}),
    ("model-parallel", "get_model_parallel_group", {}),
    ("tp-dp", "get_tensor_and_data_parallel_group", {}),
    ("tp-cp", "get_tensor_and_context_parallel_group", {}),
    ("distopt-instance", "get_intra_distributed_optimizer_instance_group", {}),
    ("ep", "get_expert_model_parallel_group", {}),
    ("etp", "get_expert_tensor_parallel_group", {}),
    ("edp", "get_expert_data_parallel_group", {}),
)


def group_labels() -> dict[str, str]:
    """group_name -> the Megatron label of that process group (this rank's groups)."""
    from megatron.core import parallel_state as ps

    out: dict[str, str] = {}
    for label, getter, kwargs in GETTERS:
        try:
            try:
                g = getattr(ps, getter)(check_initialized=False, **kwargs)
            except TypeError:  # get_data_parallel_group takes no check_initialized
                g = getattr(ps, getter)(**kwargs)
        except (AssertionError, RuntimeError, TypeError, AttributeError):
            continue
        groups = g if isinstance(g, (list, tuple)) else [g]
        for grp in groups:
            if grp is not None and hasattr(grp, "group_name"):
                out.setdefault(grp.group_name, label)
    return out


def _tensors(obj, out):
    import torch

    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out)
    return out


def _group(args):
    import torch
    import torch.distributed as dist

    for a in args:
        if isinstance(a, torch.ScriptObject):
            try:
                return dist.ProcessGroup.unbox(a)
            except (RuntimeError, TypeError):
                continue  # the ReduceOp is a ScriptObject too
    return None


def _data(kind: str, args) -> list:
    """The data tensors (see `_data_bytes`)."""
    return _tensors(args[1] if kind in ("all-gather", "reduce-scatter") else args[0], [])


def _data_bytes(kind: str, op: str, args) -> int:
    """Bytes of the data argument: c10d's schemas put the output first for all-gather and reduce-scatter
    (`_allgather_base_(output, input, ...)`, `_reduce_scatter_base_(output, input, ...)`), the tensors first for
    the others."""
    if kind == "all-gather":
        data = args[1]  # the input shard
    elif kind == "reduce-scatter":
        data = args[1]  # the full input
    else:
        data = args[0]
    return sum(t.numel() * t.element_size() for t in _tensors(data, []))


def _in_finalize() -> bool:
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "finalize_model_grads":
            return True
        f = f.f_back
    return False


def recorder_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self, tracker):
            super().__init__()
            self.tracker = tracker
            self.labels = group_labels()
            self.records: list[dict] = []

        def _phase(self, kind: str) -> str:
            if kind in ("send", "recv"):
                return "pipeline"  # 1F1B sends gradients between backward steps, outside autograd
            if self.tracker.phase == "optimizer step":
                return "optimizer step"
            if _in_finalize():
                return "gradient reduction"
            if torch._C._current_graph_task_id() != -1:
                return "backward"
            return "forward"

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name
            if name.startswith("c10d::"):
                op = name.split("::", 1)[1]
                kind = KINDS.get(op, op)
                pg = _group(args)
                self.records.append({
                    "kind": kind, "op": op, "phase": self._phase(kind),
                    "group": self.labels.get(pg.group_name, pg.group_name) if pg is not None else "?",
                    "size": pg.size() if pg is not None else 0,
                    "nbytes": _data_bytes(kind, op, args) if kind in KINDS.values() else 0,
                    "shapes": [list(t.shape) for t in _data(kind, args)] if kind in KINDS.values() else [],
                    "dtype": str(_tensors(args[0], [None])[-1].dtype).replace("torch.", "")
                    if _tensors(args[0], []) else "",
                })
            return func(*args, **(kwargs or {}))

    return Recorder


def wire(kind: str, nbytes: int, n: int) -> Fraction:
    """Bytes one GPU sends for a logical tensor of `nbytes` on a ring of `n` (symmem.comm's convention): an
    all-gather (n-1) shards, a reduce-scatter and an all-reduce's halves (n-1)/n of the whole, sends the tensor."""
    if kind == "all-gather":
        return Fraction(nbytes * (n - 1))
    if kind == "reduce-scatter":
        return Fraction(nbytes * (n - 1), n)
    if kind == "all-reduce":
        return Fraction(2 * nbytes * (n - 1), n)
    if kind == "send":
        return Fraction(nbytes)
    if kind == "recv":
        return Fraction(0)  # receives are the peer's sends
    # broadcast, all-to-all, anything else: symmem.comm has no convention for it here; it must not count as 0
    raise ValueError(f"collective kind {kind!r}: no byte convention (list it as outside the model)")


def totals(records: list[dict], key=("group", "kind", "phase")) -> dict[tuple, int]:
    """Logical bytes and count per key, collectives on groups of one rank left out (nothing moves)."""
    out: dict[tuple, int] = {}
    for r in records:
        if r["size"] > 1:
            k = tuple(r[x] for x in key)
            out[k] = out.get(k, 0) + r["nbytes"]
    return out
