"""A GPU (or any device) measured, as data: what `symmem calibrate` writes and `--gpu FILE` reads (issue 46).

A profile holds what the step-time model reads of a device, each figure measured on it: GEMM throughput at several
shapes, the fused attention's (SDPA) at several sequence lengths, the bandwidth of a large copy, the cost of one
small kernel, the memory capacity, and where every figure comes from; and its kernel table (each GEMM shape's three
passes, each attention forward and backward, symmem.calibrate_kernels), by which `--gpu FILE` times the step with
the measured-kernels model (`register`: a kernel profile and the model's constants, the slowdowns 1, the measured
launch cost, nothing fixed). Read through `--gpu FILE`, it becomes a `GPU` (symmem.hardware) whose BF16 rate is the
best measured GEMM rate and whose HBM bandwidth the measured copy's; for a profile written before the kernel table,
the fitted model's constants are derived from the measurements, none fitted: GEMM efficiency 1 (the rate is
one the device reached), attention efficiency the measured attention rate over that GEMM rate, the launch cost the
measured small kernel's, no fixed term. Collectives are measured only with several devices (`symmem calibrate
--devices N`: the link's bandwidth and its latency per ring step, `symmem.calibrate_collectives`); a profile without
them times no step that communicates, one measured on one machine no step whose groups span machines (each
refused in one line).

The file is data: its numbers are checked (positive, finite, bounded), never evaluated; a bad file is one line.
"""

from __future__ import annotations

import math
import os

from symmem._json import loads
from symmem.errors import SymmemError

FORMAT = "symmem-hardware-profile/1"
DTYPES = ("bf16", "fp16", "fp32")  # what symmem calibrate --dtype times in
# what a measured rate may be (FLOP/s, bytes/s): above a thousand a second, at most 1e20 (a B200's dense BF16 peak is
# 2.25e15): a hand-edited figure outside them would make a step's time overflow or vanish
RATE = (1e3, 1e20)
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


def _latency(raw: dict, where: str) -> float:
    """A link's seconds per ring step (`step_latency_s`): a number from 0 to 1."""
    value = raw.get("step_latency_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise SymmemError(f"{where}: step_latency_s = {str(value)[:40]!r}: must be a number from 0 to 1 (symmem "
                          "calibrate --devices N writes it)")
    return float(value)


def _rows(raw: dict, key: str, path: str, fields: tuple[str, ...]) -> list[dict]:
    rows = raw.get(key)
    if not isinstance(rows, list) or not rows or len(rows) > 1000:
        raise SymmemError(f"--gpu {path}: {key}: must be a list of 1 to 1,000 measurements")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise SymmemError(f"--gpu {path}: {key}[{i}]: must be an object")
        out.append({f: _number(row, f, f"--gpu {path}: {key}[{i}]", *(RATE if f == "flops_per_s" else (0.0, 1e30)))
                    for f in fields})
    return out


def load(path: str) -> dict:
    """The profile at `path`, checked: {name, memory, gemm_rate, attention_rate, copy_bandwidth, launch_s, links,
    kernels, source}. One line for a missing, oversized or malformed file."""
    from symmem._files import read_text_file

    text = read_text_file(path, "--gpu")  # (a regular file of at most 4 MiB, or one line)
    if len(text) > MAX_BYTES:
        raise SymmemError(f"--gpu {path}: {len(text):,} characters, more than a profile's {MAX_BYTES:,}")
    try:  # (strict: a duplicated key, deep nesting, NaN refused in one line, symmem/_json.py)
        raw = loads(text, f"--gpu {path}")
    except SymmemError:
        raise
    except ValueError as e:
        raise SymmemError(f"--gpu {path}: not JSON ({str(e)[:80]}); a profile is what `symmem calibrate -o` "
                          "writes") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise SymmemError(f"--gpu {path}: format must be {FORMAT!r} (a file `symmem calibrate -o` writes)")
    name = raw.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= 60 or not name.isprintable():
        raise SymmemError(f"--gpu {path}: name: must be 1 to 60 printable characters")
    gemm = _rows(raw, "gemm", path, ("m", "k", "n", "seconds", "flops_per_s"))
    for i, r in enumerate(gemm):  # the rate is the shape over the seconds, not a figure of its own
        if not all(float(r[f]).is_integer() for f in ("m", "k", "n")) \
                or not math.isclose(r["flops_per_s"], 2 * r["m"] * r["k"] * r["n"] / r["seconds"], rel_tol=1e-6):
            raise SymmemError(f"--gpu {path}: gemm[{i}]: flops_per_s = {r['flops_per_s']:.6g}: must be 2 m k n / "
                              "seconds of the row's whole m, k, n (symmem calibrate writes it so)")
    attention = _rows(raw, "attention", path, ("s", "flops_per_s"))
    dtype = raw.get("dtype")
    if dtype not in DTYPES:
        raise SymmemError(f"--gpu {path}: dtype = {str(dtype)[:20]!r}: must be one of {', '.join(DTYPES)} (what "
                          "symmem calibrate --dtype measured in)")
    links = raw.get("links")
    if links is not None:
        where = f"--gpu {path}: links"
        if not isinstance(links, dict):
            raise SymmemError(f"{where}: must be an object (or null: no collectives measured)")
        latency = _latency(links, where)
        processes = links.get("processes")
        if isinstance(processes, bool) or not isinstance(processes, int) or not 2 <= processes <= 64:
            raise SymmemError(f"{where}: processes = {str(processes)[:40]!r}: must be a whole number from 2 to 64 "
                              "(symmem calibrate --devices N writes it)")
        links = {"intra_bytes_per_s": _number(links, "intra_bytes_per_s", where, *RATE),
                 # one machine measured: no figure between machines (None)
                 "inter_bytes_per_s": None if links.get("inter_bytes_per_s") is None
                 else _number(links, "inter_bytes_per_s", where, *RATE),
                 "step_latency_s": float(latency), "processes": processes,
                 "by_kind": _by_kind(links.get("by_kind"), where)}
    memory = raw.get("memory_bytes")
    if isinstance(memory, bool) or not isinstance(memory, int) or not 1 << 20 <= memory <= 1 << 60:
        raise SymmemError(f"--gpu {path}: memory_bytes = {str(memory)[:40]!r}: must be a whole number of bytes from "
                          "1 MiB (2^20) to 2^60")
    return {"name": name, "memory": memory, "dtype": dtype,
            # the compute-bound rate: the best any measured GEMM reached
            "gemm_rate": max(r["flops_per_s"] for r in gemm),
            # the fused attention at the longest sequence measured (the flash kernel's steady rate)
            "attention_rate": max(attention, key=lambda r: r["s"])["flops_per_s"],
            "copy_bandwidth": _number(raw, "copy_bytes_per_s", f"--gpu {path}", *RATE),
            # (written with the kernel table; absent from earlier files)
            "elementwise_bandwidth": None if raw.get("elementwise_bytes_per_s") is None
            else _number(raw, "elementwise_bytes_per_s", f"--gpu {path}", *RATE),
            "launch_s": _number(raw, "launch_s", f"--gpu {path}", 0, 1.0),
            "links": links, "kernels": _kernels(raw, path), "source": str(raw.get("source", ""))[:300]}


def _by_kind(table, where: str) -> dict | None:
    """The links' per-kind fits (calibrate_collectives.by_kind), checked; None for a profile written before them
    (each kind then runs at the one link)."""
    from symmem.calibrate_collectives import OWN_FIT

    if table is None:
        return None
    if not isinstance(table, dict) or not set(table) <= set(OWN_FIT):
        raise SymmemError(f"{where}.by_kind: must be an object of {', '.join(OWN_FIT)} (symmem calibrate --devices N "
                          "writes it)")
    out = {}
    for kind, fit in table.items():
        if not isinstance(fit, dict):
            raise SymmemError(f"{where}.by_kind.{kind}: must be an object of bytes_per_s and step_latency_s")
        out[kind] = {"bytes_per_s": _number(fit, "bytes_per_s", f"{where}.by_kind.{kind}", *RATE),
                     "step_latency_s": _latency(fit, f"{where}.by_kind.{kind}")}
    return out


def _kernels(raw: dict, path: str) -> dict | None:
    """The profile's kernel table (symmem.calibrate_kernels), checked: every GEMM row [layout, m, k, n, seconds]
    with each layout present, every attention row [b, s, heads, kv heads, qk dim, v dim, forward seconds,
    backward seconds], and where there is one every grouped GEMM row [stage, experts, tokens per expert, n, k,
    seconds] with each stage present; None for a profile written before the table was (the fitted model's
    constants then)."""
    from symmem.calibrate_kernels import LAYOUTS, STAGES, attention_rates, gemm_rate, grouped_rate

    table = raw.get("kernels")
    if table is None:
        return None
    where = f"--gpu {path}: kernels"
    if not isinstance(table, dict):
        raise SymmemError(f"{where}: must be an object (symmem calibrate writes it)")

    def rows(key: str, width: int, sizes: range) -> list[list]:
        items = table.get(key)
        if not isinstance(items, list) or not items or len(items) > 1000:
            raise SymmemError(f"{where}.{key}: must be a list of 1 to 1,000 measurements")
        out = []
        for i, row in enumerate(items):
            if not isinstance(row, list) or len(row) != width:
                raise SymmemError(f"{where}.{key}[{i}]: must be a list of {width} entries")
            for j in sizes:  # the shape: whole numbers from 1 to 2^20
                if isinstance(row[j], bool) or not isinstance(row[j], int) or not 1 <= row[j] <= 1 << 20:
                    raise SymmemError(f"{where}.{key}[{i}][{j}] = {str(row[j])[:40]!r}: must be a whole number "
                                      "from 1 to 1,048,576")
            for j in range(sizes.stop, width):  # the seconds measured: above 0, at most an hour
                t = row[j]
                if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) \
                        or not 0 < t <= 3600:
                    raise SymmemError(f"{where}.{key}[{i}][{j}] = {str(t)[:40]!r}: must be seconds above 0 and "
                                      "at most 3,600")
            out.append(list(row))
        return out

    gemm = rows("gemm", 5, range(1, 4))
    for i, row in enumerate(gemm):
        if row[0] not in LAYOUTS:
            raise SymmemError(f"{where}.gemm[{i}][0] = {str(row[0])[:20]!r}: must be one of {', '.join(LAYOUTS)}")
        _rate(gemm_rate(row), f"{where}.gemm[{i}]")
    missing = [lay for lay in LAYOUTS if not any(r[0] == lay for r in gemm)]
    if missing:
        raise SymmemError(f"{where}.gemm: no {', '.join(missing)} pass measured (each GEMM shape is timed in all "
                          "three)")
    attention = rows("attention", 8, range(0, 6))
    for i, row in enumerate(attention):  # the B200 table's FLOP convention
        if row[2] % row[3]:  # (grouped-query attention: each KV head serves a whole group of query heads)
            raise SymmemError(f"{where}.attention[{i}]: {row[3]} KV heads of {row[2]} heads: the KV heads must "
                              "divide the heads")
        forward, backward = attention_rates(row)
        _rate(forward, f"{where}.attention[{i}] forward")
        _rate(backward, f"{where}.attention[{i}] backward")
    out = {"gemm": gemm, "attention": attention}
    if isinstance(table.get("shapes_from"), str):  # (what calibrate --model measured for: said in a note)
        out["shapes_from"] = table["shapes_from"][:200]
    if table.get("grouped_gemm") is not None:  # (written for a model with routed experts: calibrate --model)
        grouped = rows("grouped_gemm", 6, range(1, 5))
        for i, row in enumerate(grouped):
            if row[0] not in STAGES:
                raise SymmemError(f"{where}.grouped_gemm[{i}][0] = {str(row[0])[:20]!r}: must be one of "
                                  f"{', '.join(STAGES)}")
            _rate(grouped_rate(row), f"{where}.grouped_gemm[{i}]")
        missing = [st for st in STAGES if not any(r[0] == st for r in grouped)]
        if missing:
            raise SymmemError(f"{where}.grouped_gemm: no {', '.join(missing)} pass measured (each grouped GEMM "
                              "shape is timed in all three)")
        out["grouped_gemm"] = grouped
    return out


def _rate(flops_per_s: float, where: str) -> None:
    if not RATE[0] < flops_per_s <= RATE[1]:
        raise SymmemError(f"{where}: {flops_per_s:.3g} FLOP/s from its shape and seconds: must be above "
                          f"{RATE[0]:g} and at most {RATE[1]:g}")


# a registered profile's key -> the dtype its kernels were timed in (`register`), for `dtype_note`
TIMED_IN: dict[str, str] = {}


def dtype_note(gpu_key: object) -> str | None:
    """A note when a registered profile was timed in another dtype than BF16, the step's compute (the step's kernels
    are then timed at those rates, which `symmem calibrate --dtype bf16` would measure as they run); else None."""
    dtype = TIMED_IN.get(gpu_key)  # type: ignore[arg-type]
    if dtype is None or dtype == "bf16":
        return None
    return (f"note: {gpu_key} was calibrated in {dtype} (symmem calibrate --dtype {dtype}); this step's BF16 "
            "kernels are timed at those rates: symmem calibrate --dtype bf16 measures them as they run")


def measured(gpu_key: object) -> bool:
    """Whether a GPU key is a measured profile's (`--gpu FILE`) rather than a named GPU's."""
    from symmem.steptime.model import DEVICE_CONSTANTS

    return gpu_key in DEVICE_CONSTANTS


def register(path: str) -> str:
    """Load the profile at `path` and make it a GPU of this process (symmem.hardware's speeds, symmem.units'
    capacity, the step-time constants derived from it); its key, which `--gpu` then stands for."""
    from symmem import hardware, units
    from symmem.steptime import kernels, measured, model

    p = load(path)
    key = f"{p['name']} ({os.path.basename(path.strip())})".upper()
    links = p["links"]
    # (a key registered before, from another file of the same name, is replaced whole: its kernel table too)
    kernels.REGISTERED.pop(key, None)
    measured.KERNEL_CONSTANTS.pop(key, None)
    table = None
    if p["kernels"] is not None:
        from symmem.calibrate_kernels import kernel_profile

        table = kernel_profile(key, p["kernels"], p["copy_bandwidth"], links, p["elementwise_bandwidth"])
    # no collectives measured: links of infinite speed, by which steptime.step_time refuses a step that communicates
    # (and no link between machines measured: a network of infinite speed, by which a step spanning them is refused)
    # the BF16 rate (MFU's denominator): the kernel table's peak where it has one (every pass's best), else the best
    # summary GEMM rate
    hardware.GPUS[key] = hardware.GPU(
        key, p["memory"], table.peak if table is not None else p["gemm_rate"], None, p["copy_bandwidth"],
        links["intra_bytes_per_s"] if links else math.inf,
        network=(links["inter_bytes_per_s"] or math.inf) if links else math.inf,
        step_latency=links["step_latency_s"] if links else None,
        measured_group=links["processes"] if links else None)
    units.GPUS[key.lower()] = p["memory"]
    TIMED_IN[key] = p["dtype"]
    # the attention's rate relative to the measured GEMM rate, as measured: above 1 when this machine's attention
    # runs faster per FLOP than its fastest GEMM shape (a "peak" that is itself a measurement, not a datasheet's)
    # (both over the rate the GPU is given: with a kernel table its peak, every pass's best, which the summary's
    # best forward GEMM may be below)
    rate = table.peak if table is not None else p["gemm_rate"]
    model.DEVICE_CONSTANTS[key] = model.Constants(
        gemm_efficiency=p["gemm_rate"] / rate, attention_efficiency=p["attention_rate"] / rate,
        link_efficiency=1.0, latency_s=p["launch_s"], fixed_s=0.0)
    if table is not None:  # each kernel's own time: the measured-kernels model, nothing fitted
        kernels.REGISTERED[key] = table
        measured.KERNEL_CONSTANTS[key] = measured.KernelConstants(1.0, 1.0, p["launch_s"], 0.0)
    return key
