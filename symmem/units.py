"""Byte sizes: parsing `80GB`, `80GiB`, `80e9`, and printing GiB (2^30) and GB (10^9), always named."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from symmem._numbers import decimal_text
from symmem.errors import SymmemError

GIB = 2**30
GB = 10**9
MAX_BYTES = 10**18  # no device holds an exabyte: a larger size is a typo

_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
# GPU capacities by name (HBM as sold, GB = 10^9 bytes).
GPUS = {"h800": 80 * GB, "h100": 80 * GB, "a100": 80 * GB, "h20": 96 * GB, "h200": 141 * GB, "b200": 192 * GB,
        "mi300x": 192 * GB}

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def gpu_capacity(name: str, field: str = "gpu") -> int:
    """The memory capacity of a GPU by name (`GPUS`, bytes as sold)."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in GPUS:
        raise SymmemError(f"{field} = {str(name)[:40]!r}: unknown GPU; known: {', '.join(g.upper() for g in GPUS)}")
    return GPUS[key]


def parse_size(text: object, field: str = "size") -> int:
    """`80GB` = 80·10^9 bytes, `80GiB` = 80·2^30, `80e9` and `80000000000` are bytes; `H800`, `H200`... name a GPU."""
    if isinstance(text, str) and text.strip().lower() in GPUS:
        return GPUS[text.strip().lower()]
    if isinstance(text, int) and not isinstance(text, bool):
        if not 0 < text <= MAX_BYTES:
            raise SymmemError(f"{field} = {text!r}: must be a positive number of bytes up to 10^18")
        return text
    if isinstance(text, str) and len(text) > 40:
        raise SymmemError(f"{field} = {text[:20]!r}... ({len(text):,} characters): not a size; a size is at most "
                          "40 characters, e.g. 80GB")
    m = _SIZE.match(str(text)) if isinstance(text, (str, float)) else None
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise SymmemError(
            f"{field} = {text!r}: not a size; write e.g. 80GB (10^9 bytes), 80GiB (2^30 bytes), 80e9, "
            f"or a GPU name ({', '.join(g.upper() for g in GPUS)})")
    # the exponent is checked in the text before the number is built: 1e999999999 is refused, not computed
    try:
        value = decimal_text(m.group(1), field) * _UNITS[unit]
    except SymmemError:
        raise SymmemError(f"{field} = {text!r}: must be a positive size up to 10^18 bytes") from None
    if not 0 < value <= MAX_BYTES:
        raise SymmemError(f"{field} = {text!r}: must be a positive size up to 10^18 bytes")
    if value < 1:
        raise SymmemError(f"{field} = {text!r}: is {float(value):g} bytes; a size is at least 1 byte (write 80GB, "
                          "not 0.08)")
    return int(value)


FIXED_LIMIT = 10**15  # from this many units on, a size prints in scientific notation (no GPU holds a petabyte)


def fmt_units(nbytes: int | float, unit: int, digits: int = 2) -> str:
    """`nbytes / unit` with `digits` decimals; from 10^15 units on (an integer no float can hold included) in
    scientific notation from the exact integer, never `inf` or `nan`."""
    if isinstance(nbytes, float) and not math.isfinite(nbytes):
        raise ValueError(f"{nbytes!r} bytes: not a size")  # the engine's byte counts are integers
    try:
        ratio = nbytes / unit
    except OverflowError:
        ratio = math.inf
    if abs(ratio) < FIXED_LIMIT:
        return f"{ratio:.{digits}f}"
    return _scientific(Fraction(nbytes) / unit, digits)


def _scientific(x: Fraction, digits: int) -> str:
    """x as `d.dd...e+N` from its exact value (rounded half to even at the last digit)."""
    sign, x = ("-" if x < 0 else ""), abs(x)
    exp = len(str(x.numerator // x.denominator)) - 1
    mantissa = round(x / Fraction(10) ** exp * 10**digits)
    if mantissa >= 10 ** (digits + 1):  # 9.999... rounded up to 10.00
        exp, mantissa = exp + 1, round(x / Fraction(10) ** (exp + 1) * 10**digits)
    text = str(mantissa)
    return f"{sign}{text[0]}.{text[1:]}e+{exp}" if digits else f"{sign}{text}e+{exp}"


def fmt_gib(nbytes: int | float, digits: int = 2) -> str:
    return fmt_units(nbytes, GIB, digits)


def fmt_gb(nbytes: int | float, digits: int = 2) -> str:
    return fmt_units(nbytes, GB, digits)
