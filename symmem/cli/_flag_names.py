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
    "precision": (("precision", "--precision"),), "cp_comm_type": (("cp_comm_type", "--cp-comm-type"),),
    "recompute": (("recompute", "--recompute"),), "zero": (("zero", "--zero"),), "stage": (("stage", "--stage"),),
}
_PREFIX = re.compile(r"(^|: )([a-z_·]+)(?: = ([^:()]*?))?:")  # (a value with parentheses is not one flag's)


def typed(args: argparse.Namespace, dest: str, flag: str) -> str:
    """`--flag value` as given, or the switch (`--flag` / `--no-flag`)."""
    value = getattr(args, dest)
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def _as_flag(flag: str, value: str) -> str:
    """`flag` with the message's value as a command line spells it: 'sdpa' -> sdpa, [20, 12] -> 20,12, True ->
    the switch (the message's value, not the typed one: a sweep's --cp 1,3 is refused for its 3)."""
    value = value.strip()
    if value in ("True", "False"):
        return flag if value == "True" else "--no-" + flag[2:]
    if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    elif value.startswith("[") and value.endswith("]"):
        value = value[1:-1].replace(" ", "")
    return f"{flag} {value}"


def in_flags(message: str, args: argparse.Namespace | None) -> str:
    """`message` with its first `field = value:` naming the flags the user gave for that field, if any."""
    if args is None:
        return message
    m = _PREFIX.search(message)
    if m is None or m.group(2) not in FIELDS:
        return message
    field, value, pairs = m.group(2), m.group(3), FIELDS[m.group(2)]
    given = [(dest, flag) for dest, flag in pairs if getattr(args, dest, None) is not None]
    if not given:
        return message
    if len(pairs) == 1:
        said = _as_flag(pairs[0][1], value) if value is not None else typed(args, *pairs[0])
    else:  # the flags typed, and the value they led to
        said = " ".join(typed(args, dest, flag) for dest, flag in given)
        if value is not None:
            said += f" ({field.upper() if field == 'ep·etp' else field.replace('_', ' ')} {value.strip()})"
    return message[:m.start(2)] + said + ":" + message[m.end():]  # (a bare `field:` is named as well)
