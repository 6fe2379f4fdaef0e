"""DeepSeek-V3's multi-token-prediction module: enorm, hnorm, eh_proj, one MoE layer, sharing embedding and head."""

from __future__ import annotations

from symmem.blocks._dims import S_SP, B, H, seq
from symmem.blocks.embedding import embedding, head
from symmem.blocks.symbols import h
from symmem.graph import D, DataflowBuilder, Weight


def mtp(fb: DataflowBuilder, h_main: str, ids: str, *, layer, index: int = 0,
        head_shared_with: str = "lm_head.weight", convention: str = "paper", embed_dropout: bool = False) -> str:
    """Append MTP module `index`: `layer(fb, x)` appends its transformer layer and returns the output name.

    Its head is the main model's (`head_shared_with`: the embedding itself when the two are tied). Megatron-Core
    builds eh_proj column-parallel (split over TP); the paper's convention keeps it whole. The embedding is the main
    model's module, dropout included (`embed_dropout`): Megatron-LM 23e00ed0,
    transformer/multi_token_prediction.py:502-505 calls it on the rolled token ids."""
    p = f"mtp{index}."
    fb.block = "mtp"
    emb = embedding(fb, ids, name=f"{p}embed_tokens", shared_with="embed_tokens.weight", dropout=embed_dropout)
    (e,) = fb.op("region", f"{p}enter_e", [emb], [(f"{p}e", (B, S_SP, H))])
    (hh,) = fb.op("region", f"{p}enter_h", [h_main], [(f"{p}h", (B, S_SP, H))])
    (en,) = fb.op("rmsnorm", f"{p}enorm", [e], [(f"{p}e_norm", (B, S_SP, H))], [Weight(f"{p}enorm.weight", (H,))])
    (hn,) = fb.op("rmsnorm", f"{p}hnorm", [hh], [(f"{p}h_norm", (B, S_SP, H))], [Weight(f"{p}hnorm.weight", (H,))])
    (cat,) = fb.op("concat", f"{p}concat", [en, hn], [(f"{p}eh", (B, S_SP, D(2 * h)))])
    (x,) = fb.op("linear", f"{p}eh_proj", [cat], [(f"{p}x", (B, seq("sp_moe"), H))],
                 [Weight(f"{p}eh_proj.weight", (D(2 * h), D(h, "tp") if convention == "megatron" else H))])
    y = layer(fb, x)
    fb.block = "mtp"
    return head(fb, y, prefix=p, shared_with=head_shared_with, norm_name="shared_head.norm")
