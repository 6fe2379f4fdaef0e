"""The derived reserved memory of the configurations a sweep lists (profiles that say their framework's allocation
order, `megatron-te`): each listed configuration rebuilt as `symmem memory` builds it (`timing.scenario_of`) and
its stages' allocations replayed through the caching allocator (`symmem.accounting.reserved.stage_reserved`), the
largest over its stages. Only the listed rows (`symmem sweep --replay N`; by default every listed one, up to
`symmem.cli.sweep.REPLAY_DEFAULT_MAX`): a replay costs hundredths of a second, the compiled sweep microseconds.
"""

from __future__ import annotations

from symmem._twocores import map_on_two_cores
from symmem.sweep.timing import scenario_of


def with_reserved(space, records: list[dict], first: int) -> list[dict]:
    """`records` with `reserved` (bytes, the largest derived reserved over the configuration's stages; None where
    a replay is refused or the row is past the `first` replayed), `reserved_stage`, and `reserved_why` (why
    `reserved` is None, else None); unchanged when the profile says no allocation order or `first` is 0."""
    if not space.base.profile.allocation_order or not first:
        return records
    todo = list(range(min(first, len(records))))
    found = dict(zip(todo, map_on_two_cores(lambda i: _row(space, records[i]), todo), strict=True))
    out = []
    for i, r in enumerate(records):
        if i >= first:
            out.append({**r, "reserved": None, "reserved_stage": None,
                        "reserved_why": f"past the first {first} listed (--replay N replays more)"})
            continue
        reserved, stage, why = found[i]
        out.append({**r, "reserved": reserved, "reserved_stage": stage, "reserved_why": why})
    return out


def _row(space, r: dict) -> tuple:
    """(reserved bytes, the stage they peak at, None) of one listed configuration, or (None, None, why not)."""
    from symmem.accounting.reserved import replay_refusal, stage_reserved

    scn = scenario_of(space, r)
    refused = [why for why in (replay_refusal(scn, st) for st in scn.stages) if why is not None]
    if refused:
        return None, None, refused[0]
    top = max((stage_reserved(scn, st), st.index) for st in scn.stages)
    return top[0], top[1], None
