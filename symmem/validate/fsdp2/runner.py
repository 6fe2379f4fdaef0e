"""One training step of FSDP2 over torchtitan 0.3.0's Llama 3 or DeepSeek-V3 per rank on the CPU (gloo), measured to
the byte.

`run(settings)` spawns `world` processes (`torch.multiprocessing`, gloo); each builds torchtitan's `Llama3Model`
from a tiny flavor (or a named torchtitan flavor), or its `DeepSeekV3Model` at `MoESettings`' sizes, in FP32 with
`ScaledDotProductAttention` as the inner attention
(torchtitan 0.3.0 refuses `sdpa` for language models, torchtitan/models/common/config_utils.py:71-89
`get_attention_config`, and FlexAttention has no backward on the CPU), applies torchtitan's activation checkpointing
(`torchtitan.distributed.activation_checkpoint`), `fully_shard`s every block and then the root with
`MixedPrecisionPolicy(param_dtype, reduce_dtype)`, builds `torch.optim.AdamW(foreach=False)` and runs one step:
forward on random tokens, torchtitan's `cross_entropy_loss` (sum) divided by the number of tokens, backward,
`optimizer.step()`. Each rank returns:

* `states`: bytes of the distinct storages of the sharded parameters (`DTensor.to_local()`), their gradients and
  the optimizer's tensors (exp_avg, exp_avg_sq, step) after the step, with `states_by_kind`;
* `params`: per parameter, the global shape, the local shard's shape and numel, and its storage bytes (FSDP2 pads
  dim 0 to a multiple of the shard degree; the local shard is a view of the padded storage);
* `saved`: per transformer block, bytes saved for backward (`tracker.SavedPerLayer`; the all-gathered parameters
  and the buffers are excluded), counted when the forward ends;
* `held_after_block`: the live bytes when each block's forward returns; between two interior blocks they grow by
  what the block leaves for the backward, its saved tensors and what the autograd graph holds beside them;
* `head_growth`: the growth of the live bytes from the final norm's start to lm_head's end (what the two leave for
  the backward and the logits, less the norm's input);
* `peak`: the most bytes of live storages at any op boundary over forward, backward and the optimizer step, with
  the op and phase at it (`tracker.tracker_class`, extended to follow storages that FSDP2 resizes in place).

AC modes: `none`; `full` (torchtitan `FullAC`); `selective-op` (torchtitan `SelectiveAC`, its per-op policy);
`selective-layer:N` (torchtitan 0.3.0 has no layer SAC any more: the block of 0-based id i is wrapped as `FullAC`
wraps it when (i + 1) % N == 0, torchtitan 9dec370's rule: parallelisms/parallelize_llama.py
`_apply_ac_to_transformer_block` counts the blocks from 1 and wraps a block whose count is a multiple of N).
"""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass

from symmem.errors import SymmemError
from symmem.validate.fsdp2 import MISSING
from symmem.validate.megatron_core.tracker import SavedPerLayer  # no torch at import


@dataclass(frozen=True)
class Settings:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab: int = 256
    ffn_hidden: int | None = None  # None: torchtitan's compute_ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier)
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    max_seq_len: int = 2048  # the RoPE cache's length (HF config: max_position_embeddings; torchtitan's flavors 131072)
    flavor: str | None = None  # a torchtitan llama3 flavor ("debugmodel", ...) instead of the dims above
    family: str = "llama3"  # llama3 | deepseek_v3
    moe: MoESettings | None = None  # deepseek_v3's dims beyond the shared ones (None: MoESettings())
    world: int = 2
    replicate: int = 1  # HSDP replicate degree (mesh (replicate, world // replicate))
    tp: int = 1  # tensor parallel degree, with sequence parallel (mesh (replicate, shard, tp), tp innermost)
    reshard_after_forward: bool = True
    ac: str = "none"  # none | full | selective-layer:N | selective-op
    b: int = 1
    s: int = 32
    param_dtype: str = "bf16"
    reduce_dtype: str = "fp32"
    seed: int = 0
    float8: str | None = None  # torchao float8 training: tensorwise | rowwise | rowwise_with_gw_hp (emulated)
    float8_all_gather: bool = False  # FSDP2 gathers the Float8 linears' weights in float8 (tensorwise only)
    compile: bool = False  # torchtitan's torch.compile: each block (after AC, before FSDP) and the loss, inductor


_DTYPES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}
FLOAT8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")  # torchao's Float8LinearConfig.from_recipe_name


@dataclass(frozen=True)
class MoESettings:
    """torchtitan 0.3.0's DeepSeek-V3 (MLA with no query compression, as its debugmodel; MoE with shared experts)
    at tiny sizes; `Settings.dim`, `n_layers`, `n_heads`, `vocab` are the shared ones."""

    n_dense_layers: int = 1
    dense_hidden: int = 128
    moe_hidden: int = 32
    num_experts: int = 4
    num_shared_experts: int = 1
    top_k: int = 2
    kv_lora_rank: int = 32
    qk_nope_head_dim: int = 16
    qk_rope_head_dim: int = 8
    v_head_dim: int = 16
    q_lora_rank: int = 0  # 0: one wq (the debugmodel's); else wq_a, q_norm, wq_b (the 671B's)
    score_func: str = "softmax"  # the router's (the debugmodel's; the 671B's is sigmoid)
    route_norm: bool = False  # top-k scores divided by their sum (the 671B's: True)
    n_group: int | None = None  # group-limited routing: expert groups, and the groups kept (the 671B's: 8, 4)
    topk_group: int | None = None


def require() -> None:
    try:
        import torch  # noqa: F401
        import torch.distributed.fsdp  # noqa: F401
        import torchtitan.models.llama3  # noqa: F401
    except ImportError:
        raise SymmemError(MISSING) from None


def build_deepseek_v3(st: Settings):
    """torchtitan 0.3.0's DeepSeekV3Model at `st.moe`'s sizes (its `_debugmodel`'s recipe, models/deepseek_v3/
    __init__.py:319-386: YaRN RoPE, no MTP; its softmax router unless `st.moe` says otherwise), SDPA as the inner
    attention."""
    import torchtitan.models.deepseek_v3 as d3
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.attention import ScaledDotProductAttention

    m = st.moe or MoESettings()
    d3.get_attention_config = lambda backend: ScaledDotProductAttention.Config()  # as for Llama 3 (build_model)
    layers = d3._build_dsv3_layers(
        n_layers=st.n_layers, n_dense_layers=m.n_dense_layers, dim=st.dim, n_heads=st.n_heads,
        q_lora_rank=m.q_lora_rank,
        kv_lora_rank=m.kv_lora_rank, qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=m.qk_rope_head_dim,
        v_head_dim=m.v_head_dim, mscale=0.70, dense_hidden_dim=m.dense_hidden, moe_hidden_dim=m.moe_hidden,
        num_experts=m.num_experts, num_shared_experts=m.num_shared_experts, router_top_k=m.top_k,
        router_score_func=m.score_func, router_route_norm=m.route_norm, router_num_expert_groups=m.n_group,
        router_num_limited_groups=m.topk_group, attn_backend="sdpa",
        moe_comm_backend="standard",
        non_blocking_capacity_factor=None,
        # every flavor's RoPE cache: 4096 x 4 positions (models/deepseek_v3/__init__.py:356-365), whatever the HF
        # config's max_position_embeddings (the profile's buffer, symmem.profiles.DSV3_ROPE_MAX_SEQ_LEN)
        rope=ComplexRoPE.Config(dim=m.qk_rope_head_dim, max_seq_len=4096 * 4, theta=10000.0, scaling="yarn",
                                rope_factor=40.0, beta_fast=32.0, beta_slow=1.0, original_seq_len=4096))
    config = d3.DeepSeekV3Model.Config(
        vocab_size=st.vocab, dim=st.dim,
        tok_embeddings=Embedding.Config(num_embeddings=st.vocab, embedding_dim=st.dim, param_init=d3._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=st.dim, param_init=d3._NORM_INIT),
        lm_head=Linear.Config(in_features=st.dim, out_features=st.vocab, param_init=d3._output_linear_init(st.dim)),
        layers=layers, mtp_layers=[])
    if st.tp > 1:  # as for Llama 3 (build_model): the trainer sets the sharding config before the build
        # (models/deepseek_v3/model.py:196-211 `update_from_config`), sequence parallel on, EP off
        from torchtitan.models.deepseek_v3.sharding import set_deepseek_v3_sharding_config

        set_deepseek_v3_sharding_config(config, enable_sp=True, enable_ep=False)
    config = convert_float8(config, st)
    model = config.build()
    model.init_states()
    wrap_float8_weights(model, st)
    return model


def build_model(st: Settings):
    """torchtitan's Llama3Model (FP32, on the CPU, initialized), SDPA as the inner attention."""
    if st.family == "deepseek_v3":
        return build_deepseek_v3(st)
    if st.family != "llama3":
        raise SymmemError(f"family = {st.family!r}: llama3 or deepseek_v3")
    import torchtitan.models.llama3 as l3
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm, compute_ffn_hidden_dim
    from torchtitan.models.common.attention import ScaledDotProductAttention

    # get_attention_config("sdpa") raises for language models (config_utils.py:89): its own SDPA module instead
    l3.get_attention_config = lambda backend: ScaledDotProductAttention.Config()
    if st.flavor is not None:
        config = l3.model_registry(st.flavor, attn_backend="sdpa").model
    else:
        hidden = st.ffn_hidden or compute_ffn_hidden_dim(st.dim, multiple_of=st.multiple_of,
                                                          ffn_dim_multiplier=st.ffn_dim_multiplier)
        config = l3.Llama3Model.Config(
            dim=st.dim, vocab_size=st.vocab,
            tok_embeddings=Embedding.Config(num_embeddings=st.vocab, embedding_dim=st.dim,
                                            param_init=l3._EMBEDDING_INIT),
            norm=RMSNorm.Config(normalized_shape=st.dim, param_init=l3._NORM_INIT),
            lm_head=Linear.Config(in_features=st.dim, out_features=st.vocab,
                                  param_init=l3._output_linear_init(st.dim)),
            layers=l3._build_llama3_layers(
                fuse_qkv=True, n_layers=st.n_layers, dim=st.dim, n_heads=st.n_heads, n_kv_heads=st.n_kv_heads,
                hidden_dim=hidden,
                rope=ComplexRoPE.Config(dim=st.dim // st.n_heads, max_seq_len=st.max_seq_len, theta=500000,
                                        scaling="llama"),
                attn_backend="sdpa"))
    if st.tp > 1:
        # the sharding config is read when the modules are built: the trainer sets it on the model config first
        # (torchtitan/trainer.py:347 `update_from_config` -> models/llama3/model.py:83-88), sequence parallel on
        # (`enable_sequence_parallel = True`, config/configs.py:160)
        from torchtitan.models.llama3.sharding import set_llama3_sharding_config

        set_llama3_sharding_config(config, enable_sp=True)
    config = convert_float8(config, st)
    model = config.build()
    model.init_states()
    wrap_float8_weights(model, st)
    return model


def convert_float8(config, st: Settings):
    """torchtitan 0.3.0's Float8 converter on the model config (torchtitan/components/quantization/float8.py:
    `Float8LinearConverter.convert`, :169-188): every `Linear.Config` whose in and out features are multiples of 16
    (utils.py:16-30 `module_filter_fn`, no FQN filtered: `filter_fqns` defaults to none, :62) becomes a
    `Float8Linear.Config`. The torchao config is the recipe's with `emulate=True` eagerly (the eager Float8 cases
    were measured so; 0.3.0's converter under `emulate` builds the default, tensorwise, config, :116-117, so the
    other recipes are torchao's own `from_recipe_name` with emulation set), `emulate=False` under `Settings.compile`
    (the GPU's graph: `_scaled_mm` runs on this CPU) and, for `float8_all_gather`, torchao's
    `enable_fsdp_float8_all_gather` (tensorwise only, torchao/float8/config.py)."""
    if st.float8 is None:
        return config
    import dataclasses
    from functools import partial

    from torchao.float8 import Float8LinearConfig
    from torchtitan.components.quantization.float8 import Float8Linear
    from torchtitan.components.quantization.utils import module_filter_fn
    from torchtitan.models.common.linear import Linear

    if st.float8 not in FLOAT8_RECIPES:
        raise SymmemError(f"float8 = {st.float8!r}: {', '.join(FLOAT8_RECIPES)}")
    if st.float8_all_gather and st.float8 != "tensorwise":
        raise SymmemError(f"float8 = {st.float8!r} with the float8 all-gather: torchao gathers float8 weights "
                          "under tensorwise scaling only")
    # compiled, the GPU's path: torch._scaled_mm, which runs on this CPU (emulation would put a dequantizing mm in
    # the graph, another partition)
    ao = dataclasses.replace(Float8LinearConfig.from_recipe_name(st.float8), emulate=not st.compile,
                             enable_fsdp_float8_all_gather=st.float8_all_gather)
    keep = partial(module_filter_fn, filter_fqns=[])
    for fqn, linear, parent, attr in list(config.traverse(Linear.Config)):
        if keep(linear, fqn):
            new = Float8Linear.Config(in_features=linear.in_features, out_features=linear.out_features,
                                      bias=linear.bias, param_init=linear.param_init, _torchao_config=ao)
            if isinstance(parent, list):
                parent[attr] = new
            else:
                setattr(parent, attr, new)
    return config


def wrap_float8_weights(model, st: Settings) -> None:
    """Under the float8 all-gather, each Float8Linear's weight becomes torchao's `WeightWithDynamicFloat8CastTensor`,
    as `Float8Linear.from_float` wraps it (torchao/float8/float8_linear.py:324-334; torchtitan 0.3.0 builds its
    Float8Linear from the config and never calls `from_float`, so it has no float8 all-gather: torchtitan 9dec370
    converted with `convert_to_float8_training`, which does). FSDP2 then casts each shard to float8 before the
    all-gather (fsdp_utils.py:228-251 `fsdp_pre_all_gather`) and keeps a `Float8TrainingTensor` as the gathered
    weight (:253-285)."""
    if not st.float8_all_gather:
        return
    import torch
    from torchao.float8.float8_linear import Float8Linear
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    for mod in model.modules():
        if isinstance(mod, Float8Linear):
            mod.weight = torch.nn.Parameter(
                WeightWithDynamicFloat8CastTensor(mod.weight.data, mod.linear_mm_config,
                                                  mod.config.cast_config_weight.target_dtype),
                requires_grad=mod.weight.requires_grad)


def parallel_dims(st: Settings):
    """torchtitan's ParallelDims of the run, its meshes built on the CPU, with the DTensor backend
    (`spmd_backend = "partial_dtensor"`, config/configs.py:163; parallelize.py:52-53 applies TP through
    `model.parallelize`). The trainer's default, `spmd_types`, keeps plain local tensors and needs the trainer's
    input annotations; with FSDP it fails in torch 2.13.0 (`fully_shard` over its `dp_mesh_dims`: "all parameters
    must be DTensors", torch/distributed/fsdp/_fully_shard/_fsdp_param.py:345), so the measurements are DTensor
    TP's."""
    import torchtitan.distributed.parallel_dims as pdm
    import torchtitan.distributed.utils as du
    from torchtitan.distributed import ParallelDims

    pdm.device_type = "cpu"  # parallel_dims.py builds its meshes on the accelerator's device type
    du.set_spmd_backend("partial_dtensor")
    shard = st.world // (st.replicate * st.tp)
    pd = ParallelDims(dp_replicate=st.replicate, dp_shard=shard, cp=1, tp=st.tp, pp=1, ep=1, world_size=st.world,
                      spmd_backend="partial_dtensor")
    pd.build_mesh()
    return pd


class SacCaches:
    """The caches of torch's selective checkpointing, one per checkpointed block forward, with the layer each ran in.

    Under torchtitan's per-op AC the outputs of the ops its policy saves (MUST_SAVE) are kept in the checkpoint's
    own cache (`_CachingTorchDispatchMode.storage`, torch/utils/checkpoint.py), not through saved-tensor hooks; the
    hooks see only the checkpoint's inputs. `create_selective_checkpoint_contexts` is wrapped where torchtitan
    calls it (torchtitan/distributed/activation_checkpoint.py `SelectiveAC._wrap_block`) to keep each cache."""

    def __init__(self):
        self.entries: list[tuple[str | None, dict]] = []
        self.saved = None  # the SavedPerLayer whose `layer` names the block running

    def install(self) -> None:
        import torchtitan.distributed.activation_checkpoint as tac

        original = tac.create_selective_checkpoint_contexts

        def recording(policy_fn, *args, **kwargs):
            caching, cached = original(policy_fn, *args, **kwargs)
            self.entries.append((self.saved.layer if self.saved is not None else None, caching.storage))
            return caching, cached

        tac.create_selective_checkpoint_contexts = recording

    def add_to(self, saved) -> None:
        """Count each cache's tensors as saved by its layer (distinct storages, first owner wins)."""
        import torch
        from torch.utils._pytree import tree_leaves

        for layer, storage in self.entries:
            for per_key in storage.values():
                for value in per_key.values():
                    for leaf in tree_leaves(value):
                        t = getattr(leaf, "val", None)
                        if isinstance(t, torch.Tensor):
                            saved.layer = layer
                            saved.pack(t)
        saved.layer = None


def apply_ac(model, mode: str, sac: SacCaches | None = None) -> None:
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    if mode == "none":
        return
    if mode == "full":
        FullAC(FullAC.Config()).apply(model)
    elif mode == "selective-op":
        if sac is not None:
            sac.install()
        SelectiveAC(SelectiveAC.Config()).apply(model)
    elif mode.startswith("selective-layer:"):
        every = int(mode.split(":", 1)[1])
        policy = FullAC(FullAC.Config())
        for layer_id, block in list(model.layers.named_children()):
            if (int(layer_id) + 1) % every == 0:  # torchtitan 9dec370: a counter from 1, a multiple of N
                model.layers.register_module(layer_id, policy._wrap_block(block, base_fqn=f"layers.{layer_id}"))
    else:
        raise SymmemError(f"unknown ac mode {mode!r}: none | full | selective-layer:N | selective-op")


def _local(obj):
    from torch.distributed.tensor import DTensor

    if isinstance(obj, DTensor):
        return obj.to_local()
    if isinstance(obj, (list, tuple)):
        return [_local(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _local(v) for k, v in obj.items()}
    return obj


def fsdp_tracker_class():
    """`tracker.StorageTracker`, keyed by the storage itself (not its address) and summing current sizes.

    FSDP2 frees and re-allocates the unsharded parameters with `untyped_storage().resize_()`, which no aten op
    sees and which changes the storage's address: counted by address at first sight, a resharded parameter would
    stay counted and its re-allocation be counted again. DTensor outputs count their local tensors (the mode sees
    a DTensor op as one op; the local ops inside it run below the mode).
    """
    from symmem.validate.megatron_core.tracker import _storages, tracker_class

    Base = tracker_class()

    class FSDPStorageTracker(Base):
        def add(self, storage, op: str = "(registered)") -> None:
            key = storage._cdata
            if key in self._refs:
                return
            self.origin[key] = f"{self.phase}: {op}"

            def gone(_ref, key=key):
                self.origin.pop(key, None)
                self._refs.pop(key, None)

            self._refs[key] = weakref.ref(storage, gone)

        def _sizes(self):
            return [(k, st.nbytes()) for k, r in list(self._refs.items()) if (st := r()) is not None]

        def live_bytes(self) -> int:
            """The live bytes now, between op boundaries too (no peak bookkeeping: a module hook's moment)."""
            return sum(n for _k, n in self._sizes())

        def _check(self, op: str) -> None:
            sizes = self._sizes()
            self.current = sum(n for _k, n in sizes)
            by_phase = self.__dict__.setdefault("by_phase", {})
            if self.current > by_phase.get(self.phase, (0,))[0]:
                by_phase[self.phase] = (self.current, op)
                # what is alive at each phase's most, by the op that allocated it (a diagnostic: `at_phase_peak`)
                self.__dict__.setdefault("at_phase_peak", {})[self.phase] = [(n, self.origin[k]) for k, n in sizes
                                                                            if n]
            if self.current > self.peak:
                self.peak, self.peak_op, self.peak_phase = self.current, op, self.phase
                self.at_peak = [(n, self.origin[k]) for k, n in sizes if n]

        def add_tensors(self, tensors) -> None:
            for st in _storages(_local(list(tensors)), []):
                self.add(st)
            self._check("(registered)")

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for st in _storages(_local(out), []):
                self.add(st, str(func.__name__))
            if func.__name__ not in ("detach.default", "view.default", "_unsafe_view.default"):
                self._check(str(func.__name__))
            return out

    return FSDPStorageTracker


class _LiveStorages:
    """Addresses of storages that are alive and not empty now (a set of addresses would keep the address of a
    resharded parameter, which FSDP2 frees by resizing its storage to 0, and exclude the activation reusing it)."""

    def __init__(self):
        self._refs: list[weakref.ref] = []

    def add(self, storage) -> None:
        self._refs.append(weakref.ref(storage))

    def __contains__(self, ptr: int) -> bool:
        return any((st := r()) is not None and st.nbytes() and st.data_ptr() == ptr for r in self._refs)


def _plain(t):
    """A saved tensor's local storage holder: a DTensor's local tensor, an `AsyncCollectiveTensor` (the output of a
    functional collective, torch/distributed/_functional_collectives.py) waited for: its own `untyped_storage`
    raises."""
    from torch.distributed.tensor import DTensor

    while isinstance(t, DTensor):
        t = t._local_tensor
    if type(t).__name__ == "AsyncCollectiveTensor":
        t = t.trigger_wait()
    return t


class LocalSavedPerLayer(SavedPerLayer):
    """`tracker.SavedPerLayer` over local tensors (`_plain`): under TP the saved tensors are DTensors."""

    def pack(self, t):
        from symmem.validate.megatron_core.tracker import torchao_inner

        plain = _plain(t)
        inner = torchao_inner(plain)  # a Float8TrainingTensor: a weight gathered in float8, saved as its transpose
        if inner is None:
            super().pack(plain)
        else:
            for x in inner:
                self.pack(x)
        return t


def _step(rank: int, st: Settings) -> dict:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor
    from torchtitan.components.loss import cross_entropy_loss


    if st.world % (st.replicate * st.tp):
        raise SymmemError(f"world {st.world} is not a multiple of replicate x TP = {st.replicate} x {st.tp}")
    torch.manual_seed(st.seed)  # the same full model on every rank; fully_shard keeps each rank's shard
    model = build_model(st)
    global_shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    if st.tp > 1:  # TP first, then AC, then FSDP, as parallelize_llama does (models/llama3/parallelize.py:42-90)
        pd = parallel_dims(st)
        model.parallelize(pd)
        mesh = pd.get_mesh(["dp_replicate", "fsdp"] if st.replicate > 1 else "fsdp")
    elif st.replicate == 1:
        mesh = init_device_mesh("cpu", (st.world,))
    else:
        mesh = init_device_mesh("cpu", (st.replicate, st.world // st.replicate),
                                mesh_dim_names=("dp_replicate", "dp_shard"))
    sac = SacCaches()
    apply_ac(model, st.ac, sac)
    loss_fn = cross_entropy_loss
    if st.compile:
        loss_fn = apply_compile(model)
    mp = MixedPrecisionPolicy(param_dtype=getattr(torch, _DTYPES[st.param_dtype]),
                              reduce_dtype=getattr(torch, _DTYPES[st.reduce_dtype]))
    blocks = list(model.layers.items())
    for _id, block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=st.reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=st.reshard_after_forward)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)

    # saved for backward, per block; the all-gathered (unsharded) parameters are states, not activations:
    # a pre-forward hook registered after fully_shard's runs once they are gathered and excludes them
    excluded = _LiveStorages()
    for b in model.buffers():
        excluded.add(_plain(b).untyped_storage())
    saved = LocalSavedPerLayer(excluded)
    sac.saved = saved
    unsharded: dict[str, int] = {}

    def gathered(name, mod):
        from symmem.validate.megatron_core.tracker import _storages

        for p in mod.parameters():
            # a Float8 weight gathered in float8 is a `Float8TrainingTensor`: its float8 data (FSDP2's all-gather
            # output, freed at the reshard) and its FP32 scale (made on this rank by fsdp_pre_all_gather, kept by
            # the unsharded parameter after the reshard): both the parameter's, not activations
            for stg in _storages(_plain(p), []):
                excluded.add(stg)
                unsharded[name] = unsharded.get(name, 0) + stg.nbytes()

    # the live bytes when each block's forward returns (after FSDP's own post-forward hook, registered first, has
    # resharded): between two blocks they grow by what the block leaves for the backward, saved or only held
    held_after: dict[str, int] = {}
    live: list = []  # the tracker, once made

    def block_done(name):
        saved.layer = None
        if live:
            held_after[name] = live[0].live_bytes()

    # and from the final norm's start to the output projection's end: the norm's and lm_head's saved and held
    # tensors and the logits, less the last block's output (the norm's input, which the caller lets go)
    head_live: dict[str, int] = {}

    def head_mark(key):
        if live:
            head_live[key] = live[0].live_bytes()

    model.norm.register_forward_pre_hook(lambda mod, args: head_mark("before norm"))
    model.lm_head.register_forward_hook(lambda mod, args, out: head_mark("after lm_head"))

    # a compiled block's hooks are traced with it (`Module.compile` compiles `_call_impl`): the measurement's own
    # are kept out of the graph
    for layer_id, block in blocks:
        name = f"layer {layer_id}"
        block.register_forward_pre_hook(torch.compiler.disable(
            lambda mod, args, name=name: (gathered(name, mod), setattr(saved, "layer", name))[-1]))
        block.register_forward_hook(torch.compiler.disable(lambda mod, args, out, name=name: block_done(name)))
    def root_gathered(mod, args):  # the root's own parameters (its children but the blocks); returns None
        for m in mod.children():
            if m is not mod.layers:
                gathered("root", m)

    model.register_forward_pre_hook(root_gathered)

    g = torch.Generator().manual_seed(st.seed + 1 + rank // st.tp)  # each DP rank its own data, TP ranks the same
    vocab = model.lm_head.weight.shape[0]
    tokens = torch.randint(0, vocab, (st.b, st.s + 1), generator=g)
    # two tensors of their own, as a data loader hands them over (views of one buffer would share a storage)
    inputs, labels = tokens[:, :-1].clone(), tokens[:, 1:].clone()

    # a compiled block does not run under a dispatch mode (dynamo skips every frame while one is active): under
    # --compile the live bytes are not traced, only the states and what the saved-tensor hooks see
    tracker = _Untraced() if st.compile else fsdp_tracker_class()()
    live.append(tracker)
    gc.collect()
    with tracker:
        tracker.add_tensors(o for o in gc.get_objects() if isinstance(o, torch.Tensor))
        start = tracker.current
        tracker.phase = "forward"
        saved.active = True
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
            pred = model(inputs)
            loss = loss_fn(pred, labels) / labels.numel()
            if not st.compile:  # per-op AC: what the checkpoint's cache keeps, beside what the hooks saw
                sac.add_to(saved)  # (compiled, the partitioner applies the policy: the hooks see all it saves)
            saved.active = False
            gc.collect()
            saved_layers = {f"layer {i}": 0 for i, _b in blocks}
            saved_layers.update(saved.result())
            saved_detail = saved.detail()
            del pred
            tracker.phase = "backward"
            # no automatic collection in backward and the step (as the Megatron-Core runner): when Python's
            # collector runs depends on the allocations gloo's threads make, and a cycle freed or not moves a peak
            gc.disable()
            try:
                loss.backward()
            finally:
                gc.enable()
        gc.collect()
        tracker.phase = "optimizer step"
        gc.disable()
        try:
            optimizer.step()
        finally:
            gc.enable()
        tracker.phase = "end"
        gc.collect()
        tracker._check("(end)")
        end = tracker.current
    from symmem.validate.megatron_core.tracker import _storages

    states = _state_bytes(model, optimizer)
    params = {}
    for n, p in model.named_parameters():
        loc = p.to_local()
        params[n.replace("_checkpoint_wrapped_module.", "")] = {
            "global": list(p.shape), "local": list(loc.shape), "numel": loc.numel(),
            "storage": sum(stg.nbytes() for stg in _storages(loc, []))}
    assert all(global_shapes[k] == tuple(v["global"]) for k, v in params.items())
    from symmem.validate.megatron_core.runner import _summary

    if isinstance(loss, DTensor):
        loss = loss.full_tensor()
    return {"rank": rank, "loss": float(loss.detach()), "peak": tracker.peak, "peak_op": tracker.peak_op,
            "peak_phase": tracker.peak_phase,
            "peak_by_phase": tracker.by_phase, "at_peak": _summary(tracker.at_peak),
            "at_phase_peak": {k: _summary(v) for k, v in tracker.__dict__.get("at_phase_peak", {}).items()},
            "start": start, "end": end,
            "states": states["total"], "states_by_kind": states, "params": params,
            "saved": dict(sorted(saved_layers.items(), key=lambda kv: (kv[0] == "outside layers", kv[0]))),
            "saved_detail": saved_detail, "unsharded_param_bytes": unsharded, "held_after_block": held_after,
            "head_growth": head_live["after lm_head"] - head_live["before norm"]}


def apply_compile(model):
    """torchtitan 0.3.0's compile (`compile.enable`, components model and loss, the inductor backend): each block
    compiled whole, after AC and before FSDP (torchtitan/distributed/compile.py:39-72 `apply_compile`, called by
    models/llama3/parallelize.py:61-67), and the loss function compiled (components/loss.py:309-315
    `_maybe_compile`). Returns the compiled loss."""
    import types
    import warnings

    import torch
    from torchtitan.components.loss import cross_entropy_loss

    # RoPE's complex product: inductor runs it as an aten fallback and says so on every compile
    warnings.filterwarnings("ignore", message="Torchinductor does not support code generation for complex")
    from torchtitan.config import CompileConfig
    from torchtitan.distributed import compile as tcompile

    # the TP mesh is read only for async TP, which is off (CompileConfig.enable_async_tensor_parallel)
    tcompile.apply_compile(model, compile_config=CompileConfig(enable=True),
                           parallel_dims=types.SimpleNamespace(tp_enabled=False))
    return torch.compile(cross_entropy_loss, backend="inductor")


class _Untraced:
    """The tracker's interface with nothing traced (`Settings.compile`)."""

    current = peak = 0
    peak_op = peak_phase = None
    phase = ""
    by_phase: dict = {}
    at_peak: list = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_tensors(self, tensors) -> None:
        pass

    def live_bytes(self) -> int:
        return 0

    def _check(self, op: str) -> None:
        pass


def _state_bytes(model, optimizer) -> dict:
    """Distinct storages of the sharded parameters, their gradients and the optimizer's tensors, by kind."""
    import torch

    seen: set[int] = set()
    out = {"params": 0, "grads": 0, "exp_avg": 0, "exp_avg_sq": 0, "step": 0, "other": 0}

    from symmem.validate.megatron_core.tracker import _storages

    def add(kind, t):
        if isinstance(t, torch.Tensor):
            for stg in _storages(_local(t), []):  # a float8-gathered weight's shard: the FP32 tensor it wraps
                if stg.data_ptr() not in seen and stg.nbytes():
                    seen.add(stg.data_ptr())
                    out[kind] += stg.nbytes()

    for p in model.parameters():
        add("params", p)
    for p in model.parameters():
        add("grads", p.grad)
    for state in optimizer.state.values():
        for k, t in state.items():
            add(k if k in out else "other", t)
    out["total"] = sum(out.values())
    return out


def run(st: Settings) -> list[dict]:
    """Spawn the ranks, run one step on each, return their measurements ordered by rank."""
    require()
    from symmem.validate._spawn import spawn

    return spawn(_step, st, st.world, "FSDP2")
