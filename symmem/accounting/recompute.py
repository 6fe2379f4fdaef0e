"""Activation recomputation policies: which ops are recomputed in backward instead of keeping what they save.

One mechanism serves every policy (see `symmem.accounting.activations.kept_tensors`): with R the set of recomputed ops,
what R produces is dropped, the inputs of R that come from outside R are kept as the checkpoint, and the
top-k routing decision is pinned so that recomputation routes the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from symmem.errors import SymmemError
from symmem.graph import Op

# The tag the model assembly (`symmem.model`) puts on every op of a decoder layer, whatever its blocks. Under full
# recomputation the checkpoint is then the layer's dataflow input `layer.x`: the tensor the layer receives, shaped
# as the layer (or embedding) before it emits it (`symmem.model.layer_flow`, docs/recomputation.md).
LAYER_TAG = "decoder_layer"


class Recompute(Enum):
    """The activation-recomputation policies (`policy(name)` builds one; `custom:OPS` names the ops)."""

    NONE = "none"
    """Keep everything each op saves."""
    FULL = "full"
    """Recompute whole decoder layers: keep their inputs (and the routing decisions) only."""
    SELECTIVE = "selective"
    """Recompute the attention core (QKᵀ, softmax, dropout, ·V), as Megatron's selective recomputation."""
    DEEPSEEK = "deepseek"
    """DeepSeek-V3's: recompute every RMSNorm and the MLA up-projections (with the rope/concat that feed attention)."""
    SELECTIVE_OP = "selective-op"
    """torchtitan's per-op selective checkpointing (`SelectiveAC`): each decoder layer keeps its input and the
    outputs of the ops on PyTorch's save list, every other matrix product only (`activations.sac_kept`)."""
    SELECTIVE_LAYER = "selective-layer"
    """torchtitan's per-layer selective checkpointing, `selective-layer:N`: every N-th decoder layer fully
    recomputed, the others keep everything (torchtitan 9dec370, parallelisms/parallelize_llama.py
    `_apply_ac_to_transformer_block`: a counter from 1 over the blocks, a block wrapped when it is a multiple of N,
    so 0-based layer i when (i + 1) % N == 0). Layers differ, so a quantity is derived per kind of layer
    (`Policy.layer_split`); one that treats every layer alike refuses it (`recomputed`)."""
    CUSTOM = "custom"
    """A user-given set of op kinds, tags or names."""


@dataclass(frozen=True)
class Policy:
    kind: Recompute
    ops: frozenset[str] = frozenset()  # for CUSTOM: op kinds, tags or names
    every: int = 0  # for SELECTIVE_LAYER: N

    def recomputed(self, op: Op) -> bool:
        if self.kind is Recompute.SELECTIVE_LAYER:
            raise SymmemError(f"recompute = {self.label!r}: per-layer checkpointing is derived by symmem memory's "
                              "activations and peak and the FSDP2 replay; this quantity treats every layer alike "
                              "(use --recompute full, none or selective-op)")
        if self.kind is Recompute.NONE:
            return False
        if self.kind in (Recompute.FULL, Recompute.SELECTIVE_OP):  # per-op: the block's forward runs again,
            return LAYER_TAG in op.tags  # the saved outputs taken from its cache
        if self.kind is Recompute.SELECTIVE:
            return "core_attention" in op.tags
        if self.kind is Recompute.DEEPSEEK:
            return op.kind == "rmsnorm" or bool({"up_projection", "attention_prep"} & op.tags)
        return op.kind in self.ops or op.name in self.ops or bool(self.ops & op.tags)

    @property
    def drops_outputs(self) -> bool:
        """Output semantics: what R produces is never stored, whoever reads it (DeepSeek-V3's phrasing).
        Checkpoint semantics (full, selective, as Megatron's checkpoint): R's own saves are dropped, while R's
        outputs read by ops outside R stay."""
        return self.kind in (Recompute.DEEPSEEK, Recompute.CUSTOM)

    def checkpoints_layer(self, layer: int) -> bool:
        """Under `selective-layer:N`, whether 0-based decoder layer `layer` is the one fully recomputed."""
        return (layer + 1) % self.every == 0

    def layer_split(self, layers: tuple[int, ...]) -> list[tuple[Policy, int]]:
        """The layers of a part by the policy each runs under, as (policy, how many), the kind of the part's last
        layer last (the one a step's forward ends and its backward starts with); one entry for a uniform policy."""
        if self.kind is not Recompute.SELECTIVE_LAYER:
            return [(self, len(layers))]
        counts: dict[Policy, int] = {}
        for i in layers:
            pol = self.for_layer(i)
            counts[pol] = counts.get(pol, 0) + 1
        last = self.for_layer(layers[-1]) if layers else None
        return sorted(counts.items(), key=lambda pn: pn[0] == last)

    def for_layer(self, layer: int) -> Policy:
        """The policy 0-based decoder layer `layer` runs under: full or none under `selective-layer:N`, this one
        otherwise."""
        if self.kind is not Recompute.SELECTIVE_LAYER:
            return self
        return Policy(Recompute.FULL) if self.checkpoints_layer(layer) else Policy(Recompute.NONE)

    def outside_layers(self) -> Policy:
        """The policy of the ops outside the decoder layers (every layer policy recomputes none of them)."""
        return Policy(Recompute.NONE) if self.kind is Recompute.SELECTIVE_LAYER else self

    @property
    def label(self) -> str:
        if self.kind is Recompute.SELECTIVE_LAYER:
            return f"selective-layer:{self.every}"
        if self.kind is Recompute.CUSTOM:
            return "custom:" + ",".join(sorted(self.ops))
        return self.kind.value


def policy(text: str) -> Policy:
    """`none`, `full`, `selective`, `deepseek`, `selective-op`, `selective-layer:N`, or
    `custom:KIND_OR_TAG_OR_NAME,...`."""
    if text.startswith("selective-layer:"):
        n = text[len("selective-layer:"):]
        if not n.isdigit() or not 1 <= int(n) <= 1_000_000:
            raise SymmemError(f"recompute = {text!r}: selective-layer:N needs a whole number N from 1 to 1,000,000 "
                              "(every N-th layer fully recomputed)")
        return Policy(Recompute.SELECTIVE_LAYER, every=int(n))
    if text.startswith("custom:"):
        names = frozenset(x.strip() for x in text[len("custom:"):].split(",") if x.strip())
        if not names:
            raise SymmemError(f"recompute = {text!r}: custom needs op kinds, tags or names after 'custom:'")
        return Policy(Recompute.CUSTOM, names)
    try:
        kind = Recompute(text)
    except ValueError:
        known = ", ".join(r.value for r in Recompute if r is not Recompute.CUSTOM)
        raise SymmemError(f"recompute = {text!r}: unknown policy; known: {known}, custom:OPS") from None
    if kind is Recompute.CUSTOM:
        raise SymmemError("recompute = 'custom': name the ops, as custom:rmsnorm,core_attention")
    if kind is Recompute.SELECTIVE_LAYER:
        raise SymmemError("recompute = 'selective-layer': give the period, as selective-layer:2 (every 2nd layer "
                          "fully recomputed)")
    return Policy(kind)
