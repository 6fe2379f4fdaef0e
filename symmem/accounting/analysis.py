"""What a scenario costs, stage by stage: parameters, model states, activations, the per-GPU total.

Everything here is derived from the dataflows: expressions are built once per structure, then evaluated.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, lru_cache

import sympy

from symmem._cache import bound_cache
from symmem.accounting.activations import Term, part_terms, tensor_bytes
from symmem.accounting.evaluate import ceil_int, evaluate, evaluate_form, expand_sum, sum_form
from symmem.accounting.params import (
    GROUPS,
    MOE_GROUPS,
    ModelTotals,
    activated_expr,
    count_by_group,
    count_values,
    weight_uses,
)
from symmem.accounting.states import StateBytes, state_bytes
from symmem.accounting.timeline import (
    PIPELINE,
    Amount,
    Event,
    StagePeak,
    one_microbatch_events,
    others_amount,
    stage_peak,
    step_series,
    with_others,
)
from symmem.config import ModelConfig
from symmem.model import model_parts, stage_parts
from symmem.parallel.layout import Stage
from symmem.parallel.schedule import WALKED, Schedule
from symmem.scenario import Scenario
from symmem.symbols import b, s


def to_int(expr: sympy.Expr, values: dict) -> int:
    """Evaluate to an exact integer number of bytes or parameters (a fractional byte rounds up)."""
    return ceil_int(evaluate(expr, values))


def values(scn: Scenario, b_value: int | None = None, s_value: int | None = None) -> dict:
    vals = scn.size_values()  # a copy
    vals[b] = scn.b if b_value is None else b_value
    vals[s] = scn.s if s_value is None else s_value
    return vals


# ---------------------------------------------------------------------------------------------- parameters
@bound_cache(maxsize=16)
def model_totals(model: ModelConfig, convention: str = "paper") -> ModelTotals:
    """Whole-model parameter counts: `total` (no MTP), `activated` per token, and the MTP module's own `mtp`.

    >>> from symmem import load_model
    >>> model_totals(load_model("deepseek-v3")).total
    671026404352
    """
    uses = weight_uses(model_parts(model, convention), unique=True)
    subs = model.substitutions()
    total = sum(count_values(uses, None, subs).values())
    activated = to_int(activated_expr(model_parts(model, convention), model.family.moe_fraction(model)), subs)
    with_mtp = weight_uses(model_parts(model, convention, with_mtp=True), unique=True)
    mtp = sum(count_values(with_mtp, None, subs).values()) - total
    return ModelTotals(total, activated, mtp)


@dataclass(frozen=True)
class StageParams:
    """Parameters of one GPU of a stage, by group (`dense`, the routers and experts): `total`, `dense`, `moe`;
    `whole_total` counts the stage's distinct parameters over all its ranks."""

    stage: Stage
    per_gpu: dict[str, int]  # parameters one GPU of the stage holds, by group
    whole: dict[str, int]  # the stage's distinct parameters over all its ranks
    _source: tuple = field(repr=False, compare=False, default=())  # (parts, axis sizes) of `per_gpu_expr`

    @cached_property
    def per_gpu_expr(self) -> dict[str, sympy.Expr]:
        """`per_gpu` in the model's symbols (parallel sizes substituted, or kept as symbols: `stage_params`'s
        `symbolic_parallel`); derived on first use (the numbers need no sympy sum)."""
        return dict(_group_exprs(*self._source))

    @property
    def dense(self) -> int:
        return self.per_gpu["dense"]

    @property
    def moe(self) -> int:
        return sum(self.per_gpu[g] for g in MOE_GROUPS)

    @property
    def total(self) -> int:
        return sum(self.per_gpu.values())

    @property
    def whole_total(self) -> int:
        return sum(self.whole.values())


def stage_params(scn: Scenario, stage: Stage, symbolic_parallel: bool = False) -> StageParams:
    """The parameters one GPU of `stage` holds under the scenario's parallelism and TP convention
    (`symbolic_parallel`: keep t, EP, ETP as symbols in `per_gpu_expr`)."""
    parts = stage_parts(scn.model, stage, scn.convention)
    per_gpu, whole = _stage_counts(scn.size_key, scn.parallel, parts, symbolic_parallel)
    return StageParams(stage, dict(per_gpu), dict(whole), (parts, scn.parallel.axis_sizes(symbolic_parallel)))


@lru_cache(maxsize=1024)
def _stage_counts(sizes: tuple, parallel, parts: tuple, symbolic_parallel: bool):
    uses = weight_uses(parts)
    subs = dict(sizes)
    per_gpu = (count_values(uses, parallel.axis_sizes(), subs) if not symbolic_parallel else
               {g: 0 for g in GROUPS})
    return tuple(per_gpu.items()), tuple(count_values(uses, None, subs).items())


@lru_cache(maxsize=1024)
def _group_exprs(parts: tuple, axes) -> tuple:
    return tuple(count_by_group(weight_uses(parts), axes).items())


def stage_states(scn: Scenario, sp: StageParams) -> StateBytes:
    """Model-state bytes (weights, gradients, optimizer states) of one GPU holding `sp`, under the scenario's
    precision recipe, ZeRO stage and schedule. An FP8/FP4 recipe adds its quantized weight copies and scaling
    state (`quantized`, derived weight by weight from the stage's GEMMs: symmem.precision.weights) and takes off the
    working copies it does not keep. Under DualPipe the GPU holds a second stage's states too (`dualpipe_states`)."""
    if _dualpipe(scn):
        return dualpipe_states(scn, sp.stage)
    if scn.profile.states is not None:  # the framework's own layout (FSDP2's padded shards)
        return scn.profile.states(scn, sp.stage, stage_parts(scn.model, sp.stage, scn.convention, scn.flow_impl),
                                  values(scn))
    st = state_bytes(sp.dense, sp.moe, scn.parallel.dense_shard, scn.parallel.expert_dp, scn.precision, scn.zero)
    if scn.precision.low_precision is None:
        return st
    q = stage_quantized(scn, sp.stage)
    return StateBytes(st.weights - q.dropped_weights, st.gradients, st.optimizer, q.added)


def stage_quantized(scn: Scenario, stage: Stage):
    """The FP8/FP4 weight state of one GPU of `stage` (`symmem.precision.weights.QuantizedStates`)."""
    from symmem.accounting.states import ZeroStage
    from symmem.precision.weights import quantized_states

    def shard(by_group: dict[str, int]) -> int:  # the dropped working copies, sharded as the weights are
        total = 0
        for group, n in by_group.items():
            size = scn.parallel.dense_shard if group == "dense" else scn.parallel.expert_dp
            total += scn.precision.weight_bytes * (-(-n // size) if scn.zero >= ZeroStage.OS_G_P else n)
        return total

    parts = stage_parts(scn.model, stage, scn.convention)
    return quantized_states(scn.precision, parts, scn.parallel.axis_sizes(), values(scn), 1,
                            shard)


# --------------------------------------------------------------------------------------------- activations
def stage_terms(scn: Scenario, stage: Stage, symbolic_parallel: bool = False) -> list[Term]:
    """Every tensor one GPU of `stage` keeps for one micro-batch, with provenance."""
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    return list(_terms(_activation_key(scn), parts, symbolic_parallel))


def _activation_key(scn: Scenario) -> tuple:
    return scn.activation_key  # what activations depend on (`Scenario.activation_key`)


def _tokens_per_expert(key: tuple, axes) -> sympy.Expr:
    model, _conv, _rules, _policy, parallel, routing, _act_bytes = key
    fraction = model.family.moe_fraction(model)
    return routing.tokens_per_expert(axes, fraction, parallel.ep) if fraction is not None else sympy.Integer(0)


@lru_cache(maxsize=1024)
def _terms(key: tuple, parts: tuple, symbolic_parallel: bool) -> tuple[Term, ...]:
    model, _conv, rules, policy, parallel, routing, act_bytes = key
    axes = parallel.axis_sizes(symbolic_parallel)
    e_tok = _tokens_per_expert(key, axes)
    terms: list[Term] = []
    for part in parts:
        terms.extend(part_terms(part, rules, policy, axes, act_bytes, e_tok))
    return tuple(terms)


@lru_cache(maxsize=4096)
def _summed(key: tuple, parts: tuple, block: str | None, symbolic_parallel: bool) -> sympy.Expr:
    terms = [t for t in _terms(key, parts, symbolic_parallel) if block is None or t.block == block]
    return expand_sum((t.count, t.nbytes) for t in terms)


@lru_cache(maxsize=4096)
def _summed_form(key: tuple, parts: tuple, block: str | None):
    terms = _terms(key, parts, False)
    return sum_form(tuple((t.count, t.nbytes) for t in terms if block is None or t.block == block))


def stage_activation_bytes(scn: Scenario, stage: Stage, block: str | None = None) -> int:
    """The value of `stage_activation_expr` at the scenario's sizes, b and s (rounded up to a whole byte), added up
    term by term without building the sympy sum (what every memory figure needs; the formula is for display)."""
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    form = _summed_form(_activation_key(scn), parts, block)
    if form is None:  # a term that is no polynomial in its sizes and step atoms: sympy's sum, evaluated
        return to_int(stage_activation_expr(scn, stage, block), values(scn))
    return ceil_int(evaluate_form(form, values(scn)))


def stage_activation_expr(scn: Scenario, stage: Stage, block: str | None = None,
                          symbolic_parallel: bool = False) -> sympy.Expr:
    """Bytes one GPU of `stage` keeps for one micro-batch (of `block` only, if given), in b, s and model sizes."""
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    return _summed(_activation_key(scn), parts, block, symbolic_parallel)


@dataclass(frozen=True)
class StageMemory:
    """One GPU of one stage: the per-GPU breakdown under the scenario's schedule.

    `allocated` is the sum of model states and the saved tensors of the micro-batches in flight (what the paper
    adds up); `peak.peak_allocated` is what the GPU holds at its busiest moment (`symmem.accounting.timeline`),
    with the framework's buffers, transient tensors, activation gradients and workspaces."""

    stage: Stage
    params: StageParams
    states: StateBytes
    activation_per_microbatch: int
    in_flight: Fraction
    activations: int  # per micro-batch × in flight
    fragmentation: tuple[int, int]
    comm_buffers: tuple[int, int]
    scenario: Scenario = field(repr=False, compare=False, default=None)

    @property
    def allocated(self) -> int:
        """Model states plus saved activations of the micro-batches in flight: the sum, not the peak."""
        return self.states.total + self.activations

    @cached_property
    def peak(self) -> StagePeak:
        """The busiest moment of one GPU of the stage (derived on first use: a timeline of every op)."""
        return stage_peak_of(self.scenario, self.stage, self.states, self.in_flight)

    @property
    def peak_allocated(self) -> int:
        """Bytes allocated at the busiest moment of one GPU of the stage (`peak.event` names the moment)."""
        return self.peak.peak_allocated

    @property
    def reserved(self) -> tuple[int, int]:
        """The allocator's reserved memory at the peak: [low, high]."""
        return (math.ceil(self.peak_allocated * (1 + self.fragmentation_fractions[0])) + self.comm_buffers[0],
                math.ceil(self.peak_allocated * (1 + self.fragmentation_fractions[1])) + self.comm_buffers[1])

    fragmentation_fractions: tuple[float, float] = (0.05, 0.30)

    @property
    def low(self) -> int:
        return self.allocated + self.fragmentation[0] + self.comm_buffers[0]

    @property
    def high(self) -> int:
        return self.allocated + self.fragmentation[1] + self.comm_buffers[1]


def verdict(low: int, high: int, capacity: int) -> str:
    if high <= capacity:
        return "fits"
    if low <= capacity:
        return "fits only at the low end of overheads"
    return "does not fit"


def stage_memory(scn: Scenario, stage: Stage) -> StageMemory:
    """The per-GPU memory of one stage: model states plus the saved activations of the micro-batches in flight
    (`allocated`), with fragmentation and communication-buffer ranges; `peak` derives the busiest moment."""
    sp = stage_params(scn, stage)
    st = stage_states(scn, sp)
    act = stage_activation_bytes(scn, stage)
    k = scn.schedule.in_flight(stage.index, scn.parallel.pp, scn.m, scn.schedule_runtime)
    acts = math.ceil(act * k)
    alloc = st.total + acts
    frag = (math.ceil(alloc * scn.fragmentation[0]), math.ceil(alloc * scn.fragmentation[1]))
    return StageMemory(stage, sp, st, act, k, acts, frag, scn.comm_buffers, scn, scn.fragmentation)


def _dualpipe(scn: Scenario) -> bool:
    return scn.schedule.name == "dualpipe" and scn.parallel.pp > 1


def dualpipe_states(scn: Scenario, stage: Stage) -> StateBytes:
    """DualPipe: GPU i holds the model states of stage i and of stage PP - 1 - i, the second chunk it runs for the
    micro-batches going the other way (deepseek-ai/DualPipe@3da1bbe dualpipe/dualpipe.py: `modules` is a pair; the
    DeepSeek-V3 report, section 3.2.1: "two copies of the model parameters"; `Schedule.held_stages`). The first
    GPU holds the embedding and the head, each once, not the embedding twice."""
    one = scn.replace(schedule=Schedule("1f1b"))  # the model states of a stage do not depend on the schedule
    a, b = (stage_states(one, stage_params(one, scn.stages[i]))
            for i in scn.schedule.held_stages(stage.index, scn.parallel.pp))
    return StateBytes(a.weights + b.weights, a.gradients + b.gradients, a.optimizer + b.optimizer,
                      a.quantized + b.quantized)


def stage_timeline_events(scn: Scenario, stage: Stage) -> list[Event]:
    """The candidate peak events of one GPU of `stage` (dynamic amounts, closed forms)."""
    events, others = _timeline_events(scn, stage)
    return with_others(events, others)


def _timeline_events(scn: Scenario, stage: Stage) -> tuple[tuple[Event, ...] | list[Event], Amount | None]:
    """`stage_timeline_events` as (events, what the other micro-batches in flight keep, alive at each event but
    the last): the tuple of events of one micro-batch in flight `_events` caches for the stages of the same layers
    (`timeline.stage_peak` scores such a tuple once), and the amount of the others (`timeline.with_others`); or a
    list of every event as is, and None."""
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    key = _activation_key(scn)
    axes = scn.parallel.axis_sizes()
    k = scn.schedule.in_flight(stage.index, scn.parallel.pp, scn.m, scn.schedule_runtime)
    extra = scn.profile.backward_tensors(scn, stage) if scn.profile.backward_tensors else ()
    back = tuple(Amount(PIPELINE, name, tensor_bytes(t, axes, scn.act_bytes, sympy.Integer(0))) for name, t in extra)
    if not pipelined_fsdp(scn):
        events, per_mb = _events(key, parts, int(scn.zero), scn.gathered, scn.precision.grad_bytes, axes, back)
        return events, others_amount(per_mb, k)
    if scn.schedule.name == "interleaved":  # several chunks per GPU: walked in torch's order
        # (zero bubble V: its whole step; its rounds are not interleaved 1F1B's)
        walk = scn.replace(microbatches=_torch_walk_microbatches(scn))
        return stage_pipelined_series(walk, stage), None
    from symmem.accounting.pipelined import with_stage_outputs
    from symmem.profiles import pipeline_stage_output

    sharded = stage_states(scn, stage_params(scn, stage)).gradients
    output = pipeline_stage_output(scn, stage.head)

    def events(in_flight: Fraction, accumulated: str) -> list[Event]:
        one, per_mb = _events(key, parts, int(scn.zero), scn.gathered, scn.precision.grad_bytes, axes, back,
                              accumulated, sharded)
        return with_stage_outputs(with_others(one, others_amount(per_mb, in_flight)), in_flight, output)

    if scn.schedule.name == "1f1b" and scn.m > scn.parallel.pp - stage.index:
        # 1F1B's steady state: a forward after each backward, so a backward runs with k in flight and every
        # gradient accumulated by the micro-batches before (torch/distributed/pipelining/schedules.py:1050-1120)
        return events(k, "whole"), None
    # every forward before the first backward (GPipe; 1F1B with M <= PP - i): the first backward with k in flight
    # and nothing accumulated yet but its own later parts', the next with k - 1 and every gradient accumulated
    first = events(k, "first")
    return first if k <= 1 else first[:-1] + events(k - 1, "whole"), None  # (one optimizer step: the second's)


def stage_chunks(scn: Scenario, stage: Stage) -> list[Stage]:
    """The model chunks one GPU of `stage` runs, each as a stage of its own (its layers; the embedding with the
    first, the head and MTP with the last): v even parts of its layers under interleaving, torchtitan's own chunk
    sizes where the stage has them (`Stage.chunk_layers`), else the stage itself."""
    v = scn.schedule.chunks if scn.schedule.name == "interleaved" else 1
    counts = stage.chunk_layers or (len(stage.layers) // v,) * v
    out, at = [], 0
    for c, n in enumerate(counts):
        out.append(dataclasses.replace(stage, layers=stage.layers[at:at + n], embedding=stage.embedding and c == 0,
                                       head=stage.head and c == v - 1, mtp=stage.mtp if c == v - 1 else 0,
                                       chunk_layers=()))
        at += n
    return out


def stage_pipelined_series(scn: Scenario, stage: Stage) -> list[Event]:
    """Every event of one GPU's step under FSDP2 and torch.distributed.pipelining with several chunks per GPU
    (`symmem.accounting.pipelined`), in torch's order (`Schedule.order`, runtime "torch")."""
    from symmem.accounting.pipelined import pipelined_series
    from symmem.profiles import pipeline_stage_output

    key = _activation_key(scn)
    _model, _conv, rules, policy, _parallel, _routing, act_bytes = key
    axes = scn.parallel.axis_sizes()
    chunks = stage_chunks(scn, stage)
    parts = [stage_parts(scn.model, ch, scn.convention, scn.flow_impl) for ch in chunks]
    sharded = [stage_states(scn, stage_params(scn, ch)).gradients for ch in chunks]
    order = scn.schedule.order(stage.index, scn.parallel.pp, scn.m, scn.schedule_runtime)
    extra = scn.profile.backward_tensors(scn, stage) if scn.profile.backward_tensors else ()
    back = tuple(Amount(PIPELINE, name, tensor_bytes(t, axes, scn.act_bytes, sympy.Integer(0))) for name, t in extra)
    outputs = [pipeline_stage_output(scn, ch.head) for ch in chunks]
    stash = None
    if scn.schedule.zero_bubble:  # what each input backward keeps for its weight backward (the first stage: none)
        from symmem.accounting.pipelined import weight_path_gradients

        stash = [None if ch.embedding else [weight_path_gradients(p, rules, axes, act_bytes) for p in ps]
                 for ch, ps in zip(chunks, parts, strict=True)]
    return pipelined_series(parts, rules, policy, axes, act_bytes, _tokens_per_expert(key, axes), order,
                            scn.gathered, scn.precision.grad_bytes, sharded, outputs, back, stash)


def _torch_walk_microbatches(scn: Scenario) -> int:
    """The micro-batches a walk of torch's step takes to reach every state the whole step does
    (`Schedule.walk_microbatches`; the stage's receive buffers, M of each, are counted from the scenario's M)."""
    return scn.schedule.walk_microbatches(scn.parallel.pp, scn.m)


def pipelined_fsdp(scn: Scenario) -> bool:
    """FSDP2 under torch.distributed.pipelining (the profile says so, PP > 1): every block gathered through the
    step, the gradients accumulated unsharded, the sharded ones made at the last micro-batch (`stage_events`)."""
    return scn.profile.pipelined_fsdp and scn.parallel.pp > 1


@lru_cache(maxsize=256)
def _events(key, parts, zero, weight_bytes, grad_bytes, axes, back, pipelined=None,
            sharded=0) -> tuple[tuple[Event, ...], sympy.Expr]:
    """`timeline.one_microbatch_events`, derived once for the stages of the same layers."""
    _model, _conv, rules, policy, _parallel, _routing, act_bytes = key
    return one_microbatch_events(parts, rules, policy, axes, act_bytes, _tokens_per_expert(key, axes), zero,
                                 weight_bytes, grad_bytes, back, pipelined, sharded)


def stage_step_series(scn: Scenario, stage: Stage) -> list[Event]:
    """Every event of one training step on one GPU of `stage`, in the schedule's time order (`Schedule.order`:
    GPipe, 1F1B and interleaved 1F1B as Megatron runs them, ZB-H1 as its authors do, DualPipe as DeepSeek's
    repository does). Under interleaving the stage's layers are its v model chunks, in order; under DualPipe the GPU
    holds two chunks, the stage and stage PP - 1 - i (run by the micro-batches going the other way). FSDP2 under
    torch.distributed.pipelining (`pipelined_fsdp`) is `stage_pipelined_series`, in torch's order."""
    if pipelined_fsdp(scn):
        return stage_pipelined_series(scn, stage)
    key = _activation_key(scn)
    _model, _conv, rules, policy, _parallel, _routing, act_bytes = key
    axes = scn.parallel.axis_sizes()
    chunks = [stage_parts(scn.model, ch, scn.convention, scn.flow_impl) for ch in stage_chunks(scn, stage)]
    if scn.schedule.name == "dualpipe":
        mirror = scn.stages[scn.parallel.pp - 1 - stage.index]
        chunks.append(stage_parts(scn.model, mirror, scn.convention, scn.flow_impl))
    order = scn.schedule.order(stage.index, scn.parallel.pp, scn.m, scn.schedule_runtime)
    extra = scn.profile.backward_tensors(scn, stage) if scn.profile.backward_tensors else ()
    back = tuple(Amount(PIPELINE, name, tensor_bytes(t, axes, scn.act_bytes, sympy.Integer(0))) for name, t in extra)
    return step_series(chunks, rules, policy, axes, act_bytes, _tokens_per_expert(key, axes), order, int(scn.zero),
                       scn.gathered, scn.precision.grad_bytes, back)


def stage_buffers(scn: Scenario, stage: Stage) -> list:
    """The implementation profile's framework buffers on one GPU of `stage` (named, sourced)."""
    return list(_stage_buffers(scn, stage))


@lru_cache(maxsize=256)
def _stage_buffers(scn: Scenario, stage: Stage) -> tuple:
    # (a stage's replay asks once per rank replayed, and its memory once more: each a walk of the stage's weights)
    if scn.profile.buffers is None:
        return ()
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    return tuple(scn.profile.buffers(scn, stage, parts, values(scn)))


QUANTIZED = "quantized weight copies and scaling state"  # the peak's static component of FP8/FP4 recipes


def walked_schedule(scn: Scenario) -> bool:
    """Whether a stage's peak is found by walking the schedule's real order rather than from the in-flight count:
    ZB-H1 (`zb1p`), whose stages after the first keep deferred weight-gradient operands from B to W, which a count
    of micro-batches between F and B leaves out (on the last of 4 stages of Llama-3-8B under megatron-te at s = 2048,
    2.9 GB against the walk's 11.5 GB); DualPipe, whose GPU runs two chunks, its stage and stage PP - 1 - i, not
    two copies of its stage."""
    return scn.schedule.name in WALKED and scn.parallel.pp > 1


# ZB-H1's per-stage order repeats one F, B, W step from the (PP + 1)-th micro-batch on, and DualPipe's its steady
# phase from 2·PP on, so every state of what is held and what waits for its W occurs within 2·PP + 2 micro-batches
# (even, as DualPipe needs): the walk stops there (tests/test_peak.py checks that more micro-batches change no peak)
def _walk_microbatches(scn: Scenario) -> int:
    return min(scn.m, 2 * scn.parallel.pp + 2)


def stage_peak_of(scn: Scenario, stage: Stage, states: StateBytes, k: Fraction) -> StagePeak:
    static = {"weights": states.weights, "gradients": states.gradients, "optimizer states": states.optimizer}
    if pipelined_fsdp(scn):  # made only at the last micro-batch: the optimizer step's event holds them
        del static["gradients"]
    if states.quantized:
        static[QUANTIZED] = states.quantized
    static.update({buf.name: buf.nbytes for buf in stage_buffers(scn, stage)})
    if walked_schedule(scn):
        walk = scn.replace(microbatches=_walk_microbatches(scn))
        return stage_peak(stage_step_series(walk, stage), static, values(scn), k)
    events, others = _timeline_events(scn, stage)
    return stage_peak(events, static, values(scn), k, others)


def memory(scn: Scenario) -> list[StageMemory]:
    """`stage_memory` of every stage of the scenario, in stage order (what `symmem memory` prints)."""
    return [stage_memory(scn, st) for st in scn.stages]


def peak(stages: list[StageMemory]) -> StageMemory:
    """The stage with the most memory per GPU (by the allocated total, not by parameter count)."""
    return max(stages, key=lambda m: (m.allocated, -m.stage.index))
