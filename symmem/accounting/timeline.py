"""The peak, not the sum: what one GPU of a stage holds over one training step, derived from the dataflows.

A GPU runs out of memory at its peak, which holds more than the saved tensors: outputs that live only until their
consumer has run, gradients of activations during the backward, workspaces, and parameters gathered for one layer.
This module follows one micro-batch through each part of a stage, op by op, with the rule set's saved tensors:

* forward, op i: every storage produced so far that is kept for backward, plus those not kept whose last consumer
  has not run yet (an op's inputs and outputs are alive while it runs), plus the op's workspace;
* backward, op j (reverse order): the kept storages whose first saver is at or before j (a saved tensor is released
  once the backward of the first op that saved it has run), plus the gradients of activations alive then (the
  gradient of a tensor lives from the backward of its last consumer to the backward of its producer), plus the
  op's workspace. A recomputed op's own saves are alive again from its recomputation on.

A stage then adds, at every event: the model states and the framework's buffers (static), the saved tensors of the
other micro-batches the schedule holds in flight, the saved tensors of the parts before the current one (and of
the earlier copies of the current part), and under ZeRO-3 the parameters gathered for the current layer (with a
prefetch depth) or under ZeRO-2/3 its not yet reduce-scattered gradients. The peak is the largest of these
candidate events: each is a closed form in the model's sizes, b and s, evaluated exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, lru_cache

import sympy

from symmem.accounting.activations import kept_tensors, storage_of, tensor_bytes
from symmem.accounting.evaluate import ceil_int, evaluate, expand_sum
from symmem.accounting.recompute import Policy, Recompute
from symmem.graph import AxisSizes, Dataflow, Tensor, local_size
from symmem.model import Part
from symmem.rules import RuleSet

NO_RECOMPUTE = Policy(Recompute.NONE)
INT_DTYPES = ("int64", "int32", "bool", "mask")
ZERO3_PREFETCH = 1  # layers gathered ahead under ZeRO-3 (DeepSpeed's stage3_prefetch; one layer by default)

# Components of what is alive, in the order a breakdown lists them.
SAVED_OTHER = "saved activations, other micro-batches in flight"
SAVED_EARLIER = "saved activations, earlier layers of this micro-batch"
SAVED_CURRENT = "saved activations, current layer"
TRANSIENT = "transient outputs"
GRADS = "activation gradients"
WORKSPACE = "op workspaces"
GATHERED = "gathered parameters (ZeRO-3)"
UNREDUCED = "unreduced gradients (ZeRO-2/3)"
PIPELINE = "pipeline gradient buffers"
STASH = "weight-gradient operands (B done, W deferred)"
STAGE_OUTPUTS = "pipeline stage outputs kept for backward"


@dataclass(frozen=True)
class Amount:
    """A named amount of memory alive at an event."""

    component: str
    what: str
    nbytes: sympy.Expr


@dataclass(frozen=True)
class OpEvent:
    phase: str  # "forward" or "backward"
    op: str
    alive: tuple[Amount, ...]


@dataclass(frozen=True)
class PartTimeline:
    """One copy of a part (e.g. one MoE layer), one micro-batch: its saved total and its op events."""

    saved: sympy.Expr  # bytes it keeps for backward once its forward is done
    events: tuple[OpEvent, ...]


def _requires_grad(flow: Dataflow) -> set[str]:
    """Tensors that get a gradient: floating point, reached from a floating input or a weight."""
    grad: set[str] = {t for t in flow.inputs if flow.tensors[t].dtype.name not in INT_DTYPES}
    for op in flow.ops:
        if op.weights or any(t in grad for t in op.inputs):
            grad |= {t for t in op.outputs if flow.tensors[t].dtype.name not in INT_DTYPES}
    return grad


def _slots(flow: Dataflow, fused_tags: tuple[str, ...]) -> tuple[list[int], list[tuple[int, ...]]]:
    """Consecutive ops sharing a fused tag run as one kernel: op index -> slot, and each slot's ops."""
    slot_of: list[int] = []
    members: list[list[int]] = []
    last_tag = None
    for i, op in enumerate(flow.ops):
        tag = next((t for t in fused_tags if t in op.tags), None)
        if tag is not None and tag == last_tag:
            members[-1].append(i)
        else:
            members.append([i])
        slot_of.append(len(members) - 1)
        last_tag = tag
    return slot_of, [tuple(m) for m in members]


@lru_cache(maxsize=512)
def part_timeline(flow: Dataflow, rules: RuleSet, policy: Policy, axes: AxisSizes, act_bytes: int,
                  e_tok: sympy.Expr) -> PartTimeline:
    """The forward and backward events of one copy of `flow` for one micro-batch (one event per op, or per fused
    group of ops: indices below are slots)."""
    slot_of, members = _slots(flow, rules.fused_tags)
    ops = flow.ops
    n = len(members)
    index = {op.name: slot_of[i] for i, op in enumerate(ops)}
    produced = {t: -1 for t in flow.inputs}
    last_use = {t: -1 for t in flow.tensors}
    first_use = {t: n for t in flow.tensors}
    for i, op in enumerate(ops):
        for t in op.outputs:
            produced[t] = slot_of[i]
        for t in op.inputs:
            last_use[t] = max(last_use[t], slot_of[i])
            first_use[t] = min(first_use[t], slot_of[i])
    for t in flow.outputs:
        last_use[t] = n
    # Inside a fused kernel: produced and consumed within one slot, never materialised (nor its gradient).
    internal = {t for t in flow.tensors if t in produced and produced[t] >= 0 and last_use[t] == produced[t]
                and len(members[produced[t]]) > 1}

    def nbytes(t: Tensor) -> sympy.Expr:
        return tensor_bytes(t, axes, act_bytes, e_tok)

    # Storages: a view or a same-dtype conversion lives in its base's storage (alive while any alias is).
    root = {t: storage_of(flow.tensors[t], flow, act_bytes).name for t in flow.tensors if t not in internal}
    s_prod: dict[str, int] = {}
    s_last: dict[str, int] = {}
    s_bytes: dict[str, sympy.Expr] = {}
    for t, r in root.items():
        s_prod[r] = min(s_prod.get(r, n), produced.get(t, produced.get(r, -1)))
        s_last[r] = max(s_last.get(r, -1), last_use[t])
        s_bytes.setdefault(r, nbytes(flow.tensors[r]))

    def kept_roots(pol: Policy) -> dict[str, int]:
        """storage -> index of the first op that keeps it; synthetic saves (masks, FP32 copies) are their own."""
        out: dict[str, int] = {}
        for k in kept_tensors(flow, rules, pol):
            r = storage_of(k.tensor, flow, act_bytes).name
            if r not in s_bytes:  # synthetic: made by the op that keeps it
                s_bytes[r] = nbytes(k.tensor)
                s_prod[r] = index[k.op]
                s_last[r] = index[k.op]
            out[r] = min(out.get(r, n), index[k.op])
        return out

    kept = kept_roots(policy)
    recomputed = [slot_of[i] for i, op in enumerate(ops) if policy.recomputed(op)]
    kept_all = kept_roots(NO_RECOMPUTE) if recomputed else {}
    last_recomputed = max(recomputed, default=-1)
    first_recomputed = min(recomputed, default=n)
    saved = sympy.Add(*[s_bytes[r] for r in kept])

    needs_grad = _requires_grad(flow) - internal
    grads = [t for t in flow.tensors if t in needs_grad]  # in flow order: the same in every process
    in_place = {t for op in ops if op.kind in rules.grad_in_place for t in op.inputs}
    g_prod = {t: produced.get(t, -1) for t in grads}

    def label(j: int) -> str:
        group = [ops[i] for i in members[j]]
        if len(group) == 1:
            return group[0].name
        tag = next(t for t in rules.fused_tags if t in group[0].tags)
        return f"fused {tag} ({', '.join(o.name for o in group)})"

    def workspace(j: int, phase: str) -> list[Amount]:
        return [Amount(WORKSPACE, w.tensor.name, nbytes(w.tensor)) for i in members[j]
                for w in rules.workspace(ops[i], flow, phase, axes)]

    # Each storage's amounts, made once: an event lists the same few hundred amounts again and again
    saved_amount = {r: Amount(SAVED_CURRENT, r, b) for r, b in s_bytes.items()}
    transient_amount = {r: Amount(TRANSIENT, r, b) for r, b in s_bytes.items()}
    grad_amount = {t: Amount(GRADS, "grad " + t, nbytes(flow.tensors[t])) for t in grads}
    events: list[OpEvent] = []
    for i in range(n):
        alive = []
        for r in s_bytes:
            if s_prod[r] <= i and (r in kept or s_last[r] >= i):
                alive.append(saved_amount[r] if r in kept and kept[r] <= i else transient_amount[r])
        events.append(OpEvent("forward", label(i), tuple(alive + workspace(i, "forward"))))
    for j in range(n - 1, -1, -1):
        alive = [saved_amount[r] for r, k in kept.items() if k <= j]
        if first_recomputed <= j <= last_recomputed:  # recomputed: its own saves exist again until released
            alive += [saved_amount[r] for r, k in kept_all.items()
                      if k <= j and r not in kept and k >= first_recomputed]
        # An in-place gradient (TE's cross-entropy writes it into the logits it saved) takes no memory while the
        # saved tensor is alive, and keeps that storage alive after it, until its producer's backward.
        alive += [grad_amount[t] for t in grads
                  if g_prod[t] <= j <= last_use[t] and not (t in in_place and j == last_use[t])]
        events.append(OpEvent("backward", label(j), tuple(alive + workspace(j, "backward"))))
    return PartTimeline(saved, tuple(events))


# ----------------------------------------------------------------------------------------------- a stage
@dataclass(frozen=True)
class Event:
    """A candidate peak on one GPU of a stage: what is alive, by component, as closed forms."""

    phase: str  # "forward", "backward" or "optimizer step"
    part: str
    op: str
    amounts: tuple[Amount, ...]  # dynamic amounts (the static ones are the stage's)

    def expression(self) -> sympy.Expr:
        return expand_sum((1, a.nbytes) for a in self.amounts)


@dataclass(frozen=True)
class StagePeak:
    """The peak of one GPU of a stage: static components, the winning event and its breakdown (bytes)."""

    static: dict[str, int]
    event: Event
    dynamic: dict[str, int]  # the event's amounts by component
    in_flight: Fraction
    # (events, others, their dynamic bytes): `stage_peak`'s candidates, as `events` lists them
    candidates: tuple = field(repr=False, compare=False)

    @cached_property
    def events(self) -> tuple[tuple[Event, int], ...]:
        """Every candidate with its dynamic bytes (built on first use: most callers want only the winner)."""
        events, others, totals = self.candidates
        return tuple(zip(with_others(events, others), totals, strict=True))

    @property
    def peak_allocated(self) -> int:
        return sum(self.static.values()) + sum(self.dynamic.values())

    @property
    def label(self) -> dict:
        return {"phase": self.event.phase, "part": self.event.part, "op": self.event.op,
                "microbatch": "last in flight" if self.event.phase != "optimizer step" else None}


def _component_sums(amounts, values: dict) -> dict[str, int]:
    """`amounts`' bytes by component, at `values`."""
    return _by_component(amounts, amount_values(values))


def _by_component(amounts, value: Callable) -> dict[str, int]:
    """`amounts`' bytes by component (`value`: an amount's exact bytes, `amount_values`)."""
    out: dict[str, int | Fraction] = {}
    for a in amounts:
        out[a.component] = out.get(a.component, 0) + value(a.nbytes)
    return {k: v if v.__class__ is int else ceil_int(Fraction(v)) for k, v in out.items()}


def stage_events(parts: tuple[Part, ...], rules: RuleSet, policy: Policy, axes: AxisSizes, act_bytes: int,
                 e_tok: sympy.Expr, in_flight: Fraction, zero: int, weight_bytes: int, grad_bytes: int,
                 backward_extra: tuple[Amount, ...] = (), pipelined_fsdp: str | None = None,
                 sharded_grads: int = 0) -> list[Event]:
    """Every candidate peak event of one GPU of a stage (dynamic amounts only), with `in_flight` micro-batches in
    flight: `one_microbatch_events`, the other micro-batches' saved tensors added (`with_others`)."""
    events, per_mb = one_microbatch_events(parts, rules, policy, axes, act_bytes, e_tok, zero, weight_bytes,
                                           grad_bytes, backward_extra, pipelined_fsdp, sharded_grads)
    return with_others(events, others_amount(per_mb, in_flight))


def others_amount(per_mb: sympy.Expr, in_flight: Fraction) -> Amount | None:
    """What the other micro-batches in flight keep saved (None with one in flight), `per_mb` bytes each."""
    others = sympy.Rational(in_flight.numerator, in_flight.denominator) - 1
    return Amount(SAVED_OTHER, f"{others} x saved per micro-batch", others * per_mb) if others else None


def with_others(events, others: Amount | None) -> list[Event]:
    """`events` of one micro-batch in flight (`one_microbatch_events`) with `others` alive at each but the last
    (the optimizer step, after every backward), as the events' first amount."""
    if others is None:
        return list(events)
    return [Event(ev.phase, ev.part, ev.op, (others,) + ev.amounts) for ev in events[:-1]] + [events[-1]]


def one_microbatch_events(parts: tuple[Part, ...], rules: RuleSet, policy: Policy, axes: AxisSizes, act_bytes: int,
                          e_tok: sympy.Expr, zero: int, weight_bytes: int, grad_bytes: int,
                          backward_extra: tuple[Amount, ...] = (), pipelined_fsdp: str | None = None,
                          sharded_grads: int = 0) -> tuple[tuple[Event, ...], sympy.Expr]:
    """The candidate peak events of one GPU of a stage with one micro-batch in flight, the optimizer step's last,
    and the bytes one micro-batch keeps saved. Stages of the same layers share them: they differ only in the other
    micro-batches in flight, alive alike at every event but the step (`with_others`). Under a per-layer policy
    (`selective-layer:N`) a part's layers are taken by the policy each runs under, the kind of the part's last layer
    last (`Policy.layer_split`): its last copy then sees every other layer of the part saved, as the step's last
    layer does; the other kind's last copy sees those of its own kind (a floor for the moment it stands for).

    `pipelined_fsdp`: FSDP2 (ZeRO-3) under torch.distributed.pipelining, which runs every micro-batch's backward but
    the last with `set_reshard_after_backward(False)` and `set_requires_gradient_sync(False)`
    (torch/distributed/pipelining/stage.py:844-847; torchtitan turns reshard-after-forward off under PP,
    torchtitan/distributed/fsdp.py:54-74): the stage's every parameter stays gathered (in `weight_bytes`) from its
    first forward to the last backward, and each parameter's gradient, upcast to the reduce dtype, accumulates
    unsharded (`grad_bytes`; _fsdp_param.py:802-821 `to_accumulated_grad_if_needed`) beside the layer's own in the
    parameters' dtype while its backward runs. "whole": a backward after an earlier micro-batch's (1F1B's steady
    state), every accumulated gradient there; "first": the first micro-batch's backward, with those of the parts
    after the event's already accumulated. The sharded gradients (`sharded_grads` bytes) are made only by the last
    micro-batch's reduce-scatter (the optimizer's zero_grad leaves none before): the optimizer step's event holds
    them (the caller leaves them out of the static states)."""
    units = []  # (part, policy, copies, label)
    for p in parts:
        split = (policy.layer_split(p.layer_ids) if p.is_layers
                 else [(policy.outside_layers(), p.count)])
        for pol, n in split:
            label = p.name if pol is policy or not p.is_layers else f"{p.name} ({pol.label})"
            units.append((p, pol, n, label))
    timelines = [part_timeline(p.flow, rules, pol, axes, act_bytes, e_tok) for p, pol, _, _ in units]
    per_mb = sympy.Add(*[n * tl.saved for (_, _, n, _), tl in zip(units, timelines, strict=True)])
    # each part's weights (all its copies), in stage order
    weights_of = [p.count * _layer_weights(p, axes) for p in parts] if pipelined_fsdp else []
    stage_weights = sympy.Add(*weights_of)
    stage_gathered = sympy.Add(*[p.count * gathered_bytes(weight_bytes, p, axes) for p in parts]
                               ) if pipelined_fsdp else sympy.Integer(0)
    events: list[Event] = []
    earlier = sympy.Integer(0)
    for (p, _, count, label), tl in zip(units, timelines, strict=True):
        before = earlier + (count - 1) * tl.saved
        common = (Amount(SAVED_EARLIER, "earlier parts and copies", before),) if before != 0 else ()
        # what this part adds to each of its forward and backward events (the same amounts for all of them)
        forward_extra: tuple[Amount, ...] = ()
        backward: tuple[Amount, ...] = ()
        if pipelined_fsdp and zero >= 3:
            forward_extra = (Amount(GATHERED, "the stage's parameters (kept gathered under PP)", stage_gathered),)
            if pipelined_fsdp == "whole":
                accumulated = Amount(UNREDUCED, "the stage's gradients, accumulated unsharded",
                                     grad_bytes * stage_weights)
            else:  # the parts after this one have run their backward of the first micro-batch
                accumulated = Amount(UNREDUCED, "the gradients of the parts after it, accumulated unsharded",
                                     grad_bytes * sympy.Add(*weights_of[parts.index(p) + 1:]))
            backward = forward_extra + (accumulated,)
            if p.is_layers:
                backward += (Amount(UNREDUCED, "the layer's gradients",
                                    param_dtype_bytes(weight_bytes) * _layer_weights(p, axes)),)
        elif p.is_layers and zero >= 2:
            layer_weights = _layer_weights(p, axes)
            if zero >= 3:
                forward_extra = (Amount(GATHERED, f"{1 + ZERO3_PREFETCH} layers' parameters",
                                        (1 + ZERO3_PREFETCH) * gathered_bytes(weight_bytes, p, axes)),)
            backward = forward_extra + (Amount(UNREDUCED, "the layer's gradients", grad_bytes * layer_weights),)
        backward_all = backward + tuple(backward_extra)
        for ev in tl.events:
            extra = backward_all if ev.phase == "backward" else forward_extra
            events.append(Event(ev.phase, label, ev.op, common + ev.alive + extra))
        earlier += count * tl.saved
    step = (Amount(UNREDUCED, "the sharded gradients (the last micro-batch's reduce-scatter)", sharded_grads),) \
        if pipelined_fsdp else ()
    events.append(Event("optimizer step", "", "step", step))
    return tuple(events), per_mb


def _layer_weights(p: Part, axes: AxisSizes) -> sympy.Expr:
    """Elements of one copy of a part's own weights on one GPU (a weight shared with another part counted there)."""
    return sympy.Add(*[local_size(w.dims, axes) for _, w in p.flow.weights() if w.shared_with is None])


@dataclass(frozen=True)
class Float8Gathered:
    """What ZeRO-3 gathers per parameter when FSDP2 gathers the Float8 linears' weights in float8 (torchao's
    `enable_fsdp_float8_all_gather`, torchao/float8/fsdp_utils.py:228-285): each such weight 1 byte per element and
    its FP32 scale, 4 bytes (one per Float8Linear module: `float8.owns_scale`); every other parameter
    `other_bytes` (the param dtype). Passed where an int `weight_bytes` is otherwise (`gathered_bytes`)."""

    other_bytes: int
    float8: object  # symmem.precision.recipes.Float8AllGather


def param_dtype_bytes(weight_bytes: int | Float8Gathered) -> int:
    """Bytes per element of the parameters' dtype (what an unreduced gradient is made in before the upcast)."""
    return weight_bytes.other_bytes if isinstance(weight_bytes, Float8Gathered) else weight_bytes


def gathered_bytes(weight_bytes: int | Float8Gathered, p: Part, axes: AxisSizes, scales: bool = True) -> sympy.Expr:
    """Bytes one copy of part `p`'s own weights takes gathered on one GPU (`scales`: with the float8 weights' FP32
    scales, which are made on each GPU, not gathered)."""
    if not isinstance(weight_bytes, Float8Gathered):
        return weight_bytes * _layer_weights(p, axes)
    f8 = weight_bytes.float8
    total = sympy.Integer(0)
    for op, w in p.flow.weights():
        if w.shared_with is None:
            total += (1 if f8.is_float8(op) else weight_bytes.other_bytes) * local_size(w.dims, axes)
    return total + 4 * float8_scales(weight_bytes, p) if scales else total


def float8_scales(weight_bytes: int | Float8Gathered, p: Part) -> int:
    """The float8-gathered weights of one copy of part `p` (one FP32 scale each; none unless `Float8Gathered`)."""
    if not isinstance(weight_bytes, Float8Gathered):
        return 0
    return sum(1 for op in p.flow.ops if weight_bytes.float8.owns_scale(op) and op.weights[0].shared_with is None)


def amount_values(values: dict) -> Callable[[sympy.Expr], int | Fraction]:
    """The exact value of an amount's bytes at `values`, each distinct expression evaluated once (the same storages
    recur in many events). Whole numbers of bytes are ints (adding ints is about 20 times faster than adding
    Fractions, and a stage has up to ~10^5 amounts to add); the rare fractional amount stays a Fraction, so sums
    stay exact either way."""
    known: dict[sympy.Expr, int | Fraction] = {}

    def value(expr: sympy.Expr) -> int | Fraction:
        v = known.get(expr)
        if v is None:
            f = evaluate(expr, values)
            v = known[expr] = f.numerator if f.denominator == 1 else f
        return v

    return value


def stage_peak(events, static: dict[str, int], values: dict, in_flight: Fraction,
               others: Amount | None = None) -> StagePeak:
    """The busiest of `events` (the first of equals: forward before backward, earlier parts first), with the
    stage's static bytes. `others`: `events` are of one micro-batch in flight (`one_microbatch_events`), and
    `others` the other micro-batches' saved tensors, alive alike at each event but the last (`with_others`): it
    adds the same bytes to each of their scores, so a tuple of such events, derived once for the stages of the
    same layers, is scored once at the same sizes (`_shared_scores`)."""
    if isinstance(events, tuple):
        scores, value = _shared_scores(events, values)
    else:
        value = amount_values(values)
        scores = _scores(events, value)
    if others is not None:
        more = value(others.nbytes)
        scores = [total + more for total in scores[:-1]] + [scores[-1]]
    totals = [total if total.__class__ is int else ceil_int(Fraction(total)) for total in scores]
    best = max(range(len(totals)), key=totals.__getitem__)  # the first of equals
    event = events[best]
    if others is not None and best < len(totals) - 1:
        event = Event(event.phase, event.part, event.op, (others,) + event.amounts)
    return StagePeak(static, event, _by_component(event.amounts, value), in_flight, (events, others, totals))


def _scores(events, value: Callable) -> list[int | Fraction]:
    """Each event's dynamic bytes, exact (an int, or a Fraction where an amount is fractional)."""
    # each amount's value looked up inline by the identity of its expression (`events` keeps them alive): a stage
    # has up to ~10^5 amounts, and a call or a sympy hash (a Python method) per amount was most of this loop's time
    known: dict[int, int | Fraction] = {}
    out = []
    for ev in events:
        total = 0
        for a in ev.amounts:
            v = known.get(id(a.nbytes))
            if v is None:
                v = known[id(a.nbytes)] = value(a.nbytes)
            total += v
        out.append(total)
    return out


# id(events) -> (events, {sizes: (scores, value)}): the events' tuple is held here, so that its id stays its own
_SHARED: dict[int, tuple[tuple, dict]] = {}
_SHARED_MAX = 256  # tuples of events remembered (a whole `symmem paper` derives about 60)


def _shared_scores(events: tuple, values: dict) -> tuple[list[int | Fraction], Callable]:
    """`_scores` of an immutable tuple of events, remembered by its identity and the sizes, with the
    `amount_values` that scored them."""
    held = _SHARED.get(id(events))
    if held is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        held = _SHARED[id(events)] = (events, {})
    key = frozenset(values.items())
    found = held[1].get(key)
    if found is None:
        value = amount_values(values)
        found = held[1][key] = (_scores(events, value), value)
    return found


def reserved_range(peak_allocated: int, fragmentation: tuple[float, float], comm: tuple[int, int]) -> tuple[int, int]:
    """What the caching allocator reserves at the peak: at least the allocated bytes (reserved >= allocated), plus
    the scenario's fragmentation range and the communication buffers allocated through it."""
    return (math.ceil(peak_allocated * (1 + fragmentation[0])) + comm[0],
            math.ceil(peak_allocated * (1 + fragmentation[1])) + comm[1])


# ------------------------------------------------------------------------------------------- the whole step
def one_f_one_b_order(stage: int, pp: int, m: int) -> list[str]:
    """The order of forward (F) and backward (B) micro-batches on `stage` under 1F1B (Megatron's
    forward_backward_pipelining_without_interleaving: PP - stage - 1 warm-up forwards, then one forward and one
    backward in turn, then the cool-down backwards)."""
    warm = min(pp - stage - 1, m)
    order = ["F"] * warm
    for _ in range(m - warm):
        order += ["F", "B"]
    return order + ["B"] * warm


def step_series(chunks: list[tuple[Part, ...]], rules: RuleSet, policy: Policy, axes: AxisSizes, act_bytes: int,
                e_tok: sympy.Expr, order: list[tuple[str, int, int]], zero: int, weight_bytes: int, grad_bytes: int,
                backward_extra: tuple[Amount, ...] = ()) -> list[Event]:
    """Every event of one training step on one GPU of a stage, in time order: `order` is the schedule's
    (phase, micro-batch, chunk) sequence (`Schedule.order`), `chunks` the parts of each model chunk the GPU holds
    (one, except under interleaving and DualPipe). For a figure, and as a check: under 1F1B its largest event is
    the candidate peak of `stage_events`. A "B" followed later by a "W" of the same micro-batch and chunk computes
    input gradients only: from it the micro-batch keeps its weight-gradient operands (`weight_grad_stash`), drawn
    as their own component, until the W, an event of its own."""
    from symmem.accounting.deferred import weight_grad_stash

    timelines = [[part_timeline(p.flow, rules, policy, axes, act_bytes, e_tok) for p in parts] for parts in chunks]
    per_mb = [sympy.Add(*[p.count * tl.saved for p, tl in zip(parts, tls, strict=True)])
              for parts, tls in zip(chunks, timelines, strict=True)]
    deferred = {(mb, c) for phase, mb, c in order if phase == "W"}
    stash = [[weight_grad_stash(p.flow, axes, act_bytes, e_tok) for p in parts] if any(i == c for _, i in deferred)
             else [sympy.Integer(0)] * len(parts) for c, parts in enumerate(chunks)]
    stash_mb = [sympy.Add(*[p.count * x for p, x in zip(parts, xs, strict=True)])
                for parts, xs in zip(chunks, stash, strict=True)]
    held: dict[int, int] = {}  # chunk -> micro-batches whose forward of it is done and backward not yet
    waiting: dict[int, int] = {}  # chunk -> micro-batches whose B is done and W not yet
    series: list[Event] = []

    def other() -> list[Amount]:
        name = (lambda c: "") if len(chunks) == 1 else (lambda c: f" of chunk {c}")
        return ([Amount(SAVED_OTHER, f"{n} x saved per micro-batch{name(c)}", n * per_mb[c])
                 for c, n in sorted(held.items()) if n]
                + [Amount(STASH, f"{n} x weight-gradient operands{name(c)}", n * stash_mb[c])
                   for c, n in sorted(waiting.items()) if n])

    for phase, mb_index, c in order:
        parts, tls = chunks[c], timelines[c]
        mb = f"micro-batch {mb_index}" + (f", chunk {c}" if len(chunks) > 1 else "")
        if phase == "W":
            series.append(Event("weight gradients", mb, "W", tuple(other())))
            waiting[c] -= 1
        elif phase == "F":
            base = other()
            earlier = sympy.Integer(0)
            for p, tl in zip(parts, tls, strict=True):
                layer_weights = sympy.Add(*[local_size(w.dims, axes) for _, w in p.flow.weights()
                                            if w.shared_with is None])
                for copy in range(p.count):
                    common = base + [Amount(SAVED_EARLIER, "earlier parts and copies", earlier + copy * tl.saved)]
                    for ev in tl.events:
                        if ev.phase != "forward":
                            continue
                        extra = [Amount(GATHERED, "gathered",
                                        (1 + ZERO3_PREFETCH) * gathered_bytes(weight_bytes, p, axes))
                                 ] if p.is_layers and zero >= 3 else []
                        series.append(Event("forward", f"{p.name} ({mb})", ev.op, tuple(common) + ev.alive
                                            + tuple(extra)))
                earlier += p.count * tl.saved
            held[c] = held.get(c, 0) + 1
        else:
            held[c] -= 1
            base = other()
            before = per_mb[c]
            kept = sympy.Integer(0)  # weight-gradient operands of the copies this B has done, if its W waits
            for p, tl, x in reversed(list(zip(parts, tls, stash[c], strict=True))):
                before -= p.count * tl.saved
                layer_weights = sympy.Add(*[local_size(w.dims, axes) for _, w in p.flow.weights()
                                            if w.shared_with is None])
                for copy in range(p.count - 1, -1, -1):
                    common = base + [Amount(SAVED_EARLIER, "earlier parts and copies", before + copy * tl.saved)]
                    if kept != 0:
                        common.append(Amount(STASH, "weight-gradient operands, this micro-batch", kept))
                    for ev in tl.events:
                        if ev.phase != "backward":
                            continue
                        extra = list(backward_extra)
                        if p.is_layers and zero >= 3:
                            extra.append(Amount(GATHERED, "gathered",
                                                (1 + ZERO3_PREFETCH) * gathered_bytes(weight_bytes, p, axes)))
                        if p.is_layers and zero >= 2:
                            extra.append(Amount(UNREDUCED, "the layer's gradients", grad_bytes * layer_weights))
                        series.append(Event("backward", f"{p.name} ({mb})", ev.op, tuple(common) + ev.alive
                                            + tuple(extra)))
                    if (mb_index, c) in deferred:
                        kept += x
            if (mb_index, c) in deferred:
                waiting[c] = waiting.get(c, 0) + 1
    series.append(Event("optimizer step", "", "step", ()))
    return series
