"""Small builders shared by the HF blocks: views, dtype conversions, RMSNorm and linear layers."""

from __future__ import annotations

from collections.abc import Iterable

from symmem.graph import ACT, DataflowBuilder, Dim, DType, Weight


def views(fb: DataflowBuilder, kind: str, name: str, src: str, outs: Iterable[tuple], tags=()) -> tuple[str, ...]:
    """An op whose outputs all view `src`'s storage (split, chunk, view, transpose)."""
    names = fb.op(kind, name, [src], outs, tags=tags)
    for n in names:
        fb.alias(n, view_of=src)
    return names


def cast(fb: DataflowBuilder, name: str, src: str, out: str, dims: tuple[Dim, ...], dtype: DType = ACT,
         tags=()) -> str:
    """`src.to(dtype)`: a copy, unless `src` already has that dtype (then it is `src` itself)."""
    (o,) = fb.op("cast", name, [src], [(out, dims, dtype)], tags=tags)
    return fb.alias(o, cast_of=src)


def rmsnorm(fb: DataflowBuilder, name: str, x: str, out: str, dims: tuple[Dim, ...]) -> str:
    """An RMSNorm module named `name` (HF's DeepseekV3RMSNorm / DeepseekV2RMSNorm); its weight is `name.weight`."""
    (y,) = fb.op("rmsnorm", name, [x], [(out, dims)], [Weight(f"{name}.weight", (dims[-1],))])
    return y


def linear(fb: DataflowBuilder, name: str, x: str, out: tuple, weight_dims: tuple[Dim, ...], group: str = "dense",
           tags=(), weight: str | None = None) -> str:
    """An nn.Linear (or a grouped expert projection) named `name`, weight `name.weight` unless given."""
    (y,) = fb.op("linear", name, [x], [out], [Weight(weight or f"{name}.weight", weight_dims, group)], tags=tags)
    return y
