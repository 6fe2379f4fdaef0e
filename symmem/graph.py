"""The dataflow types: dimensions, tensors, weights, ops, and the graph they form.

Parallelism is an annotation on dimensions: a `Dim` names the parallel axes it is split over (`"tp"`, `"sp"`,
`"sp_moe"`, `"ep"`, `"etp"`). One function, `local_size`, turns an annotated shape into what one rank holds, for
tensors and weights alike. Which axes are active (is the MoE block sequence-sharded?) is decided by the
`AxisSizes` of a scenario, not by the block definitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

import sympy

from symmem._cache import hash_once
from symmem.errors import SymmemError


@dataclass(frozen=True)
class Dim:
    """One dimension of a tensor or weight: its global size and the parallel axes it is split over."""

    size: sympy.Expr
    axes: tuple[str, ...] = ()


def D(size: sympy.Expr | int, *axes: str) -> Dim:
    """Shorthand: `D(n_h, "tp")` is the head dimension split over tensor parallelism."""
    return Dim(sympy.Integer(size) if isinstance(size, int) else size, tuple(axes))


@dataclass(frozen=True)
class DType:
    """A storage type. `act` resolves to the run's activation dtype (BF16 = 2 bytes in the paper)."""

    name: str
    nbytes: int | None  # None: resolved from the scenario (the activation dtype)


ACT = DType("act", None)
BF16 = DType("bf16", 2)
FP32 = DType("fp32", 4)
MASK = DType("mask", 1)  # a dropout mask, one byte per element (Korthikanti et al. 2022)
INT64 = DType("int64", 8)
BOOL = DType("bool", 1)
INT32 = DType("int32", 4)  # e.g. grouped_mm's per-expert offsets
COMPLEX64 = DType("complex64", 8)  # DeepSeek-V2's rotary table freqs_cis (two FP32 per element)


@dataclass(frozen=True)
class Tensor:
    """A named activation with a symbolic, parallel-annotated shape."""

    name: str
    dims: tuple[Dim, ...]
    dtype: DType = ACT
    # Storage aliasing (PyTorch; unused by the paper's dataflows): a view shares its base's storage, and saving
    # it keeps the whole base alive; a cast to the dtype its source already has is the source itself.
    view_of: str | None = None  # the tensor whose storage this one views
    cast_of: str | None = None  # the tensor this one is a dtype conversion of
    # A quantized copy's layout (symmem.precision.saved.QuantizedLayout): its bytes are data plus scale tensors,
    # from its local shape, not elements × dtype bytes. None: a plain tensor.
    packing: object | None = None


@dataclass(frozen=True)
class Weight:
    """A learnable parameter. `group` decides the ZeRO sharding group: dense parts over DP, expert parts over EDP."""

    name: str
    dims: tuple[Dim, ...]
    group: str = "dense"  # "dense", "router", "routed_expert" or "shared_expert" (ZeRO groups follow it)
    shared_with: str | None = None  # a weight tied to another block's (e.g. the MTP head): not counted again


@dataclass(frozen=True)
class Op:
    """One step of a dataflow: `kind` selects the rule that says what it saves for backward."""

    kind: str
    name: str
    block: str  # the block it belongs to (the block file names it: "mla", "moe", "mlp", "embedding", ...)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    weights: tuple[Weight, ...] = ()
    tags: frozenset[str] = frozenset()  # e.g. {"core_attention"}, {"up_projection"}, {"routing"}


@dataclass(frozen=True, eq=False)
class Dataflow:
    """A sequence of ops on named tensors. Tensor names are unique within a dataflow.

    Compared and hashed by identity: dataflows are built once per structure and cached."""

    name: str
    ops: tuple[Op, ...]
    tensors: Mapping[str, Tensor]
    inputs: tuple[str, ...]  # tensors that come from outside (checkpointed under full recomputation)
    outputs: tuple[str, ...]

    def producer(self, tensor: str) -> Op | None:
        for op in self.ops:
            if tensor in op.outputs:
                return op
        return None

    def weights(self) -> tuple[tuple[Op, Weight], ...]:
        return tuple((op, w) for op in self.ops for w in op.weights)


@dataclass
class DataflowBuilder:
    """Builds a `Dataflow` op by op; blocks are written as calls on it (see `symmem.blocks`)."""

    name: str
    ops: list[Op] = field(default_factory=list)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    block: str = ""
    prefix: str = ""
    scope_tags: frozenset[str] = frozenset()  # added to every op appended inside `tagged(...)`

    @contextmanager
    def tagged(self, *tags: str) -> Iterator[None]:
        """Every op appended inside the `with` block carries `tags` too (e.g. the engine's `decoder_layer`)."""
        before = self.scope_tags
        self.scope_tags = before | frozenset(tags)
        try:
            yield
        finally:
            self.scope_tags = before

    def input(self, name: str, dims: Iterable[Dim], dtype: DType = ACT) -> str:
        name = self._add(Tensor(self.prefix + name, tuple(dims), dtype))
        self.inputs.append(name)
        return name

    def op(
        self,
        kind: str,
        name: str,
        inputs: Iterable[str],
        outputs: Iterable[tuple[str, Iterable[Dim]] | tuple[str, Iterable[Dim], DType]],
        weights: Iterable[Weight] = (),
        tags: Iterable[str] = (),
    ) -> tuple[str, ...]:
        inputs = tuple(inputs)
        for t in inputs:
            if t not in self.tensors:
                raise SymmemError(f"op {self.prefix + name}: input tensor {t!r} is not defined in {self.name}")
        outs = []
        for spec in outputs:
            tname, dims = spec[0], spec[1]
            dtype = spec[2] if len(spec) > 2 else ACT
            outs.append(self._add(Tensor(self.prefix + tname, tuple(dims), dtype)))
        ws = tuple(Weight(self.prefix + w.name, w.dims, w.group, w.shared_with) for w in weights)
        self.ops.append(Op(kind, self.prefix + name, self.block, inputs, tuple(outs), ws,
                           frozenset(tags) | self.scope_tags))
        return tuple(outs)

    def alias(self, name: str, *, view_of: str | None = None, cast_of: str | None = None) -> str:
        """Declare that tensor `name` views `view_of`'s storage, or is a dtype conversion of `cast_of`."""
        for other in (view_of, cast_of):
            if other is not None and other not in self.tensors:
                raise SymmemError(f"alias of {name!r}: tensor {other!r} is not defined in {self.name}")
        t = self.tensors[name]
        self.tensors[name] = Tensor(t.name, t.dims, t.dtype, view_of, cast_of)
        return name

    def _add(self, tensor: Tensor) -> str:
        if tensor.name in self.tensors:
            raise SymmemError(f"tensor {tensor.name!r} defined twice in {self.name}")
        self.tensors[tensor.name] = tensor
        return tensor.name

    def build(self, outputs: Iterable[str]) -> Dataflow:
        return Dataflow(self.name, tuple(self.ops), dict(self.tensors), tuple(self.inputs), tuple(outputs))


@hash_once
@dataclass(frozen=True)
class AxisSizes:
    """How many ways each parallel axis splits a dimension on one rank. An inactive axis has size 1."""

    sizes: Mapping[str, sympy.Expr]

    def __hash__(self) -> int:  # a cache key of the derivations that depend on it (hashed once: hash_once)
        return hash(tuple(sorted(self.sizes.items())))

    def of(self, axis: str) -> sympy.Expr:
        try:
            return self.sizes[axis]
        except KeyError:
            raise SymmemError(f"parallel axis {axis!r} has no size; known axes: {sorted(self.sizes)}") from None


def local_size(dims: Iterable[Dim], axes: AxisSizes) -> sympy.Expr:
    """The number of elements one rank holds: each dimension divided by the sizes of its active axes."""
    return _local_size(tuple(dims), axes)


@lru_cache(maxsize=65536)  # every stage of a model sizes the same shapes again
def _local_size(dims: tuple[Dim, ...], axes: AxisSizes) -> sympy.Expr:
    total = sympy.Integer(1)
    for d in dims:
        part = d.size
        for a in d.axes:
            part = part / axes.of(a)
        total *= part
    return total


def unsplit(dims: Iterable[Dim], axis: str) -> tuple[Dim, ...]:
    """`dims` whole over `axis` (its split taken off): a tensor gathered over that axis (TP's sequence, CP's)."""
    return tuple(Dim(d.size, tuple(a for a in d.axes if a != axis)) for d in dims)


def global_size(dims: Iterable[Dim]) -> sympy.Expr:
    return _global_size(tuple(dims))


@lru_cache(maxsize=65536)
def _global_size(dims: tuple[Dim, ...]) -> sympy.Expr:
    total = sympy.Integer(1)
    for d in dims:
        total *= d.size
    return total
