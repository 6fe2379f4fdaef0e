"""EXAONE 4.0 (transformers 5.24 models/exaone4, `exaone4`): RMSNorm on q and k per head, norms after attention and
MLP only (post_attention_layernorm, post_feedforward_layernorm, as OLMo 2), and in its hybrid form (sliding_window
set) local layers by sliding_window_pattern whose global layers rotate nothing: "global NoPE"
(modeling_exaone4.py:232-235). Declared from the features other families already compose: its own window and NoPE
rules are the only code, here.
"""

from symmem.blocks.features import Arch
from symmem.families._decoder import PER_HEAD, Decoder, positive_int


def _pattern(get, n_layers: int, source: str) -> tuple[bool, ...]:
    """configuration_exaone4.py:100-108: layers i with (i + 1) % sliding_window_pattern != 0 slide; none without a
    window. A pattern given as a string of L (local) and G (global) letters repeats that string."""
    if get("sliding_window") is None:
        return (False,) * n_layers
    pattern = get("sliding_window_pattern")
    if isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}:
        return tuple(pattern[i % len(pattern)] == "L" for i in range(n_layers))
    every = positive_int("sliding_window_pattern", pattern, source)
    return tuple(bool((i + 1) % every) for i in range(n_layers))


def exaone_window(raw, get, n_layers, source):
    w = get("sliding_window")
    return (None if w is None else positive_int("sliding_window", w, source)), _pattern(get, n_layers, source)


def exaone_nope(raw, get, n_layers, source) -> tuple[bool, ...]:
    """With a window, the global layers are NoPE layers (no RoPE: no rotary table kept)."""
    if get("sliding_window") is None:
        return (False,) * n_layers
    types = raw.get("layer_types")
    sliding = (tuple(t == "sliding_attention" for t in types) if isinstance(types, list) and len(types) == n_layers
               else _pattern(get, n_layers, source))
    return tuple(not s for s in sliding)


FAMILY = Decoder(
    name="exaone4", model_types=("exaone4",),
    defaults={"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": PER_HEAD,
              "intermediate_size": 16384, "vocab_size": 102400, "num_hidden_layers": 32, "sliding_window": 4096,
              "sliding_window_pattern": 4},
    arch=Arch(qk_norm="head", norms="post"), window_rule=exaone_window, nope_rule=exaone_nope, megatron=False,
    reads=("sliding_window", "sliding_window_pattern", "layer_types"),
    doc="EXAONE 4.0: q/k norm per head, post norms, local layers and global NoPE layers")
