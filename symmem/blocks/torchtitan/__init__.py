"""torchtitan 0.3.0's DeepSeek-V3 decoder layers as dataflows (its Llama 3 is Hugging Face's Llama dataflow under
the `torchtitan` rule sets: the same ops, `symmem.rules.torchtitan`).

torchtitan's DeepSeek-V3 differs from Hugging Face's where its code does: its MLA's rotary embedding multiplies
complex views by a cached table (a buffer), its router computes the gate under an FP32 autocast, and its routed
experts are reordered by a local token dispatcher, run as three `torch._grouped_mm` and weighted in FP32 before a
scatter-add (torchtitan/models/common/moe.py, token_dispatcher.py). The op kinds are those of the `torch-eager` rule
set (`symmem.rules.torch_eager`) and two of torchtitan's (`scatter_add`, `autocast_weight`); the weights carry
torchtitan's parameter names (`attention.wkv_a.weight`, `moe.routed_experts.inner_experts.w1_EFD`, ...).
"""

from symmem.blocks.torchtitan.deepseek_v3 import TorchtitanImpl, layer

__all__ = ["TorchtitanImpl", "layer"]
