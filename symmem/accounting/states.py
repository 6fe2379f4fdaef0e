"""Model states: weights, gradients and optimizer states in bytes, under a precision recipe and a ZeRO stage.

Dense parameters shard over DP (× CP under context parallelism), the MoE ones (routers and experts, as the paper
counts them) over EDP.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from symmem.errors import SymmemError
from symmem.precision.model_states import Precision

RECIPES = {
    # The paper: BF16 weights, FP32 gradients, Adam's two FP32 moments, no separate master copy.
    "paper": Precision("paper", 2, 4, 0, 8),
    # Megatron mixed precision: BF16 weights, FP32 main gradients, FP32 master weights, Adam moments.
    "megatron": Precision("megatron", 2, 4, 4, 8),
    # FP32 weights and gradients, Adam's two FP32 moments; the weights are the master copy (Megatron-Core's local
    # spec run in FP32, symmem measure --framework megatron-core).
    "fp32": Precision("fp32", 4, 4, 0, 8),
}


def recipe(name: str) -> Precision:
    """A named precision recipe: `paper` (2 + 4 + 8 bytes per parameter), `megatron` (2 + 4 + 4 + 8), `fp32`
    (4 + 4 + 8), or an FP8/FP4 recipe of `symmem.precision` (`te-mxfp8`, `deepseek-v3-fp8`, ...)."""
    if name in RECIPES:
        return RECIPES[name]
    from symmem.precision.recipes import RECIPES as LOW

    try:
        return LOW[name]
    except KeyError:
        from symmem.precision import RECIPE_NAMES

        raise SymmemError(f"precision = {name!r}: unknown recipe; known: {', '.join(RECIPE_NAMES)}") from None


class ZeroStage(IntEnum):
    """What DeepSpeed ZeRO shards over the data-parallel group (dense parts over DP, expert parts over EDP)."""

    NONE = 0
    """Nothing sharded: every data-parallel rank holds all states."""
    OS = 1
    """Optimizer states (and the master copy) sharded."""
    OS_G = 2
    """Optimizer states and gradients sharded."""
    OS_G_P = 3
    """Optimizer states, gradients and the weights themselves sharded."""

    @property
    def label(self) -> str:
        return {0: "none", 1: "os", 2: "os+g", 3: "os+g+params"}[int(self)]


def zero_stage(value: object) -> ZeroStage:
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value.strip()) < 4:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
        raise SymmemError(f"zero = {value!r}: ZeRO stage must be 0, 1, 2 or 3")
    return ZeroStage(value)


@dataclass(frozen=True)
class StateBytes:
    weights: int
    gradients: int
    optimizer: int  # master copy + optimizer moments
    quantized: int = 0  # FP8/FP4 weight copies, their scale tensors and scaling state (symmem.precision.weights)

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.quantized


def state_bytes(dense, moe, dp: int, edp: int, precision: Precision, zero: ZeroStage) -> StateBytes:
    """Bytes of model states on one GPU that holds `dense` and `moe` parameters (DualPipe's two stages: the caller
    adds both, `analysis.dualpipe_states`).

    Integers: a shard that does not divide evenly is the ceiling (memory is planned for the fullest rank).
    Sympy expressions (`symmem check --quantity gpu.states`): the same formula with exact division.
    """

    def share(n, group: int, sharded: bool):
        if not sharded:
            return n
        return -(-n // group) if isinstance(n, int) else n / group

    def part(nbytes: int, sharded: bool):
        return nbytes * (share(dense, dp, sharded) + share(moe, edp, sharded))

    return StateBytes(
        weights=part(precision.weight_bytes, zero >= ZeroStage.OS_G_P),
        gradients=part(precision.grad_bytes, zero >= ZeroStage.OS_G),
        optimizer=part(precision.master_bytes + precision.optimizer_bytes, zero >= ZeroStage.OS),
    )
