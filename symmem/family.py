"""Model families as plug-ins: what the engine asks of an architecture, and the registry that finds them.

A family (one module in `symmem.families`, exposing `FAMILY`) declares its Hugging Face `model_type`s, its config
schema (which config key gives which size symbol, which keys are optional, the consistency rules), how a layer
index maps to a layer kind, the dataflows of its layers, embedding, head and extra modules, its parallel
divisibility rules and its presets. The engine (graph, rules, accounting, parallel, scenario, check, render, CLI)
asks only through this interface: adding an architecture adds files under `symmem/blocks/` and
`symmem/families/`, and touches no engine module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from functools import lru_cache

import sympy

from symmem._numbers import size_bound
from symmem.errors import SymmemError
from symmem.graph import DataflowBuilder, Dim
from symmem.model_config import ModelConfig, positive_int, require


class Family:
    """Base class of a model family. Subclasses set the class attributes and implement the `build_*` methods."""

    name: str = ""
    model_types: tuple[str, ...] = ()
    presets: tuple[str, ...] = ()  # preset names: files `symmem/presets/<name>.json`
    #: symbol name -> config key, in the order a table of hyperparameters lists them
    config_keys: Mapping[str, str] = {}
    #: config keys of `config_keys` that may be absent or null (the family's `parse` decides what that means)
    optional_keys: tuple[str, ...] = ()
    #: other keys the family reads (structure, options)
    structural_keys: tuple[str, ...] = ()
    #: (experts symbol, experts-per-token symbol) of a routed MoE, or None for a model without routed experts
    routed_experts: tuple[str, str] | None = None
    #: (parallel field, symbol name): the parallel size must divide the model size
    divisibility: tuple[tuple[str, str], ...] = ()
    #: key-value heads fixed by the architecture rather than a config key (DeepSeek-V4's one shared KV head), or
    #: None: the `n_kv` symbol's value where the family has one, else a head each (MLA, multi-head attention)
    fixed_kv_heads: int | None = None
    #: how a TP convention may split weights ("paper" always exists)
    conventions: tuple[str, ...] = ("paper",)
    #: the layer kinds in the order a stage lists them
    layer_kind_order: tuple[str, ...] = ()
    #: Hugging Face dataflows (symmem.blocks.hf...): None where the family has none
    hf_dataflow: bool = False
    #: whether its Hugging Face dataflow models biases and attention dropout (the declared decoders' do)
    hf_biases_and_dropout: bool = False
    #: whether `hf_impl` takes the sequence length `s` (a sliding window's mask exists from s = window on)
    hf_impl_takes_seq: bool = False
    #: transformers class names (a config's `architectures`) -> the model_type they are: how a config whose
    #: model_type transformers does not know (Kimi-K2's kimi_k2, a DeepseekV3ForCausalLM) is read
    architectures: Mapping[str, str] = {}

    def __reduce_ex__(self, protocol):
        """A registered family pickles (and copies) as its name: the copy is the registry's own instance, the one
        every ModelConfig of that family holds (`ModelConfig.family`), not a second one."""
        if registry().get(self.name) is self:
            return family, (self.name,)
        return super().__reduce_ex__(protocol)

    # ---------------------------------------------------------------------------------------- schema
    def parse(self, raw: Mapping, source: str) -> ModelConfig:
        """Check a config.json's contents against the schema and build a `ModelConfig`."""
        raise NotImplementedError

    def layer_kinds(self, model: ModelConfig) -> tuple[str, ...]:
        """The kind of each decoder layer (one of `layer_kind_order`)."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------------------- dataflows
    def residual_dims(self, model: ModelConfig, kind: str) -> tuple[Dim, ...]:
        """The shape of the residual stream a layer of `kind` emits, or with `kind = "embedding"` the stream the
        embedding emits. A layer receives what the layer before it (or, for layer 0, the embedding) emits: that is
        its input, and what full recomputation keeps of it (`symmem.model.layer_flow`)."""
        raise NotImplementedError

    def build_layer(self, fb: DataflowBuilder, x: str, kind: str, model: ModelConfig, convention: str,
                    impl: object | None) -> str:
        """Append one decoder layer of `kind` to `fb`; return its output. `impl` selects a Hugging Face dataflow."""
        raise NotImplementedError

    def build_embedding(self, fb: DataflowBuilder, model: ModelConfig, impl: object | None = None) -> str:
        """Append the input embedding; return its output (shaped as `residual_dims(model, "embedding")`). `impl`:
        the Hugging Face implementation the decoder layers follow, or None for the paper's dataflows."""
        raise NotImplementedError

    def build_head(self, fb: DataflowBuilder, model: ModelConfig) -> str:
        raise NotImplementedError

    def build_mtp(self, fb: DataflowBuilder, model: ModelConfig, index: int, convention: str, impl: object | None,
                  layer: Callable[[DataflowBuilder, str], str]) -> str:
        """Append multi-token-prediction module `index`; `layer(fb, x)` appends its decoder layer."""
        raise SymmemError(f"model family {self.name}: has no multi-token-prediction modules")

    def build_shared(self, fb: DataflowBuilder, model: ModelConfig, impl: object | None) -> str | None:
        """Tensors all layers of a stage share (the rotary tables of a Hugging Face model), or None."""
        return None

    def uses_shared(self, model: ModelConfig, kind: str) -> bool:
        """Whether a layer of `kind` keeps the shared tensors (`build_shared`): a stage of layers that all do not
        (NoPE layers, which rotate nothing) keeps none."""
        return True

    # ---------------------------------------------------------------------------------------- options
    def hf_impl(self, model: ModelConfig, attn: str, experts: str, router: str | None, unit_batch: bool,
                unit_seq: bool) -> object:
        """The Hugging Face implementation a torch-eager dataflow follows."""
        raise SymmemError(f"dataflow = 'hf': model family {self.name} has no Hugging Face dataflow; use "
                          "dataflow = 'paper' (--dataflow paper)")

    def torchtitan_impl(self, model: ModelConfig, on_gpu: bool, unit_batch: bool, unit_seq: bool) -> object | None:
        """torchtitan's own dataflow of this family's layers, where it differs from Hugging Face's (DeepSeek-V3);
        None: the Hugging Face dataflow is torchtitan's (Llama 3: the same ops, `symmem.rules.torchtitan`)."""
        return None

    def framework_gap(self, model: ModelConfig, framework: str) -> str | None:
        """What of this model `framework` ("megatron": Megatron-Core's GPTModel) cannot build, in a few words; None
        where it builds it. A profile modelling that framework refuses the model with it."""
        return None

    def formula_aliases(self, model: ModelConfig) -> dict[sympy.Symbol, sympy.Symbol]:
        """Symbols a person's formula may use for another one in this model (replaced before comparing)."""
        return {}

    def moe_fraction(self, model: ModelConfig) -> sympy.Expr | None:
        """The fraction of routed experts a token passes through (N_r/N), or None without routed experts."""
        if self.routed_experts is None:
            return None
        from symmem.symbols import sym

        n, k = self.routed_experts
        return sym(k) / sym(n)


def _discover() -> dict[str, Family]:
    from symmem import families

    found: dict[str, Family] = {}
    for info in pkgutil.iter_modules(families.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{families.__name__}.{info.name}")
        # a module declares one family (FAMILY) or several (FAMILIES: e.g. one per model type of a series)
        fams = getattr(module, "FAMILIES", None) or (getattr(module, "FAMILY", None),)
        for fam in fams:
            if not isinstance(fam, Family):
                raise SymmemError(f"symmem.families.{info.name}: defines no FAMILY or FAMILIES (symmem.family.Family)")
            if fam.name in found:
                raise SymmemError(f"model family {fam.name!r} is defined twice")
            found[fam.name] = fam
    return found


@lru_cache(maxsize=1)
def registry() -> dict[str, Family]:
    """Every family under `symmem.families`, by name (imported once, on first use)."""
    fams = _discover()
    types: dict[str, str] = {}
    for fam in fams.values():
        for mt in fam.model_types:
            if mt in types:
                raise SymmemError(f"model_type {mt!r} claimed by families {types[mt]!r} and {fam.name!r}")
            types[mt] = fam.name
    return fams


def family(name: str) -> Family:
    try:
        return registry()[name]
    except KeyError:
        raise SymmemError(f"model family = {name!r}: unknown; known: {', '.join(registry())}") from None


def family_of_type(model_type: object, source: str) -> Family:
    for fam in registry().values():
        if model_type in fam.model_types:
            return fam
    known = sorted(mt for fam in registry().values() for mt in fam.model_types)
    raise SymmemError(f"{source}: model_type = {model_type!r}: symmem models {', '.join(known)}")


def family_of_config(raw: Mapping, source: str) -> tuple[Family, str, str | None]:
    """The family of a config, the model_type it is read as, and a note when that is not its own `model_type`:
    a model_type no family claims and transformers does not know (`transformers_model_types`) whose
    `architectures` names a class a family models (kimi_k2, whose
    architectures says DeepseekV3ForCausalLM, is read as deepseek_v3, as transformers' Auto classes would run it
    through trust_remote_code)."""
    mt = raw["model_type"]
    inner = raw.get("text_config")
    modelled = {t for fam in registry().values() for t in fam.model_types}
    if mt not in modelled and isinstance(inner, Mapping) and inner.get("model_type") in modelled:
        # a multimodal config (Llama 4, Gemma 3): its language model is a family symmem models
        raise SymmemError(f"{source}: model_type = {mt!r:.40}: a multimodal config; symmem models its language "
                          f"model, model_type {inner['model_type']!r:.40}: give its text_config as the config.json "
                          "(with that model_type)")
    if mt in modelled or mt in transformers_model_types():
        return family_of_type(mt, source), mt, None
    names = raw.get("architectures")
    for cls in names if isinstance(names, list) else ():
        for fam in registry().values():
            if isinstance(cls, str) and cls in fam.architectures:
                as_type = fam.architectures[cls]
                return fam, as_type, (f"model_type = {mt!r:.60} is not a model type of transformers 5.24; its "
                                      f"architectures names {cls}: read as model_type {as_type!r}")
    return family_of_type(mt, source), mt, None


@lru_cache(maxsize=1)
def transformers_model_types() -> frozenset[str]:
    """The model types transformers 5.24.0 knows (its CONFIG_MAPPING_NAMES, shipped as data: symmem needs no
    transformers to read a config)."""
    from importlib import resources

    text = resources.files("symmem.data").joinpath("transformers_model_types.txt").read_text()
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


def all_presets() -> dict[str, Family]:
    """Preset name -> its family."""
    return {p: fam for fam in registry().values() for p in fam.presets}


def read_sizes(raw: Mapping, fam: Family, source: str) -> dict[str, int]:
    """The family's size symbols from their config keys; optional keys absent or null are left out."""
    require(raw, [k for k in fam.config_keys.values() if k not in fam.optional_keys], source, fam.name)
    values: dict[str, int] = {}
    for name, key in fam.config_keys.items():
        if raw.get(key) is None and key in fam.optional_keys:
            continue
        values[name] = positive_int(key, raw[key], source, size_bound(name))
    return values


# config keys no family reads that change nothing a training step holds: token ids, names, versions, init and
# epsilons, RoPE's frequencies, auxiliary-loss weights, the checkpoint's storage (quantization_config: training's
# precision is --precision), deployment hints; and those refused unless at the value modelled (config.py: biases
# off, dropout rates 0, hidden_act silu)
METADATA_KEYS = frozenset({
    "_comment", "_attn_implementation_autoset", "_name_or_path", "architectures", "attention_dropout", "attn_pdrop",
    "auto_map", "aux_loss_alpha", "bos_token_id", "cache_implementation", "chunk_size_feed_forward",
    "compress_rope_theta", "dtype", "embd_pdrop", "ep_size", "eos_token_id", "hc_eps",
    "id2label", "initial_context_length", "initializer_range", "is_encoder_decoder", "label2id", "layer_norm_eps",
    "layer_norm_epsilon", "max_position_embeddings", "n_ctx", "output_attentions", "output_hidden_states",
    "output_router_logits", "pad_token_id", "pretraining_tp", "problem_type", "quantization_config", "resid_pdrop",
    "return_dict", "rms_norm_eps", "rope_parameters", "rope_scaling", "rope_theta", "routed_scaling_factor",
    "router_aux_loss_coef", "router_jitter_noise", "seq_aux", "summary_activation", "summary_first_dropout",
    "summary_proj_to_labels", "summary_type", "summary_use_proj", "swiglu_limit", "task_specific_params",
    "torch_dtype", "transformers_version", "use_cache", "attention_bias", "mlp_bias", "for_llm_compressor",
    "hidden_act", "hidden_dropout", "residual_dropout",
})


def unread_note(model) -> str | None:
    """A note naming the config keys the model's family does not read and that may change what a step holds (every
    unread key but `METADATA_KEYS`; `symmem params` lists them all), or None."""
    keys = [k for k in model.ignored_keys if k not in METADATA_KEYS]
    if not keys:
        return None
    shown = ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
    return (f"note: config keys {model.family.name}'s dataflow does not read: {shown} (not modelled; symmem "
            "params lists every key not used)")


def ignored(raw: Mapping, fam: Family) -> tuple[str, ...]:
    used = set(fam.config_keys.values()) | set(fam.structural_keys) | {"model_type"}
    return tuple(sorted(k for k in raw if k not in used))

