"""Decoder-only families declared, not programmed: `Decoder` is a family whose layers compose the features of an
`Arch` (`symmem.blocks.features`), read from the config keys transformers 5.24 reads, with its config classes'
defaults. A family module declares one `Decoder` per model type (its `FAMILIES`): which config key gives each size,
the defaults transformers' config class applies when a key is absent, which features are fixed and which a config
key switches, and which layers carry MoE blocks.

Nothing here names a model: the families do (`symmem.families.qwen`, `.mistral`, `.gemma`, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from symmem.blocks import decoder
from symmem.blocks._dims import B, H, seq
from symmem.blocks.embedding import embedding, token_ids
from symmem.blocks.features import Arch
from symmem.blocks.hf import decoder as hf_decoder
from symmem.errors import SymmemError
from symmem.family import Family
from symmem.graph import DataflowBuilder
from symmem.model_config import ModelConfig, boolean, check_layer_types, non_negative_int, positive_int

# read keys that scale or clamp values (transformers' softcapping, SwiGLU limit, query scale, routing and Granite's
# multipliers): positive numbers where given
POSITIVE_SCALARS = frozenset({"attn_logit_softcapping", "final_logit_softcapping", "swiglu_limit",
                              "query_pre_attn_scalar", "routed_scaling_factor", "embedding_multiplier",
                              "residual_multiplier", "attention_multiplier", "logits_scaling", "clip_qkv"})

#: a default that is another key's value (transformers: num_key_value_heads = num_attention_heads when absent)
HEADS = "=num_attention_heads"
#: head_dim absent (or null): hidden_size // num_attention_heads
PER_HEAD = "=hidden_size/num_attention_heads"

#: transformers' ACT2FN names (activations.py) of each gated activation: "silu"/"swish" are nn.SiLU;
#: "gelu_pytorch_tanh" is F.gelu(approximate="tanh") and "gelu" F.gelu, one op each (not "gelu_new", a composition)
ACT_NAMES = {"silu": ("silu", "swish"), "gelu_tanh": ("gelu_pytorch_tanh", "gelu")}

DENSE_SIZES = {"h": "hidden_size", "n_h": "num_attention_heads", "n_kv": "num_key_value_heads", "d_h": "head_dim",
               "h_F": "intermediate_size", "V": "vocab_size", "L": "num_hidden_layers"}


def _number(key: str, value: object, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SymmemError(f"{source}: {key} = {value!r:.60}: must be a number")
    return float(value)


@dataclass(frozen=True)
class Switch:
    """An `Arch` feature a config key turns on: a boolean key (`when = "true"`), a key that is on when set to
    anything but null (`"set"`: Gemma 2's attn_logit_softcapping), or a positive number (`"positive"`). `on`: the
    feature's value when on (True, or e.g. "head" for GLM-4.5's use_qk_norm); off, the feature keeps the family's
    `arch` value."""

    feature: str
    key: str
    when: str = "true"
    on: object = True

    def is_on(self, raw: Mapping, default: object, source: str) -> bool:
        value = raw.get(self.key, default)
        if self.when == "true":
            return boolean(self.key, value, source)
        if self.when == "set":
            return value is not None
        return value is not None and _number(self.key, value, source) > 0


# --------------------------------------------------------------------------------------------- which layers are MoE
def all_dense(raw: Mapping, get: Callable[[str], object], n_layers: int, source: str) -> tuple[str, ...]:
    return ("dense",) * n_layers


def all_moe(raw, get, n_layers, source) -> tuple[str, ...]:
    return ("moe",) * n_layers


def sparse_step(raw, get, n_layers, source) -> tuple[str, ...]:
    """Qwen2-MoE / Qwen3-MoE (modeling_qwen3_moe.py:310-311): MoE iff the layer is not in mlp_only_layers,
    num_experts > 0 and (layer + 1) % decoder_sparse_step == 0."""
    step = positive_int("decoder_sparse_step", get("decoder_sparse_step"), source)
    only = _layer_list("mlp_only_layers", get("mlp_only_layers"), n_layers, source)
    return tuple("moe" if i not in only and (i + 1) % step == 0 else "dense" for i in range(n_layers))


def first_k_dense(raw, get, n_layers, source) -> tuple[str, ...]:
    """GLM-4.5 (modeling_glm4_moe.py:402): MoE iff layer >= first_k_dense_replace."""
    k = non_negative_int("first_k_dense_replace", get("first_k_dense_replace"), source)
    return tuple("moe" if i >= k else "dense" for i in range(n_layers))


def moe_layers_or_step(raw, get, n_layers, source) -> tuple[str, ...]:
    """Llama 4 (configuration_llama4.py:175-183): moe_layers if given, else every interleave_moe_layer_step-th
    layer from interleave_moe_layer_step - 1."""
    given = get("moe_layers")
    if given is None:
        step = positive_int("interleave_moe_layer_step", get("interleave_moe_layer_step"), source)
        moe = set(range(step - 1, n_layers, step))
    else:
        moe = _layer_list("moe_layers", given, n_layers, source)
    return tuple("moe" if i in moe else "dense" for i in range(n_layers))


# ------------------------------------------------------------------------ which layers attend through a window
# Each returns (window, sliding layers): the window size transformers' config leaves (None: no window) and, per
# layer, whether it is a sliding layer; a config's own `layer_types` overrides the rule (as transformers' does).
def no_window(raw, get, n_layers, source) -> tuple[int | None, tuple[bool, ...]]:
    return None, (False,) * n_layers


def window_everywhere(raw, get, n_layers, source):
    """Mistral, Mixtral, Phi-3, Ministral: every layer slides when sliding_window is set."""
    w = _window(get("sliding_window"), source)
    return w, (w is not None,) * n_layers


def qwen_window(raw, get, n_layers, source):
    """Qwen2/Qwen3 (configuration_qwen2.py:83-93): sliding_window only with use_sliding_window; layers from
    max_window_layers on slide."""
    w = _window(get("sliding_window"), source) if _flag(get, "use_sliding_window", source) else None
    first = non_negative_int("max_window_layers", get("max_window_layers"), source)
    return w, tuple(w is not None and i >= first for i in range(n_layers))


def qwen_moe_window(raw, get, n_layers, source):
    """Qwen3-MoE (configuration_qwen3_moe.py:110): every layer slides with use_sliding_window."""
    w = _window(get("sliding_window"), source) if _flag(get, "use_sliding_window", source) else None
    return w, (w is not None,) * n_layers


def qwen2_moe_window(raw, get, n_layers, source):
    """Qwen2-MoE (configuration_qwen2_moe.py:114-117): odd-numbered layers below max_window_layers slide."""
    w = _window(get("sliding_window"), source) if _flag(get, "use_sliding_window", source) else None
    last = non_negative_int("max_window_layers", get("max_window_layers"), source)
    return w, tuple(w is not None and bool((i + 1) % 2) and i < last for i in range(n_layers))


def alternate_window(raw, get, n_layers, source):
    """Gemma 2, gpt-oss: layers 0, 2, 4, ... slide ((i + 1) % 2)."""
    w = _window(get("sliding_window"), source)
    return w, tuple(w is not None and bool((i + 1) % 2) for i in range(n_layers))


def pattern_window(raw, get, n_layers, source):
    """Gemma 3 (configuration_gemma3.py:108-110): all but every sliding_window_pattern-th layer slide."""
    w = _window(get("sliding_window"), source)
    pattern = positive_int("sliding_window_pattern", get("sliding_window_pattern"), source)
    return w, tuple(w is not None and bool((i + 1) % pattern) for i in range(n_layers))


def _rope_layers(get, n_layers: int, source: str, given: bool) -> list:
    """no_rope_layers (1: the layer rotates), as `given`, else every no_rope_layer_interval-th layer NoPE (the
    config classes' default); one entry per layer."""
    rope = get("no_rope_layers")
    if not given:
        every = positive_int("no_rope_layer_interval", get("no_rope_layer_interval"), source)
        rope = [int((i + 1) % every != 0) for i in range(n_layers)]
    if not isinstance(rope, list) or len(rope) != n_layers:
        raise SymmemError(f"{source}: no_rope_layers = {rope!r:.60}: must list 0 or 1 for each of the {n_layers} "
                          "layers")
    return rope


def smollm3_nope(raw, get, n_layers, source) -> tuple[bool, ...]:
    """SmolLM3's NoPE layers: no_rope_layers[i] == 0, by default every no_rope_layer_interval-th
    (configuration_smollm3.py:100-103)."""
    return tuple(not r for r in _rope_layers(get, n_layers, source, get("no_rope_layers") is not None))


def nope_window(raw, get, n_layers, source):
    """SmolLM3 (configuration_smollm3.py:100-113): with use_sliding_window, the NoPE layers slide."""
    w = _window(get("sliding_window"), source) if _flag(get, "use_sliding_window", source) else None
    return w, tuple(w is not None and nope for nope in smollm3_nope(raw, get, n_layers, source))


def chunked_window(raw, get, n_layers, source):
    """Llama 4 (configuration_llama4.py:169-191): the RoPE layers attend in chunks of attention_chunk_size (a
    window as far as the mask goes: transformers builds one from s = chunk on), the NoPE layers globally."""
    w = None if get("attention_chunk_size") is None else positive_int("attention_chunk_size",
                                                                        get("attention_chunk_size"), source)
    return w, tuple(w is not None and not nope for nope in llama4_nope(raw, get, n_layers, source))


def llama4_nope(raw, get, n_layers, source) -> tuple[bool, ...]:
    """Llama 4's NoPE layers: no_rope_layers[i] == 0, or, when no_rope_layers is absent or empty (Scout's config
    has []), every no_rope_layer_interval-th layer (configuration_llama4.py:169-172)."""
    rope = _rope_layers(get, n_layers, source, bool(get("no_rope_layers")))
    if any(r not in (0, 1) or isinstance(r, bool) for r in rope):
        raise SymmemError(f"{source}: no_rope_layers = {rope!r:.60}: must list 0 or 1 for each of the {n_layers} "
                          "layers")
    return tuple(not r for r in rope)


def _window(value: object, source: str) -> int | None:
    return None if value is None else positive_int("sliding_window", value, source)


def _flag(get, key: str, source: str) -> bool:
    return boolean(key, get(key), source)


def _layer_list(key: str, value: object, n_layers: int, source: str) -> set[int]:
    if not isinstance(value, list) or len(value) > 1_000_000:
        raise SymmemError(f"{source}: {key} = {value!r:.60}: must be a list of layer indices")
    for i in value:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers:
            raise SymmemError(f"{source}: {key} has {i!r:.40}: must be a layer index in [0, {n_layers})")
    return set(value)


@dataclass(eq=False)
class Decoder(Family):
    """A decoder-only family declared by its config keys and features (see the module's docstring)."""

    name: str = ""
    model_types: tuple[str, ...] = ()
    presets: tuple[str, ...] = ()
    #: symbol -> config key (DENSE_SIZES, and for MoE models N, N_r, h_E and N_s or h_S)
    sizes: Mapping[str, str] = field(default_factory=lambda: dict(DENSE_SIZES))
    #: config key -> transformers' default when the key is absent (HEADS, PER_HEAD: another key's value)
    defaults: Mapping[str, object] = field(default_factory=dict)
    #: the features every model of the type has
    arch: Arch = Arch()
    #: the features a config key switches
    switches: tuple[Switch, ...] = ()
    #: which layers are MoE blocks (all_dense, all_moe, sparse_step, first_k_dense, moe_layers_or_step)
    layer_rule: Callable = all_dense
    #: which layers attend through a sliding window, and its size (no_window, window_everywhere, qwen_window, ...)
    window_rule: Callable = no_window
    #: which layers are NoPE layers (no RoPE: they keep no rotary table; Llama 4's: no q/k norm either, and
    #: temperature-scaled queries); None: every layer rotates
    nope_rule: Callable | None = None
    #: other keys read (checked where they matter, never silently trusted): windows, layer types, routing options
    reads: tuple[str, ...] = ()
    #: what the family is, for `symmem families` and the docs
    doc: str = ""
    #: `architectures` class names read as this family when the model_type is one transformers does not know
    architectures: Mapping[str, str] = field(default_factory=dict)
    tie_default: bool = False
    #: the key naming the gated MLP's activation (None: fixed by the architecture, gpt-oss's clamped SwiGLU), and
    #: its default; the value must be one the dataflow's activation is (ACT_NAMES)
    act_key: str | None = "hidden_act"
    act_default: str = "silu"
    #: transformers' default partial_rotary_factor (GLM: 0.5): sizes the rotary tables the HF dataflow keeps
    rotary_default: float = 1.0
    #: transformers' default norm_topk_prob (an MoE router's renormalisation of its top-k weights)
    norm_topk_default: bool = False
    megatron: bool = True  # whether Megatron-Core's GPT model builds it (the `megatron` TP convention)
    hf_dataflow: bool = True
    hf_biases_and_dropout: bool = True
    sdpa: bool = True  # whether transformers runs it with sdpa attention (Gemma 2: eager only)
    hf_impl_takes_seq: bool = True

    def __post_init__(self) -> None:
        moe = "N" in self.sizes
        self.config_keys = dict(self.sizes)
        self.routed_experts = ("N", "N_r") if moe else None
        base = ("dense", "moe") if moe else ("dense",)
        # a sliding layer is a kind of its own: its sdpa keeps a mask where the window bites (symmem.blocks.hf.decoder)
        slides = ("", "_sliding") if self.window_rule is not no_window else ("",)
        nopes = ("", "_nope") if self.nope_rule is not None else ("",)
        self.layer_kind_order = tuple(f"{b}{w}{n}" for b in base for n in nopes for w in slides)
        self.conventions = ("paper", "megatron") if moe and self.megatron else ("paper",)
        div = [("tp", "n_h"), ("tp", "n_kv"), ("tp", "V")]
        div += [("tp", "h_F")] if "h_F" in self.sizes else []
        div += [("ep", "N"), ("etp", "h_E")] if moe else []
        self.divisibility = tuple(div)
        self.optional_keys = ()
        keys = {"tie_word_embeddings", "attention_dropout", *self.reads, *(s.key for s in self.switches)}
        keys |= {self.act_key} if self.act_key else set()
        self.structural_keys = tuple(sorted(keys - set(self.sizes.values())))

    # ----------------------------------------------------------------------------------------------- schema
    def _get(self, raw: Mapping) -> Callable[[str], object]:
        def get(key: str) -> object:
            if key in raw:
                return raw[key]
            return self.defaults.get(key)

        return get

    def parse(self, raw: Mapping, source: str) -> ModelConfig:
        from symmem.family import ignored

        get = self._get(raw)
        values: dict[str, int] = {}
        for sym_name in ("h", "n_h"):
            key = self.sizes[sym_name]
            if get(key) is None:
                raise SymmemError(f"{source}: missing key {key!r}: {self.name} configs need it")
            values[sym_name] = positive_int(key, get(key), source)
        for sym_name, key in self.sizes.items():
            if sym_name in values:
                continue
            value = raw.get(key)
            if value is None:  # absent or null: transformers' default
                value = self.defaults.get(key)
                if value == HEADS:
                    value = values["n_h"]
                elif value == PER_HEAD:
                    if values["h"] % values["n_h"]:
                        raise SymmemError(f"{source}: hidden_size = {values['h']}: must be a multiple of "
                                          f"num_attention_heads = {values['n_h']} when {key} is not given")
                    value = values["h"] // values["n_h"]
            if value is None:
                raise SymmemError(f"{source}: missing key {key!r}: {self.name} configs need it")
            values[sym_name] = positive_int(key, value, source)
        if values["n_h"] % values["n_kv"]:
            raise SymmemError(f"{source}: {self.sizes['n_kv']} = {values['n_kv']}: must divide "
                              f"num_attention_heads = {values['n_h']}")
        if "N" in values and values["N_r"] > values["N"]:
            raise SymmemError(f"{source}: {self.sizes['N_r']} = {values['N_r']}: more than {self.sizes['N']} = "
                              f"{values['N']}")
        flags = {s.feature: s.on if s.is_on(raw, self.defaults.get(s.key), source) else getattr(self.arch, s.feature)
                 for s in self.switches}
        arch = dataclasses.replace(self.arch, **flags)
        if self.act_key is not None:
            act = raw.get(self.act_key, self.act_default)
            if act not in ACT_NAMES[arch.act]:
                raise SymmemError(f"{source}: {self.act_key} = {act!r:.60}: the {self.name} dataflow's MLP is gated by "
                                  f"{arch.act}; must be one of {', '.join(map(repr, ACT_NAMES[arch.act]))}")
        # scales and clamps: they change no tensor's size, but a value transformers could not run (0 divides, text
        # is no number) is refused, not carried
        for key in (*self.reads, *(sw.key for sw in self.switches)):
            if key in POSITIVE_SCALARS and raw.get(key) is not None:
                v = raw[key]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                    raise SymmemError(f"{source}: {key} = {str(v)[:30]}: must be a number above 0 (or null)")
        dropout = _number("attention_dropout", get("attention_dropout") or 0.0, source)
        if not 0 <= dropout < 1:
            raise SymmemError(f"{source}: attention_dropout = {dropout!r}: must be a number in [0, 1)")
        kinds = self.layer_rule(raw, get, values["L"], source)
        window, sliding = self.window_rule(raw, get, values["L"], source)
        if raw.get("layer_types") is not None:  # transformers uses a config's own layer_types as given
            types = raw["layer_types"]
            check_layer_types(types, "layer_types", ("full_attention", "sliding_attention", "chunked_attention"),
                              values["L"], source)
            sliding = tuple(t in ("sliding_attention", "chunked_attention") for t in types)
            if any(sliding) and window is None:
                window = _window(get("sliding_window"), source)
                if window is None:
                    raise SymmemError(f"{source}: layer_types has sliding_attention layers: sliding_window must be set")
        kinds = tuple(f"{k}_sliding" if slide else k for k, slide in zip(kinds, sliding, strict=True))
        if self.nope_rule is not None:
            nope = self.nope_rule(raw, get, values["L"], source)
            kinds = tuple(f"{k}_nope" if n else k for k, n in zip(kinds, nope, strict=True))
        if any(k.startswith("moe") for k in kinds) and "N" not in values:
            raise SymmemError(f"{source}: {self.name}: MoE layers without routed experts")
        used = {k for s, k in self.sizes.items() if s in values}
        if not any(k.startswith("dense") for k in kinds):  # no dense layer: h_F is not a size of it (Mixtral)
            values.pop("h_F", None)
            used.discard(self.sizes.get("h_F"))
        tie = boolean("tie_word_embeddings", get("tie_word_embeddings") if "tie_word_embeddings" in raw
                      else self.tie_default, source)
        options = (("arch", arch), ("kinds", kinds), ("window", window), ("attention_dropout", dropout > 0),
                   ("temperature_tuning", boolean("attn_temperature_tuning", get("attn_temperature_tuning") or False,
                                                  source)),
                   ("rotary_dim", self._rotary_dim(raw, values["d_h"], source)),
                   ("norm_topk_prob", boolean("norm_topk_prob", raw.get("norm_topk_prob", self.norm_topk_default),
                                              source)))
        return ModelConfig(name=source, family=self, model_type=str(raw["model_type"]), values=tuple(values.items()),
                           tie_word_embeddings=tie, ignored_keys=tuple(k for k in ignored(raw, self) if k not in used),
                           options=options)

    def _rotary_dim(self, raw: Mapping, head_dim: int, source: str) -> int | None:
        """The rotary tables' width where not head_dim: 2 ceil(int(head_dim f) / 2) for partial_rotary_factor f
        (top level, or in rope_parameters / rope_scaling as transformers 5.24 moves it; GLM's inv_freq has
        ceil(int(head_dim f) / 2) entries, repeated twice); None for f = 1."""
        f = raw.get("partial_rotary_factor")
        for nest in ("rope_parameters", "rope_scaling"):
            if f is None and isinstance(raw.get(nest), dict):
                f = raw[nest].get("partial_rotary_factor")
        f = self.rotary_default if f is None else _number("partial_rotary_factor", f, source)
        if not 0 < f <= 1:
            raise SymmemError(f"{source}: partial_rotary_factor = {f!r}: must be in (0, 1]")
        dim = int(head_dim * f)
        return None if dim == head_dim else 2 * ((dim + 1) // 2)

    def layer_kinds(self, model: ModelConfig) -> tuple[str, ...]:
        return model.option("kinds")

    def framework_gap(self, model: ModelConfig, framework: str) -> str | None:
        """What Megatron-Core 0.16.1's GPTModel lacks (megatron/core/transformer/transformer_config.py: it has
        qk_layernorm per head, qk_l2_norm, add_qkv_bias, softmax_type 'learnable' sinks, gated GELU, the clamped
        GLU, shared-expert gates, sigmoid routers with expert bias, moe_layer_freq lists; it has no logit
        soft-capping, no norms after attention and MLP, no q/k norm over the whole projection, no embedding
        scale)."""
        if framework != "megatron":
            return None
        arch: Arch = model.option("arch")
        gaps = [what for on, what in (
            (arch.attn_softcap or arch.final_softcap, "logit soft-capping (attn/final_logit_softcapping)"),
            (arch.post_norms, "norms after attention and MLP (post_attention/post_feedforward_layernorm)"),
            (arch.qk_norm in ("proj", "hidden"), "q/k norm over the whole projection (its qk_layernorm is per head)"),
            (arch.embed_scale, "scaling of the embedding by sqrt(hidden_size)")) if on]
        return "; ".join(gaps) or None

    # ----------------------------------------------------------------------------------------------- dataflows
    def residual_dims(self, model: ModelConfig, kind: str):
        return (B, seq("sp_moe" if kind.startswith("moe") else "sp"), H)

    def build_layer(self, fb: DataflowBuilder, x: str, kind: str, model: ModelConfig, convention: str,
                    impl: object | None) -> str:
        if impl is not None:  # Hugging Face's modules (torch-eager); the TP convention does not apply
            return hf_decoder.layer(fb, x, kind, model=model, impl=impl)
        arch: Arch = model.option("arch")
        axis = "sp_moe" if kind.startswith("moe") else "sp"
        nope = kind.endswith("_nope")
        # a NoPE layer rotates nothing; Llama 4's also skips its (weightless) q/k norm, EXAONE 4's keeps its own
        y = decoder.attention(fb, x, arch=arch, resid_axis=axis, dropout=bool(model.option("attention_dropout")),
                              rope=not nope, qk_norm=not (nope and arch.qk_norm == "l2"))
        if kind.startswith("moe"):
            return decoder.moe(fb, y, arch=arch, convention=convention)
        return decoder.dense_mlp(fb, y, arch=arch, resid_axis=axis)

    def build_shared(self, fb: DataflowBuilder, model: ModelConfig, impl: object | None) -> str | None:
        # the model computes cos and sin once per forward; every layer's RoPE keeps them (GLM-4's keeps copies of
        # its own instead: symmem.blocks.hf.decoder)
        if impl is None or model.option("arch").rope_interleave:
            return None
        return hf_decoder.rope_tables(fb, model)

    def uses_shared(self, model: ModelConfig, kind: str) -> bool:
        return not kind.endswith("_nope")  # a NoPE layer rotates nothing: it keeps no rotary table

    def hf_impl(self, model: ModelConfig, attn: str, experts: str, router: str | None, unit_batch: bool,
                unit_seq: bool, s: int | None = None) -> object:
        if router is not None:
            raise SymmemError(f"hf_router = {router!r}: {self.name}'s router is its config's; leave it unset")
        if attn == "sdpa" and not self.sdpa:
            raise SymmemError(f"attn_impl = 'sdpa': transformers 5.24 runs {self.name} with eager attention only "
                              "(its _supports_sdpa is False); use --attn-impl eager")
        window = model.option("window")
        # transformers' masking_utils skips the sliding mask, for sdpa's is_causal, only while s < window
        masked = window is not None and (s is None or s >= window)
        return hf_decoder.DecoderImpl(attn, experts, unit_batch=unit_batch, unit_seq=unit_seq, window_mask=masked)

    def build_embedding(self, fb: DataflowBuilder, model: ModelConfig, impl: object | None = None) -> str:
        x = embedding(fb, token_ids(fb))
        return decoder.scaled_embedding(fb, x) if model.option("arch").embed_scale else x

    def build_head(self, fb: DataflowBuilder, model: ModelConfig) -> str:
        fb.block = "head"
        x = fb.input("final.x", (B, seq("sp_moe" if model.layer_kinds()[-1].startswith("moe") else "sp"), H))
        shared = "embed_tokens.weight" if model.tie_word_embeddings else None
        return decoder.head(fb, x, arch=model.option("arch"), shared_with=shared)
