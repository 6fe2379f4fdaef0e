"""Communication volume, derived from the dataflows' shardings: which collectives each op implies, on which
parallel axis, forward and backward, and how many bytes one GPU sends for them (closed form, per micro-batch).

A tensor's dimensions name the axes they are split over (`symmem.graph`); where an op's input and output disagree,
data must move. The rules (Megatron-Core with TransformerEngine's modules, Megatron-LM 23e00ed0 and TE c188b533):

* **gather**: an op whose input is sequence-sharded (`sp`, `sp_moe`) and whose outputs are not, all-gathers that
  input over the tensor-parallel group once (one all-gather per tensor, however many linears read it: TE's
  LayerNormLinear, MLM's fused linear_qkv and linear_fc1). Its backward reduce-scatters the input's gradient
  (TE layernorm_linear.py:764, linear.py's dgrad likewise; MLM tensor_parallel/mappings.py:296-350), and a
  linear re-gathers its input for the weight gradient, because TE keeps the local shard, not the gathered one
  (layernorm_linear.py:381-383 frees it, :669-688 gathers it again; linear.py:381, 649-668).
* **reduce**: a linear (or vocabulary-parallel embedding) whose weight is split over `tp` or `etp` while its
  output is not split over that axis (so the split dimension is the one contracted or looked up) produces partial
  sums:
  reduce-scattered into a sequence-sharded output (linear.py:358; mappings.py:351-379), else all-reduced
  (linear.py:363; mappings.py:217-235). The backward of a reduce-scatter all-gathers the output's gradient
  (module/base.py:1119, grad_output_preprocess); of an all-reduce, nothing (its partner is the next rule).
* **copy**: without sequence parallelism, a linear whose weight is split over `tp` on its output dimension, with
  an input split over no tensor axis, all-reduces its input's gradient in the backward (mappings.py:197-216;
  layernorm_linear.py:770), once per input tensor.
* **vocabulary-parallel cross-entropy**: three all-reduces of one FP32 number per token (the logits' max, the sum
  of exponentials, the target logit; MLM tensor_parallel/cross_entropy.py; in megatron-core 0.16.1 three calls,
  :130, :148, :154, on logits cast to FP32 at :28).
* **expert all-to-all**: `dispatch` and `combine` each move the routed copies of this GPU's tokens, (EP-1)/EP of
  them to other GPUs, forward and backward (MLM transformer/moe/token_dispatcher.py:625-628, 769, the alltoall
  dispatcher; the expert-tensor-parallel group is ETP, 1 in every run here, so no further gather).
* **context-parallel ring**: the attention core's keys and values travel the ring: CP-1 steps of this rank's
  chunk forward, and in the backward the chunks again plus their gradients (TE attention/dot_product_attention/
  context_parallel.py, AttnFuncWithCPAndKVP2P: forward send/recv of kv, backward of kv and dkv).
* **context-parallel all-to-all** (`--cp-comm-type a2a`, TE AttnFuncWithCPAndQKVOA2A): q, k and v (k and v at
  the key/value heads) are exchanged before the attention and its output after it, (CP-1)/CP of each local tensor
  (context_parallel.py:3421 and :3520 at TE v2.11); in the backward the output's gradient before (:3691) and dq, dk,
  dv after (:3810).

A ring all-gather or reduce-scatter over n GPUs sends (n-1)/n of the whole tensor per GPU, an all-reduce twice
that. Recomputed ops (--recompute) send their forward collectives again. Per iteration: pipeline sends (the
stage's output activation forward and its gradient backward, per micro-batch) and the data-parallel gradient and
parameter traffic (`dp_bytes`).

Held to the byte against the collectives Megatron-Core 0.16.1 issues on the CPU without sequence parallelism (TP,
PP, DP with the distributed optimizer; tests/validate/test_megatron_comm.py, docs/comm_validation.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import sympy

from symmem.graph import AxisSizes, Dataflow, Op, Tensor, local_size

SEQ = ("sp", "sp_moe")
TENSOR = ("tp", "etp")
GROUP = {"sp": "tp", "sp_moe": "tp", "tp": "tp", "etp": "etp", "ep": "ep", "cp": "cp"}
MOVES_TOKENS = ("dispatch", "combine")


@dataclass(frozen=True)
class Collective:
    axis: str  # the process group: tp, etp, ep, cp
    kind: str  # all-gather, reduce-scatter, all-reduce, all-to-all, ring
    phase: str  # forward, backward, recompute
    tensor: str
    op: str
    nbytes: sympy.Expr  # sent by one GPU


def _axes_of(t: Tensor) -> set[str]:
    return {a for d in t.dims for a in d.axes}


def _bytes(t: Tensor, act_bytes: int) -> int:
    return t.dtype.nbytes if t.dtype.nbytes is not None else act_bytes


def _ring(n: sympy.Expr) -> sympy.Expr:
    return (n - 1) / n


def op_collectives(op: Op, flow: Dataflow, axes: AxisSizes, act_bytes: int,
                   gathered: set[tuple[str, str]], cp_a2a: bool = False) -> list[Collective]:
    """The collectives `op` implies (forward and backward, one micro-batch); `gathered` (tensor, axis) pairs
    already all-gathered in this flow (updated); `cp_a2a`: context parallelism by all-to-all, not the ring."""
    out: list[Collective] = []
    outs = [flow.tensors[t] for t in op.outputs]
    out_axes = set().union(*(_axes_of(t) for t in outs)) if outs else set()

    if op.kind in MOVES_TOKENS:
        n = axes.of("ep")
        if n != 1:
            rows_in = flow.tensors[op.inputs[0]] if op.kind == "dispatch" else outs[0]
            k = flow.tensors[op.inputs[-1]].dims[-1].size  # the top-k indices' last dimension: N_r copies
            vol = local_size(rows_in.dims, axes) * k * _bytes(rows_in, act_bytes) * _ring(n)
            for phase in ("forward", "backward"):
                out.append(Collective("ep", "all-to-all", phase, rows_in.name, op.name, vol))
        return out

    if op.kind == "matmul" and "core_attention" in op.tags and axes.of("cp") != 1 and cp_a2a:
        n = axes.of("cp")
        names = ([op.inputs[0], _before_repeat(op.inputs[1], flow).name] if op.name.endswith("qk")
                 else [_before_repeat(op.inputs[1], flow).name, op.outputs[0]])  # q, k / v, the output
        for name in names:
            t = flow.tensors[name]
            vol = local_size(t.dims, axes) * _bytes(t, act_bytes) * _ring(n)
            for phase in ("forward", "backward"):
                out.append(Collective("cp", "all-to-all", phase, name, op.name, vol))
    elif op.kind == "matmul" and "core_attention" in op.tags and axes.of("cp") != 1:
        n = axes.of("cp")
        kv = _before_repeat(op.inputs[1], flow)  # the ring sends the key/value heads before any repeat
        chunk = local_size(kv.dims, axes) * _bytes(kv, act_bytes)
        if "cp" not in _axes_of(kv):
            chunk = chunk / n  # a dimension of all s keys: the rank's own chunk is 1/CP of it
        out.append(Collective("cp", "ring", "forward", kv.name, op.name, (n - 1) * chunk))
        out.append(Collective("cp", "ring", "backward", kv.name, op.name, 2 * (n - 1) * chunk))

    for name in op.inputs:
        t = flow.tensors[name]
        for ax in SEQ:
            n = axes.of(ax)
            if n == 1 or ax not in _axes_of(t) or ax in out_axes or (name, ax) in gathered:
                continue
            gathered.add((name, ax))
            vol = local_size(t.dims, axes) * n * _bytes(t, act_bytes) * _ring(n)
            out.append(Collective(GROUP[ax], "all-gather", "forward", name, op.name, vol))
            out.append(Collective(GROUP[ax], "reduce-scatter", "backward", name, op.name, vol))
            if op.weights:
                out.append(Collective(GROUP[ax], "all-gather", "backward", name, op.name, vol))

    if op.kind in ("linear", "embedding") and op.weights:
        x, y = flow.tensors[op.inputs[0]], outs[0]
        for ax in TENSOR:
            n = axes.of(ax)
            if n == 1 or ax in _axes_of(y):
                continue
            split = [w for w in op.weights if any(ax in d.axes for d in w.dims)]
            if not split:
                continue
            full = local_size(y.dims, axes) * _bytes(y, act_bytes)
            scattered = [a for a in SEQ if a in _axes_of(y) and a not in _axes_of(x) and axes.of(a) != 1]
            if scattered:
                m = axes.of(scattered[0])
                vol = full * m * _ring(m)
                out.append(Collective(GROUP[ax], "reduce-scatter", "forward", y.name, op.name, vol))
                out.append(Collective(GROUP[ax], "all-gather", "backward", y.name, op.name, vol))
            else:
                out.append(Collective(GROUP[ax], "all-reduce", "forward", y.name, op.name, 2 * full * _ring(n)))

    if op.kind == "linear" and op.weights:
        x, y = flow.tensors[op.inputs[0]], outs[0]
        for ax in TENSOR:
            n = axes.of(ax)
            if (n == 1 or ax in _axes_of(x) or ax not in _axes_of(y) or (x.name, ax) in gathered
                    or any(a in _axes_of(x) and axes.of(a) != 1 for a in SEQ)):
                continue
            gathered.add((x.name, ax))
            vol = 2 * local_size(x.dims, axes) * _bytes(x, act_bytes) * _ring(n)
            out.append(Collective(GROUP[ax], "all-reduce", "backward", x.name, op.name, vol))

    if op.kind == "cross_entropy":
        logits = flow.tensors[op.inputs[0]]
        n = axes.of("tp")
        if n != 1 and "tp" in logits.dims[-1].axes:
            rows = local_size(logits.dims[:-1], axes)
            out.append(Collective("tp", "all-reduce", "forward", logits.name, op.name, 3 * 2 * rows * 4 * _ring(n)))
    return out


def _before_repeat(name: str, flow: Dataflow) -> Tensor:
    """The tensor before a GQA repeat (and views): what the attention's exchanges move."""
    t = flow.tensors[name]
    producer = flow.producer(name)
    while producer is not None and producer.kind in ("expand", "view", "reshape"):
        t = flow.tensors[producer.inputs[0]]
        producer = flow.producer(t.name)
    return t


def flow_collectives(flow: Dataflow, axes: AxisSizes, act_bytes: int, recomputed=lambda op: False,
                     cp_a2a: bool = False) -> list[Collective]:
    """Every collective of one pass of `flow` (one micro-batch, forward and backward); a recomputed op's forward
    collectives once more (phase `recompute`)."""
    gathered: set[tuple[str, str]] = set()
    out: list[Collective] = []
    for op in flow.ops:
        cs = op_collectives(op, flow, axes, act_bytes, gathered, cp_a2a)
        out += cs
        if recomputed(op):
            out += [Collective(c.axis, c.kind, "recompute", c.tensor, c.op, c.nbytes) for c in cs
                    if c.phase == "forward"]
    return out


def stage_collectives(scn, stage) -> list[tuple[object, Collective]]:
    """(part, collective) of one micro-batch through `stage` on one GPU; a part's count multiplies its bytes."""
    from symmem.model import stage_parts

    axes = scn.parallel.axis_sizes()
    out = []
    for part in stage_parts(scn.model, stage, scn.convention):
        rec = scn.policy.recomputed if part.is_layers else (lambda op: False)
        out += [(part, c) for c in flow_collectives(part.flow, axes, scn.act_bytes, rec,
                                                    scn.parallel.cp_comm_type == "a2a")]
    return out


def stage_comm_bytes(scn, stage) -> dict[str, sympy.Expr]:
    """Bytes one GPU of `stage` sends per micro-batch, by process group (tp, etp, ep, cp, pp), closed form in b, s
    and the model's sizes."""
    totals: dict[str, sympy.Expr] = {}
    for part, c in stage_collectives(scn, stage):
        totals[c.axis] = totals.get(c.axis, sympy.Integer(0)) + part.count * c.nbytes
    if scn.parallel.pp > 1:
        totals["pp"] = pipeline_bytes(scn, stage)
    return {k: sympy.expand(v) for k, v in totals.items()}


def stage_comm_sources(scn, stage, axis: str) -> tuple[sympy.Expr, dict[sympy.Expr, list[str]]]:
    """`stage_comm_bytes(...)[axis]` with each monomial's collectives (for `symmem check`)."""
    from symmem.check.compare import monomials

    total = sympy.Integer(0)
    sources: dict[sympy.Expr, list[str]] = {}
    for part, c in stage_collectives(scn, stage):
        if c.axis != axis:
            continue
        term = sympy.expand(part.count * c.nbytes)
        total += term
        for mono in monomials(term):
            sources.setdefault(mono, []).append(f"{part.name}: {c.kind} ({c.phase}) of {c.tensor} at {c.op}")
    if axis == "pp" and scn.parallel.pp > 1:
        term = sympy.expand(pipeline_bytes(scn, stage))
        total += term
        for mono in monomials(term):
            sources.setdefault(mono, []).append("pipeline send of the stage's output / its input's gradient")
    return sympy.expand(total), sources


def pipeline_bytes(scn, stage) -> sympy.Expr:
    """Per micro-batch: the stage's output activation sent forward (unless last) and its input's gradient sent
    backward (unless first), the residual stream as the stage's last layer emits it (MLM pipeline_parallel/
    p2p_communication.py: one tensor each way per micro-batch). Under interleaved 1F1B each of the GPU's v model
    chunks sends its own (MLM schedules.py, forward_backward_pipelining_with_interleaving: a send per chunk), but
    the first chunk of the first stage receives no gradient to pass on and the last chunk of the last stage sends
    no activation."""
    model, axes = scn.model, scn.parallel.axis_sizes()
    kinds = model.layer_kinds()
    last = stage.layers[-1] if stage.layers else 0
    t = local_size(model.family.residual_dims(model, kinds[last]), axes) * scn.act_bytes
    v = scn.schedule.chunks if scn.schedule.name == "interleaved" else 1
    sends = 2 * v - (1 if stage.head else 0) - (1 if stage.embedding else 0)
    return sends * t


def dp_bytes(scn, stage) -> Fraction:
    """Bytes one GPU sends per iteration for data parallelism, exact: the distributed optimizer's gradient
    reduce-scatter and parameter all-gather (ZeRO 1 and 2; Megatron's DistributedOptimizer,
    distributed/param_and_grad_buffer.py), a plain all-reduce of the gradients without it (ZeRO 0), and under
    ZeRO-3 the parameters gathered again for every micro-batch's forward and backward. Dense parameters over DP,
    expert parameters over the expert data-parallel group.

    Under a profile with Megatron's DDP padding (megatron-te), the distributed optimizer reduce-scatters and
    all-gathers whole buckets, padding included: each parameter's start padded to 64 elements and the bucket's end
    to lcm(DP, 128) when the distributed optimizer is on (megatron-core 0.16.1 distributed/param_and_grad_buffer.py:
    638-666; the reduce-scatter's input is `bucket.grad_data`, :443-448, the all-gather's output
    `bucket.param_data`, :285-290). Held against Megatron-Core 0.16.1 on the CPU, to the byte
    (tests/validate/test_megatron_comm.py).

    Under DualPipe the GPU holds two stages (`Schedule.held_stages`): both stages' traffic, and the sum of the two
    copies of each stage's gradients, an all-reduce over the mirror pair of GPUs i and PP - 1 - i, which sends
    each gradient once (deepseek-ai/DualPipe@3da1bbe examples/example_dualpipe.py:168-174 adds the mirror copy's
    gradient into each)."""
    held = scn.schedule.held_stages(stage.index, scn.parallel.pp)
    total = sum((_dp_one(scn, scn.stages[i]) for i in held), Fraction(0))
    if len(held) > 1:
        from symmem.accounting.analysis import stage_params

        total += sum(stage_params(scn, scn.stages[i]).total for i in held) * scn.precision.grad_bytes
    return total


def _dp_one(scn, stage) -> Fraction:
    return sum((nb for _n, nb in dp_groups(scn, stage)), Fraction(0))


def dp_groups(scn, stage) -> list[tuple[int, Fraction]]:
    """`dp_bytes` of one stage by group: (its size, the bytes one GPU sends in it) for the dense parameters over DP
    (x CP) and the expert parameters over the expert data-parallel group, each where it sends anything."""
    from symmem.accounting.analysis import stage_params
    from symmem.accounting.params import MOE_GROUPS

    sp = stage_params(scn, stage)
    par, p, z = scn.parallel, scn.precision, int(scn.zero)
    pads = {"dense": 0, "expert": 0}
    if scn.profile.ddp_padding and z in (1, 2):  # without the distributed optimizer nothing is padded (:641, :661)
        from symmem.model import stage_parts
        from symmem.profiles import ddp_padding

        pads = ddp_padding(scn, stage, stage_parts(scn.model, stage, scn.convention), scn.size_values())
    float8_gather = _float8_gather(scn, stage) if z >= 3 else None
    out: list[tuple[int, Fraction]] = []
    for groups, n, pad in ((("dense",), par.dense_shard, pads["dense"]), (MOE_GROUPS, par.expert_dp, pads["expert"])):
        params = sum(int(sp.per_gpu[g]) for g in groups if g in sp.per_gpu)
        if n <= 1 or params == 0:
            continue
        ring = Fraction(n - 1, n)
        params += pad
        if z == 0:
            nb = 2 * params * p.grad_bytes * ring
        elif z < 3:
            nb = params * (p.grad_bytes + p.weight_bytes) * ring
        elif groups == ("dense",) and float8_gather:
            # the Float8 linears' weights gathered in float8 (1 byte), the others in the param dtype, after an
            # all-reduce of each Float8 weight's amax (4 bytes, a ring's 2 (n - 1)/n) that makes its scale
            # (torchao/float8/fsdp_utils.py:240-251, float8_scaling_utils.py `hp_tensor_to_float8_dynamic`)
            gathered, scales = float8_gather
            nb = (params * p.grad_bytes + 2 * scn.m * (gathered + 2 * 4 * scales)) * ring
        else:
            nb = params * (p.grad_bytes + 2 * scn.m * scn.gather_bytes) * ring  # gathered per micro-batch
        out.append((n, nb))
    return out


def _float8_gather(scn, stage) -> tuple[int, int] | None:
    """Under FSDP2's float8 all-gather: the bytes one GPU's stage gathers (its Float8 weights at 1 byte per
    element, the rest in the param dtype, TP-local, before the shard) and its Float8 weights' count; else None."""
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.accounting.timeline import Float8Gathered, float8_scales, gathered_bytes
    from symmem.model import stage_parts

    g = scn.gathered
    if not isinstance(g, Float8Gathered):
        return None
    axes, vals = scn.parallel.axis_sizes(), scn.size_values()
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    data = sum(p.count * gathered_bytes(g, p, axes, scales=False) for p in parts)
    return ceil_int(evaluate(data, vals)), sum(p.count * float8_scales(g, p) for p in parts)
