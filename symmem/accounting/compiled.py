"""What a torch.compile'd region keeps for backward: AOTAutograd's min-cut partitioner (torch 2.13) over a dataflow.

torch.compile traces a region's forward and backward as one joint graph of aten ops and splits it with
`min_cut_rematerialization_partition` (torch/_functorch/partitioners.py, chosen by inductor at
torch/_inductor/compile_fx.py:2311-2313): the backward may recompute what the forward made instead of keeping it,
and a minimum cut of a flow graph decides which forward values cross to the backward. The rules it cuts by, with
torch 2.13.0's defaults (torch/_functorch/config.py: `ban_recompute_not_in_allowlist` :170,
`ban_recompute_materialized_backward` :165, `ban_recompute_reductions` :174, `treat_parameters_as_free_to_save`
:53, `activation_memory_budget` 1.0 :202), each a line of partitioners.py:

* **Banned from recomputation** (`should_ban_recomputation`, :2200-2255; an infinite edge from the source, :2308):
  a value made by an op outside the recomputable allowlist (`get_default_op_list`, :2826-2990: pointwise ops, casts,
  views, `sum`/`mean`/`amax` reductions and indexing are on it; `mm`, the SDPA kernels, `view_as_complex` and
  `view_as_real` are not); a non-view value a backward op that cannot fuse with it reads (`is_materialized_backwards`,
  :2186: a matrix product's input, SDPA's q, k, v, output and logsumexp); a reduction whose output is less than a
  quarter of its inputs (a norm's mean square); the region's inputs (primals, :2384).
* **Needed by the backward**: what each op's backward reads (its inputs or outputs; `required_bw_nodes`, an
  infinite edge to the sink, :2358).
* **Weights** (`get_node_weight`, :2265-2303): a value's bytes times 1.1^max(min(distance to the backward, 100), 1),
  doubled when every user can fuse with it (`is_materialized`, :2259); parameters and buffers are free (:2278).
* **Per-op checkpointing** inside the region (`torch.utils.checkpoint` with a policy, traced as a higher-order op):
  an op answered MUST_SAVE is banned (:2206), every other op of the region must be recomputed (`must_recompute`,
  :166-170, an infinite edge to the sink, :2360-2372); so a saved op's output crosses only if the backward needs it.
  A checkpointed region that runs a random op again (the flash SDPA, for its dropout) also keeps the generator
  state it replays with (`run_and_save_rng_state`): the CPU's mt19937 state is 5,056 bytes (measured), CUDA's
  Philox seed and offset 16 (aten/src/ATen/cuda/CUDAGeneratorImpl.cpp `get_state`: seed_size + offset_size).
* **Used far apart** (`ban_recompute_used_far_apart`, :2460-2500): a fusible op reading a value after the first
  unfusible op the value's readers lead to is banned (DeepSeek-V3's router: the gather of the scores after top-k).
* **One zeros tensor**: the graph's common-subexpression pass (`config.cse`, :3762) merges the zeros an `index`'s
  backward scatters into with a forward fill of the same shape (DeepSeek-V3's combine), which is then kept.

The cut is a maximum flow's (Edmonds-Karp, below) on the dataflow with each op decomposed into the aten values its
compiled graph makes (`_MODELS`: an RMSNorm's FP32 upcast, mean square, rstd and normalized input; RoPE's complex
product; the loss's max, sum of exponentials and log-probabilities). Its weights are evaluated at the model's sizes
and one token (every value of a block is proportional to b·s); the cut is a structure, sized symbolically after.
Not modelled: `ban_recompute_long_fusible_chains` (:2502-2540, a chain of over 100 fusible ops), which no block
here has. Held to the byte against torch.compile on the CPU: torchtitan's Llama 3 and DeepSeek-V3 blocks under
every AC mode (tests/validate/test_fsdp2_compile.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sympy

from symmem.errors import SymmemError
from symmem.graph import FP32, INT64, Dataflow, Dim, DType, Op, Tensor, global_size, local_size, unsplit

FP8_E4M3 = DType("float8_e4m3fn", 1)
BOOL = DType("bool", 1)

COMPUTE, POINTWISE, REDUCTION, VIEW, INPUT = "compute", "pointwise", "reduction", "view", "input"
PARAM = "param"  # a parameter read inside the region: free to keep (config.treat_parameters_as_free_to_save)
INF = float("inf")


@dataclass(frozen=True)
class Node:
    """A value of the compiled graph: a tensor of the dataflow or one an op makes inside (an RMSNorm's rstd)."""

    tensor: Tensor
    cls: str  # COMPUTE (not recomputable), POINTWISE, REDUCTION, VIEW (an alias of its one dependency), INPUT
    deps: tuple[str, ...] = ()
    # what a per-op checkpoint policy says of it: "op" (its op's answer: the op's outputs, and what a Float8 matrix
    # product computes inside its own dispatch), "max" (`aten.max`, on torchtitan's save list: always MUST_SAVE),
    # "recompute" (any other op: PREFER_RECOMPUTE)
    policy: str = "op"


@dataclass(frozen=True)
class Decomposed:
    """An op as its compiled graph has it: the values it makes, and what its backward reads, each with whether
    the backward op reading it can fuse with it (a pointwise backward) or not (a matrix product, SDPA's)."""

    nodes: tuple[Node, ...]
    needs: tuple[tuple[str, bool], ...] = ()
    # the zero-filled tensors its backward allocates (as `index`'s backward, index_put into zeros of the source's
    # shape): the graph's common-subexpression pass (config.cse, partitioners.py:3762) makes one node of a forward
    # fill with the same shape and dtype, which the backward then reads
    backward_zeros: tuple[Tensor, ...] = ()


def _t(flow: Dataflow, name: str) -> Tensor:
    return flow.tensors[name]


def _split(t: Tensor, axis: str, axes) -> bool:
    """Whether `t` is split over `axis` on this GPU (the axis in a dim, and its size above 1)."""
    return axes is not None and axes.of(axis) != 1 and any(axis in d.axes for d in t.dims)


def _linear(op: Op, flow: Dataflow, axes=None) -> Decomposed:
    """A matrix product: its backward reads its input (grad_W = grad^T x). Under TP with sequence parallelism, as
    DTensor runs torchtitan's plan inside the compiled graph: a column-parallel product (its input on s/TP rows, its
    output on all) reads its input all-gathered, a functional collective off the allowlist, so the gathered input
    is banned and kept (the rows' shard is then not read); a row-parallel one (its output on s/TP rows) makes its
    full-sequence partial sum and reduce-scatters it (both off the allowlist)."""
    (x,), (y,) = op.inputs, op.outputs
    xt, yt = _t(flow, x), _t(flow, y)
    if _split(xt, "sp", axes) and not _split(yt, "sp", axes):
        g = f"{x}.gathered"
        return Decomposed((Node(Tensor(g, unsplit(xt.dims, "sp"), xt.dtype), COMPUTE, (x,)), Node(yt, COMPUTE, (g,))),
                          ((g, False),))
    if _split(yt, "sp", axes) and not _split(xt, "sp", axes):
        partial = f"{y}.partial"
        return Decomposed((Node(Tensor(partial, unsplit(yt.dims, "sp"), yt.dtype), COMPUTE, (x,)),
                           Node(yt, COMPUTE, (partial,))), ((x, False),))
    return Decomposed((Node(yt, COMPUTE, (x,)),), ((x, False),))


def _rmsnorm(op: Op, flow: Dataflow) -> Decomposed:
    """x32 = x.float(); ms = mean(x32^2) (a reduction to one value a row); rstd = rsqrt(ms + eps);
    normed = x32 * rstd; y = (normed * w).to(x) (ATen's composite rms_norm, aten/src/ATen/native/layer_norm.cpp, and
    torch/_decomp/decompositions.py:1946-2001 for the fused kernel: the same values). The backward reads x32, rstd
    (grad of x) and normed (grad of w), all pointwise."""
    (x,), (y,) = op.inputs, op.outputs
    xt, yt = _t(flow, x), _t(flow, y)
    rows = xt.dims[:-1] + (Dim(1),)
    n = {k: f"{y}.{k}" for k in ("x_fp32", "mean_square", "rstd", "normed_fp32")}
    return Decomposed((
        Node(Tensor(n["x_fp32"], xt.dims, FP32), POINTWISE, (x,)),
        Node(Tensor(n["mean_square"], rows, FP32), REDUCTION, (n["x_fp32"],)),
        Node(Tensor(n["rstd"], rows, FP32), POINTWISE, (n["mean_square"],)),
        Node(Tensor(n["normed_fp32"], xt.dims, FP32), POINTWISE, (n["x_fp32"], n["rstd"])),
        Node(yt, POINTWISE, (n["normed_fp32"],)),
    ), ((n["x_fp32"], True), (n["rstd"], True), (n["normed_fp32"], True)))


def _rope_complex(op: Op, flow: Dataflow) -> Decomposed:
    """torchtitan's RoPE (models/common/rope.py:255-265): view_as_complex(q.float()) * freqs_cis, view_as_real, cast
    back. `view_as_complex` and `view_as_real` are not on the allowlist, so the rotated value in FP32 is banned; the
    backward reads only the table (a buffer, free)."""
    nodes = []
    for x, y in zip(op.inputs, op.outputs, strict=True):
        yt = _t(flow, y)
        nodes += [Node(Tensor(f"{y}.rotated_fp32", yt.dims, FP32), COMPUTE, (x,)),
                  Node(yt, POINTWISE, (f"{y}.rotated_fp32",))]
    return Decomposed(tuple(nodes))


def _sdpa(op: Op, flow: Dataflow) -> Decomposed:
    nodes = tuple(Node(_t(flow, y), COMPUTE, op.inputs) for y in op.outputs)
    return Decomposed(nodes, tuple((t, False) for t in (*op.inputs, *op.outputs)))


def _pointwise_needing(*which: int) -> Callable[[Op, Dataflow], Decomposed]:
    """A pointwise op whose backward reads its inputs `which` (silu: its input; mul: both; add: none)."""
    def model(op: Op, flow: Dataflow) -> Decomposed:
        return Decomposed(tuple(Node(_t(flow, y), POINTWISE, op.inputs) for y in op.outputs),
                          tuple((op.inputs[i], True) for i in which))
    return model


def _alias(op: Op, flow: Dataflow) -> Decomposed:
    """An identity (a region's boundary) or a view: the same storage as its input."""
    return Decomposed(tuple(Node(_t(flow, y), VIEW, (op.inputs[0],)) for y in op.outputs))


def _contiguous(op: Op, flow: Dataflow) -> Decomposed:
    (y,) = op.outputs
    if _t(flow, y).view_of is not None:  # already contiguous (the CPU flash kernel's output layout)
        return _alias(op, flow)
    return Decomposed((Node(_t(flow, y), POINTWISE, op.inputs),))  # clone, on the allowlist


def _reshape(op: Op, flow: Dataflow) -> Decomposed:
    """A reshape: a view where the dataflow says so, else a copy (torchtitan 9dec370's `repeat_kv`, expand then
    reshape to n_h heads: an `expand` and a `clone`, on the allowlist; the SDPA that reads it bans it, as any input
    of a matrix product)."""
    (y,) = op.outputs
    if _t(flow, y).view_of is not None:
        return _alias(op, flow)
    return Decomposed((Node(_t(flow, y), POINTWISE, op.inputs),))


def _cross_entropy(op: Op, flow: Dataflow) -> Decomposed:
    """torchtitan's loss compiled on its own (components/loss.py:309-315): `F.cross_entropy(logits.float(), labels,
    reduction="sum")` as log_softmax's decomposition (amax, exp, sum, log: two reductions to one value a row) and
    nll_loss. The backward reads the log-probabilities (pointwise: grad - exp(logp) * sum(grad)) and the labels."""
    (logits,), (loss,) = op.inputs, op.outputs
    lt = _t(flow, logits)
    rows = lt.dims[:-1]
    one = rows + (Dim(1),)
    n = {k: f"{logits}.{k}" for k in ("labels", "fp32", "row_max", "sum_exp", "logsumexp", "log_probs")}
    return Decomposed((
        Node(Tensor(n["labels"], rows, INT64), INPUT),
        Node(Tensor(n["fp32"], lt.dims, FP32), POINTWISE, (logits,)),
        Node(Tensor(n["row_max"], one, FP32), REDUCTION, (n["fp32"],)),
        Node(Tensor(n["sum_exp"], one, FP32), REDUCTION, (n["fp32"], n["row_max"])),
        Node(Tensor(n["logsumexp"], one, FP32), POINTWISE, (n["sum_exp"],)),
        Node(Tensor(n["log_probs"], lt.dims, FP32), POINTWISE, (n["fp32"], n["row_max"], n["logsumexp"])),
        Node(_t(flow, loss), REDUCTION, (n["log_probs"], n["labels"])),
    ), ((n["log_probs"], True), (n["labels"], False)))


def compiled_loss_workspace(op: Op, flow: Dataflow, phase: str, axes, on_cpu: bool = False) -> list:
    """What the compiled loss (`_cross_entropy`, one device's logits) allocates beyond what it keeps: inductor runs
    its forward as fused kernels that read the BF16 logits and write values a row (the max and the log of the sum of
    exponentials, both kept) and the loss, and its backward as one fused kernel that writes the BF16 gradient of the
    logits (the `.float()`'s backward fused in; on the CPU beside one FP32 value a row, the rows' sums of the
    incoming gradient, which the GPU's kernel keeps in registers). No FP32 tensor of the logits' size exists, forward
    or backward, where the eager loss holds three (symmem/rules/torchtitan.py `_loss_workspace`): the joint-graph
    pass `scatter_upon_const_tensor` (torch/_inductor/fx_passes/joint_graph.py) turns nll_loss's zeros-and-scatter
    into a pointwise select. Read off inductor's generated code: on the CPU for `reduction="sum"` (torchtitan 0.3.0)
    and `"mean"` (e7c0cae) (tests/validate/test_compiled_loss.py), and inductor's CUDA code for e7c0cae's at Llama 3
    8B's logits, generated here with the device faked (tools/compile_study/cuda_codegen_loss.py)."""
    from symmem.rules._base import Saved

    if phase == "forward" or not on_cpu:
        return []
    logits = _t(flow, op.inputs[0])
    return [Saved(Tensor(f"{logits.name}.grad_row_sum", logits.dims[:-1] + (Dim(1),), FP32),
                  f"the compiled loss's FP32 row sums of the incoming gradient ({op.name})")]


def compiled_loss_workspace_cpu(op: Op, flow: Dataflow, phase: str, axes) -> list:
    """`compiled_loss_workspace` of inductor's C++ kernels."""
    return compiled_loss_workspace(op, flow, phase, axes, on_cpu=True)


def _cross_entropy_parallel(op: Op, flow: Dataflow) -> Decomposed:
    """torchtitan 0.3.0's loss under TP (loss-parallel, `_LossParallelCrossEntropy`, components/loss.py:113-213)
    compiled: the local vocabulary shard's log-probabilities by two all-reduces (max, sum of exponentials: off the
    allowlist), then in the backward `(grad_input + exp(log_probs)) * where(labels != ignore, grad, 0)`, where
    `grad_input` (zeros with -1 at each row's label in this shard) depends on the labels alone: the whole factor
    before the gradient is a forward value, and the partitioner keeps it (one FP32 tensor of the local logits'
    shape) with the labels' mask [N, 1] (bool) instead of the log-probabilities and the labels (measured: TP 2)."""
    (logits,), (loss,) = op.inputs, op.outputs
    lt = _t(flow, logits)
    rows = lt.dims[:-1]
    one = rows + (Dim(1),)
    n = {k: f"{logits}.{k}" for k in ("labels", "fp32", "row_max", "max_all", "sum_exp", "sum_all", "log_probs",
                                      "mask", "grad_input", "grad_factor")}
    return Decomposed((
        Node(Tensor(n["labels"], rows, INT64), INPUT),
        Node(Tensor(n["fp32"], lt.dims, FP32), POINTWISE, (logits,)),
        Node(Tensor(n["row_max"], one, FP32), REDUCTION, (n["fp32"],)),
        Node(Tensor(n["max_all"], one, FP32), COMPUTE, (n["row_max"],)),  # all-reduce
        Node(Tensor(n["sum_exp"], one, FP32), REDUCTION, (n["fp32"], n["max_all"])),
        Node(Tensor(n["sum_all"], one, FP32), COMPUTE, (n["sum_exp"],)),  # all-reduce
        Node(Tensor(n["log_probs"], lt.dims, FP32), POINTWISE, (n["fp32"], n["max_all"], n["sum_all"])),
        Node(Tensor(n["mask"], one, BOOL), POINTWISE, (n["labels"],)),
        # zeros with -1 at each row's label: an index_put, not recomputed (else the BF16 logits, a region input
        # half the bytes, would be kept to recompute the factor from: they are not, measured)
        Node(Tensor(n["grad_input"], lt.dims, FP32), COMPUTE, (n["labels"],)),
        Node(Tensor(n["grad_factor"], lt.dims, FP32), POINTWISE, (n["grad_input"], n["log_probs"])),
        Node(_t(flow, loss), COMPUTE, (n["log_probs"], n["labels"])),  # the gather and its all-reduce
    ), ((n["grad_factor"], True), (n["mask"], True)))


def _loss(op: Op, flow: Dataflow, axes=None) -> Decomposed:
    """The loss, loss-parallel where its logits are split over the vocabulary (TP)."""
    logits = _t(flow, op.inputs[0])
    parallel = axes is not None and axes.of("tp") != 1 and "tp" in logits.dims[-1].axes
    return (_cross_entropy_parallel if parallel else _cross_entropy)(op, flow)


def _not_recomputable(needs: tuple[int, ...] = ()) -> Callable[[Op, Dataflow], Decomposed]:
    """An op off the allowlist (a batched or grouped matrix product, `cat`, `topk`, `sort`, `scatter_add`, the
    routing's counts): its outputs are banned; its backward reads its inputs `needs` and cannot fuse with them."""
    def model(op: Op, flow: Dataflow) -> Decomposed:
        return Decomposed(tuple(Node(_t(flow, y), COMPUTE, op.inputs) for y in op.outputs),
                          tuple((op.inputs[i], False) for i in needs))
    return model


def _indexing(op: Op, flow: Dataflow) -> Decomposed:
    """`index` / `gather` (on the allowlist, partitioners.py get_default_op_list): recomputable from the source and
    the indices; the backward scatters into zeros of the source's shape (`index_put`, `scatter_add`), reading the
    indices (not fusible)."""
    return Decomposed(tuple(Node(_t(flow, y), POINTWISE, op.inputs) for y in op.outputs), ((op.inputs[1], False),),
                      backward_zeros=(_t(flow, op.inputs[0]),))


def _same_dtype(a: DType, b: DType, act_bytes: int) -> bool:
    """Whether two dtypes are one once the activation dtype is resolved (2 bytes: BF16, 4: FP32)."""
    def name(d: DType) -> str:
        return {2: "bf16", 4: "fp32", 1: "fp8"}[act_bytes] if d.nbytes is None else d.name
    return name(a) == name(b)


def _cast(op: Op, flow: Dataflow) -> Decomposed:
    """A dtype conversion (`_to_copy`, on the allowlist); to the dtype it already has it is no op at all
    (`partition`)."""
    return Decomposed(tuple(Node(_t(flow, y), POINTWISE, op.inputs) for y in op.outputs))


def _softmax(op: Op, flow: Dataflow) -> Decomposed:
    """Softmax (decomposed to `prepare_softmax_online` and pointwise ops, on the allowlist) and sigmoid: the
    backward reads the output (grad * y - y * sum(grad * y); grad * y * (1 - y))."""
    (y,) = op.outputs
    return Decomposed((Node(_t(flow, y), POINTWISE, op.inputs),), ((y, True),))


def float8_linear(op: Op, flow: Dataflow, module: str, gathered: bool = False) -> Decomposed:
    """torchao's Float8Linear, tensorwise (float8/float8_linear.py:29-149, `matmul_with_hp_or_float8_args`), as its
    compiled graph has it with `torch._scaled_mm` (a GPU's path, and the CPU's with emulate off). The forward casts
    the input and the weight: amax = max(abs(t)) (a reduction to one value, in the tensor's dtype), scale =
    448 / amax (FP32), t8 = (t * scale) in float8, and the product reads t8 and the FP32 reciprocals of the scales.
    The backward casts again from what the forward saved in high precision (the input, the weight): the weight's
    cast is the forward's own node, merged by the graph's common-subexpression pass (the same ops on the same
    transposed parameter), so its amax and the reciprocal of its scale (a `_scaled_mm` operand in the backward) are
    read; the input's is not (the backward casts the input reshaped to 2-D, other nodes), so the backward reads the
    input through pointwise ops and a reduction: fusible, recomputable. `module`: the Float8Linear the op belongs to
    (torchtitan's wqkv is one module for q, k and v: one weight, one amax, one scale).

    `gathered`: FSDP2 gathers the weight in float8 (torchao's `enable_fsdp_float8_all_gather`): the region reads the
    gathered float8 data, a parameter (free to keep), and its FP32 scale (the unsharded Float8TrainingTensor's,
    computed before the all-gather, torchao float8/fsdp_utils.py), and casts nothing of the weight: no weight amax.
    Measured under per-op and full AC on torchtitan 0.3.0's block (tests/validate/test_fsdp2_compile.py; its q, k
    and v one product, the rule the same for each of three). Without AC the partitioner keeps the
    column-major float8 copy the backward's `_scaled_mm` reads for some products and not others (the last two of a
    block, measured), a rule not found: refused (`Scenario._check_compiled`)."""
    (x,), (y,) = op.inputs, op.outputs
    xt, yt = _t(flow, x), _t(flow, y)
    wdims = op.weights[0].dims
    w = f"{module}.float8_weight"
    n = {k: f"{module}.{k}" for k in ("weight_amax", "weight_scale", "weight_inv_scale", "weight_fp8")}
    # the input's cast is one per input tensor: products reading one input (w1 and w3) share it (CSE)
    i = {k: f"{x}.float8_{k}" for k in ("amax", "scale", "inv_scale", "data")}
    cast_input = (
        Node(Tensor(i["amax"], (), xt.dtype), REDUCTION, (x,), "max"),
        Node(Tensor(i["scale"], (), FP32), POINTWISE, (i["amax"],), "recompute"),
        Node(Tensor(i["inv_scale"], (), FP32), POINTWISE, (i["scale"],)),
        Node(Tensor(i["data"], xt.dims, FP8_E4M3), POINTWISE, (x, i["scale"]), "recompute"),
        Node(yt, COMPUTE, (i["data"], n["weight_fp8"], i["inv_scale"], n["weight_inv_scale"])))
    if gathered:
        return Decomposed((
            Node(Tensor(n["weight_fp8"], wdims, FP8_E4M3), PARAM),  # the gathered float8 data: free to keep
            Node(Tensor(n["weight_scale"], (), FP32), INPUT),
            Node(Tensor(n["weight_inv_scale"], (), FP32), POINTWISE, (n["weight_scale"],)),
            *cast_input,
        ), ((x, True), (n["weight_fp8"], True), (n["weight_inv_scale"], False)))
    return Decomposed((
        Node(Tensor(w, wdims, xt.dtype), PARAM),  # the parameter: free to keep
        Node(Tensor(n["weight_amax"], (), xt.dtype), REDUCTION, (w,), "max"),
        Node(Tensor(n["weight_scale"], (), FP32), POINTWISE, (n["weight_amax"],), "recompute"),
        Node(Tensor(n["weight_inv_scale"], (), FP32), POINTWISE, (n["weight_scale"],)),
        Node(Tensor(n["weight_fp8"], wdims, FP8_E4M3), POINTWISE, (w, n["weight_scale"]), "recompute"),
        *cast_input,
    ), ((x, True), (n["weight_amax"], True), (n["weight_fp8"], True), (n["weight_inv_scale"], False)))


def _sum(op: Op, flow: Dataflow) -> Decomposed:
    """A sum over a dimension (a reduction on the allowlist); its backward expands the gradient, reading nothing."""
    return Decomposed(tuple(Node(_t(flow, y), REDUCTION, op.inputs) for y in op.outputs))


def _autocast_weight(op: Op, flow: Dataflow) -> Decomposed:
    """CUDA's FP32 autocast copy of the router gate's BF16 weight (torchtitan/models/common/moe.py:297-299): a cast
    of a parameter that the gate's backward reads (grad @ W, not fusible), so banned and kept, as eager keeps it."""
    (y,) = op.outputs
    return Decomposed((Node(_t(flow, y), COMPUTE),), ((y, False),))


_MODELS: dict[str, Callable[[Op, Dataflow], Decomposed]] = {
    "linear": _linear, "rmsnorm": _rmsnorm, "rope": _rope_complex, "sdpa_flash": _sdpa,
    "silu": _pointwise_needing(0), "mul": _pointwise_needing(0, 1), "div": _pointwise_needing(0, 1),
    "add": _pointwise_needing(), "sum": _sum,
    "scale": _pointwise_needing(), "cast": _cast, "softmax": _softmax, "sigmoid": _softmax,
    "autocast_weight": _autocast_weight,
    "region": _alias, "split": _alias, "reshape": _reshape, "view": _alias, "reduce_scatter": _alias,
    "contiguous": _contiguous, "cross_entropy": _loss,
    # bmm (the math attention's two products), _grouped_mm, cat, topk (its values unread by any gradient),
    # torchtitan's scatter_add (its backward gathers by the index, torchtitan/ops/scatter_add.py:28-43), and the
    # routing's index arithmetic (sort, histc, cumsum: no gradient)
    "matmul": _not_recomputable((0, 1)), "grouped_mm": _not_recomputable((0, 1)), "concat": _not_recomputable(),
    "argtopk": _not_recomputable(), "scatter_add": _not_recomputable((0,)), "no_grad": _not_recomputable(),
    "index": _indexing, "gather": _indexing,
}

_PARALLEL_AWARE = (_linear, _loss)  # the models that read the parallel sizes (TP's gathers, its loss-parallel)

# What the policy says of a value an op makes inside a checkpointed region, given the value's `Node.policy` ("op" or
# "max"): "save" (MUST_SAVE) or "recompute" (PREFER_RECOMPUTE, which the partitioner treats as must-recompute)
Decision = Callable[[Op, str], str]


@dataclass(frozen=True)
class CutResult:
    saved: tuple[tuple[Tensor, Op, str], ...]  # (tensor, the op that made it, why)


def partition(ops: tuple[Op, ...], flow: Dataflow, sizes: Mapping[sympy.Symbol, int], act_bytes: int,
              decide: Decision | None = None, float8: Callable[[Op], str | None] | None = None,
              axes=None, float8_gathered: bool = False) -> CutResult:
    """The values the compiled region `ops` keeps for its backward (the module docstring's rules). `float8`: the
    Float8Linear module a linear op belongs to (None: not one; `float8_linear`); `axes`: the parallel sizes, to weigh
    each value at one GPU's size (None: the unsplit sizes); `float8_gathered`: FSDP2 gathers the Float8 weights in
    float8."""
    nodes: dict[str, Node] = {}
    made_by: dict[str, Op] = {}
    needs: list[tuple[str, bool]] = []
    zeros: list[Tensor] = []
    for op in ops:
        try:
            model = _MODELS[op.kind]
        except KeyError:
            raise SymmemError(f"op kind = {op.kind!r} ({op.name}): --compile has no model of what torch.compile's "
                              f"partitioner makes of it (modelled: {', '.join(sorted(_MODELS))})") from None
        module = float8(op) if float8 is not None and op.kind == "linear" else None
        d = (float8_linear(op, flow, module, float8_gathered) if module is not None
             else model(op, flow, axes) if model in _PARALLEL_AWARE else model(op, flow))
        if op.kind == "cast" and all(_same_dtype(_t(flow, x).dtype, nd.tensor.dtype, act_bytes)
                                     for x, nd in zip(op.inputs, d.nodes, strict=True)):
            d = _alias(op, flow)  # `.to(dtype)` to its own dtype returns the tensor itself
        for nd in d.nodes:
            nodes.setdefault(nd.tensor.name, nd)
            made_by.setdefault(nd.tensor.name, op)  # a shared value (one input's Float8 cast) is its first maker's
        needs += d.needs
        zeros += d.backward_zeros
    for nd in list(nodes.values()):  # the region's inputs: primals
        for dep in nd.deps:
            if dep not in nodes:
                nodes[dep] = Node(_t(flow, dep), INPUT)
    # a view is its base: resolve every name to the value that owns the storage
    def base(name: str) -> str:
        while nodes[name].cls == VIEW:
            name = nodes[name].deps[0]
        return name

    for z in zeros:  # a forward fill the backward's own zeros are merged with (`Decomposed.backward_zeros`)
        shape = tuple(d.size for d in z.dims)
        fill = next((n for n, nd in nodes.items() if nd.cls == COMPUTE and not nd.deps
                     and tuple(d.size for d in nd.tensor.dims) == shape
                     and _same_dtype(nd.tensor.dtype, z.dtype, act_bytes)), None)
        if fill is not None:
            needs.append((fill, False))
    # in forward order: the region's inputs first, then each op's values as it makes them
    values = sorted((n for n in nodes if nodes[n].cls != VIEW), key=lambda n: nodes[n].cls not in (INPUT, PARAM))
    deps = {n: tuple(dict.fromkeys(base(d) for d in nodes[n].deps)) for n in values}
    users: dict[str, list[str]] = {n: [] for n in values}
    for n in values:
        for d in deps[n]:
            users[d].append(n)
    needed: dict[str, bool] = {}  # value -> whether every backward reader can fuse with it
    for n, fusible in needs:
        b = base(n)
        needed[b] = needed.get(b, True) and fusible

    # distance to the backward (partitioners.py:3798-3806): 1 for a value the backward reads, else 1 + its users'
    dist: dict[str, float] = {}
    for n in reversed(values):  # ops come in forward order: users after their dependencies
        ds = [dist[u] + 1 for u in users[n] if u in dist]
        if n in needed:
            ds.append(1)
        dist[n] = min(ds) if ds else 1e9

    def fusible_value(n: str) -> bool:
        return nodes[n].cls in (POINTWISE, REDUCTION, VIEW)

    def materialized(n: str) -> bool:  # is_materialized: a user that cannot fuse with it (or a primal)
        if nodes[n].cls in (INPUT, PARAM) or not fusible_value(n):
            return True
        return any(not fusible_value(u) for u in users[n]) or needed.get(n) is False

    def nbytes(n: str) -> float:
        t = nodes[n].tensor
        per = act_bytes if t.dtype.nbytes is None else t.dtype.nbytes
        # (one GPU's: under TP a gathered input is TP times its rows' shard)
        size = sympy.sympify(global_size(t.dims) if axes is None else local_size(t.dims, axes)).subs(sizes)
        return float(size.subs({sym: 1 for sym in size.free_symbols})) * per  # one token: b = s = 1

    def banned(n: str) -> str | None:
        nd = nodes[n]
        if nd.cls == PARAM:
            return "a parameter"
        if nd.cls == INPUT:
            return "an input of the compiled region"
        if decide is not None and n in made_by:
            choice = policy_of(n)
            if choice == "save":
                return "its op is marked MUST_SAVE by the checkpoint's policy"
            if choice == "recompute":
                return None
        if nd.cls == COMPUTE:
            return "its op is not on the partitioner's recomputable allowlist"
        if needed.get(n) is False:
            return "a backward op that cannot fuse with it reads it (materialized in backward)"
        if nd.cls == REDUCTION and nbytes(n) * 4 < sum(nbytes(d) for d in deps[n]):
            return "a reduction to under a quarter of its inputs"
        if n in far_apart:
            return far_apart[n]
        return None

    def policy_of(n: str) -> str:
        p = nodes[n].policy
        return "recompute" if p == "recompute" else decide(made_by[n], p)

    def must_recompute(n: str) -> bool:
        return decide is not None and n in made_by and policy_of(n) == "recompute"

    # the flow graph of partitioners.py:2330-2420: v_in -> v_out at the value's weight; producer_out -> user_in
    cap: dict[str, dict[str, float]] = {}

    def edge(a: str, b: str, c: float) -> None:
        cap.setdefault(a, {})
        cap.setdefault(b, {})
        cap[a][b] = cap[a].get(b, 0.0) + c

    far_apart = _used_far_apart(values, users, fusible_value, {n: nodes[n].cls == COMPUTE for n in values})
    why_banned: dict[str, str] = {}
    for n in values:
        if n in needed:
            edge(f"{n}:out", "sink", INF)
        if must_recompute(n):
            edge(f"{n}:in", "sink", INF)
        elif (reason := banned(n)) is not None:
            why_banned[n] = reason
            edge("source", f"{n}:in", INF)
        weight = 0.0 if nodes[n].cls == PARAM else nbytes(n) * 1.1 ** max(min(dist[n], 100), 1) * (
            1 if materialized(n) else 2)
        edge(f"{n}:in", f"{n}:out", weight)
        for u in users[n]:
            edge(f"{n}:out", f"{u}:in", INF)
    if "source" not in cap or "sink" not in cap:
        return CutResult(())
    reach = _source_side(cap)
    cut = {n for n in values if f"{n}:in" in reach and f"{n}:out" not in reach}
    # the backward graph reads a cut value only if it needs it, or recomputes from it something it needs: the rest
    # is dead code in the backward, and the forward does not return it (a MUST_SAVE op's output the backward never
    # reads, e.g. the last matrix product's under per-op checkpointing: measured)
    read: set[str] = set()
    stack = list(needed)
    while stack:
        n = stack.pop()
        if n in read:
            continue
        read.add(n)
        if n not in cut:
            stack += deps[n]
    saved = []
    for n in values:
        if n in cut and n in read and nodes[n].cls != PARAM:  # (a parameter is the model's, not an activation)
            op = made_by.get(n)
            why = (f"compiled: needed by the backward, {why_banned[n]}" if n in why_banned and n in needed else
                   "compiled: kept to recompute from" if n not in why_banned else
                   f"compiled: kept to recompute from ({why_banned[n]})")
            saved.append((nodes[n].tensor, op, why))
    return CutResult(tuple(saved))


def _used_far_apart(values: list[str], users: Mapping[str, list[str]], fusible: Callable[[str], bool],
                    compute: Mapping[str, bool]) -> dict[str, str]:
    """`ban_recompute_used_far_apart` (partitioners.py:2460-2500, config.py:159): a fusible value read by a fusible
    op after the first unfusible op its readers lead to is not recomputed there (inductor could not fuse both
    reads). The first unfusible op is found walking the readers in forward order (`find_first_unfusible`); a reader
    that is itself a matrix product or another op off the allowlist counts at its own place: its outputs are the
    graph's `getitem`s of it, reached through an edge that cannot fuse."""
    import heapq

    order = {n: i for i, n in enumerate(values)}
    out: dict[str, str] = {}
    for n in values:
        if not fusible(n) or not users[n]:
            continue
        last = max(order[u] for u in users[n])
        heap = [(order[u], u, not compute[u]) for u in users[n]]
        heapq.heapify(heap)
        seen: set[tuple[str, bool]] = set()
        first = last
        while heap:
            o, cur, cur_fusible = heapq.heappop(heap)
            if (cur, cur_fusible) in seen:
                continue
            seen.add((cur, cur_fusible))
            if not cur_fusible:
                first = o
                break
            for u in users[cur]:
                if order[u] <= last:
                    heapq.heappush(heap, (order[u], u, fusible(cur) and fusible(u)))
        for u in users[n]:
            if order[u] > first and fusible(u):
                out.setdefault(u, f"read by a fusible op after an unfusible one ({n}: used far apart)")
    return out


def _source_side(cap: dict[str, dict[str, float]]) -> set[str]:
    """The source's side of a minimum cut: Edmonds-Karp's maximum flow, then what the residual graph reaches."""
    flow: dict[tuple[str, str], float] = {}
    for a, out in list(cap.items()):
        for b in out:
            cap.setdefault(b, {}).setdefault(a, 0.0)  # the reverse edge of the residual graph

    def residual(a: str, b: str) -> float:
        return cap[a][b] - flow.get((a, b), 0.0)

    while True:
        parent = {"source": None}
        queue = deque(["source"])
        while queue and "sink" not in parent:
            a = queue.popleft()
            for b in cap[a]:
                if b not in parent and residual(a, b) > 0:
                    parent[b] = a
                    queue.append(b)
        if "sink" not in parent:
            return set(parent)
        path, b = [], "sink"
        while parent[b] is not None:
            path.append((parent[b], b))
            b = parent[b]
        push = min(residual(a, b) for a, b in path)
        if push == INF:
            raise SymmemError("compiled region: a value needed by the backward can neither be kept nor recomputed")
        for a, b in path:
            flow[(a, b)] = flow.get((a, b), 0.0) + push
            flow[(b, a)] = flow.get((b, a), 0.0) - push


@dataclass(frozen=True)
class CompileSpec:
    """How a rule set's regions are compiled: the model's sizes the cut weighs values at, the activation dtype's
    bytes, and the bytes of the generator state a checkpointed region keeps (the device's)."""

    sizes: tuple[tuple[sympy.Symbol, int], ...]
    act_bytes: int
    rng_state_bytes: int
    loss: bool = True  # the loss function compiled too (torchtitan 0.3.0; at 9dec370 it ran eagerly)
    float8: bool = False  # torchao's Float8Linear (tensorwise) for every eligible linear (`float8_linear`)
    float8_gathered: bool = False  # FSDP2 gathers those linears' weights in float8 (`float8_linear`'s `gathered`)
    axes: object = None  # the parallel sizes (`AxisSizes`): each value weighed at one GPU's size


def rng_state(flow_name: str, nbytes: int) -> Tensor:
    """The generator state a checkpointed compiled region keeps (`CompileSpec.rng_state_bytes`)."""
    return Tensor(f"{flow_name}.rng_state", (Dim(sympy.Integer(nbytes)),), UINT8)


UINT8 = DType("uint8", 1)
CPU_RNG_STATE_BYTES = 5056  # torch.get_rng_state(): the mt19937 state (measured: u8[5056])
CUDA_RNG_STATE_BYTES = 16  # CUDAGeneratorImpl::get_state: seed (8) and Philox offset (8)
