"""A GPU (or any device) measured, as data: what `symmem calibrate` writes and `--gpu FILE` reads (issue 46).

A profile holds what the step-time model reads of a device, each figure measured on it: GEMM throughput at several
shapes, the fused attention's (SDPA) at several sequence lengths, the bandwidth of a large copy, the cost of one
small kernel, the memory capacity, and where every figure comes from. Read through `--gpu FILE`, it becomes a `GPU`
(symmem.hardware) whose BF16 rate is the best measured GEMM rate and whose HBM bandwidth the measured copy's, and
the step-time model's constants are derived from the measurements, none fitted: GEMM efficiency 1 (the rate is
one the device reached), attention efficiency the measured attention rate over that GEMM rate, the launch cost the
measured small kernel's, no fixed term. Collectives are measured only with several devices (`symmem calibrate
--devices N`: the link's bandwidth and its latency per ring step, `symmem.calibrate_collectives`); a profile without
them times no step that communicates, one measured on one machine no step whose groups span machines (each
refused in one line).

The file is data: its numbers are checked (positive, finite, bounded), never evaluated; a bad file is one line.
"""

from __future__ import annotations

import json
import math
import os

from symmem.errors import SymmemError

FORMAT = "symmem-hardware-profile/1"
MAX_BYTES = 1 << 20  # a profile is a few kilobytes; a larger file is not one


def is_profile_path(text: object) -> bool:
    """Whether `--gpu` names a profile file rather than a GPU: a path ending in .json."""
    return isinstance(text, str) and text.strip().lower().endswith(".json")


def _number(raw: dict, key: str, where: str, low: float = 0.0, high: float = 1e30) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low < value <= high:
        raise SymmemError(f"{where}: {key} = {str(value)[:40]!r}: must be a number above {low:g} and at most "
                          f"{high:g}")
    return float(value)


def _rows(raw: dict, key: str, path: str, fields: tuple[str, ...]) -> list[dict]:
    rows = raw.get(key)
    if not isinstance(rows, list) or not rows or len(rows) > 1000:
        raise SymmemError(f"--gpu {path}: {key}: must be a list of 1 to 1,000 measurements")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise SymmemError(f"--gpu {path}: {key}[{i}]: must be an object")
        out.append({f: _number(row, f, f"--gpu {path}: {key}[{i}]") for f in fields})
    return out


def load(path: str) -> dict:
    """The profile at `path`, checked: {name, memory, gemm_rate, attention_rate, copy_bandwidth, launch_s, links,
    source}. One line for a missing, oversized or malformed file."""
    from symmem._files import read_text_file

    text = read_text_file(path, "--gpu")  # (a regular file of at most 4 MiB, or one line)
    if len(text) > MAX_BYTES:
        raise SymmemError(f"--gpu {path}: {len(text):,} characters, more than a profile's {MAX_BYTES:,}")
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise SymmemError(f"--gpu {path}: not JSON ({str(e)[:80]}); a profile is what `symmem calibrate -o` "
                          "writes") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise SymmemError(f"--gpu {path}: format must be {FORMAT!r} (a file `symmem calibrate -o` writes)")
    name = raw.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= 60 or not name.isprintable():
        raise SymmemError(f"--gpu {path}: name: must be 1 to 60 printable characters")
    gemm = _rows(raw, "gemm", path, ("m", "k", "n", "seconds", "flops_per_s"))
    attention = _rows(raw, "attention", path, ("s", "flops_per_s"))
    links = raw.get("links")
    if links is not None:
        where = f"--gpu {path}: links"
        if not isinstance(links, dict):
            raise SymmemError(f"{where}: must be an object (or null: no collectives measured)")
        latency = links.get("step_latency_s")
        if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency <= 1:
            raise SymmemError(f"{where}: step_latency_s = {str(latency)[:40]!r}: must be a number from 0 to 1 "
                              "(symmem calibrate --devices N writes it)")
        processes = links.get("processes")
        if isinstance(processes, bool) or not isinstance(processes, int) or not 2 <= processes <= 64:
            raise SymmemError(f"{where}: processes = {str(processes)[:40]!r}: must be a whole number from 2 to 64 "
                              "(symmem calibrate --devices N writes it)")
        links = {"intra_bytes_per_s": _number(links, "intra_bytes_per_s", where),
                 # one machine measured: no figure between machines (None)
                 "inter_bytes_per_s": None if links.get("inter_bytes_per_s") is None
                 else _number(links, "inter_bytes_per_s", where),
                 "step_latency_s": float(latency), "processes": processes}
    return {"name": name, "memory": int(_number(raw, "memory_bytes", f"--gpu {path}", 0, 1e18)),
            # the compute-bound rate: the best any measured GEMM reached
            "gemm_rate": max(r["flops_per_s"] for r in gemm),
            # the fused attention at the longest sequence measured (the flash kernel's steady rate)
            "attention_rate": max(attention, key=lambda r: r["s"])["flops_per_s"],
            "copy_bandwidth": _number(raw, "copy_bytes_per_s", f"--gpu {path}"),
            "launch_s": _number(raw, "launch_s", f"--gpu {path}", 0, 1.0),
            "links": links, "source": str(raw.get("source", ""))[:300]}


def measured(gpu_key: object) -> bool:
    """Whether a GPU key is a measured profile's (`--gpu FILE`) rather than a named GPU's."""
    from symmem.steptime.model import DEVICE_CONSTANTS

    return gpu_key in DEVICE_CONSTANTS


def register(path: str) -> str:
    """Load the profile at `path` and make it a GPU of this process (symmem.hardware's speeds, symmem.units'
    capacity, the step-time constants derived from it); its key, which `--gpu` then stands for."""
    from symmem import hardware, units
    from symmem.steptime import model

    p = load(path)
    key = f"{p['name']} ({os.path.basename(path.strip())})".upper()
    links = p["links"]
    # no collectives measured: links of infinite speed, by which steptime.step_time refuses a step that communicates
    # (and no link between machines measured: a network of infinite speed, by which a step spanning them is refused)
    hardware.GPUS[key] = hardware.GPU(
        key, p["memory"], p["gemm_rate"], None, p["copy_bandwidth"],
        links["intra_bytes_per_s"] if links else math.inf,
        network=(links["inter_bytes_per_s"] or math.inf) if links else math.inf,
        step_latency=links["step_latency_s"] if links else None,
        measured_group=links["processes"] if links else None)
    units.GPUS[key.lower()] = p["memory"]
    # the attention's rate relative to the measured GEMM rate, as measured: above 1 when this machine's attention
    # runs faster per FLOP than its fastest GEMM shape (a "peak" that is itself a measurement, not a datasheet's)
    model.DEVICE_CONSTANTS[key] = model.Constants(
        gemm_efficiency=1.0, attention_efficiency=p["attention_rate"] / p["gemm_rate"],
        link_efficiency=1.0, latency_s=p["launch_s"], fixed_s=0.0)
    return key
