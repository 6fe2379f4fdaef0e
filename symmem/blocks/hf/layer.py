"""A whole HF decoder layer, and the rotary tables all layers share."""

from __future__ import annotations

from symmem.blocks._dims import S_FULL
from symmem.blocks.hf.attention import mla
from symmem.blocks.hf.ffn import dense_mlp, moe
from symmem.blocks.hf.impl import HFImpl
from symmem.blocks.symbols import d_hr
from symmem.config import ModelConfig
from symmem.graph import COMPLEX64, INT64, D, DataflowBuilder


def layer(fb: DataflowBuilder, x: str, kind: str, *, model: ModelConfig, impl: HFImpl, resid_axis: str) -> str:
    """DeepseekV3DecoderLayer / DeepseekV2DecoderLayer: attention, then the dense MLP or the MoE block."""
    y = mla(fb, x, model=model, impl=impl, resid_axis=resid_axis)
    return moe(fb, y, impl=impl) if kind == "moe" else dense_mlp(fb, y, resid_axis=resid_axis)


def rope_tables(fb: DataflowBuilder, model: ModelConfig) -> str:
    """The model's rotary embedding, computed once per forward and passed to every layer, whose RoPE
    multiplications keep it: V3's cos and sin, (1, s, d_hr) each in the model dtype; V2's complex64 freqs_cis,
    (1, s, d_hr/2) in either dtype."""
    fb.block = "rope"
    pos = fb.input("rope.position_ids", (D(1), S_FULL), INT64)
    if model.model_type in ("deepseek_v3", "deepseek_v32"):
        outs = [("rope.cos", (D(1), S_FULL, D(d_hr))), ("rope.sin", (D(1), S_FULL, D(d_hr)))]
    else:
        outs = [("rope.freqs_cis", (D(1), S_FULL, D(d_hr / 2)), COMPLEX64)]
    names = fb.op("rotary_emb", "rotary_emb", [pos], outs)
    return names[0]
