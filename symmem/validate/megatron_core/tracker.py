"""Live storages of one process, followed op by op: the peak over an iteration and the op at it.

`StorageTracker` is a `TorchDispatchMode`: every aten op's outputs are looked at, and each untyped storage not yet
known is added with its `nbytes` and a weak reference whose callback removes it when the storage dies. Storages that
exist before the iteration (parameters, DDP buffers, optimizer states) are registered with `add`. Live bytes are the
sum over distinct storages (a view counts its base once); the peak is checked after every op, so it is the high
water mark of what is alive between ops (a temporary freed inside one aten kernel is not seen; on the CPU the
caching allocator does not exist, so allocated = live).

`SavedPerLayer` counts what autograd keeps for backward, per transformer layer, as `symmem measure` does for HF
layers: `saved_tensors_hooks` record each packed tensor's storage, attributed to the layer that packed it first;
parameters and other model states are excluded; a storage counts while it is alive when the micro-batch's forward
ends.
"""

from __future__ import annotations

import weakref


def torchao_inner(t) -> list | None:
    """The inner tensors of one of torchao's wrapper subclasses (Float8TrainingTensor,
    WeightWithDynamicFloat8CastTensor), which own no storage: what `__tensor_flatten__` names; None for any other
    tensor. (DTensors and functional collectives' outputs are their callers' to unwrap: `fsdp2.runner._local`,
    `_plain`.)"""
    if not type(t).__module__.startswith("torchao."):
        return None
    return [getattr(t, name) for name in type(t).__tensor_flatten__(t)[0]]


def _storages(obj, out):
    import torch

    if isinstance(obj, torch.Tensor):
        inner = torchao_inner(obj)
        if inner is not None:
            for t in inner:
                _storages(t, out)
        elif obj.layout == torch.strided and obj.device.type == "cpu":
            out.append(obj.untyped_storage())
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _storages(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _storages(o, out)
    return out


def tracker_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class StorageTracker(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live: dict[int, int] = {}  # data_ptr -> nbytes
            self._refs: dict[int, weakref.ref] = {}
            self.current = 0
            self.peak = 0
            self.peak_op = "(start)"
            self.phase = "start"
            self.peak_phase = "start"
            self.origin: dict[int, str] = {}  # data_ptr -> "phase: op" that made it
            self.at_peak: list[tuple[int, str]] = []  # (bytes, origin) of every storage live at the peak

        def add(self, storage, op: str = "(registered)") -> None:
            ptr, n = storage.data_ptr(), storage.nbytes()
            if n == 0 or ptr in self.live:
                return
            self.live[ptr] = n
            self.origin[ptr] = f"{self.phase}: {op}"
            self.current += n

            def gone(_ref, ptr=ptr):
                self.origin.pop(ptr, None)
                n = self.live.pop(ptr, 0)
                self.current -= n
                self._refs.pop(ptr, None)

            self._refs[ptr] = weakref.ref(storage, gone)

        def add_tensors(self, tensors) -> None:
            for st in _storages(list(tensors), []):
                self.add(st)
            self._check("(registered)")

        def _check(self, op: str) -> None:
            if self.current > self.peak:
                self.peak, self.peak_op, self.peak_phase = self.current, op, self.phase
                self.at_peak = [(n, self.origin[p]) for p, n in self.live.items()]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for st in _storages(out, []):
                self.add(st, str(func.__name__))
            if func.__name__ not in ("detach.default", "view.default", "_unsafe_view.default"):
                self._check(str(func.__name__))
            return out

    return StorageTracker


OUTSIDE = "outside layers"  # the embedding, the output layer and loss, full recomputation's checkpoints


class SavedPerLayer:
    """Storages saved for backward in one micro-batch's forward, per layer (first packer wins)."""

    def __init__(self, excluded_ptrs: set[int]):
        self.excluded = excluded_ptrs
        self.layer: str | None = None
        self.owner: dict[int, str] = {}
        self.refs: dict[int, tuple[weakref.ref, int]] = {}
        self.active = False
        self.shapes: dict[int, tuple] = {}

    def pack(self, t):
        if self.active:
            try:
                st = t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                return t
            ptr = st.data_ptr()
            known = self.refs.get(ptr)
            # a new storage, or one at the address of a packed storage already released (a node that died at once,
            # e.g. DeepSeek-V3's group-limited routing: its masked_fill and topk pack, and nothing keeps them)
            if st.nbytes() and ptr not in self.excluded and (known is None or known[0]() is None):
                self.owner[ptr] = self.layer or OUTSIDE
                self.refs[ptr] = (weakref.ref(st), st.nbytes())
                self.shapes[ptr] = (tuple(t.shape), str(t.dtype).replace("torch.", ""))
        return t

    def forget_released(self) -> None:
        """Drop the storages already released, so that a later one at the same address counts (model chunks)."""
        for ptr in [p for p, (ref, _n) in self.refs.items() if ref() is None]:
            del self.owner[ptr], self.refs[ptr], self.shapes[ptr]

    @staticmethod
    def unpack(t):
        return t

    def detail(self) -> dict[str, list]:
        """Per layer: (shape, dtype, storage bytes) of every storage counted, in packing order."""
        out: dict[str, list] = {}
        for ptr, layer in self.owner.items():
            ref, n = self.refs[ptr]
            if ref() is not None:
                out.setdefault(layer, []).append([*self.shapes[ptr], n])
        return out

    def result(self) -> dict[str, int]:
        """Per layer: the storage bytes `detail` lists, added up."""
        return {layer: sum(entry[-1] for entry in entries) for layer, entries in self.detail().items()}
