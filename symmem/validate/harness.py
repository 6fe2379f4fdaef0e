"""Measure, to the byte, what PyTorch eager autograd saves for backward in one HF DeepSeek or Llama decoder layer.

The harness builds a tiny random ``DeepseekV3ForCausalLM`` / ``DeepseekV2ForCausalLM`` / ``LlamaForCausalLM`` on
the CPU (no weights, no network), captures the exact inputs the model hands to one decoder layer (position
embeddings, causal mask, position ids) with a forward pre-hook, then runs that layer alone on a fresh random leaf
``hidden_states`` inside ``torch.autograd.graph.saved_tensors_hooks``.

Every saved tensor is wrapped in a small holder object by the pack hook; the harness keeps only a weak
reference to each holder.  A holder dies when the autograd node that saved it dies, so after the layer returns
(and ``gc.collect()``) the live holders are exactly the tensors still reachable from the layer output's graph:
tensors saved on branches that were freed at once (V3's group-limited routing, the no-grad routing masks) do
not count.  Live tensors are deduplicated by the data pointer of their untyped storage and counted by the
storage's ``nbytes`` (a saved view keeps its whole base alive).  Storages of parameters and buffers are
excluded; storages of the layer's inputs (its hidden-states input, the position embeddings shared by all
layers, the mask) are counted in ``saved_bytes`` and flagged by ``SavedTensor.source``.

One artifact of the method: a node that saves its own output (ReluBackward0, SoftmaxBackward0, ...) holds, through
the pack hook's holder, that output and so its own grad_fn: a reference cycle through C++ that Python's collector
cannot break. Without hooks PyTorch saves an output without its grad_fn, and such a branch dies with its last
tensor. So a live storage that no node reachable from the layer's output saved (DeepSeek-V4's lightning indexer,
whose only product is integer top-k indices) is flagged ``source = "unreachable"`` and left out of
``saved_bytes`` (`LayerMeasurement.unreachable_saved_bytes` keeps the figure).

torch and transformers are imported lazily; without them every entry point raises ``SymmemError``.
"""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass, field
from typing import Any

from symmem.errors import SymmemError

_MISSING = "torch/transformers not installed: pip install -e '.[validate]' (torch==2.13.0, transformers==5.24.0)"

FAMILIES = ("deepseek-v3", "deepseek-v2", "deepseek-v2-lite", "llama", "deepseek-v3.2", "deepseek-v4")
DTYPES = ("fp32", "bf16")
ATTNS = ("eager", "sdpa")
EXPERTS = ("eager", "grouped_mm")


def _import():
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise SymmemError(_MISSING) from exc
    return torch, transformers


@dataclass(frozen=True)
class SavedTensor:
    """One distinct storage saved for backward and still live when the layer returns."""

    shape: tuple[int, ...]  # shape of the (first) saved tensor viewing this storage
    dtype: str  # e.g. "float32", "bfloat16", "int64"
    nbytes: int  # bytes of the whole untyped storage (what is kept alive)
    grad_fn: str  # name of the autograd node that saved it ("" when not found)
    source: str  # "layer" (made inside the layer), "input" (the layer's hidden-states input),
    # "shared" (an input the model passes to every layer: position embeddings, mask), "unreachable" (alive only
    # through a hook-made reference cycle on a branch the loss does not reach: not counted in saved_bytes)
    view_numel: int  # numel of the saved tensor itself (< storage numel when a view keeps a bigger base)
    savers: tuple[str, ...] = ()  # every node that saved a tensor on this storage


@dataclass(frozen=True)
class LayerMeasurement:
    family: str
    layer: int
    layer_kind: str  # "dense" | "moe"
    b: int
    s: int
    dtype: str
    attn: str
    experts: str
    saved_bytes: int  # distinct live storages, inputs included, parameters/buffers and unreachable excluded
    saved: tuple[SavedTensor, ...]
    param_counts: dict[str, int] = field(default_factory=dict)
    freed_saved: int = 0  # saved tensors packed during the forward but already dead at layer return
    freed: tuple[tuple[tuple[int, ...], str, int], ...] = ()  # (shape, dtype, storage nbytes) of those, params excluded
    packed_total: int = 0  # number of pack-hook calls (params included)

    @property
    def layer_saved_bytes(self) -> int:
        """Saved bytes excluding storages that are the layer's inputs (hidden-states input and shared inputs)."""
        return sum(t.nbytes for t in self.saved if t.source == "layer")

    @property
    def unreachable_saved_bytes(self) -> int:
        """Live only through the hooks' reference cycles, on branches the layer output does not reach."""
        return sum(t.nbytes for t in self.saved if t.source == "unreachable")

    @property
    def input_saved_bytes(self) -> int:
        return sum(t.nbytes for t in self.saved if t.source == "input")

    @property
    def shared_saved_bytes(self) -> int:
        return sum(t.nbytes for t in self.saved if t.source == "shared")


# ---------------------------------------------------------------------------------------------------------------
# Configs


def tiny_config(family: str, **overrides: Any) -> dict:
    """A small, consistent HF config dict for ``family`` (see ``FAMILIES``); ``overrides`` replace keys."""
    if family not in FAMILIES:
        raise SymmemError(f"family = {family!r}: must be one of {', '.join(FAMILIES)}")
    if family == "llama":
        return _tiny_llama(**overrides)
    cfg: dict[str, Any] = {
        "vocab_size": 128,
        "hidden_size": 64,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "kv_lora_rank": 32,
        "q_lora_rank": 48,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "max_position_embeddings": 256,
        "attention_dropout": 0.0,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "initializer_range": 0.02,
        "use_cache": False,
        "pad_token_id": None,
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    if family == "deepseek-v4":
        return _tiny_v4(overrides)
    if family == "deepseek-v3.2":
        cfg.update(model_type="deepseek_v32", n_group=2, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                   index_n_heads=4, index_head_dim=16, index_topk=8)
    elif family == "deepseek-v3":
        cfg.update(
            model_type="deepseek_v3",
            n_group=2,
            topk_group=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rope_interleave=True,
        )
    elif family == "deepseek-v2":
        cfg.update(
            model_type="deepseek_v2",
            n_shared_experts=2,
            n_group=2,
            topk_group=1,
            topk_method="group_limited_greedy",
            routed_scaling_factor=16.0,
            norm_topk_prob=False,
        )
    else:  # deepseek-v2-lite: no query latent, greedy routing
        cfg.update(
            model_type="deepseek_v2",
            n_shared_experts=2,
            q_lora_rank=None,
            n_group=1,
            topk_group=1,
            topk_method="greedy",
            routed_scaling_factor=1.0,
            norm_topk_prob=False,
        )
    cfg.update(overrides)
    return cfg


def _tiny_llama(**overrides: Any) -> dict:
    """A small Llama config: grouped-query attention (4 query heads, 2 key/value heads), head_dim from h / n_h."""
    cfg: dict[str, Any] = {
        "model_type": "llama",
        "vocab_size": 128,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "attention_dropout": 0.0,
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "initializer_range": 0.02,
        "use_cache": False,
        "pad_token_id": None,
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    cfg.update(overrides)
    return cfg


def _tiny_v4(overrides: dict) -> dict:
    """A small DeepSeek-V4: layers sliding / CSA / HCA with hash, routed, routed MoE; HCA rate 8 so that short
    sequences have compressed entries (the real 128 gives none below 128 tokens)."""
    cfg: dict[str, Any] = {
        "model_type": "deepseek_v4", "vocab_size": 128, "hidden_size": 64, "moe_intermediate_size": 32,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
        "qk_rope_head_dim": 8, "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 16, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "n_shared_experts": 1, "num_hash_layers": 1, "index_topk": 4,
        "index_n_heads": 2, "index_head_dim": 16, "sliding_window": 8, "hc_mult": 4, "hc_sinkhorn_iters": 20,
        "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
        "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
        "max_position_embeddings": 256, "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
        "initializer_range": 0.02, "use_cache": False, "pad_token_id": None, "bos_token_id": 0, "eos_token_id": 1,
        "num_nextn_predict_layers": 0,
    }
    cfg.update(overrides)
    return cfg


def _decoder_types() -> set[str]:
    """The model types of the declared decoder families (symmem.families._decoder): built through transformers'
    Auto classes, measured like Llama."""
    from symmem.families._decoder import Decoder
    from symmem.family import registry

    return {mt for fam in registry().values() if isinstance(fam, Decoder) for mt in fam.model_types}


def _family_of(config: dict) -> str:
    mt = config.get("model_type")
    if mt == "llama":
        return "llama"
    if mt in _decoder_types():
        return mt
    if mt == "deepseek_v32":
        return "deepseek-v3.2"
    if mt == "deepseek_v4":
        return "deepseek-v4"
    if mt == "deepseek_v3":
        return "deepseek-v3"
    if mt == "deepseek_v2":
        return "deepseek-v2" if config.get("q_lora_rank") is not None else "deepseek-v2-lite"
    raise SymmemError(f"config.model_type = {mt!r}: must be 'deepseek_v4', 'deepseek_v32', 'deepseek_v3', "
                      f"'deepseek_v2', 'llama' or a declared decoder ({', '.join(sorted(_decoder_types()))})")


def _build_model(config: dict, dtype: str, attn: str, experts: str):
    torch, _ = _import()
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

    if dtype not in DTYPES:
        raise SymmemError(f"dtype = {dtype!r}: must be one of {', '.join(DTYPES)}")
    if attn not in ATTNS:
        raise SymmemError(f"attn = {attn!r}: must be one of {', '.join(ATTNS)}")
    if experts not in EXPERTS:
        raise SymmemError(f"experts = {experts!r}: must be one of {', '.join(EXPERTS)}")
    family = _family_of(config)
    kwargs = {k: v for k, v in config.items() if k != "model_type"}
    torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
    if family == "llama":  # no experts: `experts` is accepted and ignored
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM._from_config(LlamaConfig(**kwargs), dtype=torch_dtype, attn_implementation=attn)
        if model.config._attn_implementation != attn:
            raise SymmemError(f"attn = {attn!r}: transformers chose {model.config._attn_implementation!r}")
        model.train()
        return model
    if family in _decoder_types():  # a declared decoder family: transformers' own class for the model type
        from transformers import AutoConfig, AutoModelForCausalLM

        hf_config = AutoConfig.for_model(config["model_type"], **kwargs)
        model = AutoModelForCausalLM.from_config(hf_config, dtype=torch_dtype, attn_implementation=attn,
                                                 experts_implementation=experts)
        if model.config._attn_implementation != attn:
            raise SymmemError(f"attn = {attn!r}: transformers chose {model.config._attn_implementation!r}")
        model.train()
        return model
    if family in ("deepseek-v3.2", "deepseek-v4"):
        from transformers import DeepseekV4Config, DeepseekV4ForCausalLM, DeepseekV32Config, DeepseekV32ForCausalLM

        if family == "deepseek-v4" and attn != "eager":
            raise SymmemError(f"attn = {attn!r}: transformers' DeepSeek-V4 runs eager attention only")
        cfg_cls, model_cls = ((DeepseekV4Config, DeepseekV4ForCausalLM) if family == "deepseek-v4" else
                              (DeepseekV32Config, DeepseekV32ForCausalLM))
    elif family == "deepseek-v3":
        cfg_cls, model_cls = DeepseekV3Config, DeepseekV3ForCausalLM
    else:
        cfg_cls, model_cls = DeepseekV2Config, DeepseekV2ForCausalLM
    hf_config = cfg_cls(**kwargs)
    model = model_cls._from_config(
        hf_config, dtype=torch_dtype, attn_implementation=attn, experts_implementation=experts
    )
    if model.config._attn_implementation != attn:
        raise SymmemError(f"attn = {attn!r}: transformers chose {model.config._attn_implementation!r}")
    if model.config._experts_implementation != experts:
        raise SymmemError(f"experts = {experts!r}: transformers chose {model.config._experts_implementation!r}")
    model.train()
    return model


# ---------------------------------------------------------------------------------------------------------------
# Parameter counts


def _param_counts(module) -> dict[str, int]:
    """Parameters per named submodule that owns parameters directly (e.g. ``self_attn.q_a_proj``), plus total."""
    counts: dict[str, int] = {}
    for name, p in module.named_parameters():
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        counts[owner] = counts.get(owner, 0) + p.numel()
    counts["total"] = sum(p.numel() for p in module.parameters())
    return counts


def measure_model_params(config: dict) -> dict[str, int]:
    """Parameter counts per top-level module of the whole model: embed, layers, norm, lm_head, total."""
    model = _build_model(config, "fp32", "eager", "eager")
    inner = model.model
    out = {
        "embed": sum(p.numel() for p in inner.embed_tokens.parameters()),
        "layers": sum(p.numel() for p in inner.layers.parameters()),
        "norm": sum(p.numel() for p in inner.norm.parameters()),
        "lm_head": sum(p.numel() for p in model.lm_head.parameters()),
    }
    for i, layer in enumerate(inner.layers):
        out[f"layers.{i}"] = sum(p.numel() for p in layer.parameters())
    # distinct parameters (a tied lm_head is counted once here)
    out["total"] = sum(p.numel() for p in model.parameters())
    return out


# ---------------------------------------------------------------------------------------------------------------
# Measurement


class _Captured(Exception):
    pass


class _Holder:
    """What the pack hook returns; it dies with the autograd node that saved it."""

    __slots__ = ("t", "idx", "__weakref__")

    def __init__(self, t, idx: int) -> None:
        self.t = t
        self.idx = idx


def _capture_layer_inputs(model, layer: int, b: int, s: int, seed: int):
    """Run the model until ``layers[layer]`` is called and return the (args, kwargs) it receives."""
    torch, _ = _import()
    target = model.model.layers[layer]
    box: dict[str, Any] = {}

    def pre_hook(_mod, args, kwargs):
        box["args"], box["kwargs"] = args, dict(kwargs)
        raise _Captured

    handle = target.register_forward_pre_hook(pre_hook, with_kwargs=True)
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, model.config.vocab_size, (b, s), generator=g)
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    except _Captured:
        pass
    finally:
        handle.remove()
    if "kwargs" not in box:
        raise SymmemError(f"layer = {layer}: the model never called this decoder layer")
    return box["args"], box["kwargs"]


def measure_layer(
    config: dict,
    layer: int,
    b: int,
    s: int,
    dtype: str = "fp32",
    attn: str = "eager",
    experts: str = "eager",
    seed: int = 0,
    convert=None,
) -> LayerMeasurement:
    """Bytes saved for backward by one decoder layer's forward and still live when it returns.

    See the module docstring for the method.  Deterministic for fixed arguments. `convert(model)`, when given, is
    applied to the built model in place before the layer runs (torchao's float8 module swap,
    `symmem.validate.torchao_float8`).
    """
    torch, _ = _import()
    if b < 1 or s < 1:
        raise SymmemError(f"(b, s) = ({b}, {s}): both must be >= 1")
    family = _family_of(config)
    torch.manual_seed(seed)
    model = _build_model(config, dtype, attn, experts)
    n_layers = len(model.model.layers)
    if not 0 <= layer < n_layers:
        raise SymmemError(f"layer = {layer}: must be in [0, {n_layers})")
    if convert is not None:
        convert(model)
    target = model.model.layers[layer]
    ffn = getattr(target, "mlp", None) or getattr(target, "feed_forward", None)  # Llama 4: feed_forward
    layer_kind = "moe" if hasattr(ffn, "experts") else "dense"

    itemsize = 4 if dtype == "fp32" else 2
    if layer_kind == "moe" and experts == "grouped_mm" and (model.config.hidden_size * itemsize) % 16:
        raise SymmemError(
            f"hidden_size = {model.config.hidden_size}: grouped_mm on the CPU needs hidden_size * {itemsize} bytes "
            "to be a multiple of 16 (strides should be multiple of 16 bytes)"
        )
    _args, kwargs = _capture_layer_inputs(model, layer, b, s, seed)
    torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
    g = torch.Generator().manual_seed(seed + 2)
    # DeepSeek-V4's layers take the hc_mult residual streams [b, s, hc_mult, h]
    streams = (model.config.hc_mult,) if family == "deepseek-v4" else ()
    x = torch.randn(b, s, *streams, model.config.hidden_size, generator=g).to(torch_dtype).requires_grad_(True)
    kwargs.pop("hidden_states", None)

    excluded = {p.untyped_storage().data_ptr() for p in model.parameters()}
    excluded |= {buf.untyped_storage().data_ptr() for buf in model.buffers()}
    input_ptrs = {x.untyped_storage().data_ptr()}
    shared_ptrs: set[int] = set()

    def _collect(obj):
        if isinstance(obj, torch.Tensor):
            shared_ptrs.add(obj.untyped_storage().data_ptr())
        elif isinstance(obj, (tuple, list)):
            for o in obj:
                _collect(o)

    for v in kwargs.values():
        _collect(v)

    refs: list[weakref.ref] = []

    packed_meta: list[tuple[tuple[int, ...], str, int, int]] = []

    def pack(t):
        h = _Holder(t, len(refs))
        refs.append(weakref.ref(h))
        packed_meta.append(
            (
                tuple(t.shape),
                str(t.dtype).replace("torch.", ""),
                t.untyped_storage().nbytes(),
                t.untyped_storage().data_ptr(),
            )
        )
        return h

    current: list[str | None] = [None]
    savers: dict[int, str] = {}

    def unpack(h):
        if current[0] is not None:
            savers.setdefault(h.idx, current[0])
        return h.t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = target(x, **kwargs)
    if isinstance(out, tuple):
        out = out[0]
    kwargs_keep = kwargs  # the model keeps position embeddings / mask alive for the next layers
    gc.collect()

    alive: dict[int, _Holder] = {}
    for r in refs:
        h = r()
        if h is not None:
            alive[h.idx] = h
    freed = len(refs) - len(alive)
    freed_list = tuple(
        (packed_meta[i][0], packed_meta[i][1], packed_meta[i][2])
        for i in range(len(refs))
        if i not in alive and packed_meta[i][3] not in excluded
    )

    # grad_fn names: walk the graph and read every saved attribute; the unpack hook records who asked.
    _walk_saved(out, current)

    by_storage: dict[int, list[_Holder]] = {}
    for idx in sorted(alive):
        t = alive[idx].t
        ptr = t.untyped_storage().data_ptr()
        if ptr in excluded:
            continue
        by_storage.setdefault(ptr, []).append(alive[idx])

    saved: list[SavedTensor] = []
    for ptr, holders in by_storage.items():
        t0 = holders[0].t
        names = tuple(n for n in dict.fromkeys(savers.get(h.idx, "") for h in holders) if n)
        source = "input" if ptr in input_ptrs else "shared" if ptr in shared_ptrs else "layer"
        if not any(h.idx in savers for h in holders):
            source = "unreachable"
        saved.append(
            SavedTensor(
                shape=tuple(t0.shape),
                dtype=str(t0.dtype).replace("torch.", ""),
                nbytes=t0.untyped_storage().nbytes(),
                grad_fn=names[0] if names else "",
                source=source,
                view_numel=t0.numel(),
                savers=names,
            )
        )
    # forward order: by the first pack of each storage
    result = LayerMeasurement(
        family=family,
        layer=layer,
        layer_kind=layer_kind,
        b=b,
        s=s,
        dtype=dtype,
        attn=attn,
        experts=experts,
        saved_bytes=sum(st.nbytes for st in saved if st.source != "unreachable"),
        saved=tuple(saved),
        param_counts=_param_counts(target),
        freed_saved=freed,
        freed=freed_list,
        packed_total=len(refs),
    )
    del out, kwargs_keep, alive
    return result


def _walk_saved(out, current: list) -> None:
    """Read every saved tensor of every node reachable from ``out``; ``current[0]`` names the node meanwhile."""
    seen: set[int] = set()
    stack = [out.grad_fn] if out.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        current[0] = node.name()
        for attr in dir(node):
            if not (attr.startswith("_saved_") or attr == "saved_tensors"):
                continue
            try:
                getattr(node, attr)
            except Exception:  # noqa: BLE001 - freed buffers, non-tensor saved values
                pass
        current[0] = None
        for nxt, _ in node.next_functions:
            stack.append(nxt)


def format_measurement(m: LayerMeasurement) -> str:
    """Human-readable listing, one saved storage per line."""
    lines = [
        f"{m.family} layer {m.layer} ({m.layer_kind}) b={m.b} s={m.s} {m.dtype} attn={m.attn} "
        f"experts={m.experts}: saved_bytes={m.saved_bytes} (layer {m.layer_saved_bytes}, input "
        f"{m.input_saved_bytes}, shared {m.shared_saved_bytes}, unreachable {m.unreachable_saved_bytes} not counted); "
        f"{len(m.saved)} storages, "
        f"{m.freed_saved} saved tensors freed before return"
    ]
    for shape, dt, nb in m.freed:
        lines.append(f"  freed before return: {dt} {shape} ({nb} B)")
    for t in m.saved:
        view = "" if t.view_numel * _itemsize(t.dtype) == t.nbytes else f" (view of {t.view_numel} el.)"
        lines.append(f"  {t.nbytes:>9}  {t.dtype:<9} {str(t.shape):<22} {t.source:<6} {','.join(t.savers)}{view}")
    return "\n".join(lines)


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "bool": 1, "complex64": 8}.get(dtype, 0)
