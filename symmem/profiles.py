"""Implementation profiles: what a framework keeps is a rule set (what each op saves and allocates), a model-state
layout and the framework's own buffers.

* `paper`: the paper's accounting (Korthikanti et al. 2022 as arXiv 2502.07846 applies it); no framework buffers.
* `torch-eager`: PyTorch eager autograd as Hugging Face transformers runs a model on one device.
* `megatron-local`: Megatron-Core 0.16.1 with its local (non-TransformerEngine) layer spec as `symmem measure
  --framework megatron-core` runs it on the CPU (FP32, distributed optimizer, no sequence parallelism): rule set
  `megatron-local` (symmem/rules/megatron_local_ops.py), the DDP buffers' padding, Adam's step counters, the
  attention-score buffer and the RoPE tables. Llama-family models.
* `megatron-te`: Megatron-Core at Megatron-LM commit 23e00ed0963c35382dfe8a5a94fb3cda4d21e133 with
  TransformerEngine 2.11 (BF16, distributed optimizer, FP32 gradient accumulation): rule set `megatron-te`
  (symmem/rules/megatron_te.py), Megatron's padded vocabulary, the DDP buffers' padding, TransformerEngine's dummy
  weight-gradient buffers, cuBLAS workspaces and the 1F1B loop's gradient buffers. Every constant that cannot be
  derived from the model is named, sourced and shown in the breakdown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy

from symmem.errors import SymmemError
from symmem.graph import Dataflow, Op, Tensor, local_size
from symmem.symbols import s as s_symbol

MiB = 1 << 20


@dataclass(frozen=True)
class Buffer:
    """A framework buffer held for the whole step: its bytes on one GPU and where the rule comes from."""

    name: str
    nbytes: int
    source: str


@dataclass(frozen=True)
class Profile:
    name: str
    rules: str
    description: str
    # the vocabulary the framework allocates: V -> padded V (tensor-parallel size given)
    padded_vocabulary: Callable[[int, int], int] | None = None
    # static buffers of one GPU of a stage: (scenario, stage, parts, values) -> buffers
    buffers: Callable | None = None
    # tensors alive during every backward event of a stage: (scenario, stage) -> [(name, Tensor)]; it may read of the
    # stage only `head` and `embedding` (the replay's ops are cached on those: accounting.reserved._micro_batch_ops)
    backward_tensors: Callable | None = None
    # the model-state layout it implies when chosen on the command line (None: the scenario's)
    precision: str | None = None  # a recipe of symmem.accounting.states
    zero: int | None = None  # Megatron's distributed optimizer shards master weights and moments: ZeRO-1
    convention: str | None = None  # the TP convention, where the model's family has it
    # sequence parallelism (and a sequence-sharded MoE block) when chosen on the command line without
    # --sequence-parallel/--no-sequence-parallel: the framework's way of running TP > 1
    sequence_parallel: bool = False
    # Megatron's DDP buffers: each parameter's start and each bucket's end padded (`_ddp_padding`); the distributed
    # optimizer's reduce-scatter and all-gather move the padding too (symmem.comm.dp_bytes)
    ddp_padding: bool = False
    # the order the framework allocates in (model build, buffers, optimizer, steps), when symmem knows it: then each
    # stage's reserved memory is derived by replaying PyTorch's caching allocator: "megatron"
    # (symmem.accounting.reserved: Megatron-LM's DDP and distributed optimizer) or "fsdp2"
    # (symmem.accounting.fsdp2_reserved: torchtitan 9dec370 under FSDP2, expandable segments)
    allocation_order: str | None = None
    # the model states of one GPU when the framework lays them out itself (FSDP2's padded shards): (scenario,
    # stage, parts, values) -> StateBytes; None: symmem.accounting.states' ZeRO layout
    states: Callable | None = None
    # k and v repeated to n_h heads before the attention (torchtitan 9dec370's `repeat_kv`; Llama's dataflow)
    repeat_kv: bool = False
    # the dataflow and attention implementation the framework's modules are (None: the scenario's)
    dataflow: str | None = None
    attn_impl: str | None = None
    # whose model code the layers are, where a family's differs from Hugging Face's: "torchtitan-gpu" or
    # "torchtitan-cpu" (torchtitan's DeepSeek-V3, symmem.blocks.torchtitan; its router's FP32 autocast runs on a
    # GPU only); None: Hugging Face's
    modules: str | None = None
    # bytes per element ZeRO-3 all-gathers the parameters in, when not the stored weights' (FSDP2 gathers in its
    # MixedPrecisionPolicy's param_dtype: the gathered blocks are BF16 while the shards are FP32)
    gather_bytes: int | None = None
    # how the framework spreads the layers over pipeline stages when no layout is given (a `LayoutSpec` kind;
    # None: the scenario's): "torchtitan" (symmem.parallel.layout.torchtitan_layers)
    layout: str | None = None
    # FSDP2 under pipelining as torch.distributed.pipelining runs it: every block unsharded through the step and the
    # gradients accumulated unsharded in the reduce dtype to the last micro-batch (symmem.accounting.timeline
    # `stage_events`), and each micro-batch's receive buffers kept (`_pipeline_recv_buffers`)
    pipelined_fsdp: bool = False
    # FSDP2's prefetching: each unit's parameter all-gather issued on its own stream while the unit before computes,
    # its gradients' reduce-scatter on another while the next computes (symmem.steptime.model `_dp_exposed`); what
    # the first forward all-gather and the last backward reduce-scatter gather: "root" (torchtitan 9dec370:
    # `fully_shard(model)` holds the embedding, the final norm and the output) or "embedding" (torchtitan 0.3.0:
    # the embedding its own unit, torchtitan/distributed/fsdp.py:185-190); None: no overlap
    dp_prefetch: str | None = None


# --------------------------------------------------------------------------------------------- megatron-te
TE_CUBLAS_WORKSPACE = 32 * MiB + 1024  # TE pytorch/cpp_extensions/gemm.py:31-36 (sm >= 9.0), one per device
TE_GROUPED_GEMM_STREAMS = 4  # TE gemm.py:50-56, tex.get_num_cublas_streams() (common/util/multi_stream.cpp:52-55)
TORCH_CUBLAS_WORKSPACE = 32 * MiB  # ATen CublasHandlePool.cpp parseChosenWorkspaceSize (sm90/sm100); uncertain
from symmem.parallel.ddp_buckets import BUCKET_ALIGN, PARAM_ALIGN  # noqa: E402,F401 - Megatron's buffer alignment


def megatron_vocabulary(v: int, tp: int) -> int:
    """NullTokenizer adds one end-of-document token (MLM megatron/training/tokenizer/tokenizer.py:822-823), then
    the size is rounded up to a multiple of make_vocab_size_divisible_by (128) x TP (tokenizer.py:115-128)."""
    step = 128 * tp
    return -(-(v + 1) // step) * step


def _feature_size(t: Tensor, axes, values) -> int:
    """The size of a tensor's trailing feature dims (those without b, s or a token count)."""
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.symbols import E_tok, b, s

    size = sympy.Integer(1)
    for d in reversed(t.dims):
        if d.size.free_symbols & {b, s, E_tok}:
            break
        size *= local_size((d,), axes)
    return ceil_int(evaluate(size, values))


def _te_weight_shapes(parts, axes, values) -> set[tuple[int, int]]:
    """(out, in) of every TransformerEngine weight of the stage, one per expert for grouped GEMMs: the members of a
    fused Megatron module (tag `module:NAME`, e.g. linear_qkv) are stacked along the output features."""
    return set(te_weight_shape_by_op(parts, axes, values).values())


def _weights_key(parts, axes, values) -> tuple:
    """What a stage's weight shapes depend on: its parts, the parallel sizes and the model's sizes; not b or s (a
    weight has neither, and `_feature_size` stops at the dims that do): a sweep asks at three s per arrangement."""
    from symmem.symbols import b, s

    return parts, axes, tuple((k, v) for k, v in values.items() if k is not b and k is not s)


_SHAPES: dict = {}  # `_weights_key` -> te_weight_shape_by_op's answer


def te_weight_shape_by_op(parts, axes, values) -> dict[tuple[str, str], tuple[int, int]]:
    """(part name, op name) -> (out, in) of the TransformerEngine weight each linear op multiplies by (`_te_weight_
    shapes`; every member of a fused module maps to the module's stacked shape)."""
    from symmem._cache import bounded

    return dict(bounded(_SHAPES, _weights_key(parts, axes, values), 1024,
                        lambda: _te_weight_shape_by_op(parts, axes, values)))


def _te_weight_shape_by_op(parts, axes, values) -> dict[tuple[str, str], tuple[int, int]]:
    shapes: dict[tuple[str, str], tuple[int, int]] = {}
    for part in parts:
        flow: Dataflow = part.flow
        fused: dict[str, list[Op]] = {}
        for op in flow.ops:
            if op.kind != "linear" or not op.weights or "routing" in op.tags:
                continue  # the router is Megatron's own F.linear, not a TE module
            module = next((t for t in op.tags if t.startswith("module:")), op.name)
            fused.setdefault(module, []).append(op)
        for ops in fused.values():
            x = flow.tensors[ops[0].inputs[0]]
            cols = _feature_size(x, axes, values)
            rows = sum(_feature_size(flow.tensors[o.outputs[0]], axes, values) for o in ops)
            for o in ops:
                shapes[(part.name, o.name)] = (rows, cols)
    return shapes


def _ddp_padding(weights: list[int], dp: int, bucket_size: int | None = None) -> int:
    """Extra elements of one DDP buffer of Megatron's parameters `weights` in registration order
    (`symmem.parallel.ddp_buckets.layout`: filled in reverse order, each parameter's start padded to 64 elements,
    each bucket's end to lcm(DP, 128); one bucket unless `bucket_size` is given)."""
    from symmem.parallel.ddp_buckets import layout

    return layout(weights, dp, bucket_size).padding


def ddp_span(weights: list[int]) -> int:
    """Elements of a DDP buffer before its bucket end is padded: every parameter but the first registered followed
    by padding to 64 elements (`_ddp_padding`)."""
    return (weights[0] + sum(-(-w // PARAM_ALIGN) * PARAM_ALIGN for w in weights[1:])) if weights else 0


def ddp_padding_bytes(pad: int, group: int, p) -> int:
    """Bytes of `pad` padding elements of a DDP buffer sharded over `group`: BF16 parameter and FP32 gradient
    buffers whole, the distributed optimizer's main copy and moments of the rank's share."""
    return pad * (p.weight_bytes + p.grad_bytes) + -(-pad // group) * (p.master_bytes + p.optimizer_bytes)


def ddp_padding(scn, stage, parts, values) -> dict[str, int]:
    """Padding elements of the stage's DDP buffers, {"dense": ..., "expert": ...} (see `_ddp_padding`; bucketed
    as `ddp_buckets.bucket_size_for` says)."""
    from symmem.parallel.ddp_buckets import bucket_size_for

    dense, expert = ddp_weights(scn, parts, values)
    size = bucket_size_for(scn, stage.index)
    return {"dense": _ddp_padding(dense, scn.parallel.dense_shard, size),
            "expert": _ddp_padding(expert, scn.parallel.expert_dp, size)}


def ddp_layouts(scn, stage) -> list[tuple[int, object]]:
    """(data-parallel group size, `ddp_buckets.BufferLayout`) of each of the stage's DDP buffers that holds
    parameters (dense, then expert), bucketed as `ddp_buckets.bucket_size_for` says."""
    from symmem.model import stage_parts
    from symmem.parallel.ddp_buckets import bucket_size_for, layout

    dense, expert = ddp_weights(scn, stage_parts(scn.model, stage, scn.convention), scn.size_values())
    size = bucket_size_for(scn, stage.index)
    distributed = int(scn.zero) in (1, 2)  # (without the distributed optimizer nothing is padded)
    return [(group, layout(ws, group, size, distributed))
            for ws, group in ((dense, scn.parallel.dense_shard), (expert, scn.parallel.expert_dp)) if ws]


def ddp_weights(scn, parts, values) -> tuple[list[int], list[int]]:
    """The local parameter sizes of the stage's dense and expert DDP buffers, in registration order. The ops of
    one fused Megatron module (tag `module:NAME`: linear_qkv, linear_fc1) are one parameter, padded once."""
    from symmem._cache import bounded

    axes = scn.parallel.axis_sizes()
    dense, expert = bounded(_WEIGHTS, _weights_key(parts, axes, values), 1024,
                            lambda: _ddp_weights(parts, axes, values))
    return list(dense), list(expert)


_WEIGHTS: dict = {}  # `_weights_key` -> ddp_weights' answer


def _ddp_weights(parts, axes, values) -> tuple[tuple[int, ...], tuple[int, ...]]:
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.accounting.params import weight_uses

    tags = {(part.name, op.name): next((t for t in op.tags if t.startswith("module:")), None)
            for part in parts for op in part.flow.ops}
    dense: list[list[int]] = []  # per copy of a part: its parameters in order, fused modules summed
    expert: list[int] = []
    fused: dict[tuple, int] = {}  # (part, module) -> index into `per_part`
    per_part: dict[str, list[int]] = {}
    counts: dict[str, int] = {}
    for use in weight_uses(parts):
        n = ceil_int(evaluate(local_size(use.weight.dims, axes), values))
        if use.weight.group == "routed_expert":
            per = n // max(1, ceil_int(evaluate(local_size(use.weight.dims[:1], axes), values)))
            expert += [per] * (use.count * (n // per))
            continue
        ws = per_part.setdefault(use.part, [])
        counts[use.part] = use.count
        module = tags.get((use.part, use.op))
        if module is not None and (use.part, module) in fused:
            ws[fused[(use.part, module)]] += n
        else:
            if module is not None:
                fused[(use.part, module)] = len(ws)
            ws.append(n)
    for part, ws in per_part.items():
        dense += [ws] * counts[part]
    return tuple(w for ws in dense for w in ws), tuple(expert)


def megatron_check(scn) -> None:
    """Refuse, in one line, a model Megatron-Core's GPTModel cannot build (the family says what is missing)."""
    gap = scn.model.family.framework_gap(scn.model, "megatron")
    if gap is not None:
        raise SymmemError(f"profile {scn.profile.name}: {scn.model.name}: Megatron-Core 0.16.1's GPTModel has no "
                          f"{gap}; use --profile paper or torch-eager")


def _megatron_buffers(scn, stage, parts, values) -> list[Buffer]:
    megatron_check(scn)
    axes = scn.parallel.axis_sizes()
    out: list[Buffer] = []
    p = scn.precision
    pads = ddp_padding(scn, stage, parts, values)
    for label, group in (("dense", scn.parallel.dense_shard), ("expert", scn.parallel.expert_dp)):
        pad = pads[label]
        if pad:
            nbytes = ddp_padding_bytes(pad, group, p)
            out.append(Buffer(f"DDP {label} buffer padding ({pad:,} elements)", nbytes,
                              "MLM megatron/core/distributed/param_and_grad_buffer.py:550-576"))
    shapes = _te_weight_shapes(parts, axes, values)
    if shapes:
        out.append(Buffer(f"TE dummy weight-gradient buffers ({len(shapes)} shapes, BF16)",
                          sum(2 * r * c for r, c in shapes),
                          "TE pytorch/module/base.py:64-92 (one per distinct weight shape); MLM "
                          "megatron/core/tensor_parallel/layers.py:573-602 (the output layer)"))
    out.append(Buffer("TE cuBLAS workspace", TE_CUBLAS_WORKSPACE, "TE pytorch/cpp_extensions/gemm.py:31-36"))
    if any(op.kind == "dispatch" for part in parts for op in part.flow.ops):
        out.append(Buffer(f"TE grouped-GEMM cuBLAS workspaces ({TE_GROUPED_GEMM_STREAMS} streams)",
                          TE_GROUPED_GEMM_STREAMS * TE_CUBLAS_WORKSPACE,
                          "TE pytorch/cpp_extensions/gemm.py:50-56; common/util/multi_stream.cpp:52-55"))
    if stage.head or any("routing" in op.tags for part in parts for op in part.flow.ops):
        out.append(Buffer("PyTorch cuBLAS workspace (output layer / router matmuls; size uncertain for this build)",
                          TORCH_CUBLAS_WORKSPACE, "ATen cuda/CublasHandlePool.cpp parseChosenWorkspaceSize"))
    ropes = [(op, part.flow) for part in parts for op in part.flow.ops if op.kind == "rope"]
    if ropes:  # the rotary frequency table: FP32 [s, 1, 1, d_rope], lru-cached, one per process
        op, flow = ropes[0]
        d_rope = _feature_size(Tensor("rope", flow.tensors[op.outputs[0]].dims[-1:]), axes, values)
        out.append(Buffer("RoPE frequency table (FP32, cached)", 4 * values[s_symbol] * d_rope,
                          "MLM megatron/core/models/common/embeddings/rotary_pos_embedding.py:150-151"))
    return out


def _pipeline_gradients(scn, stage) -> list[tuple[str, Tensor]]:
    """The 1F1B loop (MLM megatron/core/pipeline_parallel/schedules.py): a non-last stage keeps the received output
    gradient for its whole backward; a non-first stage keeps the previous micro-batch's input gradient until the
    next backward_step returns (schedules.py:2236-2255)."""
    from symmem.blocks._dims import B, H, seq

    out = []
    if not stage.head:
        out.append(("received output gradient (1F1B)", Tensor("pp.output_grad", (B, seq("sp"), H))))
    if not stage.embedding:
        out.append(("previous input gradient (1F1B)", Tensor("pp.input_grad", (B, seq("sp"), H))))
    return out


# -------------------------------------------------------------------------------------------- megatron-local
def _local_buffers(scn, stage, parts, values) -> list[Buffer]:
    """Megatron-Core 0.16.1's local spec (symmem/rules/megatron_local.py and megatron_local_peak.py, which cite
    each): the DDP buffers' padding for Megatron's own parameters (linear_qkv and linear_fc1 fused), Adam's `step`
    per parameter shard (those of DP rank 0), the global attention-score buffer, the RoPE tables and the
    optimizer's scalars. Llama-family models only."""
    from symmem.rules import megatron_local as ml
    from symmem.symbols import b as b_symbol

    model = scn.model
    if model.family.name != "llama":
        raise SymmemError(f"profile 'megatron-local': {model.family.name} models are not modelled (llama only)")
    v = {k.name: n for k, n in model.substitutions().items()}
    d = ml.Dims("llama", v["h"], v["L"], v["n_h"], v["n_kv"], v["d_h"], v["h_F"], v["V"], 0, True, False,
                model.tie_word_embeddings)
    tp, dp = scn.parallel.tp, scn.parallel.dense_shard
    keep = [f"decoder.layers.{i}." for i in stage.layers]
    if stage.embedding:
        keep.append("embedding.")
    if stage.head:
        keep += ["decoder.final_layernorm.", "output_layer."]
    ws = [w for w in ml.weights(d, tp, 1, 0) if w.name.startswith(tuple(keep))]
    p = scn.precision
    from symmem.parallel.ddp_buckets import bucket_size_for

    bufs = ml.ddp_buffers(ws, dp, True, p.weight_bytes == 2, bucket_size_for(scn, stage.index))
    pad = sum(buf.numel - sum(w.numel for w, _, _ in buf.ranges) for buf in bufs)
    steps = sum(len(buf.shard(dp, 0)) for buf in bufs)
    b_, s_ = values[b_symbol], values[s_symbol]
    return [
        Buffer(f"DDP buffer padding ({pad:,} elements)", pad * (p.weight_bytes + p.grad_bytes),
               "megatron/core/distributed/param_and_grad_buffer.py:635-665, :701-735 (0.16.1)"),
        Buffer(f"Adam step counters ({steps}, FP32)", 4 * steps, "torch/optim/adam.py _init_group; "
               "megatron/core/optimizer/distrib_optimizer.py:112-171 (DP rank 0's shards)"),
        Buffer("attention-score buffer [b n, s, s] (global memory buffer)",
               b_ * (d.heads // tp) * s_ * s_ * scn.act_bytes,
               "megatron/core/transformer/dot_product_attention.py:189 (0.16.1)"),
        Buffer("RoPE table [s, d] and inv_freq [d/2] (FP32)", 4 * (s_ * d.head_dim + d.head_dim // 2),
               "megatron/core/models/common/embeddings/rotary_pos_embedding.py (0.16.1)"),
        Buffer("optimizer and loss-scale scalars", 12, "megatron/core/optimizer/optimizer.py:481, :485; "
               "transformer/multi_token_prediction.py:546 (0.16.1)"),
    ]


# ----------------------------------------------------------------------------------------------- torchtitan
ALLOCATOR_BLOCK = 512  # bytes: the CUDA caching allocator's smallest block (CUDACachingAllocator.cpp kMinBlockSize)


def _torchtitan_cp_check(scn) -> None:
    """9dec370's CP is torch's `context_parallel` (train.py:269-279 there): the kv shards exchanged by all-gather (its
    default `context_parallel_rotate_method`, config_manager.py:364-377), the sequence split round-robin into 2 x CP
    chunks for the causal mask's load balance (torch's `_generate_round_robin_indices`)."""
    par = scn.parallel
    if par.cp_comm_type != "p2p":
        raise SymmemError(f"profile {scn.profile.name}: --cp-comm-type {par.cp_comm_type}: Megatron's all-to-all CP is "
                          "not what torchtitan 9dec370 runs (torch's ring attention, its kv shards all-gathered); "
                          "drop --cp-comm-type")
    if scn.s % (2 * par.cp):
        raise SymmemError(f"profile {scn.profile.name}: -s {scn.s} with --cp {par.cp}: torch's context_parallel splits "
                          f"the sequence into 2 x CP = {2 * par.cp} chunks (its load balance for the causal mask); "
                          f"use a sequence length divisible by {2 * par.cp}")


def _torchtitan_check(scn) -> None:
    par = scn.parallel
    other = [f"--{k} {getattr(par, k)}" for k in ("pp", "cp", "ep") if getattr(par, k) != 1
             and not (k == "pp" and scn.profile.pipelined_fsdp)
             and not (k == "cp" and scn.profile.name == TORCHTITAN_9DEC370)]
    version = TORCHTITAN_COMMITS.get(scn.profile.name, "0.3.0")
    if other:
        modelled = ("FSDP (and HSDP) data parallelism, TP and PP" if scn.profile.pipelined_fsdp
                    else "FSDP (and HSDP) data parallelism and CP" if scn.profile.name == TORCHTITAN_9DEC370
                    else "FSDP and HSDP data parallelism")
        raise SymmemError(f"profile {scn.profile.name}: {', '.join(other)}: only {modelled} are modelled for "
                          f"torchtitan {version} so far; "
                          f"set {' and '.join(o.split()[0] for o in other)} 1")
    if par.pp > 1:
        _torchtitan_pp_check(scn)
    if par.cp > 1:
        _torchtitan_cp_check(scn)
    if par.tp > 1:
        # TP as torchtitan 0.3.0 applies it (symmem/rules/torchtitan.py, `under_tp`), measured on the CPU with
        # sequence parallelism and with no or full checkpointing
        if scn.profile.name in TORCHTITAN_COMMITS:
            raise SymmemError(f"profile {scn.profile.name}: --tp {par.tp}: {version}'s TP (PyTorch's "
                              "parallelize_module and loss_parallel) is not modelled; use --profile torchtitan, or "
                              "--tp 1")
        if not par.sequence_parallel:
            raise SymmemError(f"profile {scn.profile.name}: TP {par.tp} without sequence parallelism is not modelled "
                              "(torchtitan's default, enable_sequence_parallel, is on); drop --no-sequence-parallel")
    ag = scn.precision.low_precision.fsdp_float8_all_gather if scn.precision.low_precision else None
    if ag is not None and par.tp > 1:
        # torchtitan shards Float8 linears under TP with torchao's float8 TP styles (Float8ColwiseParallel, ...),
        # whose casts and gathers are another path: not measured, not modelled
        raise SymmemError(f"profile {scn.profile.name}: TP {par.tp} with {FLOAT8_ALL_GATHER_FLAG}: Float8 linears "
                          "under TP (torchao's float8 TP styles) are not modelled; use TP 1")
    if scn.precision.low_precision is not None and par.tp > 1:
        # torchtitan 0.3.0 shards a Float8Linear's weight as any Linear's (models/common/linear.py `parallelize`, no
        # float8 TP style), and its forward then multiplies a local tensor by the DTensor weight: on this CPU the
        # step fails ("aten.mm.default got mixed torch.Tensor and DTensor", torchao/float8/float8_linear.py:89 under
        # the DTensor backend), so nothing was measured to model (symmem measure refuses it too)
        raise SymmemError(f"profile {scn.profile.name}: TP {par.tp} with --precision {scn.precision.name}: Float8 "
                          "linears under TP are not modelled (torchtitan 0.3.0's TP of a Float8Linear fails on the "
                          "CPU: a local input times a DTensor weight); use TP 1")
    if scn.precision.low_precision is not None and scn.recompute_name == "selective-op" and not scn.compiled:
        # a Float8 linear runs aten._scaled_mm, which per-op AC's every-other-mm rule does not count: 0.3.0's save
        # list keeps every one (PyTorch's compute-intensive ops, torch/_functorch/partitioners.py
        # get_default_op_list; torchtitan/distributed/activation_checkpoint.py:87-93), 9dec370's none (its
        # `_save_list` has aten.mm alone), so what per-op AC keeps under Float8 is another set, not modelled eagerly.
        # Compiled it is (symmem/accounting/compiled.py `float8_linear`, measured): the policy sees the outer aten.mm
        # of the Float8 tensors, counted every other, and what runs inside it follows its answer
        raise SymmemError(f"profile {scn.profile.name}: precision {scn.precision.name} with recompute selective-op: "
                          "per-op checkpointing of Float8 linears (aten._scaled_mm) is not modelled eagerly; use "
                          "--recompute none or full with Float8, or --compile")
    fam = scn.model.family.name
    if fam == "deepseek" and scn.profile.name not in TORCHTITAN_COMMITS:
        _torchtitan_deepseek_check(scn)
    elif fam != "llama":
        raise SymmemError(f"profile {scn.profile.name}: {scn.model.name} (family {fam}): torchtitan's Llama 3 and "
                          "(0.3.0) DeepSeek-V3 are modelled (its Qwen3 is not yet)")


# the schedules of torch.distributed.pipelining modelled, as symmem names them (torchtitan's
# `pipeline_parallel_schedule` beside): the single-stage ones, whose micro-batches in flight are symmem's
# (torch/distributed/pipelining/schedules.py:1050-1056, Schedule1F1B: min(M, PP - i) warm-up forwards before the first
# backward; ScheduleGPipe: every forward first), and interleaved 1F1B, v stages per rank in torch's order
# (`Schedule.order`, runtime "torch")
TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}


def _torchtitan_pp_check(scn) -> None:
    """What of torchtitan 0.3.0's pipelining is modelled: 1F1B (its default `pipeline_parallel_schedule`,
    torchtitan/config/configs.py:210), GPipe, Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble and DualPipeV
    (the zero bubbles: Llama, no TP, no checkpointing, what was measured), the layers split its way (with TP and
    sequence parallelism, checked with TP above)."""
    name, par = scn.profile.name, scn.parallel
    if scn.schedule.name not in TORCHTITAN_SCHEDULES:
        raise SymmemError(f"profile {name}: schedule {scn.schedule.label!r} with PP {par.pp}: torchtitan's "
                          f"{', '.join(TORCHTITAN_SCHEDULES.values())} and InterleavedZeroBubble are modelled "
                          "(--schedule 1f1b, gpipe, interleaved:V or interleaved-zb:V), ZBVZeroBubble and "
                          "DualPipeV too (--schedule zbv, dualpipev)")
    if scn.schedule.zero_bubble:
        # measured on the CPU for Llama 3 under FSDP, no TP, no checkpointing (tests/validate/test_fsdp2_pipeline.py)
        if par.tp > 1 or scn.model.family.name != "llama" or scn.recompute_name != "none":
            raise SymmemError(f"profile {name}: schedule {scn.schedule.label} with "
                              + ("TP " + str(par.tp) if par.tp > 1 else
                                 f"{scn.model.name} (family {scn.model.family.name})"
                                 if scn.model.family.name != "llama" else f"recompute {scn.recompute_name}")
                              + ": torch's zero bubble is modelled for Llama under FSDP without TP or checkpointing; "
                              "use --schedule interleaved:V")
    if scn.stage_layout.kind != "torchtitan":
        raise SymmemError(f"profile {name}: a {scn.stage_layout.kind} layout with PP {par.pp}: torchtitan splits the "
                          "layers its own way (symmem.parallel.layout.torchtitan_layers); drop --layers-per-stage and "
                          "--first-stage-layers/--last-stage-layers")


def _pipeline_recv_buffers(scn, stage) -> list[Buffer]:
    """torch.distributed.pipelining's receive buffers, made for every micro-batch when the stage is first run and kept
    (torch/distributed/pipelining/stage.py:2251-2272 `_setup_forward_recv_info`: a stage but the first receives
    each micro-batch's input, [b, s, h] in the activations' dtype; :2286-2316 `_create_grad_recv_info`: a stage
    but the last the gradient of each micro-batch's output, the same shape). Under TP with sequence parallelism
    a stage sends the local shard of its DTensor output and receives into [b, s / TP, h] (the receiver re-wraps it,
    torchtitan/distributed/pipeline_parallel.py:41-62). Measured on the CPU: two stages, four micro-batches,
    4 x 4,096 bytes on each, 4 x 2,048 under TP 2 (tests/validate/test_fsdp2_pipeline.py)."""
    if scn.parallel.pp == 1:
        return []
    one = pipeline_stage_output(scn, last=False)  # what the stage before sends (and gets the gradient of)
    # each of the GPU's stages has its own (v under interleaving): all but the model's first receive activations,
    # all but its last gradients
    v = len(stage.chunk_layers) or 1
    out = []
    for what, n, where in (("activations", v - stage.embedding, "2251-2272"), ("gradients", v - stage.head,
                                                                              "2286-2316")):
        if n:
            of = f"{n} stage{'s' * (n > 1)} x {scn.m} micro-batches" if v > 1 else f"{scn.m} micro-batches"
            out.append(Buffer(f"pipeline receive buffers, {what} ({of})", n * scn.m * one,
                              f"torch/distributed/pipelining/stage.py:{where}"))
    return out


def pipeline_stage_output(scn, last: bool) -> int:
    """Bytes of one micro-batch's output of a stage, which torch.distributed.pipelining keeps from the stage's
    forward to the end of its backward (`PipelineStage.fwd_cache`, torch/distributed/pipelining/stage.py:913-917;
    popped at :963-966 into a local the backward holds): the model's last stage's is its logits, [b, s, V] in the
    activations' dtype (torchtitan's loss upcasts a copy, components/loss.py:32-60; under TP with loss parallelism
    the vocabulary shard), every other stage's the hidden state it sends, [b, s, h] (under TP with sequence
    parallelism the sequence shard). Nothing else holds either: the loss saves its FP32 log-probabilities, not the
    BF16 logits, and no op of the stage saves its own last output."""
    width = scn.model.value("V") if last else scn.model.value("h")
    return scn.b * scn.s * width * scn.act_bytes // scn.parallel.tp


def _torchtitan_deepseek_check(scn) -> None:
    """What of torchtitan 0.3.0's DeepSeek-V3 is modelled (symmem.blocks.torchtitan): its layers with the local token
    dispatcher (EP 1, checked above), under FSDP/HSDP and TP with sequence parallelism, every AC mode; no MTP
    (torchtitan's flavors build none by default: `num_mtp_layers = 0`,
    models/deepseek_v3/__init__.py:319-323, :533-537)."""
    name = scn.profile.name
    if scn.model.model_type != "deepseek_v3":
        raise SymmemError(f"profile {name}: model_type {scn.model.model_type!r}: torchtitan's DeepSeek-V3 is "
                          "modelled; DeepSeek-V2 is not a torchtitan model")
    if scn.model.option("moe_layer_freq") != 1:
        raise SymmemError(f"profile {name}: moe_layer_freq = {scn.model.option('moe_layer_freq')}: torchtitan's "
                          "DeepSeek-V3 makes every block after first_k_dense_replace an MoE block (moe_layer_freq 1)")
    if scn.model.value("h_E") % scn.parallel.tp:
        raise SymmemError(f"profile {name}: TP {scn.parallel.tp}: must divide moe_intermediate_size = "
                          f"{scn.model.value('h_E')} (torchtitan splits the experts' hidden dimension over TP)")
    if scn.parallel.tp > 1 and not scn.parallel.moe_sp:
        raise SymmemError(f"profile {name}: TP {scn.parallel.tp} with the MoE block not sequence-sharded: torchtitan "
                          "reduce-scatters the MoE block's output to the sequence shards (models/common/"
                          "moe_sharding.py); set moe_sequence_parallel = true (--moe-sequence-parallel)")
    if scn.routing.kind != "paper":
        raise SymmemError(f"profile {name}: routing = {scn.routing.kind!r}: torchtitan's local token dispatcher keeps "
                          "every routed slot (b s N_r per rank) whatever the routing; drop --routing")
    if scn.mtp and scn.model.n_mtp:
        raise SymmemError(f"profile {name}: --mtp with num_nextn_predict_layers = {scn.model.n_mtp}: torchtitan "
                          "trains DeepSeek-V3 without MTP unless asked (num_mtp_layers = 0), and its MTP is not "
                          "modelled; run with --no-mtp")


TORCHTITAN_9DEC370 = "torchtitan-2412"  # the profile of torchtitan 9dec370, the code of its published H100 runs
# the profile of torchtitan e7c0cae (2025-06-11), the code of Trainy's published H200 runs
# (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md)
TORCHTITAN_E7C0CAE = "torchtitan-2506"
# the profiles of torchtitan's code before 0.3.0, by the commit they write: q, k and v three products, one root FSDP
# unit (the embedding, the final norm and the output), the last block not resharded after forward, TP and PP not
# modelled
TORCHTITAN_COMMITS = {TORCHTITAN_9DEC370: "9dec370", TORCHTITAN_E7C0CAE: "e7c0cae"}


def fuses_qkv(scn) -> bool:
    """torchtitan 0.3.0 runs q, k and v as one `wqkv` parameter; 9dec370 and e7c0cae (the `torchtitan-2412` and
    `torchtitan-2506` profiles) as three."""
    return scn.profile.name not in TORCHTITAN_COMMITS


FLOAT8_ALL_GATHER_FLAG = "--enable-fsdp-float8-all-gather"


def with_fsdp_float8_all_gather(scn):
    """`scn` with FSDP2 gathering its Float8 linears' weights in float8 (torchao's `Float8LinearConfig.
    enable_fsdp_float8_all_gather`, torchtitan 9dec370's `float8.enable_fsdp_float8_all_gather`; torchtitan 0.3.0
    builds its Float8Linear from the config and has no such option: the weight wrapper is torchao's
    `Float8Linear.from_float`, torchao/float8/float8_linear.py:324-334). Refused, in one line, where it is not
    FSDP2 with torchao's tensorwise recipe over a Llama model whose Float8 linears all have dims that are multiples
    of 16 (torchtitan leaves the others in BF16: torchtitan/components/quantization/utils.py:16-30)."""
    from symmem.accounting.evaluate import evaluate
    from symmem.graph import global_size
    from symmem.model import stage_parts
    from symmem.precision.gemm import gemm_split
    from symmem.precision.recipes import with_fsdp_float8_all_gather as with_ag

    flag = FLOAT8_ALL_GATHER_FLAG
    if scn.profile.gather_bytes is None:
        raise SymmemError(f"{flag}: profile {scn.profile.name} does not run FSDP2; use --profile torchtitan, "
                          f"torchtitan-cpu, {TORCHTITAN_9DEC370} or {TORCHTITAN_E7C0CAE}")
    if scn.precision.name != "torchao-float8-tensorwise":
        raise SymmemError(f"{flag} with --precision {scn.precision.name}: torchao gathers float8 weights under its "
                          "tensorwise recipe only (torchao/float8/float8_linear.py:330); use --precision "
                          "torchao-float8-tensorwise")
    if int(scn.zero) != 3:
        raise SymmemError(f"{flag} with --zero {int(scn.zero)}: the float8 all-gather is FSDP's (ZeRO-3); use "
                          "--zero 3")
    if scn.model.family.name != "llama":
        raise SymmemError(f"{flag}: {scn.model.name} (family {scn.model.family.name}): modelled for Llama models (the "
                          "grouped experts' float8 path is another converter)")
    # 9dec370 filtered "output" (its default), e7c0cae's llama3_8b.toml too (`[float8] filter_fqns = ["output"]`);
    # 0.3.0 filters no FQN by default
    head = scn.profile.name not in TORCHTITAN_COMMITS
    out = scn.replace(precision=with_ag(scn.precision, fused_qkv=fuses_qkv(scn), head=head))
    ag = out.precision.low_precision.fsdp_float8_all_gather
    vals = scn.size_values()
    for stage in scn.stages:
        for part in stage_parts(scn.model, stage, scn.convention, scn.flow_impl):
            for op in part.flow.ops:
                if ag.is_float8(op):
                    split = gemm_split(op, part.flow)  # the weight's N output and K input features
                    n, k = (evaluate(global_size(d), vals) for d in (split.n, split.k))
                    if k % 16 or n % 16:
                        raise SymmemError(f"{flag}: {op.name} is {n} x {k}: torchtitan converts a linear to "
                                          "Float8 only when both dims are multiples of 16, and one that stays BF16 "
                                          "is not modelled under the float8 all-gather")
    return out


def _torchtitan_states(scn, stage, parts, values, on_gpu: bool, step_on_host: bool = False):
    """FSDP2's padded shards on rank 0, the fullest (symmem.accounting.fsdp): FP32 parameters and gradients, AdamW's
    two FP32 moments and its step scalars; on a GPU the fused AdamW's steps are device scalars, each taking the
    allocator's smallest block; on the CPU 4 bytes each. The foreach AdamW (torchtitan 9dec370's default,
    torchtitan/optimizer.py:132-138 at that commit, `--optimizer.fused` off) keeps them on the host
    (torch/optim/adam.py `_init_group`: a device scalar only when fused or capturable): none on the GPU."""
    from symmem.accounting.fsdp import fsdp_params, rank_states, shard_degree
    from symmem.accounting.states import StateBytes

    _torchtitan_check(scn)
    params = fsdp_params(parts, values, fuse_qkv=fuses_qkv(scn), axes=scn.parallel.axis_sizes())
    r = rank_states(params, shard_degree(scn), 0, step_on_device=False)  # the step scalars, below
    step = 0 if step_on_host else len(params) * (ALLOCATOR_BLOCK if on_gpu else 4)
    return StateBytes(r.params, r.grads, r.exp_avg + r.exp_avg_sq + step)


def _rope_cache(scn, stage, parts, values) -> list[Buffer]:
    """torchtitan's ComplexRoPE cache, one per attention module (GQAttention builds its own `rope`,
    torchtitan/models/common/attention.py:960; the cache is (max_seq_len, head_dim / 2) complex64,
    models/common/rope.py:185-193), a model buffer FSDP2 does not shard: 8 x max_seq_len x head_dim / 2 bytes per
    layer. max_seq_len is the config's `max_position_embeddings` (torchtitan's llama3 flavors set 131,072,
    models/llama3/__init__.py:138, as Llama 3.1's config does)."""
    m = scn.model
    if m.family.name == "deepseek":
        return _deepseek_v3_buffers(scn, stage)
    head = m.value("h") // m.value("n_h")
    n = m.max_positions
    if n is None:
        raise SymmemError(f"model {m.name}: max_position_embeddings is not given; torchtitan's RoPE cache is sized by "
                          "it")
    return [Buffer(f"RoPE cache, {len(stage.layers)} layer(s) x [{n:,}, {head // 2}] complex64",
                   len(stage.layers) * n * (head // 2) * 8, "torchtitan/models/common/rope.py:185-193")]


DSV3_ROPE_MAX_SEQ_LEN = 4096 * 4  # every torchtitan 0.3.0 DeepSeek-V3 flavor's rope max_seq_len (models/deepseek_v3/
# __init__.py:358, :428, :502, :577), whatever the HF config's max_position_embeddings


def _deepseek_v3_buffers(scn, stage) -> list[Buffer]:
    """torchtitan 0.3.0's DeepSeek-V3 buffers: each attention's ComplexRoPE cache, [16,384, d_hr / 2] complex64
    (models/deepseek_v3/model.py:91, models/common/rope.py:185-193), and each MoE block's FP32 `expert_bias_E` and
    `tokens_per_expert_E`, [N] each (models/common/moe.py:380-395; load_balance_coeff 1e-3 by default, so the bias
    exists). FSDP2 does not shard buffers."""
    m = scn.model
    n_moe = sum(1 for i in stage.layers if m.layer_kinds()[i] == "moe")
    rope = len(stage.layers) * DSV3_ROPE_MAX_SEQ_LEN * (m.value("d_hr") // 2) * 8
    return [Buffer(f"RoPE cache, {len(stage.layers)} layer(s) x [{DSV3_ROPE_MAX_SEQ_LEN:,}, {m.value('d_hr') // 2}] "
                   "complex64", rope, "torchtitan/models/common/rope.py:185-193"),
            Buffer(f"expert_bias_E and tokens_per_expert_E, {n_moe} MoE layer(s) x 2 x [{m.value('N')}] FP32",
                   n_moe * 2 * 4 * m.value("N"), "torchtitan/models/common/moe.py:380-395")]


def _freqs_cis_2412(scn, stage, parts, values) -> list[Buffer]:
    """torchtitan 9dec370's one RoPE table, a buffer of the model (not per layer): `precompute_freqs_cis(dim //
    n_heads, max_seq_len * 2)`, complex64, with max_seq_len the training sequence (train.py:107 at that commit,
    `model_config.max_seq_len = job_config.training.seq_len`; torchtitan/models/llama/model.py:417-422)."""
    return _freqs_cis(scn, values, 2, "torchtitan/models/llama/model.py:368, :417-422 (9dec370)")


def _freqs_cis_2506(scn, stage, parts, values) -> list[Buffer]:
    """torchtitan e7c0cae's one RoPE table: `precompute_freqs_cis(dim // n_heads, max_seq_len)`, the training
    sequence's rows, no longer twice (torchtitan/models/llama3/model.py:455-465 at that commit, "we removed the 2x
    relaxing in our CP enablement PR"; max_seq_len = training.seq_len, :45)."""
    return _freqs_cis(scn, values, 1, "torchtitan/models/llama3/model.py:104, :455-465 (e7c0cae)")


def _freqs_cis(scn, values, rows_per_token: int, source: str) -> list[Buffer]:
    m = scn.model
    head = m.value("h") // m.value("n_h")
    n = rows_per_token * int(values[s_symbol])
    table = [Buffer(f"RoPE table freqs_cis [{n:,}, {head // 2}] complex64", n * (head // 2) * 8, source)]
    if scn.parallel.cp > 1:
        # torch's `context_parallel` (train.py:269-279 at 9dec370 passes freqs_cis among its buffers) clones each
        # buffer it restores after the step, then shards the buffer in place (`resize_` to the shard, which keeps the
        # storage): the whole table twice through the step (torch/distributed/tensor/experimental/_attention.py,
        # `context_parallel`: `original_buffers = [... b.clone() ...]`)
        table.append(Buffer(f"RoPE table's copy kept by context_parallel to restore it [{n:,}, {head // 2}] "
                            "complex64", n * (head // 2) * 8,
                            "torch/distributed/tensor/experimental/_attention.py, context_parallel"))
    return table


def _with_pipeline_buffers(buffers: Callable) -> Callable:
    """The profile's buffers and, under PP, the pipeline's receive buffers."""
    def both(scn, stage, parts, values) -> list[Buffer]:
        # checked here too: DualPipe derives the states of a 1F1B copy of the scenario (analysis.dualpipe_states),
        # which would pass the schedule check the states make
        _torchtitan_check(scn)
        return [*buffers(scn, stage, parts, values), *_pipeline_recv_buffers(scn, stage)]
    return both


def _torchtitan_profile(name: str, on_gpu: bool, version: str = "torchtitan 0.3.0's Llama 3",
                        buffers: Callable = _rope_cache, step_on_host: bool = False,
                        allocation_order: str | None = None, where: str | None = None,
                        pipelining: bool = True, first_unit: str = "embedding", repeat_kv: bool = False) -> Profile:
    """`pipelining`: torchtitan 0.3.0 under PP is modelled (its split, torch.distributed.pipelining's FSDP2 handling
    and receive buffers); 9dec370's is not."""
    from functools import partial

    where = where or ("a GPU: fused RMSNorm, fused AdamW" if on_gpu else "the CPU: composite RMSNorm, for-loop AdamW")
    return Profile(
        name, name, f"{version} under FSDP2 (BF16 compute, FP32 reduce), as it runs on {where}",
        buffers=_with_pipeline_buffers(buffers) if pipelining else buffers, precision="fp32", zero=3,
        allocation_order=allocation_order, layout="torchtitan" if pipelining else None, pipelined_fsdp=pipelining,
        dp_prefetch=first_unit,
        states=partial(_torchtitan_states, on_gpu=on_gpu, step_on_host=step_on_host),
        dataflow="hf", attn_impl="sdpa", modules="torchtitan-gpu" if on_gpu else "torchtitan-cpu", repeat_kv=repeat_kv,
        # torchtitan's enable_sequence_parallel defaults to on (torchtitan/config/configs.py:160): under TP the
        # norms and residuals run on s/t rows
        sequence_parallel=True,
        # torchtitan's default mixed_precision_param = "bfloat16" (torchtitan/config/job_config.py), the
        # MixedPrecisionPolicy of apply_fsdp_to_decoder (torchtitan/models/llama3/parallelize.py): FSDP2 casts the
        # FP32 shard to BF16 before the all-gather (_fully_shard/_fsdp_collectives.py foreach_all_gather copy-in)
        gather_bytes=2)


PROFILES = {
    "paper": Profile("paper", "paper", "the paper's accounting (Korthikanti et al. 2022, arXiv 2502.07846)"),
    "torch-eager": Profile("torch-eager", "torch-eager", "PyTorch eager autograd (transformers on one device)"),
    "megatron-te": Profile(
        "megatron-te", "megatron-te",
        "Megatron-Core 23e00ed0 + TransformerEngine 2.11, BF16, distributed optimizer",
        padded_vocabulary=megatron_vocabulary, buffers=_megatron_buffers, backward_tensors=_pipeline_gradients,
        precision="megatron", zero=1, convention="megatron",
        # Megatron-Core runs TP > 1 with --sequence-parallel (the measured runs do; MLM
        # megatron/core/model_parallel_config.py:388-391 requires it with expert and tensor parallelism together;
        # megatron/training/arguments.py:836-842 turns it off at TP 1, where it changes nothing), its MoE block
        # sequence-sharded
        sequence_parallel=True, allocation_order="megatron", ddp_padding=True),
    "megatron-local": Profile(
        "megatron-local", "megatron-local",
        "Megatron-Core 0.16.1, local (non-TE) spec, FP32, distributed optimizer, no sequence parallelism "
        "(measured on the CPU by symmem measure --framework megatron-core)",
        buffers=_local_buffers, precision="fp32", zero=1, ddp_padding=True),
    "torchtitan": _torchtitan_profile("torchtitan", on_gpu=True, allocation_order="fsdp2"),
    "torchtitan-cpu": _torchtitan_profile("torchtitan-cpu", on_gpu=False),
    # the code of torchtitan's published H100 benchmarks (benchmarks/llama3_h100_202412_torchtitan.md): torchtitan
    # 9dec370 (2024-12-26) with the torch of 2024-12-23 (symmem/rules/torchtitan.py)
    TORCHTITAN_9DEC370: _torchtitan_profile(TORCHTITAN_9DEC370, on_gpu=True,
                                            version="torchtitan 9dec370's Llama 3 (2024-12-26)",
                                            buffers=_freqs_cis_2412, step_on_host=True, allocation_order="fsdp2",
                                            where="a GPU: its own RMSNorm, foreach AdamW", pipelining=False,
                                            first_unit="root", repeat_kv=True),
    # the code of Trainy's published H200 runs (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md): torchtitan
    # e7c0cae (2025-06-11) with torch 2.8.0a0+5228986c39 (symmem/rules/torchtitan.py): 9dec370's model and FSDP units
    # with nn.RMSNorm, a RoPE table of s rows, the loss compiled with the blocks, fused AdamW
    TORCHTITAN_E7C0CAE: _torchtitan_profile(TORCHTITAN_E7C0CAE, on_gpu=True,
                                            version="torchtitan e7c0cae's Llama 3 (2025-06-11)",
                                            buffers=_freqs_cis_2506, allocation_order="fsdp2",
                                            where="a GPU: nn.RMSNorm (ATen's composite), fused AdamW",
                                            pipelining=False, first_unit="root", repeat_kv=True),
}


def profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise SymmemError(f"profile = {name!r}: unknown; known: {', '.join(PROFILES)}") from None
