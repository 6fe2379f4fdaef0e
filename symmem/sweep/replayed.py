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
    a replay is refused or the row is past the `first` replayed), `reserved_stage`, and `reserved_why` (why
    `reserved` is None, else None); unchanged when the profile says no allocation order or `first` is 0."""
    from symmem.accounting.reserved import replay_refusal, stage_reserved

    if not space.base.profile.allocation_order or not first:
        return records
    out = []
    for i, r in enumerate(records):
        if i >= first:
            out.append({**r, "reserved": None, "reserved_stage": None,
                        "reserved_why": f"past the first {first} listed (--replay N replays more)"})
            continue
        scn = scenario_of(space, r)
        refused = [why for why in (replay_refusal(scn, st) for st in scn.stages) if why is not None]
        if refused:
            out.append({**r, "reserved": None, "reserved_stage": None, "reserved_why": refused[0]})
            continue
        top = max((stage_reserved(scn, st), st.index) for st in scn.stages)
        out.append({**r, "reserved": top[0], "reserved_stage": top[1], "reserved_why": None})
    return out
