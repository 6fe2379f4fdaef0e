"""Saved-tensor accounting: what one rank keeps for backward, derived from a dataflow, a rule set and a policy.

Each kept tensor is a `Term` that remembers where it came from (part, block, op, tensor), so that a checker
can say which op a monomial of a formula comes from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import sympy

from symmem.accounting.recompute import LAYER_TAG, Policy, Recompute
from symmem.errors import SymmemError
from symmem.graph import AxisSizes, Dataflow, DType, Op, Tensor, local_size
from symmem.model import Part
from symmem.rules import RuleSet, Saved
from symmem.symbols import E_tok


@dataclass(frozen=True)
class Kept:
    """A tensor a dataflow keeps for backward (structure only, no sizes yet)."""

    tensor: Tensor
    op: str  # the op that keeps it (the first, if several read the same tensor)
    block: str
    why: str


@lru_cache(maxsize=256)
def kept_tensors(flow: Dataflow, rules: RuleSet, policy: Policy) -> tuple[Kept, ...]:
    """The distinct tensors kept under `rules` and recomputation `policy` (a tensor read twice is kept once).

    With R the recomputed ops: under checkpoint semantics (full, selective) a tensor is dropped when R both
    produces it and is all that saves it; under output semantics (deepseek, custom) a tensor is dropped when R
    produces it, whoever reads it. Either way the inputs of R that come from outside R are kept (the checkpoint
    to recompute from), and the top-k routing decision is pinned, so that recomputation routes the same way.
    """
    if rules.compile is not None:
        return compiled_kept(flow, rules, policy)
    if policy.kind is Recompute.SELECTIVE_OP and any(LAYER_TAG in op.tags for op in flow.ops):
        return sac_kept(flow, rules)
    saved: dict[str, Kept] = {}
    savers: dict[str, set[str]] = {}
    for op in flow.ops:
        for sv in rules.saved(op, flow):
            saved.setdefault(sv.tensor.name, Kept(sv.tensor, op.name, op.block, sv.why))
            savers.setdefault(sv.tensor.name, set()).add(op.name)
    recomputed = {op.name for op in flow.ops if policy.recomputed(op)}
    if not recomputed:
        return tuple(saved.values())
    producer = {t: op for op in flow.ops for t in op.outputs}
    pinned = ({t for op in flow.ops if "routing_decision" in op.tags for t in op.outputs} if rules.pins_routing
              else set())

    def base(name: str) -> str:
        # Synthetic tensors (a mask "x.mask", an FP32 copy "x.fp32") belong to the tensor they derive from.
        while name not in flow.tensors and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    def from_recomputed(name: str) -> bool:
        op = producer.get(base(name))
        return op is not None and op.name in recomputed

    def dropped(name: str) -> bool:
        if base(name) in pinned or not from_recomputed(name):
            return False
        return policy.drops_outputs or savers[name] <= recomputed

    kept = {n: k for n, k in saved.items() if not dropped(n)}
    for op in flow.ops:
        if op.name not in recomputed:
            continue
        for t in op.inputs:
            if not from_recomputed(t) and t not in kept:
                kept[t] = Kept(flow.tensors[t], op.name, op.block, f"checkpoint: input of recomputed {op.name}")
    return tuple(kept.values())


# what torchtitan compiles (torchtitan/distributed/compile.py:39-72, components/loss.py:309-315): each decoder
# layer as one region, and the loss function as another (`CompileSpec.loss`: torchtitan 9dec370 compiled the blocks
# only, its train.py:136-138 leaves the loss's compile commented out); the rest of the model (embedding, final norm,
# output projection) runs eagerly
_COMPILED_ALONE = frozenset({"cross_entropy"})
_CHECKPOINTED = (Recompute.FULL, Recompute.SELECTIVE_OP)
_RANDOM = frozenset({"sdpa_flash", "sdpa_efficient"})


def compiled_kept(flow: Dataflow, rules: RuleSet, policy: Policy) -> tuple[Kept, ...]:
    """What a dataflow keeps when torchtitan compiles its layers and loss (`rules.compile`,
    symmem.accounting.compiled): each compiled region's values by the partitioner's minimum cut, under a
    checkpoint policy (full: every op recomputed; per-op: the save list's ops MUST_SAVE, the rest recomputed) with
    the generator state the region replays with; the eager ops' saved tensors by the rules."""
    from symmem.accounting.compiled import partition, rng_state

    spec = rules.compile
    layer = tuple(op for op in flow.ops if LAYER_TAG in op.tags)
    alone = tuple((op,) for op in flow.ops if op.kind in _COMPILED_ALONE) if spec.loss else ()
    regions = [r for r in (layer, *alone) if r]
    in_region = {op.name for r in regions for op in r}
    kept: dict[str, Kept] = {}
    for op in flow.ops:
        if op.name not in in_region:
            for sv in rules.saved(op, flow):
                kept.setdefault(sv.tensor.name, Kept(sv.tensor, op.name, op.block, sv.why))
    if policy.kind not in (Recompute.NONE, *_CHECKPOINTED) and layer:
        raise SymmemError(f"recompute = {policy.label!r} with --compile: modelled are none, full, selective-op and "
                          "selective-layer:N (torchtitan's)")
    sizes = dict(spec.sizes)
    float8 = None
    if spec.float8:
        from symmem.precision.saved import eligible

        def float8(op: Op) -> str | None:  # the Float8Linear module (torchtitan's wqkv: one for q, k and v)
            if not eligible(op):
                return None
            group = next((g for g in rules.gemm_groups if op.name in g), ())
            return next((o.name for o in flow.ops if o.name in group), op.name)  # named after its first linear
    for region in regions:
        decide = None
        if region is layer and policy.kind in _CHECKPOINTED:
            saves = ({op.name for op, whole, _c in _sac_cached(flow, rules) if whole}
                     if policy.kind is Recompute.SELECTIVE_OP else set())

            per_op = policy.kind is Recompute.SELECTIVE_OP

            def decide(op: Op, tag: str, saves=saves, per_op=per_op) -> str:
                # per-op AC: torchtitan's save list holds aten.max (the Float8 casts' amax), beside the products
                # (torchtitan/distributed/activation_checkpoint.py:45-47)
                return "save" if op.name in saves or (per_op and tag == "max") else "recompute"
        cut = partition(region, flow, sizes, spec.act_bytes, decide, float8, spec.axes, spec.float8_gathered)
        for tensor, op, why in cut.saved:
            op = op or next(o for o in region if tensor.name in o.inputs)  # a region's input: its first reader
            kept.setdefault(tensor.name, Kept(tensor, op.name, op.block, why))
        # the generator state, when the recomputation runs a random op again: the flash SDPA (its dropout; measured:
        # kept with the CPU's flash kernel recomputed, not with the math attention of DeepSeek-V3's head sizes)
        if decide is not None and any(op.kind in _RANDOM and decide(op, "op") == "recompute" for op in region):
            first = region[0]
            t = rng_state(flow.name, spec.rng_state_bytes)
            kept[t.name] = Kept(t, first.name, first.block, "compiled checkpoint: the generator state it replays "
                                "with (run_and_save_rng_state)")
    return tuple(kept.values())


def sac_kept(flow: Dataflow, rules: RuleSet) -> tuple[Kept, ...]:
    """What a decoder layer keeps under torchtitan's per-op selective checkpointing (torchtitan 0.3.0
    torchtitan/distributed/activation_checkpoint.py:243-274, `SelectiveAC._wrap_block`): the checkpoint's inputs (the
    layer's tensors made outside it) and, from the checkpoint's cache (torch/utils/checkpoint.py
    `_CachingTorchDispatchMode`: the outputs of the ops its policy answers MUST_SAVE), the output of every odd
    matrix product of the layer (1st, 3rd, ...: "save all compute/comm ops, except every second mm/linear"; the
    router's matrix product is recomputed and not counted, `force_recompute_mm_shapes_by_fqns`) and of the ops of
    `rules.sac_saved_kinds`; the top-k routing decision, on the save list too. Everything else is recomputed."""
    layer = [op for op in flow.ops if LAYER_TAG in op.tags]
    made = {t for op in layer for t in op.outputs}
    kept: dict[str, Kept] = {}
    for op in layer:
        for t in op.inputs:
            if t not in made and t not in kept:
                kept[t] = Kept(flow.tensors[t], op.name, op.block, "checkpoint: input of the layer (per-op AC)")
    for op, _whole, cached in _sac_cached(flow, rules):
        for sv in cached:
            kept.setdefault(sv.tensor.name, Kept(sv.tensor, op.name, op.block, sv.why))
    return tuple(kept.values())


def _sac_cached(flow: Dataflow, rules: RuleSet) -> list[tuple[Op, bool, tuple[Saved, ...]]]:
    """The layer's ops of which per-op AC's cache holds something (`sac_kept`): (op, whether the op's own output is
    cached, so that the recomputation does not run it, what is cached, with why). What is cached is the op's
    outputs when its policy answers MUST_SAVE, unless the rule set says otherwise (`RuleSet.sac_cached`: under TP a
    row-parallel product's reduce-scatter output is on the save list whatever the product's count)."""
    count = 0
    decided: dict[object, bool] = {}  # a GEMM group -> saved or not (its members are one matrix product)

    def group(op: Op) -> object:
        module = next((t for t in op.tags if t.startswith("module:")), None)
        if module is not None:
            return module
        return next((g for g in rules.gemm_groups if op.name in g), op.name)

    out = []
    for op in (o for o in flow.ops if LAYER_TAG in o.tags):
        if op.kind == "linear" and "routing" not in op.tags:
            g = group(op)
            if g not in decided:
                count += 1
                decided[g] = count % 2 == 1
            whole = decided[g]
            why = f"per-op AC: output of matrix product {count} ({op.name}), {'odd: saved' if whole else 'even'}"
        elif op.kind in rules.sac_saved_kinds or "routing_decision" in op.tags:
            whole, why = True, f"per-op AC: output of {op.kind} {op.name}, on the save list"
        else:
            continue
        if rules.sac_cached is not None:
            cached = tuple(rules.sac_cached(op, flow, whole, why))
        else:
            cached = tuple(Saved(flow.tensors[t], why) for t in op.outputs) if whole else ()
        if cached:
            out.append((op, whole, cached))
    return out


def runs_again(op: Op, flow: Dataflow, rules: RuleSet, policy: Policy) -> bool:
    """Whether recomputation runs `op`'s forward again in the backward: the policy recomputes it, and, under per-op
    AC, its output is not among the checkpoint's cached ones (torch/utils/checkpoint.py
    `_CachingTorchDispatchMode`: a MUST_SAVE op's output is returned from the cache during the recomputation, the
    op not run)."""
    if not policy.recomputed(op):
        return False
    if policy.kind is Recompute.SELECTIVE_OP:
        return op.name not in _cached_names(flow, rules)
    return True


@lru_cache(maxsize=256)
def _cached_names(flow: Dataflow, rules: RuleSet) -> frozenset[str]:
    return frozenset(op.name for op, whole, _ in _sac_cached(flow, rules) if whole)


@dataclass(frozen=True)
class Term:
    """Bytes one rank keeps for one tensor of one copy of a part (e.g. one MoE layer)."""

    part: str
    block: str
    op: str
    tensor: str
    dtype: str
    why: str
    nbytes: sympy.Expr
    count: int  # copies of the part on the stage

    @property
    def total(self) -> sympy.Expr:
        return self.count * self.nbytes


def tensor_bytes(tensor: Tensor, axes: AxisSizes, act_bytes: int, e_tok: sympy.Expr) -> sympy.Expr:
    if tensor.packing is not None:  # a quantized copy: data and scale tensors (symmem.precision)
        return tensor.packing.nbytes(tensor.dims, axes, e_tok)
    per = tensor.dtype.nbytes if tensor.dtype.nbytes is not None else act_bytes
    return _local_bytes(tensor.dims, per, axes, e_tok)


@lru_cache(maxsize=65536)  # many tensors share a shape (and every stage of a model the same shapes)
def _local_bytes(dims: tuple, per: int, axes: AxisSizes, e_tok: sympy.Expr) -> sympy.Expr:
    size = per * local_size(dims, axes)
    return size.xreplace({E_tok: e_tok}) if size.has(E_tok) else size


def _dtype_name(dtype: DType, act_bytes: int) -> str:
    # The activation dtype: 4 bytes is FP32, 2 bytes BF16 (what a conversion to FP32 or back is a no-op for).
    if dtype.nbytes is not None:
        return dtype.name
    return {4: "fp32", 2: "bf16"}.get(act_bytes, dtype.name)


def storage_of(tensor: Tensor, flow: Dataflow, act_bytes: int) -> Tensor:
    """The tensor whose storage `tensor` occupies: a view's base, a conversion's source when the dtypes agree
    (e.g. RMSNorm's `.to(float32)` in an FP32 model), followed to the end. Tensors without aliases are their own."""
    for _ in range(len(flow.tensors) + 1):
        if tensor.view_of is not None:
            tensor = flow.tensors[tensor.view_of]
        elif tensor.cast_of is not None and (
                _dtype_name(tensor.dtype, act_bytes) == _dtype_name(flow.tensors[tensor.cast_of].dtype, act_bytes)):
            tensor = flow.tensors[tensor.cast_of]
        else:
            return tensor
    raise SymmemError(f"tensor {tensor.name!r}: its view_of/cast_of aliases form a cycle in {flow.name}")


def part_terms(part: Part, rules: RuleSet, policy: Policy, axes: AxisSizes, act_bytes: int,
               e_tok: sympy.Expr) -> list[Term]:
    """One term per distinct storage kept: tensors that alias one storage (views, no-op conversions) count once,
    at the size of the whole storage. Under a per-layer policy (`selective-layer:N`) a part's layers count by the
    policy each runs under (`Policy.layer_split`), a term per storage and policy."""
    terms: dict[tuple, Term] = {}
    split = (policy.layer_split(part.layer_ids) if part.is_layers
             else [(policy.outside_layers(), part.count)])
    for pol, count in split:
        note = f" (layers under recompute {pol.label})" if part.is_layers and pol is not policy else ""
        for k in kept_tensors(part.flow, rules, pol):
            root = storage_of(k.tensor, part.flow, act_bytes)
            if (pol, root.name) in terms:
                continue
            why = k.why if root is k.tensor else f"{k.why}: the storage of {root.name}"
            terms[(pol, root.name)] = Term(part.name, k.block, k.op, root.name, root.dtype.name, why + note,
                                           tensor_bytes(root, axes, act_bytes, e_tok), count)
    return list(terms.values())


def sum_terms(terms: Iterable[Term], block: str | None = None) -> sympy.Expr:
    return sympy.Add(*[t.total for t in terms if block is None or t.block == block])
