"""DeepSeek's layer blocks, each written once as a dataflow of tensor shapes.

Shapes are symbolic and annotated with the parallel axes they are split over:
`"tp"` (tensor parallel: heads, FFN width, vocabulary), `"sp"` (sequence parallel in attention and dense
regions), `"sp_moe"` (sequence parallel inside the MoE block: the paper does not shard it, Megatron does),
`"ep"` (experts over expert parallelism), `"etp"` (expert width over expert tensor parallelism).
"""

from symmem.blocks.embedding import embedding, head
from symmem.blocks.mla import mla
from symmem.blocks.mlp import dense_mlp, swiglu
from symmem.blocks.moe import moe
from symmem.blocks.mtp import mtp

__all__ = ["dense_mlp", "embedding", "head", "mla", "moe", "mtp", "swiglu"]
