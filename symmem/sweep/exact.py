"""The sweep under a precision recipe that the compiled path cannot take: FP8/FP4 recipes with quantized weight
copies, whose scale tensors are ceilings of each GEMM's local shape (they depend on TP, EP and ETP), and saved
input copies whose scale tensors are ceilings of the local token count. Each configuration is evaluated one by one
as `symmem memory` evaluates it (`space.reference_records`: tens of milliseconds each, so the count is bounded:
`MAX_EXACT`), then counted and ranked as the compiled path ranks (by headroom, ties in sweep order).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from symmem.errors import SymmemError
from symmem.parallel.schedule import WALKED

MAX_EXACT = 5_000  # configurations evaluated one by one
_CHUNK = 64


def needs_exact(scn, schedules=()) -> bool:
    """Whether the scenario's precision recipe has parts the compiled path does not model, or a swept schedule's
    peak is walked in its real order (ZB-H1, DualPipe: `analysis.walked_schedule`), not counted as the compiled
    path counts."""
    lp = scn.precision.low_precision
    walked = any(s.name in WALKED for s in schedules)
    own_states = scn.profile.states is not None  # a framework's own state layout (FSDP2's padded shards)
    return walked or own_states or (lp is not None and bool(lp.weight_copies or lp.amax_history or lp.changes_saved))


def exact_reason(space) -> str:
    """Why `space` is evaluated one by one, for messages."""
    walked = [s.name for s in space.schedule if s.name in WALKED]
    if walked:
        return f"schedule = {walked[0]!r} (its peak is walked in the schedule's real order)"
    if space.base.profile.states is not None:
        return (f"profile = {space.base.profile.name!r} (its framework lays the model states out itself: FSDP2's "
                "padded shards, parameter by parameter)")
    return (f"precision = {space.base.precision.name!r} (quantized weight copies and scale tensors depend on TP, EP "
            "and the local tokens)")


def sweep_exact(space, top: int = 20, marginal: bool = False, progress: Callable[[int], None] | None = None):
    """A `Summary` of `space`, every configuration through `reference_records`."""
    from symmem.sweep.space import Rejection, Summary, reference_records

    if space.size > MAX_EXACT:
        raise SymmemError(f"{exact_reason(space)}: the sweep evaluates its {space.size:,} configurations one by one, "
                          f"at most {MAX_EXACT:,}; narrow the ranges (--tp, --pp, --ep, --zero, -b, -s, --recompute, "
                          "--schedule)")
    t0 = time.perf_counter()
    cap = space.capacity
    out = Summary(space, total=space.size, exact=True)
    records: dict[int, dict] = {}
    reasons: dict[str, int] = {}
    for start in range(0, space.size, _CHUNK):
        ordinals = range(start, min(start + _CHUNK, space.size))
        recs, rej = reference_records(space, ordinals)
        records.update(recs)
        for reason in rej.values():
            reasons[reason] = reasons.get(reason, 0) + 1
        if progress:
            progress(len(ordinals))
    out.valid = len(records)
    fits = [r for r in records.values() if r["high"] <= cap]
    low = [r for r in records.values() if r["low"] <= cap]
    out.fits, out.marginal = len(fits), len(low) - len(fits)
    listed = sorted(low if marginal else fits, key=lambda r: (-r["headroom"], r["ordinal"]))
    out.ranked = listed[:top] if top else listed
    out.rejections = [Rejection("configuration", (), reason, n) for reason, n in reasons.items()]
    out.seconds = time.perf_counter() - t0
    return out
