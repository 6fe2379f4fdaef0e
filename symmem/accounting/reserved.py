"""Reserved memory, derived: one GPU's allocations and frees over the measured window, in the order the framework
makes them, replayed through PyTorch's caching allocator (`symmem.accounting.allocator`).

`torch.cuda.max_memory_reserved()` is what a job fails on: the segments the allocator holds, which the freed blocks
inside them do not give back. It depends on the order and the sizes of every allocation, so this module writes the
training step of one GPU of a stage (the `megatron-te` profile: Megatron-Core 23e00ed0 with TransformerEngine,
distributed optimizer) as a sequence of individual mallocs and frees:

1. **Model build**: every parameter in BF16, one tensor per Megatron module weight, in module order (embedding,
   the decoder layers, the final norm and the output layer): the weights of ops one module fuses (tag
   `module:NAME`, e.g. linear_kv_down_proj) are one tensor, each local expert's its own (TE's grouped linear).
2. **DDP buffers**: per buffer (dense parameters, then expert parameters; MLM
   megatron/core/distributed/distributed_data_parallel.py:196-284), the BF16 parameter buffer and the FP32 gradient
   buffer, whole (`torch.zeros(numel)`, param_and_grad_buffer.py:700-714, numel as `parallel.ddp_buckets.layout`
   lays it out: each parameter's start padded to 64 elements, each bucket's end to lcm(DP, 128), buckets under
   --overlap-grad-reduce on the first stage); then each parameter is copied into its slice of the buffer and its own
   tensor freed, in reverse order (param_and_grad_buffer.py:719-736).
3. **Distributed optimizer**: the FP32 main copy of each parameter's piece of this rank's shard of each bucket
   (`shard_model_param.clone().float()`, distrib_optimizer.py:379), in buffer order.
4. **First step**: TransformerEngine's cuBLAS workspaces and the RoPE table at the first forward; every activation
   storage of every layer copy and micro-batch as the timeline has it (`timeline.part_timeline`: a storage is
   allocated at the first op it is alive at and freed after the last one; saved storages live until their layer's
   backward releases them), micro-batches in 1F1B order (warm-up forwards, then one forward and one backward, at
   most `REPLAYED_PAIRS` of them, then the cool-down backwards); TE's dummy weight-gradient buffers, one tensor
   per weight shape made at the first backward GEMM of that shape (`get_dummy_wgrad` caches them by shape, TE
   pytorch/module/base.py:64-92); the pipeline's gradient buffers through each micro-batch's backward.
5. **Optimizer step**: Adam's FP32 `exp_avg` and `exp_avg_sq` of each main-parameter piece, created by the first
   `step()` (TE FusedAdam, MLM megatron/core/optimizer/__init__.py:11), after the backward.
6. **The next iteration**, with the moments alive (the measured window logs several iterations and its peak is the
   largest over them; a third iteration changes no figure of the eight measured stages).

What it leaves out, named: NCCL's buffers (outside PyTorch's allocator, and outside the measurement); the gradient
reduce-scatter and parameter all-gather (in place in the DDP buffers); allocations of a few KiB (RNG states, loss
scalars, int64 bookkeeping); the order of allocations *inside* one op (each op's outputs and workspaces are
allocated before its inputs are freed, as the timeline has them alive together).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from functools import lru_cache

import sympy

from symmem.accounting import timeline as T
from symmem.accounting.allocator import fast_allocator, request
from symmem.accounting.evaluate import ceil_int, evaluate
from symmem.graph import local_size

ITERATIONS = 2  # the first, then one with Adam's moments alive (a third changes no figure of the eight measured stages)


@dataclass(frozen=True)
class Reserved:
    """The replay's figures for one GPU (bytes): peaks of allocated and reserved, and where reserved peaked."""

    peak_allocated: int  # the allocator's own count (block sizes: requests rounded up)
    peak_reserved: int
    segments: int
    reserved_at: str  # the phase at which reserved reached its peak


def _bytes(expr, values) -> int:
    return ceil_int(evaluate(expr, values))


def _parameters(scn, parts, axes, values) -> tuple[list[int], list[int]]:
    """Elements of each parameter tensor of one GPU, in module order: (dense, expert). The weights of ops that one
    Megatron module fuses (tag `module:NAME`, e.g. linear_kv_down_proj, an expert's linear_fc1) are one tensor;
    each local expert's weight is a tensor of its own (TE GroupedLinear's weight0, weight1, ...)."""
    from symmem.accounting.params import weight_uses

    dense: list[int] = []
    expert: list[int] = []
    all_uses = weight_uses(parts)
    for part in parts:
        module = {op.name: next((t for t in op.tags if t.startswith("module:")), op.name) for op in part.flow.ops}
        tensors: dict[str, list] = {}  # module -> [elements per copy, expert?, local experts]
        for use in (u for u in all_uses if u.part == part.name):
            n = _bytes(local_size(use.weight.dims, axes), values)
            is_expert = use.weight.group == "routed_expert"
            local = _bytes(local_size(use.weight.dims[:1], axes), values) if is_expert else 1
            entry = tensors.setdefault(module.get(use.op, use.op) + "/" + use.weight.group, [0, is_expert, local])
            entry[0] += n
        for _ in range(part.count):
            for n, is_expert, local in tensors.values():
                if is_expert:
                    expert += [n // local] * local
                else:
                    dense.append(n)
    return dense, expert


@dataclass(frozen=True)
class _Phases:
    """One iteration of one GPU of a stage as `CachingAllocator.run` takes it, by phase: one micro-batch's forward
    and backward ops (`first_backward`: micro-batch 0's of the first iteration, which also makes TE's dummy weight
    gradients at their first use). Micro-batch j runs them with its storage ids moved on by (j mod slots) x ids: at
    most ceil(k) micro-batches are alive at once under 1F1B, so ceil(k) + 1 slots never reuse a live id, and the
    ops are built once whatever M is (an M-long event list was 1.2 GB at M = 1,024)."""

    warm: int  # forwards before the first backward: ceil(k) - 1
    slots: int
    ops: _MicroBatchOps

    def run(self, alloc, m: int, first: bool) -> None:
        """Replay one iteration of `m` micro-batches in 1F1B order: `warm` forwards, then a forward and a backward
        per steady pair, then the cool-down backwards."""
        o, n = self.ops, self.slots
        ids, f, b = o.ids, o.forward, o.backward
        go = alloc.run_packed
        for j in range(self.warm):
            go(f, (j % n) * ids)
        for j in range(m):
            if j + self.warm < m:
                go(f, ((j + self.warm) % n) * ids)
            if first and j == 0:
                for piece in o.first_backward:  # packed, or ops (TE's dummy weight gradients' keys: no storage ids)
                    (go if isinstance(piece, array) else alloc.run)(piece, 0)
            else:
                go(b, (j % n) * ids)


@dataclass(frozen=True)
class _MicroBatchOps:
    """One micro-batch's forward and backward allocations on one GPU of a stage, storage ids from 0 (`_ops`), the
    steady phases packed for `run_packed` (`allocator.pack`); `first_backward` the first iteration's first backward,
    which also makes TE's dummy weight gradients (their keys not storage ids), as ops."""

    ids: int  # storage ids one micro-batch uses
    forward: object
    backward: object
    first_backward: tuple  # pieces: packed arrays, and tuples of ops where a copy makes TE's dummy gradients


@lru_cache(maxsize=64)
def _iteration_phases(scn, stage) -> _Phases:
    """One iteration of one GPU of `stage` by phase (`_Phases`): every activation storage of every layer copy of
    a micro-batch's forward and backward from the timeline; the same for every rank, micro-batch and iteration
    (written once), and for every stage of the same content (`_micro_batch_ops`): the stages of a pipeline differ
    in their warm-up, most not in their layers."""
    from symmem.accounting.analysis import stage_buffers
    from symmem.model import stage_parts

    k = scn.schedule.in_flight(stage.index, scn.parallel.pp, scn.m, scn.schedule_runtime)
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    dummy = any(b.name.startswith("TE dummy") for b in stage_buffers(scn, stage))
    ops = _micro_batch_ops(scn, parts, stage.head, stage.embedding, dummy, stage)
    return _Phases(math.ceil(k) - 1, math.ceil(k) + 1, ops)


_OPS: dict = {}  # (scenario, a stage's content) -> _MicroBatchOps


def _micro_batch_ops(scn, parts: tuple, head: bool, embedding: bool, dummy: bool, stage) -> _MicroBatchOps:
    """`_MicroBatchOps` of a stage of `parts` (compared without their layer indices) with or without the head and
    the embedding (which decide the pipeline's kept gradients) and TE's dummy weight gradients: cached on those,
    not on the stage (`stage` is read only for what they decide)."""
    from symmem._cache import bounded

    return bounded(_OPS, (scn, parts, head, embedding, dummy), 64, lambda: _build_ops(scn, parts, dummy, stage))


def _build_ops(scn, parts: tuple, dummy: bool, stage) -> _MicroBatchOps:
    from symmem.accounting.activations import tensor_bytes
    from symmem.accounting.analysis import _activation_key, _tokens_per_expert, values
    from symmem.profiles import te_weight_shape_by_op

    vals = values(scn)
    par = scn.parallel
    axes = par.axis_sizes()
    rules, policy, act_bytes = scn.rules, scn.policy, scn.act_bytes
    e_tok = _tokens_per_expert(_activation_key(scn), axes)
    timelines = [T.part_timeline(pt.flow, rules, policy, axes, act_bytes, e_tok) for pt in parts]
    # TE's dummy weight gradients: one tensor per weight shape, made at the first backward GEMM of that shape
    # (`get_dummy_wgrad` caches them by shape: TE pytorch/module/base.py:64-92)
    wgrad_shape = te_weight_shape_by_op(parts, axes, vals) if dummy else {}
    sizes: dict = {}

    def size(a) -> int:
        """The request of a storage (`allocator.request`: checked, rounded), evaluated once per expression."""
        if a.nbytes not in sizes:
            sizes[a.nbytes] = request(a.what, _bytes(a.nbytes, vals))
        return sizes[a.nbytes]

    # Each part's ops for one copy of its layer, written once with the layer's own storage numbers (0, 1, ...): a
    # copy's are the same moved on by the part's storages (every copy of a layer allocates alike; writing each
    # copy's from the timeline was most of building a stage's ops). Storage ids: the parts' copies one after the
    # other, then the pipeline's gradient buffers.
    local: list[dict] = []  # per part: storage name -> its number within one copy

    def number(pi: int, name) -> int:
        return local[pi].setdefault(name, len(local[pi]))

    def step(out: list, pi: int, live: dict, now: dict) -> None:
        """From one op's event to the next: what the next op does not hold is freed first (an event's alive set
        already holds everything that coexists while its op runs: inputs, outputs, workspace), then what it adds
        is allocated. Ops as (storage number, request), 0 freeing."""
        for name in live:
            if name not in now:
                out.append((number(pi, name), 0))
        for name, a in now.items():
            if name not in live:
                out.append((number(pi, name), size(a)))

    extra = scn.profile.backward_tensors(scn, stage) if scn.profile.backward_tensors else ()
    pipeline = [(name, request(name, _bytes(tensor_bytes(t, axes, act_bytes, sympy.Integer(0)), vals)))
                for name, t in extra]
    forward_ops: list[list] = []  # per part: one copy's forward ops
    backward_ops: list[list] = []  # per part: one copy's backward, each op's events preceded by ("wgrad", op)
    for pi, tl in enumerate(timelines):
        local.append({})
        fw = [{a.what: a for a in ev.alive} for ev in tl.events if ev.phase == "forward"]
        out: list = []
        live: dict = {}
        for now in fw:
            step(out, pi, live, now)
            live = now
        out += [(number(pi, name), 0) for name, a in live.items() if a.component != T.SAVED_CURRENT]
        forward_ops.append(out)  # (what the layer does not keep dies with its forward)
        kept = {n: a for ev in fw for n, a in ev.items() if a.component == T.SAVED_CURRENT}
        out = []
        live = kept  # kept since the forward
        for ev in (ev for ev in tl.events if ev.phase == "backward"):
            now = {a.what: a for a in ev.alive}
            out.append(("wgrad", ev.op))
            step(out, pi, live, now)
            live = now
        out += [(number(pi, name), 0) for name in live]
        backward_ops.append(out)
    offsets, n = [], 0
    for pi, pt in enumerate(parts):
        offsets.append(n)
        n += len(local[pi]) * pt.count
    pipe_ids = [n + i for i in range(len(pipeline))]
    n += len(pipeline)

    def one_copy(ops: list) -> tuple[array, array]:
        """A part's ops for one copy as (keys, sizes) arrays, the dummy weight gradients' marks left out."""
        return (array("q", [k for k, _ in ops if k != "wgrad"]),
                array("q", [nbytes for k, nbytes in ops if k != "wgrad"]))

    def base(pi: int, copy: int) -> int:
        return offsets[pi] + copy * len(local[pi])

    forward_one = [one_copy(ops) for ops in forward_ops]
    backward_one = [one_copy(ops) for ops in backward_ops]
    pipe = array("q", pipe_ids)
    pipe_in = (pipe, array("q", [nbytes for _, nbytes in pipeline]), 0)
    pipe_out = (pipe, array("q", bytes(8 * len(pipe))), 0)
    fwd = [(*forward_one[pi], base(pi, copy)) for pi, pt in enumerate(parts) for copy in range(pt.count)]
    bwd = [pipe_in, *((*backward_one[pi], base(pi, copy)) for pi in range(len(parts) - 1, -1, -1)
                      for copy in range(parts[pi].count - 1, -1, -1)), pipe_out]
    # the first iteration's first backward also makes TE's dummy weight gradients, each at the first backward GEMM
    # of its shape (keys ("wgrad", shape): no storage ids, run as ops); a copy that makes none runs packed as the
    # steady backward does
    first: list = []
    chunks = [pipe_in]
    made: set = set()
    for pi in range(len(parts) - 1, -1, -1):
        shapes = {wgrad_shape[(parts[pi].name, x)] for k, x in backward_ops[pi]
                  if k == "wgrad" and (parts[pi].name, x) in wgrad_shape}
        for copy in range(parts[pi].count - 1, -1, -1):
            if shapes <= made:
                chunks.append((*backward_one[pi], base(pi, copy)))
                continue
            first.append(_packed(chunks))
            chunks = []
            ops = []
            for k, x in backward_ops[pi]:
                if k == "wgrad":
                    shape = wgrad_shape.get((parts[pi].name, x))
                    if shape is not None and shape not in made:
                        made.add(shape)
                        ops.append((("wgrad", shape), request(("wgrad", shape), 2 * shape[0] * shape[1])))
                else:
                    ops.append((base(pi, copy) + k, x))
            first.append(tuple(ops))
    first.append(_packed([*chunks, pipe_out]))
    if sum(1 if nbytes else -1 for _, sizes, _ in fwd + bwd for nbytes in sizes):  # a bug of the event builder
        raise AssertionError("a micro-batch leaves an allocation alive: a later one would reuse its key")
    return _MicroBatchOps(n, _packed(fwd), _packed(bwd), tuple(first))


def _packed(chunks: list[tuple]) -> array:
    """(keys, sizes, how far) chunks as `allocator.pack` packs ops: one int64 array of key, size pairs, each
    chunk's keys moved on by its how far (array slices: no Python object per op)."""
    out = array("q", bytes(16 * sum(len(keys) for keys, _, _ in chunks)))
    at = 0
    for keys, sizes, by in chunks:
        end = at + 2 * len(keys)
        out[at:end:2] = array("q", map(by.__add__, keys)) if by else keys
        out[at + 1:end:2] = sizes
        at = end
    return out


def replay_stage(scn, stage, rank: int = 0) -> Reserved:
    """Replay one GPU of `stage` through the caching allocator: the `rank`-th GPU of the stage (0 to
    TP·CP·DP - 1), which decides its shards of the DDP buffers: Megatron orders a stage's ranks TP fastest, then CP,
    then DP (parallel_state, order tp-cp-ep-dp-pp), so its index in the dense optimizer's DP×CP group is rank // TP;
    the expert layers regroup them ETP fastest, then EP, then EDP: its expert shard index is rank // (ETP·EP).
    Ranks whose shards split the parameters alike replay alike, once."""
    from symmem.parallel.ddp_buckets import bucket_size_for, layout, shard_pieces

    par = scn.parallel
    dense, expert = _stage_parameters(scn, stage)
    size = bucket_size_for(scn, stage.index)
    shards = []
    for params, shard, index in ((dense, par.dense_shard, rank // par.tp),
                                 (expert, par.expert_dp, rank // (par.etp * par.ep))):
        if not params:
            shards.append((0, ()))
            continue
        lay = layout(params, shard, size)
        shards.append((lay.numel, tuple(shard_pieces(lay, shard, index % shard))))
    return _replay(scn, stage, tuple(shards))


@lru_cache(maxsize=256)
def _stage_parameters(scn, stage) -> tuple[list[int], list[int]]:
    from symmem.accounting.analysis import values
    from symmem.model import stage_parts

    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    return _parameters(scn, parts, scn.parallel.axis_sizes(), values(scn))


# The steady 1F1B pairs replayed: at most this many after the warm-up forwards, then the cool-down. The allocator's
# state is not periodic (its free-block layout never repeats, keys shifted by the micro-batch, over 400 pairs of
# llama-3-70b's first stage at PP 16), and a segment can come late (llama-3-70b TP 8 PP 8, stage 6: 28 MiB between
# pair 64 and 249), so no count is proven enough; in a survey of six models at M = 256 (benchmarks/
# replay_truncation.py) 32 pairs gave the whole step's figure at 48 of 52 stages, and under it by at most 28 MiB
# (0.25 %) at the other four. Below it the replay is the whole step; above it `replayed_microbatches` says so.
REPLAYED_PAIRS = 32


def replayed_microbatches(scn, stage) -> int:
    """The micro-batches the replay of `stage` walks: all M, or the warm-up and `REPLAYED_PAIRS` steady pairs."""
    k = scn.schedule.in_flight(stage.index, scn.parallel.pp, scn.m, scn.schedule_runtime)
    return min(scn.m, math.ceil(k) - 1 + REPLAYED_PAIRS)


@lru_cache(maxsize=256)
def _replay(scn, stage, shards: tuple) -> Reserved:
    """`replay_stage` of the GPU whose DDP buffers (dense, expert) have `numel` elements each, of which its shards
    hold `pieces` of each parameter, in buffer order: ((numel, pieces), (numel, pieces))."""
    from symmem.accounting.analysis import stage_buffers

    alloc = fast_allocator()
    peak_phase = ["model build"]

    def track(phase: str):
        before = alloc.peak_reserved

        def done():
            if alloc.peak_reserved > before:
                peak_phase[0] = phase
        return done

    p = scn.precision
    # 1-3: model build, DDP buffers, distributed optimizer
    done = track("model build and DDP buffers")
    dense, expert = _stage_parameters(scn, stage)
    # (each phase's allocations made in one `run`: a stage has thousands of parameters)
    alloc.run([(("param", group, i), request(group, n * p.weight_bytes))
               for group, params in (("dense", dense), ("expert", expert)) for i, n in enumerate(params)])
    pieces: list[int] = []
    for group, params, (numel, shard_pieces) in zip(("dense", "expert"), (dense, expert), shards, strict=True):
        if not params:
            continue
        alloc.run([(key, request(key, n)) for key, n in ((("param buffer", group), numel * p.weight_bytes),
                                                         (("grad buffer", group), numel * p.grad_bytes))])
        alloc.run([(("param", group, i), 0) for i in range(len(params) - 1, -1, -1)])
        pieces += shard_pieces
    done()
    done = track("optimizer's main parameters")
    alloc.run([(("main", i), request("main", n * p.master_bytes)) for i, n in enumerate(pieces)])
    done()
    # 4: the first step
    done = track("first step (forward and backward)")
    buffers = stage_buffers(scn, stage)
    for b in buffers:
        if not b.name.startswith(("TE dummy", "DDP")):  # workspaces, RoPE table: at the first forward
            alloc.run([(("buffer", b.name), request(("buffer", b.name), b.nbytes))])
    phases = _iteration_phases(scn, stage)
    m = replayed_microbatches(scn, stage)
    phases.run(alloc, m, first=True)
    done()
    # 5: the optimizer step's Adam moments, then the later iterations (the moments alive through them)
    done = track("optimizer step (Adam moments)")
    half = p.optimizer_bytes // 2
    alloc.run([op for i, n in enumerate(pieces)
               for op in ((("exp_avg", i), request("exp_avg", n * half)),
                          (("exp_avg_sq", i), request("exp_avg_sq", n * half)))])
    done()
    for _ in range(1, ITERATIONS):
        done = track("later iterations")
        phases.run(alloc, m, first=False)
        done()
    return Reserved(alloc.peak_allocated, alloc.peak_reserved, alloc.segments, peak_phase[0])


# allocator calls one stage's replays may take: about 2 us each on this project's machines, so about a minute. The
# micro-batches replayed are at most the warm-up and REPLAYED_PAIRS, so only a stage of very many layers at a deep
# pipeline comes near it; such a scenario is refused, not run
REPLAY_BUDGET = 30_000_000


def _ranks(scn) -> list[int]:
    """The ranks of a stage replayed (their shards of the DDP buffers differ): the first of the DP×CP group (the
    buffer's start: the output layer, the buffer being filled in reverse), the middle one and the last (the
    embedding)."""
    par = scn.parallel
    n = par.dense_shard
    return sorted({j * par.tp for j in (0, n // 2, n - 1)})


def replay_calls(scn, stage) -> int:
    """About how many allocator calls replaying `stage` makes: a malloc and a free per op event of every layer
    copy, per micro-batch, iteration and replayed rank (counted from the timelines, before building any event)."""
    from symmem.accounting.analysis import _activation_key, _tokens_per_expert
    from symmem.model import stage_parts

    axes = scn.parallel.axis_sizes()
    e_tok = _tokens_per_expert(_activation_key(scn), axes)
    events = sum(p.count * len(T.part_timeline(p.flow, scn.rules, scn.policy, axes, scn.act_bytes, e_tok).events)
                 for p in stage_parts(scn.model, stage, scn.convention, scn.flow_impl))
    return 2 * events * replayed_microbatches(scn, stage) * ITERATIONS * len(_ranks(scn))


def replay_refusal(scn, stage) -> str | None:
    """Why `stage` is not replayed, or None: its profile says no allocation order, an FP8/FP4 recipe, or the replay
    is over budget."""
    if not scn.profile.allocation_order:
        return f"profile {scn.profile.name} does not say the order its framework allocates in"
    if scn.profile.allocation_order == "fsdp2":
        from symmem.accounting.fsdp2_reserved import refusal

        return refusal(scn)
    if int(scn.zero) > 1:
        return (f"ZeRO {int(scn.zero)}: the replay writes Megatron-LM's DDP and distributed optimizer, ZeRO 1 (the "
                "whole BF16 parameters and FP32 gradient buffer on every rank); ZeRO 2 and 3 allocate otherwise "
                "(Megatron-FSDP's sharded buffers), which it does not model")
    if scn.schedule.name != "1f1b" and scn.parallel.pp > 1:  # (at PP 1 every schedule is Megatron's no-pipelining)
        return (f"the allocation order is Megatron-LM's 1F1B; schedule {scn.schedule.label} allocates in another "
                "order")
    if scn.precision.low_precision is not None:
        return (f"precision {scn.precision.name}: the replay does not allocate the recipe's quantized copies and "
                "scale tensors")
    calls = replay_calls(scn, stage)
    if calls > REPLAY_BUDGET:
        return (f"the replay would take about {calls:,} allocator calls (op events x micro-batches replayed x "
                f"iterations x ranks), over the budget of {REPLAY_BUDGET:,}")
    return None


def stage_reserved(scn, stage) -> int | None:
    """What PyTorch's caching allocator reserves at most on one GPU of `stage` over the measured window
    (`torch.cuda.max_memory_reserved()`), replayed from the order the framework allocates in; None where
    `replay_refusal` gives a reason. The stage's ranks differ in their shards of the DDP buffers: the largest over
    three of them (`_ranks`)."""
    if replay_refusal(scn, stage) is not None:
        return None
    if scn.profile.allocation_order == "fsdp2":
        from symmem.accounting.fsdp2_reserved import replay

        return replay(scn).peak_reserved
    return max(replay_stage(scn, stage, r).peak_reserved for r in _ranks(scn))
