"""A strict JSON loader for users' files (config.json): every hostile shape is one line of error.

* a duplicated key is an error naming it (the standard library keeps the last one silently);
* nesting deeper than `MAX_DEPTH` is refused by a scan of the text before parsing (the standard parser would
  recurse until RecursionError);
* an integer of more than `MAX_INT_DIGITS` digits is refused as it is parsed (no size in a model config needs
  more; Python refuses more than 4,300 digits with a ValueError of its own);
* NaN and Infinity, which are not JSON, are refused.
"""

from __future__ import annotations

import json

from symmem.errors import SymmemError

MAX_DEPTH = 64
MAX_INT_DIGITS = 30


def depth(text: str) -> int:
    """The deepest bracket nesting of a JSON text, brackets inside strings not counted."""
    deepest = level = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            if level > deepest:
                deepest = level
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            level -= 1
    return deepest


def loads(text: str, field: str = "json") -> object:
    """Parse `text` strictly; `field` names the input in messages (`model = 'x.json'`)."""
    if depth(text) > MAX_DEPTH:
        raise SymmemError(f"{field}: nested deeper than the limit of {MAX_DEPTH} brackets")

    def pairs(items: list[tuple[str, object]]) -> dict:
        out: dict = {}
        for key, value in items:
            if key in out:
                raise SymmemError(f"{field}: duplicate key {key[:60]!r}: each key may appear once in an object")
            out[key] = value
        return out

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise SymmemError(f"{field}: an integer of {len(digits.lstrip('-')):,} digits: the limit is "
                              f"{MAX_INT_DIGITS} digits")
        return int(digits)

    def constant(name: str) -> object:
        raise SymmemError(f"{field}: {name} is not JSON")

    def number(text_: str) -> float:
        if len(text_) > 100:
            raise SymmemError(f"{field}: a number of {len(text_):,} characters: the limit is 100")
        value = float(text_)
        if value in (float("inf"), float("-inf")):
            raise SymmemError(f"{field}: {text_[:40]} is out of range for a number")
        return value

    try:
        return json.loads(text, object_pairs_hook=pairs, parse_int=integer, parse_float=number,
                          parse_constant=constant)
    except json.JSONDecodeError as e:
        raise SymmemError(f"{field}: not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:  # unreachable after the depth scan; a safety net
        raise SymmemError(f"{field}: nested too deeply") from None
