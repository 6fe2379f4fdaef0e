"""Numbers typed by a user (flags, TOML values, size strings, histogram entries), checked before they are built.

Only ASCII digits are accepted (`int()` alone takes `٢`, `２` and `1_6`); the digit count and any exponent are
checked in the text before a number is made from it, so `1e999999999` or a 5,000-digit value is one line of
error, not a hang. Every bound is stated in the message.
"""

from __future__ import annotations

import re
from fractions import Fraction

from symmem.errors import SymmemError

# Upper bounds of what a user may ask for. Generous: each is far beyond any real run, and small enough that
# every product the engine forms stays an exact integer that prints and converts to a float without overflow.
MAX_PARALLEL = 1 << 20  # any one parallel size (TP, EP, ETP, DP, EDP, CP) and the GPU count of a sweep
# pipeline stages: the engine works stage by stage (each stage's timeline peak), so PP bounds the work; real runs
# use up to 64 stages
MAX_PP = 256
MAX_GPUS = 1 << 24  # DP·TP·PP
MAX_B = 1 << 24  # micro-batch size (as the scenario checks it)
MAX_S = 1 << 31  # sequence length (as the scenario checks it)
MAX_MICROBATCHES = 1 << 20  # M per step
MAX_CHUNKS = 1024  # interleaved 1F1B virtual stages per GPU
MAX_LAYERS = 100_000  # layers on one pipeline stage
MAX_STAGE_INDEX = MAX_PARALLEL
MAX_STATE_BYTES = 64  # bytes per parameter of one model state (FP64 Adam moments are 16)
MAX_INT_DIGITS = 18  # no integer a user types needs more (10^18 bytes is an exabyte)

_INT = re.compile(r"[+-]?[0-9]+")
# A decimal with an optional exponent, ASCII only: 80, 80.5, .5, 8e10, 1.5E+3
_DECIMAL = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?)([0-9]+))?")
MAX_DECIMAL_CHARS = 40
MAX_EXPONENT = 30  # |exponent| of a decimal's scientific notation


def int_text(text: object, field: str, low: int, high: int, what: str | None = None) -> int:
    """An integer from a flag's text (ASCII digits, optional sign), within [low, high]; the bounds in the message."""
    want = what or _range_words(low, high)
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        t = str(text).strip()
        if not _INT.fullmatch(t) or not t.isascii():
            raise SymmemError(f"{field} = {text!r}: not an integer in ASCII digits; {want}")
        if len(t.lstrip("+-").lstrip("0")) > MAX_INT_DIGITS:
            raise SymmemError(f"{field} = {_short(t)}: {want}")
        value = int(t)
    if not low <= value <= high:
        raise SymmemError(f"{field} = {_show(value)}: {want}")
    return value


def check_int(value: object, field: str, low: int, high: int) -> int:
    """An integer already parsed (TOML, JSON): true/false is no integer; bounds in the message."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SymmemError(f"{field} = {_short(repr(value))}: {_range_words(low, high)}")
    if not low <= value <= high:
        raise SymmemError(f"{field} = {_show(value)}: {_range_words(low, high)}")
    return value


def decimal_text(text: object, field: str) -> Fraction:
    """An exact number from a decimal text (`1.25`, `8e10`), its size checked in the text before it is built."""
    t = str(text).strip()
    if len(t) > MAX_DECIMAL_CHARS:
        raise SymmemError(f"{field} = {_short(t)}: a number of at most {MAX_DECIMAL_CHARS} characters")
    m = _DECIMAL.fullmatch(t)
    if not m or not t.isascii() or not (m.group(2) or m.group(3)):
        raise SymmemError(f"{field} = {t!r}: not a number (ASCII digits, e.g. 1.25 or 8e10)")
    if m.group(5) is not None and int(m.group(5)) > MAX_EXPONENT:  # at most 40 characters: int() is cheap
        raise SymmemError(f"{field} = {t!r}: out of range: the exponent is limited to {MAX_EXPONENT}")
    return Fraction(t)


def _range_words(low: int, high: int) -> str:
    if low == 1:
        return f"must be a positive integer up to {high:,}"
    return f"must be an integer from {low:,} to {high:,}"


def _short(text: str) -> str:
    """A value quoted for a message, cut when long (a 5,000-digit number is named by its length)."""
    return repr(text) if len(text) <= 40 else f"{text[:12]!r}... ({len(text):,} characters)"


def _show(value: int) -> str:
    """An integer for a message: as it is, or by its digit count when long (str() of a huge int is refused)."""
    if value.bit_length() <= 128:
        return str(value)
    return f"an integer of {int(value.bit_length() * 0.30103) + 1:,} digits"


MAX_DIMENSION = 1 << 31  # any width, rank, head count, expert count or vocabulary
# A family's size symbol -> its upper bound, for every family (`Family.config_keys`): the layer count, whatever
# the family calls it (num_hidden_layers, GPT-2's n_layer), is laid out layer by layer, so it has the layer cap;
# every other size (width, heads, experts, vocabulary, positions) has MAX_DIMENSION.
SYMBOL_BOUNDS = {"L": MAX_LAYERS}


def size_bound(symbol: str) -> int:
    """The upper bound of a family's size symbol (one place for every family: `Family.read_sizes` and
    `_config_checks.check_config`)."""
    return SYMBOL_BOUNDS.get(symbol, MAX_DIMENSION)
