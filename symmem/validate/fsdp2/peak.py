"""The most bytes live during one FSDP2 training step on the CPU (`runner`), per rank and phase, in closed form.

The runner measures the first step of a fresh model (no gradients or optimizer states before it), forward, backward
and `AdamW(foreach=False).step()`, over gloo. What is live at each phase's peak was found by tracing every op's
live storages and reading torch 2.13.0's FSDP2 (`torch/distributed/fsdp/_fully_shard/`, below `_fs/`), term by
term; the names below:

* `start`: what is live when the step begins: the sharded FP32 parameters P (`accounting.fsdp.rank_states`), the
  RoPE caches (the profile's buffer, one per block), the runner's token tensors (inputs and labels, b·s int64 each,
  and the b·(s + 1) tokens they were cut from), the device mesh's rank map and `HARNESS_SCALAR`.
* N: one block's parameters as FSDP2 all-gathers them, every rank's padded shard (`FsdpParam.padded` x W), in the
  param dtype (pd bytes); the same for the root's own parameters (embedding, final norm, output): `U_root`.
* Forward (`reshard_after_forward=True`): a block's unshard allocates the flat all-gather output (N·pd,
  `_fs/_fsdp_collectives.py` `foreach_all_gather`, :419) and copies it out into the parameters' unsharded
  storages (N·pd, `_fs/_fsdp_param.py:626` `alloc_storage`, the copy `split_with_sizes_copy`,
  `_fsdp_collectives.py:485-489`); the flat output stays in the group's all-gather state until the *next* group's
  unshard waits (`_fs/_fsdp_param_group.py` `wait_for_unshard`). So two moments compete: the last block's unshard
  (the previous block's flat output, its own, its parameters: 3·N·pd, with the earlier blocks' saved tensors and
  the block's input) and the last block's final op (its flat output and parameters, 2·N·pd, every block's saved
  tensors and the ops' transients there, from the dataflow's timeline).
* Backward (no checkpointing): the peak is at the second block's gradient reduce-scatter, while the first block's
  parameters are gathered again: the first block's saved tensors and flat all-gather output, the reduce-scatter's
  input in the reduce dtype (N·rd, `_fsdp_collectives.py:597`), a buffer of the same size that gloo's
  reduce-scatter makes below the dispatcher (no op allocates it: `GLOO_REDUCE_SCATTER_COPY`, a CPU artefact),
  the sharded gradients of the blocks reduced so far (FP32 whatever the reduce dtype, N·4 / W each,
  `_fsdp_collectives.py:696`, :704), the output
  layer's unsharded weight gradient (reduced with the root's at the end) and the gradient of the hidden state.
  Which of two FSDP2 orders the ranks take is not fixed: when the first block's prefetched copy-out lands before the
  reduce-scatter, its unsharded parameters (N·pd) are live too (both seen on the same rank in repeated runs). Other
  runs held still another buffer (+82,176 bytes once with FP32 parameters): the moments are a floor the run
  reaches, equal to its figure in most runs, not a prediction of every run's figure.
* Backward (full checkpointing): not predicted. Among its moments are the two above (with the checkpointed
  blocks' inputs as their saved tensors) and the embedding's backward with the first block's reduce-scatter still
  pending (every block's sharded gradient, that reduce-scatter's input and gloo's copy still held,
  `_fs/_fsdp_param_group.py:107`, the output layer's and the embedding's unsharded weight gradients and the final
  norm's), each seen exactly; but the recomputed forward of each block runs inside the backward, and its
  transients can exceed them (`BACKWARD_FULL_AC`).
* Optimizer step (`_single_tensor_adam`, torch/optim/adam.py): every state (P, the gradients, AdamW's moments made
  by `zeros_like` as it reaches each parameter, the step scalars), the loss, and at `denom =
  (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)` the `sqrt` and `div` outputs of the parameter being
  stepped beside the previous parameter's `denom`, still bound: max over parameters of 2·shard_i + shard_{i-1}.

* Without `reshard_after_forward` no block is resharded: every block's unsharded parameters stay, and the last
  block's flat all-gather output; the forward's most is then at the output layer's GEMM, the loss (FP32 logits),
  the last block's unshard or its last op, the backward's at the last block's reduce-scatter or the loss's
  backward, whichever is larger (the same in every run traced).
* HSDP (FP32 reduce): the all-reduce over the replicas runs in place on the reduce-scatter's output, which becomes
  the gradient (`_fsdp_collectives.py:658`, :704): the same forms over the shard group.

* Per-op and per-layer checkpointing: the same forms, each block with its own saved bytes (per-layer AC: a
  checkpointed block keeps its input, the others everything; the last block's last op under its own policy); the
  forward's and the optimizer step's most measured equal under `selective-op` and `selective-layer:N`, with and
  without resharding. Their backward recomputes what the forward did not keep, as full checkpointing does: not
  predicted (`BACKWARD_RECOMPUTED`).

Predicted where the derivation was checked against the run (every byte traced): with and without
`reshard_after_forward`, FSDP and HSDP, checkpointing none, full, per-op or per-layer (under any checkpointing the
forward and the optimizer step only), FP32 reduce, two blocks or more (`covered`). Under TP with sequence parallelism
(torchtitan 0.3.0's, FSDP x TP and HSDP x TP) the start and the optimizer step, which hold no TP collective, are the
same forms over TP's local shards (measured equal: FSDP 1 x TP 2, with and without full checkpointing, and FSDP 2 x TP
2); the forward without AC has forms of its own (`_tp_forward`: the last block's w2 reduce-scatter or the loss-parallel
forward; measured equal at FSDP 1, FSDP 2 and HSDP 2 x 1 x TP 2, b 1 and 2, 2 and 3 blocks, with and without
resharding); the backward, and the forward with AC, are not predicted (`NOT_UNDER_TP`). Elsewhere the phases' figures
are None, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

# the runner's process holds two more tensors before the step, listed from its live tensors: the device mesh's rank
# map, int32 [world] (torch/distributed/device_mesh.py:1582, `torch.arange(layout.numel(), dtype=torch.int)`), and an
# FP32 scalar whose origin is not pinned (neither the model's nor FSDP2's states): the runner's baseline, not a GPU's
MESH_RANK_BYTES = 4
HARNESS_SCALAR = 4
GLOO_REDUCE_SCATTER_COPY = 1  # reduce-scatter inputs' worth of bytes gloo allocates inside its reduce-scatter
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Peaks:
    start: int | None  # None where not predicted (TP)
    forward: int | None
    # the moments the backward reaches, by name: the run's most is at least the smallest, and in most runs equal to
    # one; FSDP2's order of prefetch and reduce-scatter (and how long gloo's copy lives) varies from run to run, and
    # some runs hold a buffer more at one of them
    backward: dict | None
    optimizer_step: int | None
    why_not: str = ""
    forward_moments: dict | None = None  # the forward's candidate moments by name (`forward` is the largest)
    why_not_backward: str = ""  # why the backward is None while the other phases are predicted
    why_not_forward: str = ""  # why the forward is None while the start and the optimizer step are predicted


def covered(st) -> str:
    """Why the settings are outside what the closed forms were checked on ('' when inside)."""
    if st.reduce_dtype != "fp32":
        return (f"reduce dtype {st.reduce_dtype} (the backward's most moves into a block's backward, whose own "
                "tensors there are not yet in closed form)")
    if st.ac not in ("none", "full", "selective-op") and not st.ac.startswith("selective-layer:"):
        return f"activation checkpointing {st.ac!r} (checked: none, full, selective-op and selective-layer:N)"
    if st.n_layers < 2:
        return "one block (the forward's moments assume a previous block)"
    if st.float8:
        return ("Float8 (torchao's casts of inputs, weights and output gradients to float8, and under the float8 "
                "all-gather each shard's cast and amax, are transients of the forward and backward not yet in "
                "closed form)")
    return ""


def _last_layer_forward(scn) -> list[tuple[int, int, str]]:
    """The last layer's forward events (the dataflow's timeline under the scenario's policy): each one's bytes of
    the layer's own alive tensors, all and those not saved, and its op."""
    from symmem.accounting import timeline as T
    from symmem.accounting.analysis import _activation_key, _tokens_per_expert, values
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.model import stage_parts

    (stage,) = scn.stages
    vals, axes = values(scn), scn.parallel.axis_sizes()
    e_tok = _tokens_per_expert(_activation_key(scn), axes)
    last_layer = len(scn.model.layer_kinds()) - 1
    layers = next(p for p in stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
                  if p.is_layers and last_layer in p.layer_ids)
    tl = T.part_timeline(layers.flow, scn.rules, scn.policy, axes, scn.act_bytes, e_tok)
    out = []
    for ev in (e for e in tl.events if e.phase == "forward"):
        sizes = [(ceil_int(evaluate(a.nbytes, vals)), a.component != T.SAVED_CURRENT) for a in ev.alive]
        out.append((sum(n for n, _ in sizes), sum(n for n, unsaved in sizes if unsaved), ev.op))
    return out


def _last_forward_transient(scn) -> int:
    """Bytes of the last layer's non-saved tensors at its last forward op."""
    return _last_layer_forward(scn)[-1][1]


def _last_forward_busiest(scn) -> tuple[int, str]:
    """The most the last layer's forward holds of its own (what it has saved so far and its transients), and at
    which op."""
    return max((held, op) for held, _unsaved, op in _last_layer_forward(scn))


# torchtitan's parameter order in a block (`model.parameters()`, the order AdamW steps them): attention's wqkv and
# wo, feed_forward's w1 (gate), w2 (down), w3 (up), then attention_norm and ffn_norm (the Llama 3 TransformerBlock's
# attributes as torchtitan declares them; the runner's `params` list them so); the root's embedding first, its final
# norm and output layer last
BLOCK_ORDER = ("self_attn.wqkv", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj", "mlp.up_proj",
               "input_layernorm", "post_attention_layernorm")
# DeepSeek-V3's block (models/deepseek_v3/model.py:61-92, :158-169; models/common/moe.py:352-365): the attention's
# projections and norms, the two block norms, then the dense feed-forward or the MoE's grouped experts, router gate
# and shared experts (symmem.blocks.torchtitan's op names)
BLOCK_ORDER_DSV3 = ("attention.wq", "attention.wq_a", "attention.q_norm", "attention.wq_b", "attention.wkv_a",
                    "attention.kv_norm", "attention.wkv_b", "attention.wo", "attention_norm", "ffn_norm",
                    "feed_forward.w1", "feed_forward.w2", "feed_forward.w3", "experts.w1_EFD", "experts.w2_EDF",
                    "experts.w3_EFD", "moe.router.gate", "moe.shared_experts.w1", "moe.shared_experts.w2",
                    "moe.shared_experts.w3")


def layer_of(parts) -> dict[str, tuple[int, ...]]:
    """Each layer part's copies as the stage's layers (DeepSeek-V3: a dense part, then MoE parts)."""
    return {p.name: p.layer_ids for p in parts if p.is_layers}


def param_layer(p, layers: dict[str, tuple[int, ...]]) -> int | None:
    """The layer an FSDP parameter (`fsdp_params`: "PART[COPY].OP") belongs to, None outside the layers."""
    part, _, rest = p.name.partition("[")
    return layers[part][int(rest.split("]", 1)[0])] if part in layers else None


def torchtitan_order(params, layers: dict[str, tuple[int, ...]] | None = None) -> list:
    """`params` (accounting.fsdp.fsdp_params) in the order torchtitan's model lists them; `layers` (`layer_of`):
    the layer parts' layers, or Llama's one part "dense layers"."""
    if layers is None:  # Llama's one part: copy i is layer i (no copy index reaches the parameter count)
        layers = {"dense layers": tuple(range(len(params)))}

    def key(p):
        part, _, op = p.name.partition("].")
        i = param_layer(p, layers)
        if i is not None:
            return (1, i, (BLOCK_ORDER if op in BLOCK_ORDER else BLOCK_ORDER_DSV3).index(op))
        return (0, 0, 0) if part.startswith("embedding") else (2, 0, 0 if op == "norm" else 1)
    return sorted(params, key=key)


def peaks(st, scn, params, rank: int, saved_blocks: list[int], held_blocks: list[int] | None = None) -> Peaks:
    """The closed forms at settings `st` (runner.Settings) for `rank`, with the scenario `scn` (predict.scenario),
    FSDP2's parameters `params` (accounting.fsdp.fsdp_params) and each block's saved bytes (predicted, in block
    order: under per-layer AC they differ), and (under TP) what each block leaves alive, saved or held
    (`predict.held_per_block`)."""
    from symmem.accounting.analysis import values
    from symmem.model import stage_parts

    (stage,) = scn.stages
    vals = values(scn)
    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    rope = sum(buf.nbytes for buf in scn.profile.buffers(scn, stage, parts, vals))
    b, s, dim, n_layers = st.b, st.s, st.dim, st.n_layers
    from symmem.accounting.fsdp import rank_states

    w = st.world // (st.replicate * st.tp)  # the shard group
    states = rank_states(params, w, rank, step_on_device=True)  # all of them after the step's first moments
    padded = states.params  # the FP32 sharded parameters, padded: every rank the same
    start = padded + rope + 2 * 8 * b * s + 8 * b * (s + 1) + MESH_RANK_BYTES * st.world + HARNESS_SCALAR
    why = covered(st)
    if why:
        return Peaks(start, None, None, None, why)
    layers = layer_of(parts)
    local = [4 * p.rows(rank, w) * p.rest for p in torchtitan_order(params, layers)]  # this rank's unpadded shards
    denom = max(2 * local[i] + (local[i - 1] if i else 0) for i in range(len(local)))
    optimizer = start - padded + states.total + 4 + denom  # 4: the loss
    pd, rd = DTYPE_BYTES[st.param_dtype], DTYPE_BYTES[st.reduce_dtype]

    def gathered(group) -> int:  # all-gathered numel: every rank's padded shard
        return sum(p.padded(w) * w for p in group)

    # each block's all-gathered parameters (DeepSeek-V3's dense and MoE blocks differ); the forms below read the
    # last block's and the one before it (`n_blk`, `n_prev`), and every block's where all of them stay
    blocks = [gathered([p for p in params if param_layer(p, layers) == i]) for i in range(n_layers)]
    root = [p for p in params if param_layer(p, layers) is None]
    n_blk, n_prev, n_all, u_root = blocks[-1], blocks[-2], sum(blocks), gathered(root) * pd
    moe = st.family == "deepseek_v3"
    if moe and st.ac != "none":
        return Peaks(start, None, None, optimizer, why_not_forward=FORWARD_MOE_AC.format(ac=st.ac),
                     why_not_backward=BACKWARD_MOE)
    if st.tp > 1:  # the start and the step hold no TP collective: the same forms over TP's local shards
        forward = (_tp_forward(st, scn, params, start, held_blocks, n_blk * pd, u_root, (n_all - n_blk) * pd,
                               _last_forward_busiest(scn) if moe else None)
                   if held_blocks is not None else None)
        if moe:
            return Peaks(start, None if forward is None else max(forward.values()), None, optimizer,
                         forward_moments=forward, why_not_forward=None if forward else NOT_MOE_TP.format(tp=st.tp),
                         why_not_backward=BACKWARD_MOE)
        if forward is None:
            return Peaks(start, None, None, optimizer, why_not_forward=NOT_UNDER_TP.format(tp=st.tp),
                         why_not_backward=NOT_UNDER_TP.format(tp=st.tp))
        return Peaks(start, max(forward.values()), None, optimizer, forward_moments=forward,
                     why_not_backward=NOT_UNDER_TP.format(tp=st.tp))
    hidden = b * s * dim * pd  # the hidden state in the param dtype (FSDP2 casts the blocks' inputs)
    vocab_dim = next(p for p in root if p.name.endswith("lm_head")).d0 * dim
    vocab = vocab_dim // dim
    loss = 4
    shards = n_blk * 4 // w  # the gradient shards are FP32 whatever the reduce dtype (_fsdp_collectives.py:696)
    reduce_scatter = n_blk * rd * (1 + GLOO_REDUCE_SCATTER_COPY)
    # the blocks' saved bytes: all of them, all but the last, the first's (one figure for all but under per-layer AC)
    saved_all, saved_before_last, saved_first = sum(saved_blocks), sum(saved_blocks[:-1]), saved_blocks[0]
    last = scn.replace(recompute_name=scn.policy.for_layer(n_layers - 1).label)  # the last block's own policy
    if moe:  # the MoE block's most is inside it (the combine, with the Python scope's locals), not at its end
        busiest, at = _last_forward_busiest(last)
        end_last, last_moment = start + u_root + saved_before_last + 2 * n_blk * pd + busiest + hidden, (
            f"the last block's busiest op ({at})")
    else:
        end_last = start + u_root + saved_all + 2 * n_blk * pd + _last_forward_transient(last) + hidden
        last_moment = "the last block's last op"
    if st.reshard_after_forward:
        forward = {"the last block's unshard":
                   start + u_root + saved_before_last + hidden + (2 * n_blk + n_prev) * pd,
                   last_moment: end_last}
        # the second block's reduce-scatter (the first block's saved tensors and flat all-gather output, the
        # reduce-scatter's input and gloo's copy, the shards so far, the output layer's gradient, two [dim]
        # gradients: the final norm's and one more, and dloss), with or without the first block's copied-out
        # parameters; and the embedding's backward with the first block's reduce-scatter still pending
        second = (start + loss + u_root + saved_first + n_blk * pd + reduce_scatter + (n_layers - 1) * shards
                  + vocab_dim * pd + hidden + 2 * dim * pd + 4)
        backward = {"second block's reduce-scatter": second,
                    "the same, the first block's parameters copied out": second + n_blk * pd - dim * pd,
                    "embedding's backward, the first block's reduce-scatter pending":
                        start + loss + u_root + n_layers * shards + reduce_scatter + 2 * vocab_dim * pd + dim * pd
                        + hidden + 4}
    else:
        # no block is resharded: every block's unsharded parameters stay (L N pd), and the last block's flat
        # all-gather output, which no later group waits on. The final norm (torchtitan's RMSNorm is nn.RMSNorm,
        # models/common/nn_modules.py:134; aten's rms_norm saves its FP32 cast of the input and x·rsqrt, b·s·dim
        # FP32 each, and the b·s FP32 rstd, beside the input) and the loss's FP32 logits (components/loss.py:60-61,
        # `.float()` then log_softmax) are live at the output layer and the loss
        norm = 2 * b * s * dim * 4 + b * s * 4 + hidden
        at_head = start + u_root + (n_all + n_blk) * pd + saved_all + norm + b * s * vocab * pd
        forward = {"the output layer's GEMM": at_head,
                   "the last block's unshard": start + u_root + (n_all + n_prev + n_blk) * pd
                   + saved_before_last + hidden,
                   last_moment: end_last + (n_all - n_blk) * pd,
                   "the loss": at_head - n_blk * pd + 2 * b * s * vocab * 4 + 8}
        # the first reduce-scatter (the last block's; every later one is lower), or the loss's backward (the
        # log-softmax's saved output and the two FP32 [b, s, vocab] gradients): the larger, in every run traced
        moments = {"the last block's reduce-scatter":
                   start + loss + u_root + (n_layers - 1) * n_blk * pd + saved_before_last + reduce_scatter + shards
                   + vocab_dim * pd + hidden + 2 * dim * pd + 4,
                   "the loss's backward": start + u_root + n_layers * n_blk * pd + saved_all + norm
                   + 3 * b * s * vocab * 4 + 8}
        top = max(moments, key=moments.__getitem__)
        backward = {top: moments[top]}
    if st.ac != "none" or moe:  # the backward recomputes (a block's forward, or per-op AC's unsaved ops), whose
        # transients are not among the moments; DeepSeek-V3's moments are not written
        why_back = (BACKWARD_MOE if moe else BACKWARD_FULL_AC if st.ac == "full"
                    else BACKWARD_RECOMPUTED.format(ac=st.ac))
        return Peaks(start, max(forward.values()), None, optimizer, forward_moments=forward,
                     why_not_backward=why_back)
    return Peaks(start, max(forward.values()), backward, optimizer, forward_moments=forward)


BACKWARD_FULL_AC = ("full checkpointing: the backward recomputes each block's forward, and those transients are not "
                    "yet among the moments (without resharding, 3 blocks, s 64, one peaked 118,912 bytes above the "
                    "last block's reduce-scatter, at a `_to_copy`)")
def _tp_forward(st, scn, params, start: int, held_blocks: list[int], n_blk: int, u_root: int, n_before: int,
                busiest: tuple[int, str] | None = None) -> dict | None:
    """The forward's most under TP with sequence parallelism (FSDP x TP, no AC; None with AC), found by tracing
    every op on the CPU (FSDP 1 x TP 2, b 1 and 2) and written term by term. Without resharding every earlier block's
    unsharded parameters stay, and the root's after lm_head (then the loss-parallel forward is the most: measured
    equal at FSDP 1 x TP 2, b 1, 2 and 3 blocks, and FSDP 2 x TP 2, b 2). With
    h = b·(s/T)·dim·pd one sequence-sharded hidden state, two moments compete:

    * the last block's w2 reduce-scatter (its `_wrap_tensor_autograd`): the root's unsharded parameters, the
      embedding's kept ids and vocabulary mask, every block's saved and held bytes, the block's input (held by the
      caller), its unsharded parameters (the 2-D path copies them parameter by parameter; no flat buffer stays), and
      the MLP's transients there: ffn_norm's sharded output (an argument until the MLP returns), the residual after
      attention, w2's full-sequence partial sum and its contiguous copy for the reduce-scatter (b·s·dim·pd each:
      torch/distributed/_functional_collectives.py `reduce_scatter_tensor` chunks along dim 1 and concatenates), and
      the reduce-scatter's output and its custom op's copy;
    * the loss-parallel forward (components/loss.py:128-185, at its last `where`): after lm_head the root reshards (its
      unsharded parameters freed, and the last block's flat all-gather output), and beside everything the forward left
      (`growth.head_growth` from the final norm's start) the loss holds three FP32 [N, V/T] (N = b·s: `logits_2d`,
      `shifted`, `log_probs`; `exp` freed after its sum), the all-reduced max, sum and picked log-probability with their
      custom ops' copies and the negated and masked results (8 FP32 [N]), `safe_labels` and `local_labels` (int64 [N]),
      two boolean [N] masks (`!= IGNORE_INDEX`, `out_of_range`) and a 4-byte scalar.

    DeepSeek-V3's last (MoE) block holds its most inside, at the combine (`busiest`: the timeline's most of its own
    saved and transient bytes, and the op): everything before it, the block's input and unsharded parameters, and
    that most (measured equal: FSDP 1 x TP 2, b 1; FSDP 2 x TP 2, b 2), beside the loss-parallel forward.

    `n_blk`, `u_root`, `n_before`: the last block's, the root's and the earlier blocks' all-gathered parameters,
    bytes in the param dtype (`peaks`)."""
    if st.ac != "none":
        return None
    from symmem.accounting.analysis import stage_terms, values
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.validate.fsdp2.growth import head_growth

    (stage,) = scn.stages
    vals = values(scn)
    pd, t = DTYPE_BYTES[st.param_dtype], st.tp
    b, s, dim = st.b, st.s, st.dim
    hidden = b * (s // t) * dim * pd
    w = st.world // (st.replicate * t)
    embedding = sum(ceil_int(evaluate(x.nbytes, vals)) for x in stage_terms(scn, stage) if x.part == "embedding")
    # with a shard group of more than one rank the last block's flat all-gather output stays in its group's state
    # (no later group's unshard waits on it in the forward: the module docstring's forward); with one rank the 2-D
    # path copies the parameters out and keeps no flat buffer (traced: FSDP 1 x TP 2 and FSDP 2 x TP 2, b 1)
    flat = n_blk if w > 1 else 0
    # without resharding every earlier block's unsharded parameters stay, and the root's after lm_head
    kept = 0 if st.reshard_after_forward else n_before
    root_freed = u_root if st.reshard_after_forward else 0
    before = start + u_root + embedding + sum(held_blocks) + flat + kept
    n, v = b * s, next(p for p in params if p.name.endswith("lm_head")).d0  # N tokens, V/T rows of lm_head
    if busiest is not None:
        inside = {f"the last block's busiest op ({busiest[1]})":
                  before - held_blocks[-1] + hidden + n_blk + busiest[0]}
    else:
        inside = {"the last block's w2 reduce-scatter": before + hidden + n_blk + 4 * hidden + 2 * b * s * dim * pd}
    return {**inside,
            # the root's post-forward frees the last all-gather result (torch/distributed/fsdp/_fully_shard/
            # _fsdp_state.py:335-342) and reshards the root's parameters
            "the loss-parallel forward":
            before - flat + (0 if st.reshard_after_forward else n_blk) + hidden + head_growth(scn, stage, vals)
            - root_freed + 3 * 4 * n * v + 8 * 4 * n + 2 * 8 * n + 2 * n + 4}


BACKWARD_MOE = ("DeepSeek-V3: the backward's moments are written for Llama 3's blocks (the second block's "
                "reduce-scatter, the embedding's backward); a MoE block's backward holds the dispatcher's and the "
                "grouped experts' gradients, not yet among them")
FORWARD_MOE_AC = ("AC {ac} with DeepSeek-V3: the forward's most is in a checkpointed block's attention, where the "
                  "CPU's math SDPA holds transients its dataflow does not have (full AC, FSDP 2, h 64, s 32: 23,232 "
                  "bytes above the last block's busiest op, at a `_to_copy`)")
NOT_MOE_TP = ("TP {tp} with DeepSeek-V3: the forward's most under TP is written for Llama 3's blocks "
              "(peak._tp_forward), not the MoE block's gathers and reduce-scatters")
BACKWARD_RECOMPUTED = ("AC {ac}: the backward recomputes what the forward did not keep, and those transients are not "
                       "yet among the moments (per-op AC, 3 blocks, b 2, s 24, without resharding: 24,832 bytes above "
                       "the last block's reduce-scatter, at an `rsqrt`)")
NOT_UNDER_TP = ("TP {tp}: the forward's most is written for FSDP x TP without AC (peak._tp_forward); the "
                "backward's, and the forward's with AC, under TP's sequence-parallel collectives, are not yet")
