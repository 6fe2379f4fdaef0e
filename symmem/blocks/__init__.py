"""The layer blocks every model family is assembled from, each written once as a dataflow of tensor shapes:
multi-head latent attention (`mla`) and grouped-query attention (`gqa`), DeepSeekMoE (`moe`), the dense SwiGLU MLP
(`mlp`), GPT's layer (`gpt`), DeepSeek-V3.2's lightning indexer (`indexer`), DeepSeek-V4's compressed and sliding
attention, mHC and hash-routed MoE (`v4_attention`, `mhc`, `hash_moe`), the embedding and head, the MTP module;
`hf/` holds Hugging Face's own dataflows of the same layers (the torch-eager rule set's). The families
(`symmem.families`) choose and assemble them; nothing here names a family.

Shapes are symbolic and annotated with the parallel axes they are split over:
`"tp"` (tensor parallel: heads, FFN width, vocabulary), `"sp"` (sequence parallel in attention and dense
regions), `"sp_moe"` (sequence parallel inside the MoE block: the paper does not shard it, Megatron does),
`"cp"` (context parallel: every sequence dimension), `"ep"` (experts over expert parallelism), `"etp"` (expert
width over expert tensor parallelism).
"""

from symmem.blocks.embedding import embedding, head
from symmem.blocks.mla import mla
from symmem.blocks.mlp import dense_mlp, swiglu
from symmem.blocks.moe import moe
from symmem.blocks.mtp import mtp

__all__ = ["dense_mlp", "embedding", "head", "mla", "moe", "mtp", "swiglu"]
