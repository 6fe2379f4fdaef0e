"""The input embedding and the output head (final norm, vocabulary-parallel linear, cross-entropy)."""

from __future__ import annotations

from symmem.blocks._dims import S_FULL, S_SP, B, H
from symmem.blocks.symbols import V
from symmem.graph import FP32, INT64, D, DataflowBuilder, Weight


def embedding(fb: DataflowBuilder, ids: str, *, name: str = "embed_tokens",
              shared_with: str | None = None, dropout: bool = False) -> str:
    """Token ids -> hidden states, as Megatron-Core's LanguageModelEmbedding computes them (Megatron-LM 23e00ed0):

    * the lookup is vocabulary-parallel (VocabParallelEmbedding, tensor_parallel/layers.py:262-295: each TP rank
      holds V/t rows); its `F.embedding` (layers.py:281) keeps the token ids for backward, which scatters the
      gradient rows by id (what each rule set charges for the op `embedding`);
    * under sequence parallelism the output is reduce-scattered to the sequence-parallel region (layers.py:286-291,
      language_model_embedding.py:48-53, 134-146): the embedding emits a sequence-sharded stream, s/t rows per rank
      (`S_SP`), whatever layer comes next;
    * with `dropout`, the embedding dropout follows, on the sharded rows (language_model_embedding.py:86, its
      probability is hidden_dropout, 145-148; Korthikanti et al. 2022, Section 4.3: its mask is the input
      embedding's activation). A family passes `dropout` where its layers keep hidden-dropout masks.
    """
    fb.block = "embedding" if shared_with is None else fb.block
    (x,) = fb.op("embedding", name, [ids], [(f"{name}.out", (B, S_SP, H))],
                 [Weight(f"{name}.weight", (D(V, "tp"), H), "dense", shared_with)])
    if dropout:
        (x,) = fb.op("dropout", f"{name}.dropout", [x], [(f"{name}.out_dropped", (B, S_SP, H))])
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
