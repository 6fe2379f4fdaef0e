"""A model as dataflows: its decoder layers, embedding, head and extra modules; and pipeline stages as parts.

The family (`symmem.families`) writes each dataflow; this module assembles them. Layers of one kind are identical,
so their dataflow is built once (cached) and counted as many times as the stage holds it: counted, never averaged
over stages. Every op of a decoder layer carries the tag `decoder_layer` (set here, not by the family), which is
what full recomputation recomputes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

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


@lru_cache(maxsize=128)
def layer_flow(model: ModelConfig, kind: str, convention: str = "paper", impl: object | None = None) -> Dataflow:
    """One decoder layer of `kind` (one of the family's layer kinds); `impl`: a Hugging Face dataflow."""
    _check_convention(model, convention)
    if kind not in model.family.layer_kind_order:
        raise SymmemError(f"layer kind = {kind!r}: {model.family.name} layers are "
                          f"{', '.join(model.family.layer_kind_order)}")
    fb = DataflowBuilder(f"{kind} layer" if impl is None else f"hf {kind} layer")
    x = fb.input("layer.x", model.family.residual_dims(model, kind))
    return fb.build([_layer(model, convention, impl)(fb, x, kind)])


@lru_cache(maxsize=32)
def embedding_flow(model: ModelConfig, impl: object | None = None) -> Dataflow:
    fb = DataflowBuilder("embedding")
    return fb.build([model.family.build_embedding(fb, model, impl)])


@lru_cache(maxsize=16)
def head_flow(model: ModelConfig) -> Dataflow:
    fb = DataflowBuilder("head")
    return fb.build([model.family.build_head(fb, model)])


@lru_cache(maxsize=32)
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


def stage_parts(model: ModelConfig, stage: Stage, convention: str, impl: object | None = None) -> tuple[Part, ...]:
    """The parts of a stage: its embedding, shared tensors, decoder layers grouped by kind, head and MTP modules.
    With `impl` the decoder layers (and MTP layers) follow the family's Hugging Face dataflow."""
    _check_convention(model, convention)
    kinds = model.layer_kinds()
    parts: list[Part] = []
    if stage.embedding:
        parts.append(Part("embedding", "embedding", embedding_flow(model, impl), 1))
    if impl is not None and (stage.layers or stage.mtp):
        shared = shared_flow(model, impl)
        if shared is not None:
            parts.append(Part(shared.name, "shared", shared, 1))
    for kind in model.family.layer_kind_order:
        idx = tuple(i for i in stage.layers if kinds[i] == kind)
        if idx:
            parts.append(Part(f"{kind} layers", kind, layer_flow(model, kind, convention, impl), len(idx), idx))
    if stage.head:
        parts.append(Part("head", "head", head_flow(model), 1))
    for i in range(stage.mtp):
        parts.append(Part(f"mtp{i}", "mtp", mtp_flow(model, convention, i, impl), 1))
    return tuple(parts)


def model_parts(model: ModelConfig, convention: str, with_mtp: bool = False) -> tuple[Part, ...]:
    """The whole model as one stage (PP = 1)."""
    stage = Stage(0, tuple(range(model.value("L"))), True, True, model.n_mtp if with_mtp else 0)
    return stage_parts(model, stage, convention)
