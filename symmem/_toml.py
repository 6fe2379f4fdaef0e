"""A scenario TOML read strictly: parse errors, hostile nesting and out-of-range numbers are one line each.

`tomllib` raises ValueError (not TOMLDecodeError) for an integer of more than 4,300 digits and RecursionError for
a deeply nested array; both become a `SymmemError` here. After parsing, every integer must fit TOML's 64 bits
(the TOML spec), and the sizes a scenario sets are checked against the bounds of `symmem._numbers` before any
object is built from them (a PP of 10^30 would otherwise be laid out stage by stage).
"""

from __future__ import annotations

import tomllib

from symmem import _numbers as num
from symmem.errors import SymmemError

MAX_LIST = num.MAX_PARALLEL  # entries of any one array

# (table, key) -> (low, high); the type itself is checked by the scenario loader, which names the table.
BOUNDS: dict[tuple[str, str], tuple[int, int]] = {
    **{("parallel", k): (1, num.MAX_PARALLEL) for k in ("dp", "tp", "ep", "etp", "edp", "cp")},
    ("parallel", "pp"): (1, num.MAX_PP),
    ("parallel", "world"): (1, num.MAX_GPUS),
    ("layout", "first"): (0, num.MAX_LAYERS),
    ("layout", "last"): (0, num.MAX_LAYERS),
    **{("precision", k): (0, num.MAX_STATE_BYTES)
       for k in ("weight_bytes", "grad_bytes", "master_bytes", "optimizer_bytes")},
    ("training", "micro_batch_size"): (1, num.MAX_B),
    ("training", "seq_length"): (1, num.MAX_S),
    ("training", "chunks"): (1, num.MAX_CHUNKS),
    ("training", "microbatches"): (1, num.MAX_MICROBATCHES),
    ("training", "global_batch_size"): (1, num.MAX_B * num.MAX_MICROBATCHES),
}


def loads(text: str, source: str) -> dict:
    """Parse and bound-check a scenario's TOML text; `source` names it in messages."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SymmemError(f"scenario = {source!r}: not TOML: {e}") from None
    except RecursionError:
        raise SymmemError(f"scenario = {source!r}: not TOML we read: nested too deeply") from None
    except ValueError as e:  # Python's limit on the digits of an integer
        raise SymmemError(f"scenario = {source!r}: not TOML we read: {e}") from None
    _check_tree(raw, source)
    for (table, key), (low, high) in BOUNDS.items():
        section = raw.get(table)
        value = section.get(key) if isinstance(section, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            num.check_int(value, f"{source} [{table}] {key}", low, high)
    layout = raw.get("layout")
    counts = layout.get("layers_per_stage") if isinstance(layout, dict) else None
    if isinstance(counts, list):
        if len(counts) > num.MAX_PP:
            raise SymmemError(f"{source} [layout] layers_per_stage: {len(counts):,} stages, more than the limit of "
                              f"{num.MAX_PP:,} pipeline stages")
        for c in counts:
            if isinstance(c, int) and not isinstance(c, bool):
                num.check_int(c, f"{source} [layout] layers_per_stage entry", 0, num.MAX_LAYERS)
    gpu = raw.get("gpu")
    for key in ("fragmentation", "comm_buffers"):
        value = gpu.get(key) if isinstance(gpu, dict) else None
        if isinstance(value, list) and len(value) != 2:
            raise SymmemError(f"{source} [gpu] {key}: {len(value):,} entries; give two, [low, high]")
    return raw


def _check_tree(raw: dict, source: str) -> None:
    """Every integer within TOML's 64 bits, every array at most MAX_LIST long (iteratively: no recursion)."""
    stack: list[tuple[str, object]] = [("", raw)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            if len(value) > MAX_LIST:
                raise SymmemError(f"{source} {where}: an array of {len(value):,} entries, more than the limit of "
                                  f"{MAX_LIST:,}")
            stack.extend((where, v) for v in value)
        elif isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
            raise SymmemError(f"{source} {where}: an integer of {len(str(abs(value))):,} digits: TOML integers "
                              "are 64-bit")
