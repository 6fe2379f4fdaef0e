"""The peak of one training iteration of Megatron-Core 0.16.1's local spec on a rank, as `symmem measure
--framework megatron-core` measures it (every live storage of the process at an op boundary). Five events are
modelled, and the peak is the largest:

* the optimizer step (`step_peak`), where the tiny runs peak: Adam's moments are made group by group while the
  parameters are updated one by one;
* the first GEMM of the backward (`head_peak`), the output layer's weight gradient: every activation the forward
  kept is still alive, with the loss's gradient (in place of the softmax) and the output layer's input and weight
  gradients. Larger b·s peak here in FP32 runs;
* the final norm's backward (`norm_peak`), right after: five [s b, h] FP32 gradient parts of the decomposed
  rms_norm; a vocabulary narrow against h, or TP > 1, peaks here (at TP > 1 the measurement of this event varies
  by the output layer's input gradient, all-reduced asynchronously under gloo);
* the cross-entropy's forward (`loss_peak`), where the logits and their FP32 copy are alive: larger b·s peak here
  in BF16 runs;
* the last layer's attention backward (`attention_peak`), where four [b n, s, s] FP32 gradients are alive at once:
  larger s peak here.

Other events of the forward and backward (a layer's norm backward, the recomputation of selective recompute, the 1F1B
schedule's micro-batches in flight) are not modelled: where the real peak is there, the
prediction is lower and the command says DIFFERENT. Paths are in the installed package (`megatron/core/`, 0.16.1).
"""

from __future__ import annotations

from symmem.rules.megatron_local import (
    Dims,
    layer_saved,
    rank_buffers,
    saved_per_layer,
    states,
    weights,
)

# The optimizer step (`step_peak`). At the k-th parameter that torch's single-tensor AdamW updates
# (torch/optim/adam.py `_single_tensor_adam`: weight decay in place; `denom = (exp_avg_sq.sqrt() /
# bias_correction2_sqrt).add_(eps)`), the rank holds:
# * what existed before the iteration (`_before`): the parameter and FP32 gradient buffers, the 16-bit runs' FP32
#   main shards, the rotary inv_freq buffer [d/2] (FP32, `models/common/embeddings/rotary_pos_embedding.py`), the
#   optimizer's `_scale_one` [1] FP32 and, in FP32 runs, `_dummy_overflow_buf` [1] int32
#   (`optimizer/optimizer.py:481`, `:485`), one per optimizer (the dense one, and an expert one only with
#   expert-parallel parameters, `optimizer/__init__.py:661`: never at EP 1), the FP32 scalar
#   `MTPLossAutoScaler.main_loss_backward_scale`, a class attribute made when Megatron is imported
#   (`transformer/multi_token_prediction.py:546`), with MoE layers each alltoall dispatcher's chunk indices
#   [E tp] int64, made when it is built (`transformer/moe/token_dispatcher.py:405`; at TP 1 both orders, `:409`,
#   `:413`, are views of it), and the runner's inputs: M token batches [b, s + 1] int64 and the position ids [s]
#   int64;
# * what the forward left for the whole process (`_forward_left`): Megatron's global buffer for the attention
#   scores [b n, s, s] at the run's dtype (`transformer/dot_product_attention.py:189`,
#   `parallel_state.get_global_memory_buffer`) and the cached RoPE table [s, 1, 1, d] FP32
#   (`rotary_pos_embedding.py`, lru_cache);
# * Adam's exp_avg and exp_avg_sq of every parameter group stepped so far and of the current one (`_init_group`
#   makes a group's states before updating it) and a 4-byte `step` per shard; groups in Megatron's order: per
#   optimizer (dense, then expert), weight-decayed parameters first (`optimizer/__init__.py:189`: the group without
#   overrides sorts first), then biases and norms; within a group, the shard's parameters in buffer order
#   (`optimizer/distrib_optimizer.py:112-171`). At EP 1 the experts are in the dense optimizer's decayed group;
# * the transient of the update: sqrt(exp_avg_sq) and its quotient (the parameter's shard size each) beside the
#   previous parameter's `denom`, still bound;
# * on a pipeline stage after the first, the last micro-batch's received activation [s, b, h] (the receive
#   buffer), which the block keeps as `self.input_tensor` (`transformer/transformer_block.py:570-578`) after the
#   schedule, and its gradient [s, b, h], kept on it by `retain_grad()` (`pipeline_parallel/schedules.py:469`);
#   with V model chunks (the interleaved schedule), each chunk's block keeps its own: V of each pair on a later
#   stage, V - 1 on the first (its first chunk is fed by the embedding); each chunk also has its own
#   RotaryEmbedding (`models/gpt/gpt_model.py:160`): its inv_freq and its cached table;
# * with MoE layers (EP 1, TP 1; `moe_leftovers`), what each layer's router and alltoall dispatcher keep from the
#   last micro-batch until their next forward (T = b s tokens, E experts, top-k): the routing probabilities
#   [T, E] at the router's dtype, the run's (`transformer/moe/moe_utils.py:744`), and the routing map [T, E] bool
#   (`moe_utils.py:745`), kept as `self.probs` and `self.routing_map` (`transformer/moe/token_dispatcher.py:
#   609-610`); the tokens per expert [E] int64 (`token_dispatcher.py:511`, kept as `self.tokens_per_expert` and
#   `num_global_tokens_per_local_expert`, `:566-569`, `:578`, `:617`); the permutation's sorted indices [T k]
#   int64 (`moe_utils.py:369`), kept as `self.reversed_local_input_permutation_mapping` (`token_dispatcher.py:
#   629-634`); and once per process the auxiliary-loss scale [1] FP32 (`pipeline_parallel/schedules.py:292`,
#   kept as a class attribute by `moe_utils.py:284`), set on every stage even with the auxiliary loss off.
# Not modelled (None): MoE at TP > 1 (the dispatcher then also gathers and keeps the split sizes,
# `token_dispatcher.py:525-560`; not measured here).


def step_peak(d: Dims, tp: int, pp: int, dp: int, pp_rank: int, dp_rank: int, b: int, s: int, bf16: bool,
              microbatches: int, vpp: int = 1, bucket_size: int | None = None) -> tuple[int, str] | None:
    """The most bytes a rank holds in the optimizer step, and the parameter at it; None where not modelled."""
    if d.experts and tp > 1:
        return None
    e = 2 if bf16 else 4
    bufs = rank_buffers(d, tp, pp, dp, pp_rank, True, bf16, vpp, bucket_size)
    # the rank's shard of each parameter, in buffer order, with its buffer's kind
    shards = [(w, n, buf.fp32_params) for buf in bufs for w, n in buf.shard(dp, dp_rank)]
    left = _forward_left(d, tp, b, s, e) + (vpp - 1) * _rope_table(d, s)  # a cached table per chunk
    receiving = vpp - (pp_rank == 0)  # chunks fed by a previous stage: all but the first stage's first
    left += receiving * 2 * s * b * d.h * e
    if d.experts:
        left += moe_leftovers(d, pp, b, s, e)
    held = _before(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches, vpp, bucket_size) + left
    best, at = 0, ""
    for expert in (False, True):  # the dense optimizer, then the expert one (optimizer/__init__.py:630, :668)
        for decayed in (True, False):
            group = [(w, n) for w, n, _ in shards if w.expert == expert
                     and (not w.name.endswith(".bias") and not w.name.endswith("norm.weight")) == decayed]
            if not group:
                continue
            held += sum(8 * n + 4 for _w, n in group)
            prev = 0
            for w, n in group:
                if held + 4 * (prev + 2 * n) > best:
                    best, at = held + 4 * (prev + 2 * n), w.name
                prev = n
    return best, f"optimizer step, AdamW update of {at}"


def moe_leftovers(d: Dims, pp: int, b: int, s: int, e: int) -> int:
    """Bytes the MoE layers of a stage keep between iterations (EP 1, TP 1; see the peak's notes above)."""
    tokens, experts = b * s, d.experts
    per_layer = tokens * experts * e + tokens * experts + experts * 8 + tokens * d.topk * 8
    return d.layers // pp * per_layer + 4


def _before(d: Dims, tp: int, pp: int, dp: int, pp_rank: int, dp_rank: int, b: int, s: int, bf16: bool,
            microbatches: int, vpp: int = 1, bucket_size: int | None = None) -> int:
    """What a rank holds before the iteration (see the notes above): states without Adam's tensors, the scalars,
    the buffers and the runner's inputs."""
    st = states(d, tp, pp, dp, pp_rank, dp_rank, bf16, vpp=vpp, bucket_size=bucket_size)
    ws = weights(d, tp, pp, pp_rank)
    main = 0
    for buf in rank_buffers(d, tp, pp, dp, pp_rank, True, bf16, vpp, bucket_size):
        if not buf.fp32_params:
            main += sum(4 * n for _w, n in buf.shard(dp, dp_rank))
    n_opt = 2 if any(w.expert for w in ws) else 1
    rope = d.kind != "gpt2"
    # each model chunk builds its own RotaryEmbedding (models/gpt/gpt_model.py:160), with its inv_freq
    out = (st["params"] + st["grad_buffers"] + main + vpp * (d.head_dim // 2 * 4 if rope else 0)
           + n_opt * (4 if bf16 else 8) + 4 + microbatches * b * (s + 1) * 8 + s * 8)
    if d.experts:
        out += d.layers // pp * d.experts * 8  # the dispatchers' chunk indices
    return out


def _forward_left(d: Dims, tp: int, b: int, s: int, e: int) -> int:
    """What the first forward leaves for the process: the attention-score buffer and the cached RoPE table."""
    return b * (d.heads // tp) * s * s * e + _rope_table(d, s)


def _rope_table(d: Dims, s: int) -> int:
    """The RoPE table [s, 1, 1, d] FP32 a RotaryEmbedding caches (`rotary_pos_embedding.py`, lru_cache on the
    module's forward, `:177`: one per model chunk)."""
    return s * d.head_dim * 4 if d.kind != "gpt2" else 0


# The first GEMM of the backward (`head_peak`; PP 1, FP32, Llama-like: RMSNorm, RoPE, untied
# output layer, no MoE, no full recomputation). After the loss's backward, the output layer's backward
# (`tensor_parallel/layers.py:531`, `:614`, gradient-accumulation fusion off) computes the input gradient
# [s b, h] and then the weight gradient [V/t, h]; at that op the rank holds:
# * what it held before the iteration and what the forward leaves for the process (as in the optimizer step);
# * what every transformer layer kept for backward (`saved_per_layer`);
# * what the forward kept outside the layers and the loss's backward has not released: the final RMSNorm's FP32
#   input (the last layer's output), FP32 rstd per row, normalised input and output (the output layer's input)
#   (`transformer/transformer_block.py:378`, torch's rms_norm); the logits [s, b, V/t] FP32, where the vocab-
#   parallel cross-entropy keeps its softmax and then computes the loss's gradient in place
#   (`tensor_parallel/cross_entropy.py:187`; its target mask and masked targets are released by its backward);
#   the embedding's indices: at TP 1 the runner's input ids [b, s] int64 themselves, at TP > 1 the vocabulary
#   mask [b, s] bool and the masked ids [b, s] int64 (`tensor_parallel/layers.py:276`, `:278`);
# * four 4-byte scalars: `num_tokens` (`pipeline_parallel/schedules.py:251`, int32), `total_num_tokens`
#   (`schedules.py:596`, int32), the runner's loss (a mean, FP32) and autograd's gradient of it (`ones_like`);
# * with M micro-batches (run one after the other at PP 1, `forward_backward_no_pipelining`), the event of the last
#   one holds the losses of the M - 1 before it, FP32 scalars kept by `forward_data_store`
#   (`schedules.py:270`, the runner's `{"loss": loss.detach()}`, a view of the loss).


def head_peak(d: Dims, tp: int, pp: int, dp: int, pp_rank: int, dp_rank: int, b: int, s: int, bf16: bool,
              microbatches: int, recompute: str = "none") -> tuple[int, str] | None:
    """The bytes a rank holds at the output layer's weight gradient; None where this event is not modelled."""
    if d.kind != "llama" or d.experts or d.tied or bf16 or pp > 1 or recompute == "full":
        return None
    e, rows, vocab = 4, b * s, d.vocab // tp
    layers = sum(saved_per_layer(d, tp, pp, pp_rank, b, s, bf16, recompute).values())
    final_norm = 3 * rows * d.h * 4 + rows * 4
    embedding = rows * 8 if tp == 1 else rows * (8 + 1)
    held = (_before(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches) + _forward_left(d, tp, b, s, e)
            + layers + final_norm + rows * vocab * 4 + embedding + 4 * 4 + (microbatches - 1) * 4)
    return held + rows * d.h * e + vocab * d.h * e, "backward, the output layer's weight gradient"


# The final norm's backward (`norm_peak`; the models of `head_peak`), after the output layer's: the loss's
# gradient (the logits' storage), the output layer's input gradient and its weight gradient (added into the
# gradient buffer by DDP's hook, `distributed/distributed_data_parallel.py:440`) are released, and so are the final
# norm's normalised input, output and rstd as their nodes run; torch's rms_norm (decomposed: pow, mean, rsqrt, mul)
# then holds five [s b, h] FP32 gradient parts at once, before they are added into its input's gradient.


def norm_peak(d: Dims, tp: int, pp: int, dp: int, pp_rank: int, dp_rank: int, b: int, s: int, bf16: bool,
              microbatches: int, recompute: str = "none") -> tuple[int, str] | None:
    """The bytes a rank holds at the last gradient part of the final RMSNorm's backward; None where not modelled."""
    head = head_peak(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches, recompute)
    if head is None:
        return None
    rows, vocab = b * s, d.vocab // tp
    released = rows * d.h * 4 + vocab * d.h * 4 + rows * vocab * 4 + 2 * rows * d.h * 4 + rows * 4
    return head[0] - released + 5 * rows * d.h * 4, "backward, the final norm's gradient"


# The cross-entropy's forward (`loss_peak`; the same models as `head_peak`, FP32 or BF16), at the copy of the
# target logits (`tensor_parallel/cross_entropy.py:60`), still inside GPTModel.forward. The rank holds what it held
# before the iteration, what the forward leaves for the process, every layer's saved tensors, the final RMSNorm's
# (its output at the run's dtype), and:
# * the logits [s, b, V/t] at the run's dtype (the output layer's output) and their FP32 copy (`.float()`,
#   `cross_entropy.py:28`: the same tensor in FP32 runs);
# * per row (s b of them): the maximum (FP32, `:30`), the target mask (bool, `:48`), the masked targets (int64,
#   `:49`), `arange_1d` (int64, `:58`), the target logits and their copy (FP32, `:59-60`), the labels transposed
#   (int64, `models/common/language_module/language_module.py:139`), and the runner's input ids and labels
#   (int64; at TP 1 the embedding keeps the ids, at TP > 1 its mask, bool, and masked ids, int64,
#   `tensor_parallel/layers.py:276`, `:278`);
# * the embedding's output at the run's dtype, bound as `decoder_input` in GPTModel.forward
#   (`models/gpt/gpt_model.py:313`): in FP32 runs the first layer's saved input itself, in 16-bit runs a storage
#   of its own;
# * `total_num_tokens` (`pipeline_parallel/schedules.py:596`, int32) and the M - 1 earlier losses.


def loss_peak(d: Dims, tp: int, pp: int, dp: int, pp_rank: int, dp_rank: int, b: int, s: int, bf16: bool,
              microbatches: int, recompute: str = "none") -> tuple[int, str] | None:
    """The bytes a rank holds at the cross-entropy's copy of the target logits; None where not modelled."""
    if d.kind != "llama" or d.experts or d.tied or pp > 1 or recompute == "full":
        return None
    e, rows, vocab = (2 if bf16 else 4), b * s, d.vocab // tp
    layers = sum(saved_per_layer(d, tp, pp, pp_rank, b, s, bf16, recompute).values())
    final_norm = 2 * rows * d.h * 4 + rows * 4 + rows * d.h * e
    logits = rows * vocab * e + (rows * vocab * 4 if bf16 else 0)
    per_row = rows * (4 + 1 + 8 + 8 + 4 + 4 + 8) + 2 * rows * 8 + (rows * (1 + 8) if tp > 1 else 0)
    embedding = rows * d.h * e if bf16 else 0
    return (_before(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches) + _forward_left(d, tp, b, s, e)
            + layers + final_norm + logits + per_row + embedding + 4 + (microbatches - 1) * 4,
            "forward, the cross-entropy's copy of the target logits")


# The last layer's attention backward (`attention_peak`; Llama-like, FP32, PP 1, no recomputation), at the
# backward of the in-place `attention_scores.masked_fill_(mask, -10000.0)` (`transformer/utils.py:50`) on a view
# of the attention-score buffer: autograd's CopySlices (torch/csrc/autograd/functions/tensor.cpp) makes the
# gradient of the whole base (`new_zeros`), its result (`new_empty_strided`), a copy of the view's gradient
# (`clone`) and masked_fill's gradient: four [b n, s, s] FP32 tensors at once. The rank holds then what it held
# before the iteration and what the forward leaves for the process; every other layer's saved tensors; of the last
# layer's, those its backward has not reached yet: the input norm's (FP32 input, rstd, normalised input, output),
# the four RoPE tables, q after RoPE, k (repeated to n heads when g < n) and the causal mask (its softmax output,
# v, the attention's output and its MLP's are released); the embedding's indices and the four scalars of the
# head event (the head's own tensors are released); and the gradients in flight: the residual's [s b, h]
# (accumulated), v's [b n, s, d] and the four above.


def attention_peak(d: Dims, tp: int, pp: int, dp: int, pp_rank: int, dp_rank: int, b: int, s: int, bf16: bool,
                   microbatches: int, recompute: str = "none") -> tuple[int, str] | None:
    """The bytes a rank holds at the last layer's masked_fill backward; None where not modelled."""
    if d.kind != "llama" or d.experts or d.tied or bf16 or pp > 1 or recompute != "none":
        return None
    e, rows, n, hd = 4, b * s, d.heads // tp, d.head_dim
    per_layer = sum(n_ for _, n_ in layer_saved(d, tp, b, s, bf16))
    last = 3 * rows * d.h * 4 + rows * 4 + 4 * s * hd * e + 2 * rows * n * hd * e + s * s
    embedding = rows * 8 if tp == 1 else rows * (8 + 1)
    grads = rows * d.h * 4 + rows * n * hd * 4 + 4 * b * n * s * s * 4
    return (_before(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches) + _forward_left(d, tp, b, s, e)
            + (d.layers - 1) * per_layer + last + embedding + 4 * 4 + (microbatches - 1) * 4 + grads,
            "backward, the last layer's attention-mask gradient")


def peak(d: Dims, tp: int, pp: int, dp: int, pp_rank: int, dp_rank: int, b: int, s: int, bf16: bool,
         microbatches: int, recompute: str = "none", vpp: int = 1) -> tuple[tuple[int, str] | None, list[str]]:
    """The larger of the modelled events (None when the optimizer step is not modelled), and what is not."""
    step = step_peak(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches, vpp)
    events = [e for e in (head_peak(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches, recompute),
                          loss_peak(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches, recompute),
                          norm_peak(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches, recompute),
                          attention_peak(d, tp, pp, dp, pp_rank, dp_rank, b, s, bf16, microbatches, recompute))
              if e]
    notes = []
    if step is None:
        notes.append("peak: not modelled with MoE layers at TP > 1 (what the alltoall dispatcher keeps then is not "
                     "measured)")
    if not events:
        notes.append("peak: the forward and backward are not modelled for this configuration (PP > 1, full "
                     "recomputation, GPT, Qwen3's q/k norms, tied embeddings or MoE); the prediction is the "
                     "optimizer step's")
    if step is None:
        return None, notes
    return max([step, *events]), notes
