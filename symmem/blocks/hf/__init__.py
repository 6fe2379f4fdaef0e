"""Hugging Face's DeepSeek-V3/V2 decoder layers (transformers 5.24.0) as dataflows.

They differ from the paper's dataflows (`symmem.blocks`) where the implementation differs: fused projections
(`kv_a_proj_with_mqa` produces d_c + d_hr and is then split; one `q_b_proj`, one `kv_b_proj`), an FP32 router,
experts run by `eager` loops or by `grouped_mm`, eager or sdpa attention, no dropout. They also say which
tensors are views of which (a split, a chunk, a reshape that stays a view) and which are dtype conversions of
which, because PyTorch keeps a viewed storage alive whole and a conversion to the same dtype is no copy
(`symmem.accounting.activations.storage_of`). The ops use the kinds of the `torch-eager` rule set
(`symmem.rules.torch_eager`); the parallel annotations are the paper's, so a scenario can split them.
Weights carry Hugging Face's parameter names (`self_attn.q_a_proj.weight`, `mlp.experts.gate_up_proj`, ...).
Llama's `LlamaDecoderLayer` is in `symmem.blocks.hf.llama` (its own `LlamaImpl`, the same op kinds).
"""

from symmem.blocks.hf.impl import ATTN_IMPLS, EXPERTS_IMPLS, ROUTERS, HFImpl, router_kind, router_kind_of, sdpa_backend
from symmem.blocks.hf.layer import layer, rope_tables

__all__ = ["ATTN_IMPLS", "EXPERTS_IMPLS", "ROUTERS", "HFImpl", "layer", "rope_tables", "router_kind",
           "router_kind_of", "sdpa_backend"]
