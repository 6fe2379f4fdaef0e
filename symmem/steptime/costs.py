"""What one micro-batch costs one GPU of a stage, read off the dataflows: every GEMM with its local shape, the fused
attention's FLOPs, the bytes the memory-bound ops move, every collective with its group, bytes and calls; and
what one iteration costs beside the micro-batches (the data-parallel traffic, the optimizer step). Numbers, not
yet seconds: `symmem.steptime.model` turns them into time with its named constants.

* **GEMMs** (`linear` ops): the local shape (m, k, n) of each from its input, weight and output tensors as the
  shardings leave them on one GPU (the sequence-parallel all-gather undone: a linear multiplies the gathered
  rows); the linears of one Megatron module (tag `module:NAME`, e.g. linear_qkv, linear_fc1) are one GEMM, n
  summed; routed experts are one GEMM per local expert (TE's grouped GEMM). FLOPs 2·m·k·n forward, twice that
  backward (data and weight gradients); the bytes a GEMM must move through HBM at least, its operands and
  result once, 2·(m·k + k·n + m·n) in BF16, each pass.
* **Attention** (the `core_attention` products): the `megatron` convention's FLOPs (causal: half the s x s
  products, Megatron-LM training.py's `seq_length / 2`), forward and twice that backward, on this GPU's heads and
  sequence chunk.
* **Memory-bound ops** (norms, RoPE, SwiGLU, residual adds, the router, the permutes, the cross-entropy): the
  bytes of their inputs and outputs as the framework runs them (a fused kernel, tags of `RuleSet.fused_tags`,
  reads its group's outside inputs and writes its last output only), forward once and backward twice (it reads
  the saved input and the output gradient and writes the input gradient).
* **Collectives**: `symmem.comm.stage_collectives` (each one's rule and source there), bytes and calls per
  group; each group's span (`span`): whether its GPUs sit in one node, from Megatron's rank order (tp-cp-ep-dp-pp,
  parallel_state.py RankGenerator: TP varies fastest) and the node size.
* **Recomputation**: a recomputed op's forward once more (its FLOPs, bytes and forward collectives).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from symmem._cache import bounded
from symmem.graph import Dataflow, Dim, Op, Tensor, local_size

SEQ_AXES = ("sp", "sp_moe")
# op kinds that only relabel or view a tensor, or mark a region: no kernel of their own
NO_KERNEL = frozenset({"region", "view", "reshape", "expand", "transpose", "split", "slice", "no_grad", "dropout"})
GPUS_PER_NODE = 8  # the scale-up domain of an HGX/DGX H100, H200, H800 or B200 node (NVLink within, a NIC each)


@dataclass
class StageCosts:
    """One micro-batch through one GPU of a stage (forward, backward and any recomputation)."""

    gemm_bytes: float = 0.0  # HBM bytes the GEMMs move at least
    attention_flops: float = 0.0
    memory_bytes: float = 0.0  # HBM bytes of the memory-bound ops
    comm: dict = field(default_factory=dict)  # group -> [bytes, calls, crosses nodes]
    kernels: float = 0.0  # kernels launched (forward, backward, recomputation): GEMMs (one per local expert) and
    # memory-bound kernels (a fused group one), three per op over forward and backward
    cp_ring_bytes: float = 0.0  # the CP ring (p2p): overlapped with the attention, timed as what it exceeds
    gemms: list = field(default_factory=list)  # (m, k, n, experts, copies, recomputed, low precision)
    # the fused attention's kernels (`attention_shape`): (b, s, heads, kv heads, qk dim, v dim, copies, recomputed)
    attentions: list = field(default_factory=list)


def _full_rows(t: Tensor) -> tuple[Dim, ...]:
    return tuple(Dim(d.size, tuple(a for a in d.axes if a not in SEQ_AXES)) for d in t.dims)


def _module(op: Op) -> str:
    return next((t for t in op.tags if t.startswith("module:")), op.name)


def _experts(op: Op, axes, ev) -> int:
    """Local experts of a routed expert's weight (its first dimension split over EP), else 1."""
    w = op.weights[0]
    if len(w.dims) == 3 and any(a == "ep" for a in w.dims[0].axes):
        return int(ev(local_size(w.dims[:1], axes)))
    return 1


def gemm_shapes(flow: Dataflow, axes, ev) -> list[tuple[str, float, float, float, int, tuple[Op, ...]]]:
    """(module, m, k, n, local experts, ops) of every GEMM of one pass of `flow` on one GPU: a module's linears
    fused (one input, n summed); m·k is the gathered input, k·n one expert's weight, m·n the output."""
    modules: dict[str, list] = {}
    for op in flow.ops:
        if op.kind != "linear" or not op.weights:
            continue
        x, y, w = flow.tensors[op.inputs[0]], flow.tensors[op.outputs[0]], op.weights[0]
        e = _experts(op, axes, ev)
        xs, ws, ys = (ev(local_size(_full_rows(t) if i != 1 else t.dims, axes)) for i, t in enumerate((x, w, y)))
        k = math.sqrt(xs * ws / ys / e) if ys else 0.0
        m = xs / e / k if k else 0.0
        n = ys / e / m if m else 0.0
        key = _module(op)
        if key in modules:
            modules[key][3] += n
            modules[key][5] += (op,)
        else:
            modules[key] = [key, m, k, n, e, (op,)]
    return [tuple(v) for v in modules.values()]


def _kernel_bytes(flow: Dataflow, axes, ev, act_bytes: int, fused_tags) -> list[tuple[Op, float]]:
    """(first op, bytes in and out) of every memory-bound kernel of one forward pass: fused groups as one."""
    def nbytes(name: str) -> float:
        t = flow.tensors[name]
        return ev(local_size(t.dims, axes)) * (t.dtype.nbytes or act_bytes)

    out: list[tuple[Op, float]] = []
    ops = [op for op in flow.ops if op.kind not in NO_KERNEL and op.kind != "linear"
           and not (op.kind == "matmul" and "core_attention" in op.tags)]
    i = 0
    while i < len(ops):
        op = ops[i]
        tag = next((t for t in fused_tags if t in op.tags), None)
        if tag == "core_attention":  # its softmax and dropout are inside the fused attention
            i += 1
            continue
        group = [op]
        while tag and i + 1 < len(ops) and tag in ops[i + 1].tags:
            i += 1
            group.append(ops[i])
        made = {t for g in group for t in g.outputs}
        reads = {t for g in group for t in g.inputs if t not in made}
        total = sum(nbytes(t) for t in reads if flow.tensors[t].dims) + sum(
            nbytes(t) for t in group[-1].outputs if flow.tensors[t].dims)
        out.append((op, total))
        i += 1
    return out


def fused_tags(scn) -> tuple[str, ...]:
    """The op groups run as one kernel: the rule set's (`RuleSet.fused_tags`: TE's fused attention and SwiGLU),
    and the attention wherever the framework's modules call torch's scaled_dot_product_attention (the profile's
    or scenario's `attn_impl` "sdpa": torchtitan's Llama 3, transformers with attn_implementation="sdpa"), which
    on a GPU dispatches BF16 attention to a fused kernel, flash or memory-efficient, that never writes the s x s
    scores (torch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, `select_sdp_backend`). The costs read the
    convention's dataflow, whose attention is its products and softmax: without this its softmax counted the
    scores' bytes (17 GB a layer for Llama-3-8B at b 2, s 8,192)."""
    tags = tuple(scn.rules.fused_tags)
    if "core_attention" not in tags and getattr(scn.flow_impl, "attn", None) == "sdpa":
        tags += ("core_attention",)
    return tags


def _group(scn, axis: str) -> tuple[int, int]:
    """(stride, size) of a group of `axis` in Megatron's rank order (tp-cp-ep-dp-pp for the dense layers; the
    expert layers' ETP then EP); DP is the distributed optimizer's DP x CP group."""
    par = scn.parallel
    return {"tp": (1, par.tp), "etp": (1, par.etp), "cp": (par.tp, par.cp), "ep": (par.etp, par.ep),
            "dp": (par.tp, par.dense_shard), "pp": (par.tp * par.cp * par.dp, par.pp)}[axis]


def span(scn, axis: str) -> bool:
    """Whether a group of `axis` spans nodes: its stride times its size exceeds the node (GPUS_PER_NODE)."""
    stride, size = _group(scn, axis)
    return size > 1 and stride * size > GPUS_PER_NODE


def group_size(scn, axis: str) -> int:
    """The GPUs one collective of `axis` runs over; a pipeline send is between two."""
    return 2 if axis == "pp" else _group(scn, axis)[1]


def stage_costs(scn, stage) -> StageCosts:
    """`StageCosts` of one micro-batch through one GPU of `stage`: its parts' (`part_costs`, cached: every stage of
    a model shares the layers' flow), each times its copies, and the pipeline's sends."""
    from symmem.model import stage_parts

    c = StageCosts()
    comm: dict = {}
    for part in stage_parts(scn.model, stage, scn.convention):
        p = part_costs(scn, part)
        n = part.count
        c.gemm_bytes += n * p.gemm_bytes
        c.attention_flops += n * p.attention_flops
        c.memory_bytes += n * p.memory_bytes
        c.kernels += n * p.kernels
        c.cp_ring_bytes += n * p.cp_ring_bytes
        c.gemms += [(m, k, nn, e, copies * n, again, low) for m, k, nn, e, copies, again, low in p.gemms]
        c.attentions += [(*shape, copies * n, again) for *shape, copies, again in p.attentions]
        for axis, (nb, steps) in p.comm.items():
            entry = comm.setdefault(axis, [0.0, 0])
            entry[0] += n * nb
            entry[1] += n * steps
    c.comm = {axis: [nb, steps, span(scn, axis)] for axis, (nb, steps) in comm.items()}
    if scn.parallel.pp > 1:
        from symmem.comm import pipeline_bytes
        from symmem.symbols import b, s

        nb = float(pipeline_bytes(scn, stage).xreplace({**scn.size_values(), b: scn.b, s: scn.s}))
        sends = 2 - (1 if stage.head else 0) - (1 if stage.embedding else 0)
        c.comm["pp"] = [nb, sends, span(scn, "pp")]
    return c


_PARTS: dict = {}  # what one part's costs depend on -> its StageCosts for one copy (comm: [bytes, steps])


def part_costs(scn, part) -> StageCosts:
    """One copy of `part`, one micro-batch, one GPU; cached on what it depends on (the part's flow, the rules,
    recomputation, routing, the activation dtype, the axes' sizes, the CP exchange, the sizes, b and s), not on
    DP, M, the schedule or ZeRO: a sweep times many configurations that share it."""
    par = scn.parallel
    axes = par.axis_sizes()
    low = scn.precision.low_precision is not None
    key = (part.flow, part.kind, part.is_layers, scn.model, scn.convention, scn.rules, scn.policy, scn.routing,
           scn.act_bytes, axes, par.cp_comm_type, scn.size_key, scn.b, scn.s, low, fused_tags(scn))
    return bounded(_PARTS, key, 8192, lambda: _part_costs(scn, part, axes, low))


def _part_costs(scn, part, axes, low: bool) -> StageCosts:
    from symmem.accounting.analysis import _tokens_per_expert, values
    from symmem.accounting.evaluate import evaluate
    from symmem.comm import flow_collectives
    from symmem.flops import op_flops
    from symmem.precision.saved import eligible
    from symmem.symbols import E_tok

    vals = dict(values(scn))
    vals[E_tok] = evaluate(_tokens_per_expert(scn.activation_key, axes), vals)
    cache: dict = {}

    def ev(expr) -> float:
        if expr not in cache:
            cache[expr] = float(evaluate(expr, vals))
        return cache[expr]

    from symmem.accounting.activations import runs_again

    par, policy = scn.parallel, scn.policy

    def again(op) -> bool:  # per-op AC's cached outputs are not computed again
        return part.is_layers and runs_again(op, part.flow, scn.rules, policy)

    c = StageCosts()
    for _module, m, k, n, e, ops in gemm_shapes(part.flow, axes, ev):
        passes = 3 + (1 if again(ops[0]) else 0)
        is_low = low and all(eligible(op) for op in ops)
        c.gemm_bytes += gemm_bytes(m, k, n, e, passes)
        c.kernels += e * passes
        c.gemms.append((m, k, n, e, 1, passes == 4, is_low))
    for op, nb in _kernel_bytes(part.flow, axes, ev, scn.act_bytes, fused_tags(scn)):
        c.memory_bytes += nb * (3 + (1 if again(op) else 0))
        c.kernels += 3 + (1 if again(op) else 0)
    n_att = par.tp * par.cp
    products = 0
    for _part, op, _fwd, total in op_flops(scn, (part,), True, "megatron"):
        if op.kind == "matmul" and "core_attention" in op.tags:
            c.attention_flops += ev(total) / n_att
            c.kernels += 1.5  # the fused attention: one kernel forward, two backward, per two products
            products += 1
    if products:
        first = next(op for op in part.flow.ops if op.kind == "matmul" and "core_attention" in op.tags)
        shape = attention_shape(scn)
        if shape is not None:
            c.attentions.append((*shape, products // 2, again(first)))
    recomputed = again
    for coll in flow_collectives(part.flow, axes, scn.act_bytes, recomputed, par.cp_comm_type == "a2a"):
        nb = ev(coll.nbytes)  # (E_tok too: ETP's all-reduce of the experts' weight gradients is E_tok·N·h)
        if coll.kind == "ring":
            c.cp_ring_bytes += nb
            continue
        entry = c.comm.setdefault(coll.axis, [0.0, 0])
        entry[0] += nb
        entry[1] += group_size(scn, coll.axis) - 1  # a ring or an exchange: n - 1 steps
    return c


def attention_shape(scn) -> tuple:
    """(b, s, heads, kv heads, qk head dim, v head dim) of one fused attention kernel on one GPU: the heads split
    over TP; under all-to-all CP over CP too, each GPU attending the whole sequence (TE's
    AttnFuncWithCPAndQKVOA2A); under the P2P ring each GPU runs CP kernels over chunks of s / CP (the ring's steps,
    TE's AttnFuncWithCPAndKVP2P), written as one kernel of b x CP sequences of s / CP tokens, whose b·CP·(s/CP)²
    = b·s²/CP is the GPU's share of the score matrix. Multi-head latent attention's query and key heads are
    d_h + d_hr wide, its values d_v (DeepSeek-V2/V3); grouped-query attention's KV heads n_kv (or the family's
    fixed count: DeepSeek-V4's one); one KV head a GPU at least. None for a model without n_h."""
    v = dict(scn.model.values)
    if "n_h" not in v or "h" not in v:
        return None
    par = scn.parallel
    a2a = par.cp_comm_type == "a2a"
    split = par.tp * (par.cp if a2a else 1)
    heads = v["n_h"] / split
    fixed = scn.model.family.fixed_kv_heads  # (DeepSeek-V4's one shared KV head, no config key)
    kv = max(1.0, (fixed if fixed is not None else v.get("n_kv", v["n_h"])) / split)
    d_h = v.get("d_h", v["h"] / v["n_h"])
    qk = d_h + v.get("d_hr", 0)
    vd = v.get("d_v", d_h)
    s = scn.s if a2a or par.cp == 1 else scn.s / par.cp
    return (scn.b * (1 if a2a else par.cp), s, heads, kv, qk, vd)


# The output tile one SM computes, rows x columns: 128 x 256, the large BF16 tile of CUTLASS's Hopper and Blackwell
# GEMM kernels (cuBLAS's own choice per shape is closed source). An assumption, named: against 128 x 128 it was
# compared by the leave-one-run-out error of the measured iterations (2.99 % against 3.53 % mean), nothing else.
TILE = 128
TILE_N = 256


def gemm_bytes(m, k: float, n: float, experts: int, passes: int):
    """The HBM bytes a GEMM must move at least over its passes: its BF16 operands and result once each pass,
    2·(m·k + k·n + m·n) per local expert (m a number or an array)."""
    return 2 * (m * k + k * n + m * n) * experts * passes


def wave_flops(m, k: float, n: float, experts: int, sms: int, ceil=math.ceil):
    """The FLOPs the tensor cores spend on a GEMM whose output is cut into TILE x TILE_N tiles, run in waves of one
    tile per SM: every tile is full, and the last wave occupies every SM (an m of 154 rows costs 256; 48 tiles on
    148 SMs cost a whole wave). A routed experts' GEMM is one grouped launch of all local experts' tiles. Forward
    (m x n output), data gradient (m x k) and weight gradient (k x n) tile their own outputs. With `ceil` numpy's,
    m may be an array (the sweep's time tables, `sweep.timetable`)."""
    return sum(_pass_flops(rows, cols, inner, experts, sms, ceil)
               for rows, cols, inner in ((m, n, k), (m, k, n), (k, n, m)))


def _pass_flops(rows, cols, inner, experts: int, sms: int, ceil=math.ceil):
    tiles = ceil(rows / TILE) * ceil(cols / TILE_N) * experts
    return 2 * inner * TILE * TILE_N * ceil(tiles / sms) * sms


def tiled_flops(gemms, sms: int, ceil=math.ceil) -> tuple:
    """(all, low-precision) FLOPs of `StageCosts.gemms` as the tensor cores spend them (`wave_flops`), the
    recomputed forward once more (with `ceil` numpy's, rows m may be arrays)."""
    total = low = 0.0
    for m, k, n, e, count, again, is_low in gemms:
        f = count * (wave_flops(m, k, n, e, sms, ceil) + (_pass_flops(m, n, k, e, sms, ceil) if again else 0.0))
        total += f
        if is_low:
            low += f
    return total, low


def optimizer_bytes(scn, stage) -> float:
    """HBM bytes of the optimizer step on one GPU of `stage` (Megatron's distributed optimizer with TE's FusedAdam,
    MLM megatron/core/optimizer/distrib_optimizer.py): per parameter of this rank's shard, the FP32 gradient read
    for the norm and again for Adam (8), the FP32 main copy, exp_avg and exp_avg_sq read and written (24), the BF16
    parameter written back (2); and the whole FP32 gradient buffer zeroed for the next iteration (4 per local
    parameter, param_and_grad_buffer.py `reset`). Each GPU's shard is the local parameters over the ZeRO group."""
    from symmem.accounting.analysis import stage_params

    held = scn.schedule.held_stages(stage.index, scn.parallel.pp)
    local = sum(stage_params(scn, scn.stages[i]).total for i in held)
    shard = local / scn.parallel.dense_shard if int(scn.zero) >= 1 else local
    return float(34 * shard + 4 * local)


_DP: dict = {}


def dp_cost(scn, stage) -> tuple[float, int, bool]:
    """(bytes, calls, crosses nodes) of the data-parallel traffic of one iteration (`symmem.comm.dp_bytes`): the
    gradient reduce-scatter and parameter all-gather (or the all-reduce) of each buffer, dense and expert."""
    from symmem.comm import dp_bytes

    z = int(scn.zero)
    key = (scn.model, scn.convention, scn.size_key, scn.parallel, z, scn.m if z == 3 else None, scn.precision,
           scn.profile.name, stage, scn.schedule, scn.ddp)
    nb = bounded(_DP, key, 8192, lambda: float(Fraction(dp_bytes(scn, stage))))
    buffers = 2 if scn.model.family.routed_experts else 1
    if nb and scn.ddp.overlap_grad_reduce:  # one collective per bucket (Megatron's bucket groups)
        from symmem.profiles import ddp_layouts

        buffers = sum(len(lay.buckets) for group, lay in ddp_layouts(scn, stage) if group > 1)
    calls = 0 if nb == 0 else (2 if int(scn.zero) >= 1 else 1) * buffers
    return nb, calls, span(scn, "dp")
