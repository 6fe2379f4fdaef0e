"""A model as dataflows: its decoder layers, embedding, head and extra modules; and pipeline stages as parts.

The family (`symmem.families`) writes each dataflow; this module assembles them. Layers of one kind are identical,
so their dataflow is built once (cached) and counted as many times as the stage holds it: counted, never averaged
over stages. A layer that receives another stream than its own kind emits (in the paper's convention, the first MoE
layer after the dense ones receives a sequence-sharded tensor) has a dataflow of its own, whose input is that
tensor. Every op of a decoder layer carries the tag `decoder_layer` (set here, not by the family), which is
what full recomputation recomputes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from symmem._cache import bound_cache
from symmem.accounting.recompute import LAYER_TAG
from symmem.config import ModelConfig
from symmem.errors import SymmemError
from symmem.graph import Dataflow, DataflowBuilder
from symmem.parallel.layout import Stage


def _check_convention(model: ModelConfig, convention: str) -> None:
    known = model.family.conventions
    if convention not in known:
        raise SymmemError(f"convention = {convention!r}: unknown for {model.family.name} models; known: "
                          f"{', '.join(known)}")


def _layer(model: ModelConfig, convention: str, impl: object | None):
    """Appends one decoder layer of a kind, its ops tagged as the layer's."""

    def append(fb: DataflowBuilder, x: str, kind: str) -> str:
        with fb.tagged(LAYER_TAG):
            return model.family.build_layer(fb, x, kind, model, convention, impl)

    return append


def input_source(model: ModelConfig, layer: int) -> str:
    """What emits decoder layer `layer`'s input: the layer before it (its kind; across a pipeline boundary the
    tensor arrives by a point-to-point send, unchanged) or, for layer 0, the embedding."""
    return model.layer_kinds()[layer - 1] if layer > 0 else "embedding"


def _received_from(model: ModelConfig, kind: str, source: str) -> str | None:
    """`source` when it emits another stream than a layer of `kind` does (a different shape or sequence region),
    else None: the layer receives its own kind's stream."""
    fam = model.family
    return None if fam.residual_dims(model, source) == fam.residual_dims(model, kind) else source


@bound_cache(maxsize=128)
def layer_flow(model: ModelConfig, kind: str, convention: str = "paper", impl: object | None = None,
               source: str | None = None) -> Dataflow:
    """One decoder layer of `kind` (one of the family's layer kinds); `impl`: a Hugging Face dataflow.

    The layer's input `layer.x` is the tensor the layer receives: the stream the layer (or embedding) before it
    emits, `source` (None: a layer of the same kind). What full recomputation keeps of a layer is this tensor, as
    Megatron's checkpoint saves the hidden states the layer is called with (Megatron-LM 23e00ed0,
    transformer/transformer_block.py:421-429, tensor_parallel/random.py:417-437). In the paper's convention the
    MoE layer's stream is not sequence-sharded while a dense layer's is, so the first MoE layer after the dense
    ones receives (and keeps) a sharded tensor, the other MoE layers an unsharded one."""
    _check_convention(model, convention)
    kinds = model.family.layer_kind_order
    if kind not in kinds:
        raise SymmemError(f"layer kind = {kind!r}: {model.family.name} layers are {', '.join(kinds)}")
    if source is not None and source not in (*kinds, "embedding"):
        raise SymmemError(f"layer input source = {source!r}: must be a layer kind ({', '.join(kinds)}) or "
                          "'embedding'")
    name = f"{kind} layer" if source is None else f"{kind} layer after {source}"
    fb = DataflowBuilder(name if impl is None else f"hf {name}")
    x = fb.input("layer.x", model.family.residual_dims(model, source or kind))
    return fb.build([_layer(model, convention, impl)(fb, x, kind)])


@bound_cache(maxsize=32)
def embedding_flow(model: ModelConfig, impl: object | None = None) -> Dataflow:
    fb = DataflowBuilder("embedding")
    return fb.build([model.family.build_embedding(fb, model, impl)])


@lru_cache(maxsize=16)
def head_flow(model: ModelConfig) -> Dataflow:
    fb = DataflowBuilder("head")
    return fb.build([model.family.build_head(fb, model)])


@bound_cache(maxsize=32)
def mtp_flow(model: ModelConfig, convention: str = "paper", index: int = 0, impl: object | None = None) -> Dataflow:
    """A multi-token-prediction module (its decoder layer tagged as a layer)."""
    fb = DataflowBuilder(f"mtp{index}" if impl is None else f"hf mtp{index}")
    out = model.family.build_mtp(fb, model, index, convention, impl, _layer(model, convention, impl))
    return fb.build([out])


@lru_cache(maxsize=16)
def shared_flow(model: ModelConfig, impl: object | None) -> Dataflow | None:
    """What all layers of a stage share (e.g. Hugging Face's rotary tables): one part per stage, or None."""
    fb = DataflowBuilder("rope tables")
    out = model.family.build_shared(fb, model, impl)
    return None if out is None else fb.build([out])


@dataclass(frozen=True)
class Part:
    """A piece of a stage: `count` identical copies of one dataflow (e.g. four MoE layers)."""

    name: str  # "embedding", "dense layers", "moe layers", "head", "mtp0", ...
    kind: str  # "embedding", "shared", "head", "mtp", or a layer kind of the family
    flow: Dataflow
    count: int
    layers: tuple[int, ...] = field(default=(), compare=False)  # which layers: not part of the structure

    @property
    def is_layers(self) -> bool:
        return self.kind not in ("embedding", "shared", "head", "mtp")

    @property
    def layer_ids(self) -> tuple[int, ...]:
        """The stage's layers its copies are, in order (copy i is layer `layer_ids[i]`); 0..count-1 when not given."""
        return self.layers or tuple(range(self.count))


@bound_cache(maxsize=4096)  # asked for once per stage and quantity: the same parts each time
def stage_parts(model: ModelConfig, stage: Stage, convention: str, impl: object | None = None) -> tuple[Part, ...]:
    """The parts of a stage: its embedding, shared tensors, decoder layers grouped by kind, head and MTP modules.
    With `impl` the decoder layers (and MTP layers) follow the family's Hugging Face dataflow."""
    _check_convention(model, convention)
    kinds = model.layer_kinds()
    parts: list[Part] = []
    if stage.embedding:
        parts.append(Part("embedding", "embedding", embedding_flow(model, impl), 1))
    if impl is not None and (any(model.family.uses_shared(model, kinds[i]) for i in stage.layers) or stage.mtp):
        shared = shared_flow(model, impl)
        if shared is not None:
            parts.append(Part(shared.name, "shared", shared, 1))
    for kind in model.family.layer_kind_order:
        # Layers of one kind are one part, unless some receive another stream (the first MoE layer after the dense
        # ones): those form a part of their own, named after what they receive when both occur in the stage.
        groups: dict[str | None, list[int]] = {}
        for i in stage.layers:
            if kinds[i] == kind:
                groups.setdefault(_received_from(model, kind, input_source(model, i)), []).append(i)
        for source, idx in sorted(groups.items(), key=lambda g: g[1][0]):
            name = f"{kind} layers" if source is None or len(groups) == 1 else f"{kind} layers after {source}"
            parts.append(Part(name, kind, layer_flow(model, kind, convention, impl, source), len(idx), tuple(idx)))
    if stage.head:
        parts.append(Part("head", "head", head_flow(model), 1))
    for i in range(stage.mtp):
        parts.append(Part(f"mtp{i}", "mtp", mtp_flow(model, convention, i, impl), 1))
    return tuple(parts)


def model_parts(model: ModelConfig, convention: str, with_mtp: bool = False) -> tuple[Part, ...]:
    """The whole model as one stage (PP = 1), for parameter counts: decoder layers grouped by kind alone (what a
    layer receives changes no weight)."""
    kinds = model.layer_kinds()
    parts = [Part("embedding", "embedding", embedding_flow(model), 1)]
    for kind in model.family.layer_kind_order:
        idx = tuple(i for i, k in enumerate(kinds) if k == kind)
        if idx:
            parts.append(Part(f"{kind} layers", kind, layer_flow(model, kind, convention), len(idx), idx))
    parts.append(Part("head", "head", head_flow(model), 1))
    parts += [Part(f"mtp{i}", "mtp", mtp_flow(model, convention, i), 1) for i in range(model.n_mtp if with_mtp else 0)]
    return tuple(parts)
