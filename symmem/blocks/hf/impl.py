"""Which Hugging Face implementation a dataflow follows: attention and experts implementations, the router
variant a config selects, and whether a flattening reshape of a strided view stays a view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from symmem.config import ModelConfig
from symmem.errors import SymmemError
from symmem.implementations import ATTN_IMPLS, EXPERTS_IMPLS

# v3: sigmoid scores, gather of the top-k (norm: divided by their sum, norm_topk_prob); v2: softmax scores,
# top-k directly (greedy) or after masking the experts of the groups not chosen (group_limited_greedy).
ROUTERS = ("v3-norm", "v3", "v2-greedy", "v2-group")


@dataclass(frozen=True)
class HFImpl:
    attn: str = "eager"  # attn_implementation: "eager" or "sdpa"
    experts: str = "eager"  # experts_implementation: "eager" or "grouped_mm"
    router: str = "v3-norm"  # one of ROUTERS
    # Shapes where a reshape or .contiguous() is no copy (PyTorch returns a view when the strides allow it):
    unit_batch: bool = False  # b = 1
    unit_seq: bool = False  # s = 1

    @property
    def flat_view(self) -> bool:
        """b = 1 or s = 1: flattening (b, n_h) of the value, a transposed split of kv_b_proj's output, is a view,
        so the saved operand keeps all of kv_b_proj's output alive; otherwise it is a copy of d_v columns only."""
        return self.unit_batch or self.unit_seq

    @property
    def output_view(self) -> bool:
        """s = 1: the attention output's transpose(1, 2).contiguous() is no copy: o_proj keeps the very tensor
        the attention returned (which sdpa's flash backend keeps too)."""
        return self.unit_seq

    def __post_init__(self) -> None:
        for field, value, known in (("attn_impl", self.attn, ATTN_IMPLS), ("experts_impl", self.experts,
                                     EXPERTS_IMPLS), ("hf_router", self.router, ROUTERS)):
            if value not in known:
                raise SymmemError(f"{field} = {value!r}: unknown; known: {', '.join(known)}")


def sdpa_backend(model: ModelConfig) -> str:
    """The CPU sdpa backend torch 2.13 picks: flash-attention-for-CPU needs equal q/k and v head sizes, else math."""
    v = dict(model.values)
    return "flash" if v["d_h"] + v["d_hr"] == v["d_v"] else "math"


def router_kind(raw: Mapping, where: str = "config") -> str:
    """The router variant an HF config.json selects (transformers' own defaults where a key is absent)."""
    mt = raw.get("model_type")
    if mt == "deepseek_v3":  # HF's V3 router ignores topk_method: always sigmoid and group-limited
        return "v3-norm" if raw.get("norm_topk_prob", True) else "v3"
    if mt == "deepseek_v2":  # HF's V2 router ignores norm_topk_prob
        method = raw.get("topk_method", "greedy")
        if method == "greedy":
            return "v2-greedy"
        if method == "group_limited_greedy":
            return "v2-group"
        raise SymmemError(f"{where}: topk_method = {method!r}: transformers' DeepSeek-V2 router runs only "
                          "'greedy' and 'group_limited_greedy'")
    raise SymmemError(f"{where}: model_type = {mt!r}: must be 'deepseek_v3' or 'deepseek_v2'")


def router_kind_of(model: ModelConfig) -> str:
    """`router_kind` of a loaded model, from the routing options its config gave."""
    raw = {"model_type": model.model_type}
    for key in ("topk_method", "norm_topk_prob"):
        if model.option(key) is not None:
            raw[key] = model.option(key)
    return router_kind(raw, model.name)
