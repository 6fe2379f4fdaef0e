"""A model as dataflows: each decoder layer, the embedding, the head and the MTP modules; and pipeline stages.

Layers of one kind are identical, so their dataflow is built once (cached) and counted as many times as the
stage holds it: counted, never averaged over stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from . import blocks
from .blocks import hf
from .blocks._dims import B, H, seq
from .blocks.embedding import token_ids
from .config import ModelConfig
from .errors import SymmemError
from .graph import Dataflow, DataflowBuilder
from .layout import Stage

CONVENTIONS = ("paper", "megatron")


def _resid_axis(kind: str) -> str:
    # The residual stream leaving a layer is produced by its FFN block, so it lives in that block's region.
    return "sp_moe" if kind == "moe" else "sp"


def _append_layer(fb: DataflowBuilder, x: str, kind: str, model: ModelConfig, convention: str) -> str:
    axis = _resid_axis(kind)
    y = blocks.mla(fb, x, resid_axis=axis, q_latent=model.q_latent, convention=convention, d_v=model.d_v)
    return blocks.moe(fb, y) if kind == "moe" else blocks.dense_mlp(fb, y, resid_axis=axis)


@lru_cache(maxsize=64)
def layer_flow(model: ModelConfig, kind: str, convention: str) -> Dataflow:
    """One decoder layer ('dense' or 'moe'): attention block then FFN block."""
    if convention not in CONVENTIONS:
        raise SymmemError(f"convention = {convention!r}: unknown; known: {', '.join(CONVENTIONS)}")
    fb = DataflowBuilder(f"{kind} layer")
    x = fb.input("layer.x", (B, seq(_resid_axis(kind)), H))
    return fb.build([_append_layer(fb, x, kind, model, convention)])


@lru_cache(maxsize=16)
def embedding_flow(model: ModelConfig) -> Dataflow:
    fb = DataflowBuilder("embedding")
    ids = token_ids(fb)
    first_kind = model.layer_kinds()[0]
    return fb.build([blocks.embedding(fb, ids, out_axis=_resid_axis(first_kind))])


@lru_cache(maxsize=16)
def head_flow(model: ModelConfig) -> Dataflow:
    fb = DataflowBuilder("head")
    fb.block = "head"
    x = fb.input("final.x", (B, seq(_resid_axis(model.layer_kinds()[-1])), H))
    shared = "embed_tokens.weight" if model.tie_word_embeddings else None
    return fb.build([blocks.head(fb, x, shared_with=shared)])


def _head_weight(model: ModelConfig) -> str:
    """The weight the output head multiplies by: its own, or the embedding's when tied."""
    return "embed_tokens.weight" if model.tie_word_embeddings else "lm_head.weight"


@lru_cache(maxsize=16)
def mtp_flow(model: ModelConfig, convention: str, index: int = 0) -> Dataflow:
    """An MTP module: its own MoE layer; embedding and head shared with the main model."""
    fb = DataflowBuilder(f"mtp{index}")
    fb.block = "mtp"
    h_main = fb.input("mtp.h_main", (B, seq(_resid_axis(model.layer_kinds()[-1])), H))
    ids = token_ids(fb, "mtp.input_ids")
    loss = blocks.mtp(fb, h_main, ids, index=index, convention=convention, head_shared_with=_head_weight(model),
                      layer=lambda f, x: _append_layer(f, x, "moe", model, convention))
    return fb.build([loss])


# Hugging Face's implementation (`symmem.blocks.hf`): selected by a scenario's dataflow setting; the TP
# convention does not apply (HF has one q_b_proj, split over heads when annotated).
@lru_cache(maxsize=64)
def hf_layer_flow(model: ModelConfig, kind: str, impl: hf.HFImpl) -> Dataflow:
    fb = DataflowBuilder(f"hf {kind} layer")
    x = fb.input("layer.x", (B, seq(_resid_axis(kind)), H))
    return fb.build([hf.layer(fb, x, kind, model=model, impl=impl, resid_axis=_resid_axis(kind))])


@lru_cache(maxsize=16)
def hf_mtp_flow(model: ModelConfig, impl: hf.HFImpl, index: int = 0) -> Dataflow:
    fb = DataflowBuilder(f"hf mtp{index}")
    fb.block = "mtp"
    h_main = fb.input("mtp.h_main", (B, seq(_resid_axis(model.layer_kinds()[-1])), H))
    ids = token_ids(fb, "mtp.input_ids")
    loss = blocks.mtp(fb, h_main, ids, index=index, head_shared_with=_head_weight(model),
                      layer=lambda f, x: hf.layer(f, x, "moe", model=model, impl=impl, resid_axis="sp_moe"))
    return fb.build([loss])


@lru_cache(maxsize=16)
def rope_flow(model: ModelConfig) -> Dataflow:
    """The rotary tables every layer of a stage keeps: one tensor for all of them, so one part per stage."""
    fb = DataflowBuilder("rope tables")
    return fb.build([hf.rope_tables(fb, model)])


@dataclass(frozen=True)
class Part:
    """A piece of a stage: `count` identical copies of one dataflow (e.g. four MoE layers)."""

    name: str  # "embedding", "dense layers", "moe layers", "head", "mtp"
    kind: str
    flow: Dataflow
    count: int
    layers: tuple[int, ...] = field(default=(), compare=False)  # which layers: not part of the structure


def stage_parts(model: ModelConfig, stage: Stage, convention: str, impl: hf.HFImpl | None = None) -> tuple[Part, ...]:
    """The parts of a stage: the paper's dataflows, or with `impl` Hugging Face's decoder layers (and MTP layer)
    plus the rotary tables they share, counted once per stage."""
    kinds = model.layer_kinds()
    parts: list[Part] = []
    if stage.embedding:
        parts.append(Part("embedding", "embedding", embedding_flow(model), 1))
    if impl is not None and (stage.layers or stage.mtp):
        parts.append(Part("rope tables", "rope", rope_flow(model), 1))
    for kind in ("dense", "moe"):
        idx = tuple(i for i in stage.layers if kinds[i] == kind)
        if idx:
            flow = layer_flow(model, kind, convention) if impl is None else hf_layer_flow(model, kind, impl)
            parts.append(Part(f"{kind} layers", kind, flow, len(idx), idx))
    if stage.head:
        parts.append(Part("head", "head", head_flow(model), 1))
    for i in range(stage.mtp):
        flow = mtp_flow(model, convention, i) if impl is None else hf_mtp_flow(model, impl, i)
        parts.append(Part(f"mtp{i}", "mtp", flow, 1))
    return tuple(parts)


def model_parts(model: ModelConfig, convention: str, with_mtp: bool = False) -> tuple[Part, ...]:
    """The whole model as one stage (PP = 1)."""
    stage = Stage(0, tuple(range(model.value("L"))), True, True, model.n_mtp if with_mtp else 0)
    return stage_parts(model, stage, convention)
