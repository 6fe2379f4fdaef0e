"""Reserved memory of one GPU under torchtitan + FSDP2, replayed: the step's allocations and frees in the order
FSDP2 and autograd make them, through PyTorch's caching allocator with expandable segments
(`symmem.accounting.allocator.ExpandableAllocator`; torchtitan launches with
`PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"`, run_llama_train.sh at torchtitan 9dec370).

What torchtitan logs as "memory" is `torch.cuda.memory_stats()["reserved_bytes.all.peak"]` (torchtitan/metrics.py
at 9dec370, `get_peak_stats`), reset after each logged step: a steady-state step's reserved peak, which, segments
never being unmapped without `empty_cache`, is the most the allocator ever mapped. The sequence, per step (FSDP2 in
torch/distributed/fsdp/_fully_shard/, line numbers of torch 2.13, whose logic here is the 2024 one unless said):

* **Model states**: each parameter's FP32 shard, padded to ceil(d0/N) rows (`symmem.accounting.fsdp`), made at
  the model's build; AdamW's two FP32 moments per parameter (its local rows) at the first `step()`.
* **zero_grad** first (train.py:266 at 9dec370): the sharded gradients of the last step are freed.
* **Unshard of a group** (the root: embedding, final norm and output; then each block): on the all-gather copy-in
  stream the BF16 cast of the shard (freed at once, _fsdp_collectives.py:419) and the flat BF16 all-gather output
  of the padded group (:351); on the compute stream each parameter's BF16 unsharded storage (`alloc_storage`,
  _fsdp_param.py:823, :1066) for the copy-out. In the forward the flat output is freed at the *next* group's
  copy-out (_fsdp_param_group.py:429-432, :480-486), the last at the root's post-forward (_fsdp_state.py:333-342);
  in the backward right after its own (:487-489).
* **Reshard**: after its forward, a block's unsharded storages are freed (`resize_(0)`, _fsdp_param.py:827-831),
  except the last block's (torchtitan's `reshard_after_forward = int(layer_id) < len(model.layers) - 1`,
  parallelisms/parallelize_llama.py:333 at 9dec370) and the root's (FSDP2's `_lazy_init` keeps the root unsharded
  after forward); in the backward after its gradients are taken (:606-633).
* **Activations**: every storage of every layer as the dataflow's timeline has it (`timeline.part_timeline`: a
  storage allocated at the first op it is alive at, freed after the last; saved ones kept to their backward),
  under the scenario's recomputation (per-layer checkpointing: each block under its own, full or none); in the
  backward each weight's BF16 gradient is made at its op's backward and kept to its group's reduce-scatter.
* **Backward prefetch**: at a block's pre-backward the previous block's all-gather is issued (`_backward_prefetch`).
* **Reduce-scatter** at a group's post-backward (_fsdp_collectives.py:522-775): the previous group's FP32 input is
  released (one kept, the 2024 `reduce_scatter_state`), the FP32 input of the padded group allocated on the compute
  stream (:583), the BF16 gradients freed after the copy-in (:605), the FP32 shard output allocated on the
  reduce-scatter stream (:611), kept as the sharded gradients. The root's runs after the whole backward
  (`_root_post_backward_final_callback`: its forward input, token ids, needs no gradient), with its BF16
  gradients alive until then.
* **Optimizer step**: foreach AdamW (torchtitan 9dec370's default) allocates `torch._foreach_sqrt(exp_avg_sqs)`,
  one FP32 tensor per parameter's local shard, freed at the step's end (torch/optim/adam.py `_multi_tensor_adam`).

Left out, named: NCCL's own buffers (cudaMalloc'd outside PyTorch's allocator, so outside the figure); token ids,
the loss and other tensors of a few KiB; the order of allocations inside one op (its outputs and workspaces are
allocated before its inputs are freed, as the timeline has them alive together).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from symmem.accounting import timeline as T
from symmem.accounting.allocator import ExpandableAllocator
from symmem.accounting.evaluate import ceil_int, evaluate
from symmem.errors import SymmemError

ITERATIONS = 2  # the first (moments made), then a steady step: a third and a fourth change no figure of the
# published cases (tests/test_fsdp2_reserved.py checks a third)
COPY_IN, RS, DEFAULT = "all-gather copy-in", "reduce-scatter", "default"


@dataclass(frozen=True)
class Fsdp2Reserved:
    """The replay's figures for one GPU (bytes): peaks of allocated and reserved, the reserved of each stream at the
    end, and the moment at which reserved last grew (the event of the step that mapped its last pages)."""

    peak_allocated: int
    peak_reserved: int
    by_stream: dict
    reserved_at: str


@dataclass(frozen=True)
class _Group:
    """One FSDP2 unit: its parameters' (name, padded shard elements, unsharded elements, local shard elements), and
    the names of those gathered in float8 (FSDP2's float8 all-gather: 1 byte an element, the others at the param
    dtype's)."""

    name: str
    params: tuple[tuple[str, int, int, int], ...]
    float8: frozenset = frozenset()

    def padded(self, n: int) -> int:
        return sum(p[1] for p in self.params) * n

    def gathered_bytes(self, name: str, elements: int, param_bytes: int) -> int:
        return elements * (1 if name in self.float8 else param_bytes)

    def padded_bytes(self, n: int, param_bytes: int) -> int:
        """Every rank's padded shards in the bytes they are gathered in: the all-gather's output (torch 2.13
        _fsdp_collectives.py `foreach_all_gather`: one flat buffer, of bytes when the dtypes are mixed)."""
        return sum(self.gathered_bytes(p[0], p[1], param_bytes) for p in self.params) * n


def _groups(scn, parts, vals, n: int) -> tuple[_Group, list[_Group], dict]:
    """The root group (every parameter outside the decoder layers), the blocks' groups in layer order, and each
    (part, copy, op) -> the unsharded BF16 gradient bytes its backward makes."""
    from symmem.accounting.fsdp import fsdp_params, gathered_in_float8
    from symmem.profiles import fuses_qkv

    fused = fuses_qkv(scn)
    params = fsdp_params(parts, vals, fuse_qkv=fused)
    f8 = gathered_in_float8(scn, parts, params)
    # each layer part's copies are global layers (DeepSeek-V3: a dense part, then MoE parts)
    layer_of = {p.name: p.layer_ids for p in parts if p.is_layers}
    blocks: dict[int, list] = {}
    root: list = []
    grads: dict = {}
    for p in params:
        part, rest = p.name.split("[", 1)
        copy, op = rest.split("].", 1)
        entry = (p.name, p.padded(n), p.d0 * p.rest, p.rows(0, n) * p.rest)
        if part in layer_of:
            blocks.setdefault(layer_of[part][int(copy)], []).append(entry)
        else:
            root.append(entry)
        # the gradient appears at the op's backward; a fused wqkv's at q_proj's, the first of the three
        ops = ("self_attn.q_proj",) if op == "self_attn.wqkv" else (op,)
        for o in ops:
            grads.setdefault((part, int(copy), o), []).append((p.name, 2 * p.d0 * p.rest))
    if sorted(blocks) != list(range(len(blocks))):
        raise AssertionError(f"the stage's layers are not 0..{len(blocks) - 1}: {sorted(blocks)}")
    return (_Group("root", tuple(root), f8), [_Group(f"block {i}", tuple(blocks[i]), f8) for i in sorted(blocks)],
            grads)


@dataclass
class _Units:
    """The FSDP2 units outside the decoder blocks and how a torchtitan version steps."""

    root: _Group | None  # 9dec370: one root unit of every parameter outside the blocks
    embedding: _Group | None  # 0.3.0: the embedding's unit
    head: _Group | None  # 0.3.0: [norm, lm_head]
    of_part: dict  # part name -> its unit gathered before the part's forward (0.3.0)
    resharded_after_forward: frozenset  # part names whose unit reshards after its forward
    in_final_callback: tuple  # units whose post-backward runs in the final callback (their input: token ids)
    head_first_op: str  # the head's op whose backward the logits' gradient reaches first after the loss
    zero_grad_frees: bool  # zero_grad(set_to_none=True): the sharded gradients freed before each step
    fused_adamw: bool

    def all(self, blocks: list) -> list:
        return [u for u in (self.root, self.embedding, self.head) if u is not None] + list(blocks)


def _outer_units(scn, root: _Group) -> _Units:
    """9dec370 (`torchtitan-2412`): `fully_shard(model)` holds the embedding, norm and output, never resharded after
    forward, reduce-scattered in the final callback; `zero_grad()` sets gradients to None; foreach AdamW.
    0.3.0 (`torchtitan`): `apply_fsdp_to_decoder` (torchtitan/distributed/fsdp.py:194-207) shards the embedding as a
    unit (resharded after forward; its input is token ids, so reduce-scattered in the final callback) and [norm,
    lm_head] as one (not resharded after forward), every block resharded (`get_fsdp_reshard_after_forward_policy`
    "default": True without PP, fsdp.py:66-74), the root holding nothing; `zero_grad(set_to_none=False)`
    (trainer.py:874, `disable_cuda_graphs` off) keeps the gradients, later reduce-scatters adding into them; fused
    AdamW (components/optimizer/optimizer.py:109-111), its step scalars on the device."""
    from symmem.profiles import TORCHTITAN_COMMITS, TORCHTITAN_E7C0CAE

    if scn.profile.name in TORCHTITAN_COMMITS:
        # e7c0cae: the same units (torchtitan/models/llama3/parallelize_llama.py `apply_fsdp` there), `zero_grad()`
        # to None, and fused AdamW, its default (config_manager.py:139, `optimizer.implementation = "fused"`)
        return _Units(root, None, None, {}, frozenset(), (), "lm_head", True,
                      scn.profile.name == TORCHTITAN_E7C0CAE)
    names = {p[0]: p for p in root.params}
    emb = _Group("embedding unit", tuple(p for k, p in names.items() if k.startswith("embedding[")))
    head = _Group("[norm, lm_head] unit", tuple(p for k, p in names.items() if k.startswith("head[")))
    return _Units(None, emb, head, {"embedding": emb, "head": head}, frozenset({"embedding"}), (emb,), "lm_head",
                  False, True)


FLOAT8_LEFT_OUT = ("Float8 (compiled): the float8 copies of each product's input and weight, alive while the "
                   "product runs, are not allocated")


def refusal(scn) -> str | None:
    """Why a scenario's FSDP2 step is not replayed, or None."""
    if scn.profile.allocation_order != "fsdp2":
        return (f"profile {scn.profile.name} does not allocate as torchtitan does; use --profile torchtitan-2412, "
                "torchtitan-2506 or torchtitan")
    if len(scn.stages) != 1 or scn.m != 1:
        return ("the replay writes torchtitan's step without pipelining or gradient accumulation; this scenario has "
                f"{len(scn.stages)} stage(s) and M = {scn.m} micro-batches per step (set --pp 1 and the global batch "
                "to local batch x DP)")
    lp = scn.precision.low_precision
    if lp is not None and not scn.compiled:
        return f"precision {scn.precision.name}: the replay does not allocate Float8's copies and scales"
    # (compiled, tensorwise: the saved set is the partitioner's, with each module's amax and scale; the casts' float8
    # copies, alive while their product runs, are left out, `FLOAT8_LEFT_OUT`; under the float8 all-gather each Float8
    # linear's weight is gathered at 1 byte an element, its FP32 scale, 4 bytes, left out)
    if scn.parallel.tp > 1:
        return (f"TP {scn.parallel.tp}: the replay writes FSDP's step alone, not TP's collectives and their buffers "
                "(the saved tensors and states under TP are modelled; their allocation order is not)")
    return None


@lru_cache(maxsize=64)
def replay(scn) -> Fsdp2Reserved:
    """Replay one GPU's steps (rank 0, the fullest shards) of a torchtitan profile scenario: FSDP (or HSDP's shard
    group) over the scenario's DP, one pipeline stage (once per scenario: torchtitan's published runs repeat four of
    its headline configurations)."""
    from symmem.accounting.analysis import _activation_key, _tokens_per_expert, stage_buffers, values
    from symmem.accounting.fsdp import shard_degree
    from symmem.model import stage_parts

    why = refusal(scn)
    if why is not None:
        raise SymmemError(f"reserved memory not replayed: {why}")
    (stage,) = scn.stages
    vals = values(scn)
    axes = scn.parallel.axis_sizes()
    n = shard_degree(scn)
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    e_tok = _tokens_per_expert(_activation_key(scn), axes)
    timelines: dict = {}

    def timeline(part, copy: int):
        """The part's timeline under the policy its `copy` runs (per-layer checkpointing: full or none)."""
        layers = part.layer_ids
        pol = scn.policy.for_layer(layers[copy]) if part.is_layers else scn.policy.outside_layers()
        if (part.name, pol) not in timelines:
            timelines[(part.name, pol)] = T.part_timeline(part.flow, scn.rules, pol, axes, scn.act_bytes, e_tok)
        return timelines[(part.name, pol)]

    root, blocks, grad_of = _groups(scn, parts, vals, n)
    by_phase: dict = {}

    def phase_events(part, copy: int, which: str) -> tuple:
        tl = timeline(part, copy)
        if (id(tl), which) not in by_phase:
            by_phase[(id(tl), which)] = tuple(ev for ev in tl.events if ev.phase == which)
        return by_phase[(id(tl), which)]
    pd = scn.gather_bytes or 2
    alloc = ExpandableAllocator()
    step = [0]  # 0: the model's build
    alloc.tag = alloc.peak_tag = (0, "model build")  # (step, phase): named at the end (formatting every event's
    # name was a tenth of the replay's time)
    sizes: dict = {}

    malloc = alloc.malloc  # the allocator notes `alloc.tag` when it maps more (`ExpandableAllocator.peak_tag`)

    def size(a) -> int:
        if a.nbytes not in sizes:
            sizes[a.nbytes] = ceil_int(evaluate(a.nbytes, vals))
        return sizes[a.nbytes]

    # model states and buffers
    for g in (root, *blocks):
        for name, shard, *_ in g.params:
            malloc(("param", name), 4 * shard)
    for b in stage_buffers(scn, stage):
        malloc(("buffer", b.name), b.nbytes)

    stash: list = []  # the forward's flat all-gather output kept to the next group's copy-out
    rs_state: list = []  # the last reduce-scatter's FP32 input

    def all_gather(it, g: _Group) -> None:
        alloc.tag = (step[0], f"all-gather of {g.name}")
        malloc((it, "cast", g.name), g.padded_bytes(n, pd) // n, COPY_IN)
        malloc((it, "all-gather", g.name), g.padded_bytes(n, pd), COPY_IN)
        alloc.free((it, "cast", g.name))

    def copy_out(it, g: _Group, forward: bool) -> None:
        while stash:
            alloc.free(stash.pop())
        alloc.tag = (step[0], f"copy-out of {g.name}")
        for name, shard, *_ in g.params:
            malloc((it, "unsharded", name), g.gathered_bytes(name, shard * n, pd))
        if forward:
            stash.append((it, "all-gather", g.name))
        else:
            alloc.free((it, "all-gather", g.name))

    def reshard(it, g: _Group) -> None:
        for name, *_ in g.params:
            alloc.free((it, "unsharded", name))

    def reduce_scatter(it, g: _Group, grads: list, kept_as_grad: bool) -> None:
        while rs_state:
            alloc.free(rs_state.pop())
        alloc.tag = (step[0], f"reduce-scatter of {g.name}")
        malloc((it, "rs input", g.name), 4 * g.padded(n))
        for key in grads:
            alloc.free(key)
        if kept_as_grad:  # the output's views become the sharded gradients
            malloc(("rs output", g.name), 4 * g.padded(n) // n, RS)
        else:  # added into the gradients kept from the step before, then freed (_fsdp_collectives.py:748)
            malloc((it, "rs output", g.name), 4 * g.padded(n) // n, RS)
            alloc.free((it, "rs output", g.name))
        rs_state.append((it, "rs input", g.name))

    steps_of: dict = {}

    def steps(events, live: dict) -> tuple:
        """Each event's (op, phase, freed names, allocated (name, bytes)) from `live` on, and what is alive after
        the last: the same for every copy and step of a timeline, so worked out once."""
        key = (id(events), tuple(live))
        if key not in steps_of:
            out = []
            for ev in events:
                now = {a.what: a for a in ev.alive}
                out.append((ev.op, ev.phase, [n for n in live if n not in now],
                            [(n, size(a)) for n, a in now.items() if n not in live]))
                live = now
            steps_of[key] = (tuple(out), live)
        return steps_of[key]

    def run(it, part, copy: int, events, live: dict, grads: list | None, before: dict | None = None) -> dict:
        done, after = steps(events, live)
        where = f" {copy}" if part.is_layers else ""
        for op, ph, freed, made in done:
            if before and op in before:
                before[op]()
            alloc.tag = (it + 1, (ph, part.name, where, op))
            for name in freed:
                alloc.free((it, part.name, copy, name))
            for name, nbytes in made:
                malloc((it, part.name, copy, name), nbytes)
            if grads is not None:
                for gname, nbytes in grad_of.get((part.name, copy if part.is_layers else 0, op), ()):
                    malloc((it, "grad", gname), nbytes)
                    grads.append((it, "grad", gname))
        return after

    last = len(blocks) - 1

    def layer_index(part, copy: int) -> int:  # a layer part's copy as the stage's layer (blocks are by layer)
        return part.layer_ids[copy] if part.is_layers else -1
    # how the version wraps and steps (module docstring): 9dec370 one root unit, kept unsharded, the last block
    # too; 0.3.0 the embedding and [norm, lm_head] units, every block resharded
    units = _outer_units(scn, root)
    resharded = [copy < last for copy in range(len(blocks))] if units.root else [True] * len(blocks)
    for it in range(ITERATIONS):
        step[0] = it + 1
        if it and units.zero_grad_frees:  # zero_grad(set_to_none=True) before the forward
            for g in units.all(blocks):
                alloc.free(("rs output", g.name))
        if units.root:
            all_gather(it, root)
            copy_out(it, root, True)
        kept: dict = {}
        for part in parts:
            unit = units.of_part.get(part.name)
            if unit is not None:
                all_gather(it, unit)
                copy_out(it, unit, True)
            for copy in range(part.count):
                fw = phase_events(part, copy, "forward")
                layer = layer_index(part, copy)
                if part.is_layers:
                    all_gather(it, blocks[layer])
                    copy_out(it, blocks[layer], True)
                live = run(it, part, copy, fw, {}, None)
                for name, a in live.items():  # what the part does not keep dies with its forward
                    if a.component != T.SAVED_CURRENT:
                        alloc.free((it, part.name, copy, name))
                kept[(part.name, copy)] = {k: a for k, a in live.items() if a.component == T.SAVED_CURRENT}
                if part.is_layers and resharded[layer]:
                    reshard(it, blocks[layer])
            if unit is not None and part.name in units.resharded_after_forward:
                reshard(it, unit)
        while stash:  # the root's post-forward frees the last all-gather output (_fsdp_state.py:333-342)
            alloc.free(stash.pop())
        final: list = []  # (unit, its gradients): reduce-scattered in the final callback
        for part in reversed(parts):
            unit = units.of_part.get(part.name)
            if unit is not None and part.name in units.resharded_after_forward:
                copy_out(it, unit, False)  # prefetched by the block before (the embedding)
            for copy in range(part.count - 1, -1, -1):
                bw = phase_events(part, copy, "backward")
                grads: list = []
                before = {}
                layer = layer_index(part, copy)
                if part.is_layers:
                    if resharded[layer]:
                        copy_out(it, blocks[layer], False)
                    if layer > 0:
                        all_gather(it, blocks[layer - 1])  # the backward prefetch
                    elif units.embedding is not None:
                        all_gather(it, units.embedding)
                elif unit is not None and unit is units.head and blocks:
                    # [norm, lm_head]'s pre-backward, when the logits' gradient arrives: it prefetches the last block
                    before = {units.head_first_op: lambda it=it: all_gather(it, blocks[last])}
                live = run(it, part, copy, bw, kept[(part.name, copy)], grads, before)
                for name in live:
                    alloc.free((it, part.name, copy, name))
                if part.is_layers:
                    reshard(it, blocks[layer])
                    reduce_scatter(it, blocks[layer], grads, units.zero_grad_frees or it == 0)
                elif unit is not None and unit in units.in_final_callback:
                    final.append((unit, grads))
                elif unit is not None:  # its post-backward, when the gradient of its input is computed
                    reshard(it, unit)
                    reduce_scatter(it, unit, grads, units.zero_grad_frees or it == 0)
                elif units.root is not None:  # 9dec370's root: everything outside the blocks, at the end
                    final.append((root, grads))
        for unit in dict.fromkeys(u for u, _ in final):
            reshard(it, unit)
            reduce_scatter(it, unit, [k for u, gs in final if u is unit for k in gs],
                           units.zero_grad_frees or it == 0)
        while rs_state:
            alloc.free(rs_state.pop())
        alloc.tag = (step[0], "optimizer step")
        for g in units.all(blocks):
            for name, _, _, local in g.params:
                if it == 0:
                    malloc(("exp_avg", name), 4 * local)
                    malloc(("exp_avg_sq", name), 4 * local)
                    if units.fused_adamw:
                        malloc(("step", name), 4)  # the fused AdamW's device step scalar
                if not units.fused_adamw:
                    malloc((it, "sqrt", name), 4 * local)
        if not units.fused_adamw:
            for g in units.all(blocks):
                for name, *_ in g.params:
                    alloc.free((it, "sqrt", name))
    by_stream = {s: alloc.mapped(s) for s in (DEFAULT, COPY_IN, RS)}
    at = alloc.peak_tag
    where = at[1] if isinstance(at[1], str) else "{}, {}{}, {}".format(*at[1])
    where = f"step {at[0]}, {where}"
    return Fsdp2Reserved(alloc.peak_allocated, alloc.peak_reserved, by_stream, where)
