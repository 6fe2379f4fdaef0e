"""Routing models: how many tokens one routed expert processes (the value of E_tok in the MoE dataflow).

`paper` is the paper's accounting: each expert sees E_tok = b s N_r / N of its own GPU's tokens.
`dispatch` is real expert-parallel all-to-all: an expert receives tokens from every EP rank, so it processes
EP times more (balanced routing). `capacity` allocates static per-expert buffers of a capacity factor times the
balanced load; `dynamic` bounds the busiest rank's load by a ratio to the balanced one; `histogram` takes a
measured per-expert load and charges the busiest rank's token-slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import sympy

from symmem._numbers import decimal_text
from symmem.errors import SymmemError
from symmem.graph import AxisSizes
from symmem.symbols import b, s

ROUTING_KINDS = ("paper", "dispatch", "capacity", "dynamic", "histogram")
MAX_FACTOR = 10_000  # a capacity factor or load ratio beyond this is a typo, not a plan


def _exact(value: object, field_name: str) -> sympy.Rational:
    if isinstance(value, bool):
        raise SymmemError(f"{field_name} = {value!r}: must be a number")
    if isinstance(value, Fraction):
        frac = value
    elif isinstance(value, int):
        if value.bit_length() > 64:
            raise SymmemError(f"{field_name}: an integer of {value.bit_length():,} bits: out of range")
        frac = Fraction(value)
    elif isinstance(value, (str, float)):
        # the text is checked (length, ASCII digits, exponent) before a number is built from it
        frac = decimal_text(str(value), field_name)
    else:
        raise SymmemError(f"{field_name} = {str(value)[:40]!r}: must be a number")
    if abs(frac) > 10**12 or (frac and abs(frac) < Fraction(1, 10**12)):
        raise SymmemError(f"{field_name} = {value!r}: out of range")
    return sympy.Rational(frac.numerator, frac.denominator)


@dataclass(frozen=True)
class Routing:
    """How many tokens the routed experts of one GPU receive: `paper` (E_tok = b·s·N_r/N of the GPU's own tokens),
    `dispatch`, `capacity` (`capacity_factor`), `dynamic` (`rank_load`) or `histogram` (one load per expert)."""

    kind: str = "paper"
    capacity_factor: object = None  # for "capacity"
    rank_load: object = None  # for "dynamic": busiest rank's token-slots over the balanced share (>= 1)
    histogram: tuple = field(default=())  # for "histogram": one non-negative load per routed expert

    def __post_init__(self) -> None:
        if self.kind not in ROUTING_KINDS:
            raise SymmemError(f"routing = {self.kind!r}: unknown routing model; known: {', '.join(ROUTING_KINDS)}")
        if self.kind == "capacity":
            if self.capacity_factor is None or not 0 < _exact(self.capacity_factor, "capacity_factor") <= MAX_FACTOR:
                raise SymmemError(f"capacity_factor = {self.capacity_factor!r}: must be a number > 0 and at most "
                                  f"{MAX_FACTOR:,}")
        elif self.capacity_factor is not None:
            raise SymmemError(f"capacity_factor = {self.capacity_factor!r}: applies to routing 'capacity' only, "
                              f"not {self.kind!r}")
        if self.kind == "dynamic":
            if self.rank_load is None or not 1 <= _exact(self.rank_load, "rank_load") <= MAX_FACTOR:
                raise SymmemError(f"rank_load = {self.rank_load!r}: must be a number from 1 (balanced) to "
                                  f"{MAX_FACTOR:,}")
        elif self.rank_load is not None:
            raise SymmemError(f"rank_load = {self.rank_load!r}: applies to routing 'dynamic' only, not {self.kind!r}")
        if self.kind != "histogram" and self.histogram:
            raise SymmemError(f"histogram: applies to routing 'histogram' only, not {self.kind!r}")
        if self.kind == "histogram":
            if not self.histogram:
                raise SymmemError("histogram = []: give one load per routed expert")
            loads = [_exact(x, "histogram entry") for x in self.histogram]
            if any(x < 0 for x in loads):
                raise SymmemError(f"histogram = {list(self.histogram)[:8]}...: loads must be non-negative")
            if sum(loads) == 0:
                raise SymmemError("histogram: all loads are zero")

    def check_model(self, model, ep: int) -> None:
        """The routing model against a model's routed experts (a model without them routes nothing)."""
        experts = model.family.routed_experts
        if experts is None:
            if self.kind != "paper":
                raise SymmemError(f"routing = {self.kind!r}: {model.name} has no routed experts")
            if ep != 1:
                raise SymmemError(f"ep = {ep}: {model.name} has no routed experts to split; expert parallelism "
                                  "needs an MoE model")
            return
        n_experts = model.value(experts[0])
        if self.kind == "histogram" and len(self.histogram) != n_experts:
            raise SymmemError(
                f"histogram: {len(self.histogram)} loads: must have one per routed expert, N = {n_experts}")

    def busiest_rank_share(self, ep: int) -> sympy.Rational:
        """The busiest EP rank's share of all token-slots (histogram); experts placed contiguously."""
        loads = [_exact(x, "histogram entry") for x in self.histogram]
        per = len(loads) // ep
        shares = [sum(loads[r * per:(r + 1) * per]) for r in range(ep)]
        return max(shares) / sum(loads)

    def tokens_per_expert(self, axes: AxisSizes, fraction: sympy.Expr, ep_number: int | None = None) -> sympy.Expr:
        """E_tok: the tokens one local expert is charged for; `fraction` is the share of experts a token goes to
        (N_r/N, from the model's family)."""
        s_moe = s / (axes.of("cp") * axes.of("sp_moe"))  # tokens per rank entering the MoE block
        own = b * s_moe * fraction  # the paper's: an expert's share of its own GPU's tokens
        if self.kind == "paper":
            return own
        dispatched = axes.of("ep") * own  # an expert receives from every EP rank
        if self.kind == "dispatch":
            return dispatched
        if self.kind == "capacity":
            return _exact(self.capacity_factor, "capacity_factor") * dispatched
        if self.kind == "dynamic":
            return _exact(self.rank_load, "rank_load") * dispatched
        if ep_number is None:
            raise SymmemError("routing = 'histogram': needs the numeric EP size")
        # The busiest rank processes share × (EP · b s_moe N_r) token-slots over its N/EP experts, i.e.
        # share × EP times the balanced per-expert load (share = 1/EP when balanced).
        return self.busiest_rank_share(ep_number) * axes.of("ep") * dispatched

    @property
    def label(self) -> str:
        if self.kind == "paper":
            return "paper (E_tok = b s N_r / N of the GPU's own tokens, balanced)"
        if self.kind == "dispatch":
            return "dispatch (balanced; each expert receives from all EP ranks)"
        if self.kind == "capacity":
            return f"capacity factor {self.capacity_factor} (static per-expert buffers)"
        if self.kind == "dynamic":
            return f"dynamic (busiest rank at {self.rank_load}x the balanced load)"
        return "histogram (busiest EP rank of the given per-expert loads)"
