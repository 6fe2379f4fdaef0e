"""The derived reserved memory of the configurations a sweep lists (profiles that say their framework's allocation
order, `megatron-te`): each listed configuration rebuilt as `symmem memory` builds it (`timing.scenario_of`) and
its stages' allocations replayed through the caching allocator (`symmem.accounting.reserved.stage_reserved`), the
largest over its stages. Only the listed rows: a replay costs tenths of a second, the compiled sweep microseconds.
"""

from __future__ import annotations

from symmem.sweep.timing import scenario_of

REPLAYED = 5  # listed configurations replayed by default (`symmem sweep --replay N`)


def with_reserved(space, records: list[dict], first: int = REPLAYED) -> list[dict]:
    """`records` with `reserved` (bytes, the largest derived reserved over the configuration's stages; None where
    a replay is refused or the row is past the `first` replayed) and `reserved_stage`; unchanged when the profile
    says no allocation order or `first` is 0."""
    from symmem.accounting.reserved import stage_reserved

    if not space.base.profile.allocation_order or not first:
        return records
    out = []
    for i, r in enumerate(records):
        if i >= first:
            out.append({**r, "reserved": None, "reserved_stage": None})
            continue
        scn = scenario_of(space, r)
        by_stage = [(stage_reserved(scn, st), st.index) for st in scn.stages]
        known = [x for x in by_stage if x[0] is not None]
        top = max(known) if known and len(known) == len(by_stage) else (None, None)
        out.append({**r, "reserved": top[0], "reserved_stage": top[1]})
    return out
