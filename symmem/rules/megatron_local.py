"""Megatron-Core 0.16.1 with its local (non-TransformerEngine) layer spec, as it runs on a CPU: model states and
what each module keeps for backward, per rank. Checked to the byte by `symmem.validate.megatron_core` (`symmem
measure --framework megatron-core`).

Paths are in the installed package (`megatron/core/`, version 0.16.1) and torch 2.13.0. Settings of the runs: no
sequence parallelism, dropout 0, no fusions (bias-activation, RoPE, masked softmax), Adam through torch's optimizer
(no TE/Apex), FP32 gradient buffers (`grad_reduce_in_fp32`), `overlap_grad_reduce` off (one bucket per buffer).

Model states (`states`):

* parameters are those Megatron's modules create, in their registration order (`named_parameters`): the word
  embedding [V/t, h] (`models/common/embeddings/language_model_embedding.py:56`), the learned positions [P, h]
  (`:67`, GPT only), per layer `input_layernorm` (`transformer/transformer_layer.py:287`), `linear_proj`
  [h, n_h d/t] before `linear_qkv` [(n_h + 2 n_g) d/t, h] (`transformer/attention.py:349`, `:1267`),
  Qwen3's `q_layernorm` and `k_layernorm` [d] after it (`transformer/attention.py`, qk_layernorm),
  `pre_mlp_layernorm` (`transformer_layer.py:334`), `linear_fc1` [2f/t, h] for a gated unit
  (`transformer/mlp.py:108`, `:121`), `linear_fc2` [h, f/t] (`mlp.py:141`); biases after their weight when
  `add_bias_linear`; the MoE layer's router [E, h], made FP32 and cast to the run's dtype
  (`transformer/moe/router.py:53-55`, `:72`), its local experts (`moe/moe_layer.py:223`, SequentialMLP: one MLP per
  expert) and shared expert (`moe_layer.py:232`); the final
  norm (`transformer/transformer_block.py:378`) and the output layer [V/t, h] (`models/gpt/gpt_model.py:241`) on the
  last stage, unless it shares the embedding. Norms are torch's `LayerNorm`/`RMSNorm` built without a dtype
  (`transformer/torch_norm.py:51`): FP32 parameters even when the run's are BF16.
* DDP groups parameters by (param dtype, grad dtype) and by dense/expert (`distributed/distributed_data_parallel.py:
  111-125`, `:138-151`). An expert's linear is expert-parallel (`allreduce` False) only when
  `expert_model_parallel_size > 1` (`tensor_parallel/layers.py:829`, `:886`, `:1149`, `:1209`): at EP 1 the experts
  share the dense buffer and the dense optimizer and its parameter groups (`optimizer/__init__.py:165`). One
  buffer per group holds the parameters in reverse order, with the distributed optimizer each start padded to 64
  elements and the end to lcm(DP, 128) (`distributed/param_and_grad_buffer.py:635-665`, `:701-735`); its
  parameter buffer exists only with the distributed optimizer (`:797`), the FP32 gradient buffer always (`:803`).
* the distributed optimizer gives rank r of DP the r-th 1/DP of each buffer (`optimizer/distrib_optimizer.py:
  112-171`); a parameter with elements in that range gets a shard: a new FP32 main copy when it is 16-bit, a view
  of the parameter when it is FP32 (`distrib_optimizer.py:361-432`); torch's Adam keeps exp_avg and exp_avg_sq
  (FP32, the shard's size) and a 4-byte FP32 `step` per shard (torch/optim/adam.py `_init_group`).

The peak of the iteration is `symmem.rules.megatron_local_peak`.
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem.errors import SymmemError
from symmem.parallel.ddp_buckets import BufferLayout, layout, shard

SUPPORTED = ("llama", "gpt2", "qwen2_moe", "qwen3", "mixtral")


@dataclass(frozen=True)
class Dims:
    """The sizes Megatron's modules are built from, read from an HF config."""

    kind: str  # one of SUPPORTED
    h: int
    layers: int
    heads: int
    groups: int
    head_dim: int
    ffn: int
    vocab: int
    positions: int  # learned position embeddings (GPT), 0 with RoPE
    gated: bool
    bias: bool
    tied: bool
    experts: int = 0
    topk: int = 0
    moe_ffn: int = 0
    shared_ffn: int = 0
    qk_norm: bool = False  # Qwen3: q_layernorm and k_layernorm per head (TransformerConfig.qk_layernorm)

    @classmethod
    def from_hf(cls, raw: dict, name: str = "config") -> Dims:
        kind = raw.get("model_type")
        if kind not in SUPPORTED:
            raise SymmemError(f"{name}: model_type = {kind!r}: megatron-core runs support {', '.join(SUPPORTED)}")
        try:
            if kind == "gpt2":
                h = raw["n_embd"]
                return cls(kind, h, raw["n_layer"], raw["n_head"], raw["n_head"], h // raw["n_head"],
                           raw.get("n_inner") or 4 * h, raw["vocab_size"], raw["n_positions"], False, True,
                           bool(raw.get("tie_word_embeddings", True)))
            h, heads = raw["hidden_size"], raw["num_attention_heads"]
            moe, mixtral = kind == "qwen2_moe", kind == "mixtral"
            experts = raw["num_experts"] if moe else raw["num_local_experts"] if mixtral else 0
            return cls(kind, h, raw["num_hidden_layers"], heads, raw.get("num_key_value_heads", heads),
                       raw.get("head_dim") or h // heads, raw["intermediate_size"], raw["vocab_size"], 0, True,
                       False, bool(raw.get("tie_word_embeddings", False)),
                       experts, raw["num_experts_per_tok"] if experts else 0,
                       raw["moe_intermediate_size"] if moe else raw["intermediate_size"] if mixtral else 0,
                       (raw.get("shared_expert_intermediate_size") or 0) if moe else 0, kind == "qwen3")
        except KeyError as exc:
            raise SymmemError(f"{name}: missing key {exc.args[0]!r} for model_type {kind}") from None


@dataclass(frozen=True)
class Weight:
    name: str
    numel: int
    fp32: bool  # FP32 whatever the run's dtype (torch's norms)
    expert: bool = False  # in the expert-parallel DDP buffer


def chunk_layers(d: Dims, pp: int, pp_rank: int, vpp: int = 1, chunk: int = 0) -> range:
    """The 0-based global indices of the layers of one model chunk of a rank: L/(PP V) of them from
    chunk·L/V + pp_rank·L/(PP V) (`transformer/transformer_block.py:184-196`, `transformer/transformer_layer.py:
    169-176`; V = 1 without interleaving: the stage's L/PP)."""
    n = d.layers // (pp * vpp)
    start = chunk * (d.layers // vpp) + pp_rank * n
    return range(start, start + n)


def weights(d: Dims, tp: int, pp: int, pp_rank: int, ep: int = 1, vpp: int = 1, chunk: int = 0) -> list[Weight]:
    """The parameters of one model chunk of a rank (the rank's only one when vpp = 1), in Megatron's registration
    order (experts in the expert-parallel buffer only when ep > 1, `tensor_parallel/layers.py:886`). The embedding
    is built by the first chunk of the first stage, the final norm and output layer by the last chunk of the last
    (`parallel_state.py:1622-1639`, pre_process and post_process of each chunk)."""
    out: list[Weight] = []
    first, last = pp_rank == 0 and chunk == 0, pp_rank == pp - 1 and chunk == vpp - 1
    if first:
        out.append(Weight("embedding.word_embeddings.weight", d.vocab // tp * d.h, False))
        if d.positions:
            out.append(Weight("embedding.position_embeddings.weight", d.positions * d.h, False))

    def norm(name):
        out.append(Weight(f"{name}.weight", d.h, True))
        if d.kind == "gpt2":
            out.append(Weight(f"{name}.bias", d.h, True))

    def linear(name, rows, cols, expert=False):
        out.append(Weight(f"{name}.weight", rows * cols, False, expert))
        if d.bias:
            out.append(Weight(f"{name}.bias", rows, False, expert))

    def mlp(name, f, expert=False):
        linear(f"{name}.linear_fc1", (2 if d.gated else 1) * f // tp, d.h, expert)
        if d.bias:  # linear_fc2 is row-parallel: its bias is whole
            out.append(Weight(f"{name}.linear_fc2.weight", d.h * (f // tp), False, expert))
            out.append(Weight(f"{name}.linear_fc2.bias", d.h, False, expert))
        else:
            out.append(Weight(f"{name}.linear_fc2.weight", d.h * (f // tp), False, expert))

    for i in chunk_layers(d, pp, pp_rank, vpp, chunk):
        p = f"decoder.layers.{i}"
        norm(f"{p}.input_layernorm")
        out.append(Weight(f"{p}.self_attention.linear_proj.weight", d.h * (d.heads * d.head_dim // tp), False))
        if d.bias:
            out.append(Weight(f"{p}.self_attention.linear_proj.bias", d.h, False))
        linear(f"{p}.self_attention.linear_qkv", (d.heads + 2 * d.groups) * d.head_dim // tp, d.h)
        if d.qk_norm:  # transformer/attention.py: q_layernorm, k_layernorm over the head size (torch norms: FP32)
            out.append(Weight(f"{p}.self_attention.q_layernorm.weight", d.head_dim, True))
            out.append(Weight(f"{p}.self_attention.k_layernorm.weight", d.head_dim, True))
        norm(f"{p}.pre_mlp_layernorm")
        if d.experts:
            out.append(Weight(f"{p}.mlp.router.weight", d.experts * d.h, False))
            for e in range(d.experts):
                mlp(f"{p}.mlp.experts.local_experts.{e}", d.moe_ffn, expert=ep > 1)
            if d.shared_ffn:
                mlp(f"{p}.mlp.shared_experts", d.shared_ffn)
        else:
            mlp(f"{p}.mlp", d.ffn)
    if last:
        norm("decoder.final_layernorm")
        if not (d.tied and pp == 1):
            if d.tied:
                raise SymmemError("tie_word_embeddings with PP > 1: the shared embedding's own bucket is not modelled")
            out.append(Weight("output_layer.weight", d.vocab // tp * d.h, False))
    return out


@dataclass(frozen=True)
class Buffer:
    """One DDP buffer: its parameters' (start, end) in elements, its padded size and its layout (buckets)."""

    fp32_params: bool
    expert: bool
    ranges: tuple[tuple[Weight, int, int], ...]
    numel: int
    layout: BufferLayout
    members: tuple[Weight, ...]  # registration order (the layout's spans')

    def shard(self, dp: int, dp_rank: int) -> list[tuple[Weight, int]]:
        """(parameter, elements) of each piece in DP rank `dp_rank`'s shard of each bucket (distributed
        optimizer), in buffer order."""
        return [(self.members[i], n) for i, n in shard(self.layout, dp, dp_rank)]


def ddp_buffers(ws: list[Weight], dp: int, distributed: bool, bf16: bool,
                bucket_size: int | None = None) -> list[Buffer]:
    """param_and_grad_buffer.py:635-735 (`symmem.parallel.ddp_buckets.layout`): one buffer per (parameter dtype,
    expert or not), buckets of `bucket_size` parameters (None: one bucket, overlap_grad_reduce off)."""
    groups: dict[tuple[bool, bool], list[Weight]] = {}
    for w in ws:
        groups.setdefault((w.fp32 or not bf16, w.expert), []).append(w)
    out = []
    for (fp32, expert), members in groups.items():
        lay = layout([w.numel for w in members], dp, bucket_size, distributed)
        ranges = tuple((w, a, a + n) for w, (a, n) in zip(members, lay.spans, strict=True))[::-1]
        out.append(Buffer(fp32, expert, ranges, lay.numel, lay, tuple(members)))
    return out


def rank_buffers(d: Dims, tp: int, pp: int, dp: int, pp_rank: int, distributed: bool, bf16: bool,
                 vpp: int = 1, bucket_size: int | None = None) -> list[Buffer]:
    """The DDP buffers of a rank: each model chunk has its own DistributedDataParallel and buffers, in chunk order,
    the order in which the distributed optimizer takes them (`optimizer/__init__.py`, `get_megatron_optimizer`
    over `model_chunks`; `optimizer/distrib_optimizer.py:290-297`). `bucket_size` (overlap_grad_reduce) buckets
    only the first stage's first chunk (distributed_data_parallel.py:94-100)."""
    return [buf for c in range(vpp)
            for buf in ddp_buffers(weights(d, tp, pp, pp_rank, vpp=vpp, chunk=c), dp, distributed, bf16,
                                   bucket_size if pp_rank == 0 and c == 0 else None)]


def states(d: Dims, tp: int, pp: int, dp: int, pp_rank: int, dp_rank: int, bf16: bool,
           distributed: bool = True, vpp: int = 1, bucket_size: int | None = None) -> dict[str, int]:
    """Bytes of one rank's parameters, gradient buffers and optimizer tensors (EP 1: every rank holds all experts;
    vpp model chunks, each with its own buffers, each bucket of each buffer sharded over DP)."""
    out = {"params": 0, "grad_buffers": 0, "optimizer": 0}
    for buf in rank_buffers(d, tp, pp, dp, pp_rank, distributed, bf16, vpp, bucket_size):
        pbytes = 4 if buf.fp32_params else 2
        out["params"] += buf.numel * pbytes if distributed else sum(w.numel for w, _, _ in buf.ranges) * pbytes
        out["grad_buffers"] += 4 * buf.numel
        pieces = [n for _w, n in buf.shard(dp, dp_rank)] if distributed else [w.numel for w, _, _ in buf.ranges]
        for n in pieces:
            main = 0 if buf.fp32_params else 4 * n  # a 16-bit parameter's FP32 main shard
            out["optimizer"] += main + 8 * n + 4  # exp_avg, exp_avg_sq, step
    out["total"] = sum(out.values())
    return out


# ------------------------------------------------------------------------------------------------ saved tensors
# What one transformer layer keeps for backward in the local spec, per distinct storage (e = the run's bytes per
# element, 4 or 2; FP32 = 4; n and g the query and key/value heads of the rank, d the head size, f the FFN width
# of the rank; no sequence parallelism, so every rank holds all s·b rows):
#
# * torch's RMSNorm (`transformer/torch_norm.py:51`; torch 2.13's rms_norm upcasts to FP32): the FP32 input (the
#   input itself in FP32 runs), FP32 rstd per row, the FP32 normalised input (kept by the product with the weight)
#   and the output, kept by the next linear (`tensor_parallel/layers.py:465`, `ctx.save_for_backward(input,
#   weight)`). torch's LayerNorm (GPT): the input, FP32 mean and rstd per row, the output (kept by the linear).
# * RoPE, unfused (`models/common/embeddings/rope_utils.py:122-125`): cos and sin [s, 1, 1, d] made at the run's
#   dtype on each call, for q and for k: four tables per layer, kept by the products with them.
# * core attention (`transformer/dot_product_attention.py`): with g < n, key and value are repeated to n heads
#   (`:170`, `:173`: new storages); `baddbmm` (`:194`) keeps q and k; the causal mask [s, s] (bool), made on every
#   call (`transformer/utils.py:35`) and kept by the in-place masked_fill; torch's softmax runs in FP32 and keeps
#   its output (`fusions/fused_softmax.py:314`, `:334`), cast back to the run's dtype in 16-bit runs (a second
#   storage, kept by the bmm); the bmm with the values (`:239`) keeps them. Without RoPE and repeat (GPT), q, k and
#   v are views of linear_qkv's output: one storage. Dropout runs at p = 0 and keeps nothing.
# * linear_proj keeps the attention's output [s, b, n d]; the MLP: linear_fc1 its input; SwiGLU (`transformer/
#   mlp.py:219-226`) keeps fc1's output (silu's input, a chunk), silu's output and `x_linear + glu_linear_offset`
#   (a new storage); linear_fc2 the product. GeLU with bias (`mlp.py:164-166`): the biased fc1 output (gelu's
#   input) and gelu's output (fc2's input).
# * selective recomputation checkpoints core attention (`transformer/attention.py:390-420`): it keeps its inputs
#   (q and k after RoPE, linear_qkv's output viewed as v) and an int32 tensor of the mask type (`attention.py:414`)
#   instead of the attention's intermediates. Full recomputation keeps nothing inside a layer: the checkpoint of
#   the layer's input is kept outside it (`transformer/transformer_block.py`, `_checkpointed_forward`).


def layer_saved(d: Dims, tp: int, b: int, s: int, bf16: bool, recompute: str = "none") -> list[tuple[str, int]]:
    """(term, bytes) of what one transformer layer of a rank keeps for backward (dense layers)."""
    if d.experts and (bf16 or tp > 1 or recompute != "none"):
        raise SymmemError("saved tensors of Megatron's MoE layer are modelled in FP32 at TP 1 without "
                          "recomputation only")
    if recompute == "full":
        return []
    e = 2 if bf16 else 4
    rows = s * b
    n, g, hd = d.heads // tp, d.groups // tp, d.head_dim
    f = d.ffn // tp
    out: list[tuple[str, int]] = []

    def norm(name):
        if d.kind == "gpt2":
            if bf16:
                raise SymmemError("GPT (LayerNorm) in BF16 is not modelled yet")
            out.extend([(f"{name} input", rows * d.h * e), (f"{name} FP32 mean", rows * 4),
                        (f"{name} FP32 rstd", rows * 4), (f"{name} output (linear input)", rows * d.h * e)])
        else:
            out.extend([(f"{name} FP32 input", rows * d.h * 4), (f"{name} FP32 rstd", rows * 4),
                        (f"{name} FP32 normalised input", rows * d.h * 4),
                        (f"{name} output (linear input)", rows * d.h * e)])

    norm("input_layernorm")
    if d.qk_norm and recompute != "selective":
        out.extend(_qk_norm_saved(rows, n, g, hd, e))
    elif d.qk_norm:
        raise SymmemError("Qwen3's q/k layernorm under selective recomputation is not modelled")
    rope = d.kind != "gpt2"
    if rope:
        out.append(("RoPE cos and sin for q and k", 4 * s * hd * e))
    if recompute == "selective":
        if rope:
            out.extend([("q after RoPE (checkpoint input)", rows * n * hd * e),
                        ("k after RoPE (checkpoint input)", rows * g * hd * e)])
        out.extend([("linear_qkv output, v (checkpoint input)", rows * (n + 2 * g) * hd * e),
                     ("int32 attention mask type (checkpoint input)", 4)])
    else:
        if rope:
            out.extend([("q after RoPE", rows * n * hd * e), ("k (repeated to n heads when g < n)", rows * n * hd * e)])
            if g < n or not (d.qk_norm and e == 4):  # else: linear_qkv's output, counted with k_layernorm
                out.append(("v repeated to n heads" if g < n else "linear_qkv output (v)",
                            rows * n * hd * e if g < n else rows * (n + 2 * g) * hd * e))
        else:
            out.append(("linear_qkv output (q, k, v views)", rows * (n + 2 * g) * hd * e))
        out.append(("causal mask [s, s] (bool)", s * s))
        out.append(("FP32 softmax output", b * n * s * s * 4))
        if bf16:
            out.append(("softmax output at the run's dtype", b * n * s * s * e))
    out.append(("attention output (linear_proj input)", rows * n * hd * e))
    norm("pre_mlp_layernorm")
    if d.experts:
        out.extend(_moe_saved(d, rows, e))
    elif d.gated:
        out.extend([("linear_fc1 output (silu input)", rows * 2 * f * e), ("silu output", rows * f * e),
                    ("x_linear + glu_linear_offset", rows * f * e), ("linear_fc2 input", rows * f * e)])
    else:
        out.extend([("biased linear_fc1 output (gelu input)", rows * f * e), ("gelu output (linear_fc2 input)",
                                                                            rows * f * e)])
    return out


def _qk_norm_saved(rows: int, n: int, g: int, hd: int, e: int) -> list[tuple[str, int]]:
    """Qwen3's q_layernorm and k_layernorm (torch RMSNorm over the head size, `transformer/attention.py`
    get_query_key_value_tensors then `q_layernorm`/`k_layernorm`): each keeps its FP32 input, FP32 rstd per head
    row and FP32 normalised input (the norm's output feeds the unfused RoPE, whose products keep only cos and sin).
    The query is split from linear_qkv's [s, b, g, (n/g + 2) d] output and reshaped to n heads: a copy when it
    merges two strided dimensions (g > 1 and n > g), a view when n = g or g = 1 (TP 2 of 2 groups: measured); the
    key is a view. In FP32 runs the FP32 input is the tensor itself, so a view keeps the
    whole linear_qkv output alive (counted once, and not again as v's when g = n); in BF16 runs it is an FP32 copy
    of the head's size."""
    qkv = rows * (n + 2 * g) * hd * e
    if e == 4:  # the FP32 inputs are the tensors: the query copy (n > g) and the linear_qkv output (k's view)
        inputs = [("q_layernorm input (a copy of the query)", rows * n * hd * 4)] if n > g > 1 else []
        inputs.append(("linear_qkv output (k_layernorm's input, a view)", qkv))
    else:
        inputs = [("q_layernorm FP32 input", rows * n * hd * 4), ("k_layernorm FP32 input", rows * g * hd * 4)]
    return [*inputs, ("q_layernorm FP32 rstd", rows * n * 4), ("q_layernorm FP32 normalised input", rows * n * hd * 4),
            ("k_layernorm FP32 rstd", rows * g * 4), ("k_layernorm FP32 normalised input", rows * g * hd * 4)]


def _moe_saved(d: Dims, tokens: int, e: int) -> list[tuple[str, int]]:
    """The MoE block (alltoall dispatcher, SequentialMLP experts, EP 1, dropless: the experts see tokens·k rows in
    all, however the router splits them). Router (`transformer/moe/router.py:639`, FP32 gating through
    `moe_utils.py:1192-1197`, which keeps the FP32 input: the norm's output, counted above): the top-k indices
    (int64) and probabilities (FP32) [T, k], the routing map [E, T] (bool) and the transposed FP32 probabilities
    [E, T] (`moe_utils.py:354`, `:372`); the permutation's sorted indices [T·k] (int64, `moe_utils.py:346-369`) and
    the permuted tokens [T·k, h] (kept by every expert's linear_fc1 as views of one storage) and FP32 permuted
    probabilities [T·k]; per expert row: the SwiGLU terms of a dense MLP (fc1 output 2f, silu output f,
    x_linear + offset f) and the product scaled by the routing probability (`transformer/mlp.py:231-234`, the
    unscaled product f and the scaled one, fc2's input, f); the shared expert is a dense SwiGLU MLP
    (`moe/shared_experts.py`) on all tokens."""
    k, experts, fm, fs = d.topk, d.experts, d.moe_ffn, d.shared_ffn
    routed = tokens * k
    out = [("router top-k indices (int64)", routed * 8), ("router top-k probabilities (FP32)", routed * 4),
           ("routing map [E, T] (bool)", experts * tokens), ("transposed probabilities [E, T] (FP32)",
                                                             experts * tokens * 4),
           ("permutation sorted indices (int64)", routed * 8), ("permuted tokens", routed * d.h * e),
           ("permuted probabilities (FP32)", routed * 4),
           ("experts: fc1 output, silu output, x_linear + offset, product, scaled product", routed * 6 * fm * e)]
    if fs:
        out.append(("shared expert: fc1 output, silu output, x_linear + offset, fc2 input", tokens * 5 * fs * e))
    return out


def saved_per_layer(d: Dims, tp: int, pp: int, pp_rank: int, b: int, s: int, bf16: bool,
                    recompute: str = "none", vpp: int = 1) -> dict[str, int]:
    """Bytes kept for backward by each transformer layer of a rank in one micro-batch ("layer N", 1-based as
    Megatron numbers them; with vpp chunks, every chunk's layers)."""
    per = sum(n for _, n in layer_saved(d, tp, b, s, bf16, recompute))
    return {f"layer {i + 1}": per for c in range(vpp) for i in chunk_layers(d, pp, pp_rank, vpp, c)}
