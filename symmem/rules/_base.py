"""The pieces every rule set is built from: `Saved` (a tensor an op keeps), `RuleSet` (a table of rules per op
kind, with workspaces, in-place gradients and fused kernels) and the rule builders (`inputs`, `outputs`, ...).
Below the rule sets themselves, so that they and the registry in `symmem.rules` import them without a cycle."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from symmem.errors import SymmemError
from symmem.graph import AxisSizes, Dataflow, DType, Op, Tensor


@dataclass(frozen=True)
class Saved:
    """A tensor an op keeps for backward. `tensor` may be synthetic (a dropout mask, an FP32 copy)."""

    tensor: Tensor
    why: str


Rule = Callable[[Op, Dataflow], list[Saved]]


@dataclass(frozen=True, eq=False)
class RuleSet:
    name: str
    description: str
    rules: Mapping[str, Rule]
    context_parallel: bool = True  # whether its dataflows' sequence split under CP is what the framework keeps
    # Transient tensors an op kind allocates while it runs (phase "forward" or "backward"), beside its inputs,
    # outputs and gradients: e.g. a sequence-parallel all-gather buffer. Used by the timeline (the peak).
    workspaces: Mapping[str, Callable[[Op, Dataflow, str, AxisSizes], list[Saved]]] = field(default_factory=dict)
    # Op kinds whose backward writes their input's gradient into a tensor they saved (no new allocation).
    grad_in_place: frozenset[str] = frozenset()
    # Tags whose consecutive ops the framework runs as one fused kernel: their intermediate tensors (and
    # gradients) never exist (e.g. fused attention never materialises the s×s scores).
    fused_tags: tuple[str, ...] = ()
    # Per-op selective checkpointing (torchtitan's `SelectiveAC`, recompute policy `selective-op`): the op kinds
    # besides the matrix products whose outputs its save list keeps (the GPU's SDPA kernels are in PyTorch's
    # compute-intensive list, torch/_functorch/partitioners.py get_default_op_list; the CPU's flash kernel is not),
    # and the ops the framework runs as one matrix product (torchtitan's fused wqkv), counted once.
    sac_saved_kinds: frozenset[str] = frozenset({"sdpa_flash", "sdpa_efficient"})
    gemm_groups: tuple[frozenset[str], ...] = ()
    # What per-op AC's cache holds of a layer op, given whether its policy answers MUST_SAVE for the op itself and
    # why: (op, flow, whole, why) -> saved; None: the op's outputs when it does (`activations.sac_kept`)
    sac_cached: Callable[[Op, Dataflow, bool, str], list[Saved]] | None = None
    # Whether recomputation keeps the top-k routing decision (ops tagged `routing_decision`) so that it routes the
    # same way (the paper's accounting); torch.utils.checkpoint keeps a checkpointed block's inputs only and routes
    # again (torchtitan's full and per-layer AC: measured)
    pins_routing: bool = True
    # torch.compile (`symmem.accounting.compiled.CompileSpec`): the layers and the loss are compiled regions whose
    # saved values the partitioner's minimum cut decides (`activations.compiled_kept`); None: eager
    compile: object | None = None

    def saved(self, op: Op, flow: Dataflow) -> list[Saved]:
        try:
            rule = self.rules[op.kind]
        except KeyError:
            raise SymmemError(
                f"op kind = {op.kind!r} ({op.name}): rule set {self.name!r} has no rule for it") from None
        return rule(op, flow)

    def workspace(self, op: Op, flow: Dataflow, phase: str, axes: AxisSizes) -> list[Saved]:
        rule = self.workspaces.get(op.kind)
        return rule(op, flow, phase, axes) if rule is not None else []


# Building blocks for rules.
def nothing(op: Op, flow: Dataflow) -> list[Saved]:
    return []


def inputs(*positions: int, why: str = "input") -> Rule:
    def rule(op: Op, flow: Dataflow) -> list[Saved]:
        return [Saved(flow.tensors[op.inputs[i]], f"{why} of {op.kind} {op.name}") for i in positions]

    return rule


def outputs(*positions: int, why: str = "output") -> Rule:
    def rule(op: Op, flow: Dataflow) -> list[Saved]:
        return [Saved(flow.tensors[op.outputs[i]], f"{why} of {op.kind} {op.name}") for i in positions]

    return rule


def as_dtype(tensor: Tensor, dtype: DType, suffix: str) -> Tensor:
    return Tensor(f"{tensor.name}.{suffix}", tensor.dims, dtype)


def combine(*rules: Rule) -> Rule:
    def rule(op: Op, flow: Dataflow) -> list[Saved]:
        out: list[Saved] = []
        for r in rules:
            out.extend(r(op, flow))
        return out

    return rule
