"""The input embedding and the output head (final norm, vocabulary-parallel linear, cross-entropy)."""

from __future__ import annotations

from symmem.blocks._dims import S_FULL, S_SP, B, H, seq
from symmem.blocks.symbols import V
from symmem.graph import FP32, INT64, D, DataflowBuilder, Weight


def embedding(fb: DataflowBuilder, ids: str, *, name: str = "embed_tokens",
              shared_with: str | None = None,
              out_axis: str = "sp") -> str:
    """Token ids -> hidden states; the vocabulary is split over tensor parallelism (as in Megatron's
    VocabParallelEmbedding)."""
    fb.block = "embedding" if shared_with is None else fb.block
    (x,) = fb.op("embedding", name, [ids], [(f"{name}.out", (B, seq(out_axis), H))],
                 [Weight(f"{name}.weight", (D(V, "tp"), H), "dense", shared_with)])
    return x


def head(fb: DataflowBuilder, x_in: str, *, prefix: str = "", shared_with: str | None = None,
         norm_name: str = "norm") -> str:
    """Final RMSNorm, the output projection to the vocabulary (split over TP) and the cross-entropy loss."""
    (x,) = fb.op("region", f"{prefix}head_enter", [x_in], [(f"{prefix}head.x", (B, S_SP, H))])
    (xn,) = fb.op("rmsnorm", f"{prefix}{norm_name}", [x], [(f"{prefix}head.x_norm", (B, S_SP, H))],
                  [Weight(f"{prefix}{norm_name}.weight", (H,))])
    (logits,) = fb.op("linear", f"{prefix}lm_head", [xn], [(f"{prefix}head.logits", (B, S_FULL, D(V, "tp")))],
                      [Weight(f"{prefix}lm_head.weight", (H, D(V, "tp")), "dense", shared_with)])
    (loss,) = fb.op("cross_entropy", f"{prefix}loss", [logits], [(f"{prefix}head.loss", (), FP32)])
    return loss


def token_ids(fb: DataflowBuilder, name: str = "input_ids") -> str:
    return fb.input(name, (B, D(S_FULL.size, "cp")), INT64)
