"""One training iteration of Megatron-Core 0.16.1's GPTModel (local spec) per rank on the CPU, measured.

`run(settings)` spawns TP x PP x DP processes (`torch.multiprocessing`, gloo), each builds the model from an HF
config, wraps it in Megatron's `DistributedDataParallel` (FP32 gradient buffers) and builds Megatron's optimizer
(Adam through torch's AdamW; the distributed optimizer, also at DP 1), then runs `get_forward_backward_func()`
(1F1B when PP > 1, interleaved over `vpp` model chunks per rank when vpp > 1) over M micro-batches and
`optimizer.step()`, inside `bridge.cpu_megatron()` and a `StorageTracker`. Each rank returns:

* `peak`: the most bytes of live storages at any op boundary of the iteration (forward, backward, gradient
  reduction and optimizer step), with the op and phase at it; everything alive in the process counts, the model's
  states included;
* `states`: bytes of the distinct storages of the parameters, the DDP parameter and gradient buffers, the
  optimizer's main parameters and its moments, after the step;
* `saved`: per transformer layer of the rank (global layer number), bytes saved for backward in the first
  micro-batch (of each model chunk) (`tracker.SavedPerLayer`).
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass

from symmem.errors import SymmemError
from symmem.validate.megatron_core import MISSING


@dataclass(frozen=True)
class Settings:
    raw: dict  # HF config (llama, gpt2, qwen2_moe, qwen3, mixtral)
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    vpp: int = 1  # virtual pipeline stages per rank (model chunks; > 1: the interleaved schedule)
    microbatches: int = 1
    recompute: str = "none"  # none | selective | full
    b: int = 1
    s: int = 32
    dtype: str = "fp32"  # fp32 | bf16: parameters and activations
    distributed_optimizer: bool = True
    seed: int = 0
    collectives: bool = False  # record every c10d collective (collectives.Recorder)
    # Megatron's --overlap-grad-reduce, --overlap-param-gather and --ddp-bucket-size (None: Megatron's default,
    # max(40M, 1M x DP) parameters, distributed_data_parallel.py:63-67)
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    bucket_size: int | None = None

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp


def require() -> None:
    try:
        import megatron.core  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        raise SymmemError(MISSING) from None


def transformer_config(st: Settings):
    """Megatron's TransformerConfig for an HF config (the keys read are named in `symmem.validate.megatron_core`)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    raw = st.raw
    kind = raw.get("model_type")
    dtype = torch.bfloat16 if st.dtype == "bf16" else torch.float32
    common = dict(tensor_model_parallel_size=st.tp, pipeline_model_parallel_size=st.pp,
                  expert_model_parallel_size=st.ep,
                  virtual_pipeline_model_parallel_size=st.vpp if st.vpp > 1 else None, use_cpu_initialization=True,
                  params_dtype=dtype,
                  pipeline_dtype=dtype, bf16=st.dtype == "bf16", hidden_dropout=0.0, attention_dropout=0.0,
                  perform_initialization=True, gradient_accumulation_fusion=False, bias_dropout_fusion=False,
                  apply_rope_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
                  sequence_parallel=False)
    if st.recompute == "selective":
        common.update(recompute_granularity="selective")
    elif st.recompute == "full":
        common.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    if kind == "gpt2":
        h = raw["n_embd"]
        return TransformerConfig(num_layers=raw["n_layer"], hidden_size=h, num_attention_heads=raw["n_head"],
                                 ffn_hidden_size=raw.get("n_inner") or 4 * h, normalization="LayerNorm",
                                 layernorm_epsilon=raw.get("layer_norm_epsilon", 1e-5), add_bias_linear=True,
                                 activation_func=F.gelu, gated_linear_unit=False, bias_activation_fusion=False,
                                 **common)
    h = raw["hidden_size"]
    cfg = dict(num_layers=raw["num_hidden_layers"], hidden_size=h, num_attention_heads=raw["num_attention_heads"],
               num_query_groups=raw.get("num_key_value_heads", raw["num_attention_heads"]),
               ffn_hidden_size=raw["intermediate_size"], normalization="RMSNorm",
               layernorm_epsilon=raw.get("rms_norm_eps", 1e-6), add_bias_linear=False, activation_func=F.silu,
               gated_linear_unit=True, bias_activation_fusion=False, kv_channels=raw.get("head_dim"))
    if kind == "qwen3":  # Qwen3: RMSNorm on q and k per head (Megatron's qk_layernorm)
        cfg.update(qk_layernorm=True)
    if kind in ("qwen2_moe", "mixtral"):
        mixtral = kind == "mixtral"  # Mixtral: every layer 8 experts of intermediate_size, no shared expert
        cfg.update(num_moe_experts=raw["num_local_experts" if mixtral else "num_experts"],
                   moe_router_topk=raw["num_experts_per_tok"],
                   moe_ffn_hidden_size=raw["intermediate_size" if mixtral else "moe_intermediate_size"],
                   moe_token_dispatcher_type="alltoall",
                   moe_shared_expert_intermediate_size=None if mixtral else
                   (raw.get("shared_expert_intermediate_size") or None),
                   moe_router_load_balancing_type="none", moe_grouped_gemm=False, moe_aux_loss_coeff=0.0)
    return TransformerConfig(**{k: v for k, v in cfg.items() if v is not None}, **common)


def _on_cpu(rank: int, st: Settings) -> dict:
    """One rank's iteration inside the CPU bridge (`bridge.cpu_megatron`); the gloo group is `_spawn`'s."""
    from symmem.validate.megatron_core.bridge import cpu_megatron

    with cpu_megatron():
        return _iteration(rank, st)


def _iteration(rank: int, st: Settings) -> dict:
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.transformer_layer import TransformerLayer

    from symmem.validate.megatron_core import collectives
    from symmem.validate.megatron_core.bridge import cuda_type_names
    from symmem.validate.megatron_core.tracker import SavedPerLayer, tracker_class

    vpp = st.vpp if st.vpp > 1 else None
    ps.initialize_model_parallel(tensor_model_parallel_size=st.tp, pipeline_model_parallel_size=st.pp,
                                 expert_model_parallel_size=st.ep, virtual_pipeline_model_parallel_size=vpp)
    torch.manual_seed(st.seed)
    config = transformer_config(st)
    gpt2 = st.raw.get("model_type") == "gpt2"
    moe = st.raw.get("model_type") in ("qwen2_moe", "mixtral")
    spec = get_gpt_layer_local_spec(num_experts=config.num_moe_experts if moe else None, moe_grouped_gemm=False,
                                    qk_layernorm=config.qk_layernorm, normalization=config.normalization)
    vocab = st.raw["vocab_size"]
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=st.overlap_grad_reduce,
                                               overlap_param_gather=st.overlap_param_gather,
                                               bucket_size=st.bucket_size,
                                               use_distributed_optimizer=st.distributed_optimizer)
    # one model chunk per virtual stage, as Megatron-LM's get_model builds them (megatron/training/training.py):
    # pre/post_process of the chunk (parallel_state.py:1622, :1632, vp_stage given), vp_stage to GPTModel (its
    # layers' offset, transformer/transformer_layer.py:169-176), DDP per chunk, bucketing off after the first
    model = []
    for i in range(st.vpp):
        stage = i if vpp else None
        chunk = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=vocab,
                         max_sequence_length=st.raw.get("n_positions", st.raw.get("max_position_embeddings", st.s)),
                         pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage),
                         post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage),
                         position_embedding_type="learned_absolute" if gpt2 else "rope",
                         share_embeddings_and_output_weights=bool(st.raw.get("tie_word_embeddings", gpt2)),
                         vp_stage=stage)
        model.append(DistributedDataParallel(config=config, ddp_config=ddp_config, module=chunk,
                                             disable_bucketing=i > 0))
    config.finalize_model_grads_func = finalize_model_grads
    opt_config = OptimizerConfig(optimizer="adam", lr=1e-4, bf16=st.dtype == "bf16",
                                 params_dtype=config.params_dtype,
                                 use_distributed_optimizer=st.distributed_optimizer)
    with cuda_type_names():
        optimizer = get_megatron_optimizer(opt_config, model)

    # the first micro-batch's saved tensors, per layer
    state_ptrs = {p.untyped_storage().data_ptr() for c in model for p in c.parameters()}
    saved = SavedPerLayer(state_ptrs)
    layers = [m for c in model for m in c.modules() if isinstance(m, TransformerLayer)]

    def enter(mod, args, number):
        saved.layer = f"layer {number}"

    for layer in layers:
        layer.register_forward_pre_hook(lambda mod, args, n=layer.layer_number: enter(mod, args, n))
        layer.register_forward_hook(lambda mod, args, out: setattr(saved, "layer", None))

    g = torch.Generator().manual_seed(st.seed + 1)
    batches = [torch.randint(0, vocab, (st.b, st.s + 1), generator=g) for _ in range(st.microbatches)]
    position_ids = torch.arange(st.s).unsqueeze(0).expand(st.b, -1)
    seen: set[int] = set()  # the chunks that ran a micro-batch already

    def forward_step(data_iterator, model):
        # garbage in reference cycles from the micro-batch before freed here, every run alike (the collector itself
        # is off during forward and backward, below: when it ran there depended on gloo's threads' allocations)
        gc.collect()
        tokens = next(data_iterator)
        first = id(model) not in seen
        if first and seen:  # a later chunk's first micro-batch: addresses released since may be reused
            gc.collect()
            saved.forget_released()
        seen.add(id(model))
        saved.active = first
        out = model(tokens[:, :-1].contiguous(), position_ids, None, labels=tokens[:, 1:].contiguous())
        saved.active = False
        if first:  # this chunk's layers (and, once, what is kept outside the layers)
            gc.collect()
            mine = {f"layer {m.layer_number}" for m in model.modules() if isinstance(m, TransformerLayer)}
            mine |= {"outside layers"} - set(saved_layers)
            saved_layers.update({k: v for k, v in saved.result().items() if k in mine})
            saved_detail.update({k: v for k, v in saved.detail().items() if k in mine})

        def loss_func(output):
            loss = output.float().mean()
            return loss, {"loss": loss.detach()}

        return out, loss_func

    saved_layers: dict[str, int] = {f"layer {m.layer_number}": 0 for m in layers}  # a layer may keep nothing
    saved_detail: dict[str, list] = {}
    Tracker = tracker_class()
    tracker = Tracker()
    gc.collect()
    recorder = collectives.recorder_class()(tracker) if st.collectives else contextlib.nullcontext()
    with tracker, recorder:
        tracker.add_tensors(o for o in gc.get_objects() if isinstance(o, torch.Tensor))
        start = tracker.current
        tracker.phase = "forward-backward"
        # no automatic collection during forward and backward: a cycle's tensors freed mid-step or not moved the
        # BF16 loss run's peak by 20,864 bytes once in a full test run
        gc.disable()
        try:
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                get_forward_backward_func()(forward_step_func=forward_step,
                                            data_iterator=[iter(batches) for _ in model] if vpp else iter(batches),
                                            model=model,
                                            num_microbatches=st.microbatches, seq_length=st.s,
                                            micro_batch_size=st.b, forward_only=False)
        finally:
            gc.enable()
        # Garbage in reference cycles (a 4-byte scalar, once in a few runs) is freed whenever Python's collector
        # happens to run, which gloo's threads make vary between runs: collected here, the optimizer step starts
        # from the same live set every run (the step's peak flickered by 4 bytes on PP 2's last stage without it)
        gc.collect()
        tracker.phase = "optimizer step"
        # and no collection inside the step: when the collector runs there depends on the allocations gloo's
        # threads make, so a cycle's scalar freed mid-step or not moved the step's peak by 4 bytes under load
        gc.disable()
        try:
            with cuda_type_names():
                optimizer.step()
        finally:
            gc.enable()
        tracker.phase = "end"
        gc.collect()
        end = tracker.current
    states = _state_bytes(model, optimizer)
    return {"rank": rank, "tp_rank": ps.get_tensor_model_parallel_rank(),
            "pp_rank": ps.get_pipeline_model_parallel_rank(), "dp_rank": ps.get_data_parallel_rank(),
            "peak": tracker.peak, "peak_op": tracker.peak_op, "peak_phase": tracker.peak_phase,
            "at_peak": _summary(tracker.at_peak),
            "start": start, "end": end, "states": states["total"], "states_by_kind": states,
            "saved": dict(sorted(saved_layers.items(), key=_layer_order)),
            "saved_detail": saved_detail, "collectives": getattr(recorder, "records", None)}


def _summary(items) -> dict[str, int]:
    """Bytes live at the peak by the phase and op that made them."""
    out: dict[str, int] = {}
    for n, origin in items:
        out[origin] = out.get(origin, 0) + n
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _layer_order(item) -> tuple:
    name = item[0]
    return (1, 0) if not name.startswith("layer ") else (0, int(name.split()[1]))


def _state_bytes(model, optimizer) -> dict:
    """Distinct storages of the parameters, the DDP buffers and the optimizer's tensors, by kind."""
    import torch

    seen: set[int] = set()
    out = {"params": 0, "grad_buffers": 0, "optimizer": 0}

    def add(kind, t):
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            if st.data_ptr() not in seen and st.nbytes():
                seen.add(st.data_ptr())
                out[kind] += st.nbytes()

    for p in (p for chunk in model for p in chunk.parameters()):
        add("params", p)
    for buf in [b for chunk in model for b in [*chunk.buffers, *chunk.expert_parallel_buffers]]:
        if buf.param_data is not None:
            add("params", buf.param_data)
        add("grad_buffers", buf.grad_data)
    opts = getattr(optimizer, "chained_optimizers", [optimizer])
    for opt in opts:
        inner = opt.optimizer
        for group in inner.param_groups:
            for p in group["params"]:
                add("optimizer", p)
        for state in inner.state.values():
            for t in state.values():
                add("optimizer", t)
    out["total"] = sum(out.values())
    return out


def run(st: Settings) -> list[dict]:
    """Spawn the ranks, run one iteration on each, return their measurements ordered by rank."""
    require()
    from symmem.validate._spawn import spawn

    return spawn(_on_cpu, st, st.world, "megatron-core")

