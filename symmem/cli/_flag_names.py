"""A refusal in the words the user typed (issue 45, item 4): the engine's checks name a scenario field and its
value (`layers_per_stage = [20, 12]: ...`), which is right for a TOML scenario and wrong for a command line; where
the field came from a flag the user gave, the message names the flag and the value as typed instead
(`--layers-per-stage 20,12: ...`)."""

from __future__ import annotations

import argparse
import re

# scenario field (as the checks spell it) -> the flags that set it, as (argparse dest, flag)
FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "tp": (("tp", "--tp"),), "pp": (("pp", "--pp"),), "dp": (("dp", "--dp"),), "cp": (("cp", "--cp"),),
    "ep": (("ep", "--ep"),), "etp": (("etp", "--etp"),), "edp": (("edp", "--edp"),),
    "ep·etp": (("ep", "--ep"), ("etp", "--etp")),
    "hsdp_replicate": (("hsdp_replicate", "--hsdp-replicate"),),
    "sequence_parallel": (("sequence_parallel", "--sequence-parallel"),),
    "moe_sequence_parallel": (("moe_sequence_parallel", "--moe-sequence-parallel"),),
    "layers_per_stage": (("layers_per_stage", "--layers-per-stage"),),
    "convention": (("convention", "--convention"),),
    "dataflow": (("dataflow", "--dataflow"),), "attn_impl": (("attn_impl", "--attn-impl"),),
    "experts_impl": (("experts_impl", "--experts-impl"),),
    "chunks": (("chunks", "--chunks"), ("schedule", "--schedule")),
    "routing": (("routing", "--routing"), ("capacity_factor", "--capacity-factor"), ("rank_load", "--rank-load"),
                ("histogram", "--histogram")),
    "microbatches": (("microbatches", "--microbatches"), ("global_batch", "--global-batch-size")),
    "histogram": (("histogram", "--histogram"),),
}
_PREFIX = re.compile(r"(^|: )([a-z_·]+)(?: = ([^:]*?))?:")


def _typed(args: argparse.Namespace, dest: str, flag: str) -> str:
    value = getattr(args, dest)
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def in_flags(message: str, args: argparse.Namespace | None) -> str:
    """`message` with its first `field = value:` naming the flags the user gave for that field, if any."""
    if args is None:
        return message
    m = _PREFIX.search(message)
    if m is None or m.group(2) not in FIELDS:
        return message
    given = [_typed(args, dest, flag) for dest, flag in FIELDS[m.group(2)] if getattr(args, dest, None) is not None]
    if not given:
        return message
    said = " ".join(given)
    if len(FIELDS[m.group(2)]) > 1 and m.group(3) is not None:  # the value the flags led to
        field = m.group(2).upper() if m.group(2) == "ep·etp" else m.group(2).replace("_", " ")
        said += f" ({field} {m.group(3)})"
    return message[:m.start(2)] + said + ":" + message[m.end():]  # (a bare `field:` is named as well)
