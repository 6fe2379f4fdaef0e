"""Lexer for hand-written memory formulas (plain syntax or a paper's LaTeX).

Safety model: the input is only ever *scanned*, one character class at a time. Nothing here (or in the
parser) hands user text to `eval`, `exec`, `sympify` or any other Python/sympy string parser: numbers are
converted with `int()` on validated digit strings, names are looked up in a dictionary. Anything that is
not part of the small formula language (quotes, commas, `=`, `;`, `@`, backticks, `.` outside a decimal,
a leading `_`, unknown LaTeX commands, non-ASCII) is refused here with a one-line `SymmemError`.

The lexer also enforces the size limits (length, nesting, literal size) in the same single pass, so that
hostile inputs are refused before any sympy object is built.

Runs of letters such as `bsd_hn_h` are split into symbol names here (longest match; see `_split_run`),
so the parser only ever sees one token per symbol and treats adjacent tokens as an implicit product.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import sympy

from symmem.errors import SymmemError
from symmem.family import registry
from symmem.symbols import SYMBOLS, print_rank

MAX_CHARS = 10_000  # longer inputs are refused outright: no formula in a paper is this long
MAX_DEPTH = 200  # bracket nesting; keeps the recursive-descent parser far from Python's stack limit
MAX_DIGITS = 40  # digits in one numeric literal
MAX_RUN = 64  # characters in one run of juxtaposed names (`bsd_hn_h` is 8); bounds the split search
MAX_READINGS = 16  # how many ways of splitting a run we examine before calling it ambiguous

_LETTERS = frozenset(string.ascii_letters)
_DIGITS = frozenset(string.digits)
_ALNUM = _LETTERS | _DIGITS

# LaTeX commands we understand, by what they mean. Everything else (\sqrt, \input, \alpha...) is refused.
_SPACING = frozenset({",", ";", "!", " ", ":", "quad", "qquad"})
_TIMES = frozenset({"cdot", "times"})
_FRAC = frozenset({"frac", "dfrac", "tfrac"})
_NAME_WRAPPERS = frozenset({"mathrm", "text", "operatorname"})  # \mathrm{PP}: one atomic name
_SUPPORTED = r"\frac \dfrac \tfrac \cdot \times \left \right \{ \} \mathrm \text \operatorname \, \; \: \! \ \quad"

# opener -> the closer it needs; `\left(` must be closed by `\right)`, not by `)`.
_CLOSER = {
    "(": ")",
    "[": "]",
    "{": "}",
    r"\{": r"\}",
    r"\left(": r"\right)",
    r"\left[": r"\right]",
    r"\left\{": r"\right\}",
}
_LEFT_DELIMS = ("(", "[", "\\{")
_RIGHT_DELIMS = (")", "]", "\\}")

# A spelling a caller may register: `E_tok`, `E_{tok}`, `tok`, or `\mathrm{TOK}`.
_WORD_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_(?:[A-Za-z0-9]+|\{[A-Za-z0-9]+\}))?")
_MACRO_KEY = re.compile(r"\\mathrm\{[A-Za-z0-9]+\}")


@dataclass(frozen=True)
class Token:
    """One lexeme. `kind` is one of: num sym + - * / ^ open close frac end."""

    kind: str
    text: str  # as typed, for error messages (`\cdot`, `**`, `d_{cq}`)
    pos: int  # 0-based offset into the original text
    value: sympy.Expr | None = None  # the number or Symbol for `num` / `sym`


def located(text: str, pos: int, rule: str) -> SymmemError:
    """The one error shape of the checker: what was found, where, and which rule it breaks."""
    # Quote printable tokens as typed (so `\sqrt` is not shown as `\\sqrt`); repr() anything else.
    what = (f"'{text}'" if text.isprintable() else repr(text)) if text else "end of formula"
    return SymmemError(f"formula: {what} at column {pos + 1}: {rule}")


# --------------------------------------------------------------------------------------------- names


@dataclass(frozen=True)
class NameTable:
    """Every accepted spelling of every symbol.

    `words` holds spellings that can appear inside a run of letters (`d_cq`, `d_{cq}`, `N_r`, `N_{r}`);
    `wrapped` holds `\\mathrm{...}` spellings, which are atomic and never split.
    """

    words: dict[str, sympy.Symbol]
    wrapped: dict[str, sympy.Symbol]
    names: tuple[str, ...]  # canonical names, for "known symbols" in error messages

    @property
    def longest(self) -> int:
        return max(map(len, self.words), default=1)

    def known(self) -> str:
        return "known symbols: " + ", ".join(self.names) + " (LaTeX spellings such as d_{cq} also work)"


def _variants(spelling: str) -> set[str]:
    """A spelling plus its other subscript form: `N_r` <-> `N_{r}`, `d_cq` <-> `d_{cq}`."""
    out = {spelling}
    base, sep, sub = spelling.partition("_")
    if sep and sub.startswith("{"):
        out.add(f"{base}_{sub[1:-1]}")
    elif sep:
        out.add(f"{base}_{{{sub}}}")
    return out


def _add(table: NameTable, key: str, symbol: sympy.Symbol) -> None:
    if _MACRO_KEY.fullmatch(key):
        table.wrapped[key] = symbol
    elif _WORD_KEY.fullmatch(key):
        for spelling in _variants(key):
            table.words[spelling] = symbol
    else:
        raise SymmemError(
            f"symbols key = {key!r}: a name must look like E_tok, E_{{tok}}, tok or \\mathrm{{TOK}}"
            " (ASCII letters and digits)"
        )


@lru_cache(maxsize=1)
def _default_table() -> NameTable:
    registry()  # every family's blocks have declared their symbols
    table = NameTable({}, {}, tuple(sorted(SYMBOLS, key=lambda n: print_rank(SYMBOLS[n].symbol))))
    for spec in SYMBOLS.values():
        _add(table, spec.name, spec.symbol)
        _add(table, spec.latex, spec.symbol)
    return table


def name_table(extra: Mapping[str, sympy.Symbol] | None = None) -> NameTable:
    """The default table (every symbol of `symmem.symbols`), extended by a caller's extra names."""
    base = _default_table()
    if not extra:
        return base
    table = NameTable(dict(base.words), dict(base.wrapped), base.names + tuple(k for k in extra if k not in SYMBOLS))
    for key, symbol in extra.items():
        if not isinstance(key, str) or not isinstance(symbol, sympy.Symbol):
            raise SymmemError(f"symbols key = {key!r}: must map a str to a sympy Symbol, got {type(symbol).__name__}")
        _add(table, key, symbol)
    return table


def _readings(run: str, table: NameTable) -> list[tuple[str, ...]]:
    """Every way to cut `run` into known spellings, longest-first, at most MAX_READINGS + 1 of them."""
    n, longest = len(run), table.longest
    # ok[i]: can run[i:] be cut completely? Lets the search below skip dead ends, so it stays small.
    ok = [False] * n + [True]
    for i in range(n - 1, -1, -1):
        ok[i] = any(run[i : i + k] in table.words and ok[i + k] for k in range(1, min(longest, n - i) + 1))
    found: list[tuple[str, ...]] = []
    stack: list[tuple[int, tuple[str, ...]]] = [(0, ())]
    while stack and len(found) <= MAX_READINGS:
        i, pieces = stack.pop()
        if i == n:
            found.append(pieces)
            continue
        for k in range(1, min(longest, n - i) + 1):  # pushed shortest first, so the longest pops first
            if run[i : i + k] in table.words and ok[i + k]:
                stack.append((i + k, pieces + (run[i : i + k],)))
    return found


def _split_run(run: str, pos: int, table: NameTable) -> list[Token]:
    """Split a run of juxtaposed names (`bsd_hn_h`) into symbol tokens.

    Rule: take the longest known spelling at each point, left to right. The result is accepted when
    (1) it covers the whole run, and (2) every other way of cutting the run into known spellings gives
    the same product, i.e. the longest-match choice is forced. With the default table this always holds
    (`N_r` cannot be read as N times `_r`, since no name starts with `_`); ambiguity appears only with
    caller-supplied names, e.g. adding `sh` makes `bsh` readable as b*sh or b*s*h, which is refused.
    """
    pieces: list[str] = []
    i, longest = 0, table.longest
    while i < len(run):
        k = next((k for k in range(min(longest, len(run) - i), 0, -1) if run[i : i + k] in table.words), 0)
        if k == 0:
            rest = run[i:]
            hint = "put numbers before names (2s) or use *" if rest[0] in _DIGITS else table.known()
            others = _readings(run, table)
            if others:
                reading = "*".join(others[0])
                hint = f"longest match fails here, but it could be read as {reading}; write that with * or spaces"
            raise located(rest, pos + i, f"no symbol starts here in {run!r}; {hint}")
        pieces.append(run[i : i + k])
        i += k
    # Is the longest match forced? Any other complete cut must give the same product.
    readings = _readings(run, table)
    product = Counter(table.words[p] for p in pieces)
    rivals = [r for r in readings if Counter(table.words[p] for p in r) != product]
    if rivals or len(readings) > MAX_READINGS:  # too many cuts to check counts as ambiguous too
        other = "*".join(rivals[0] if rivals else readings[-1])
        raise located(
            run,
            pos,
            f"ambiguous run of names: {'*'.join(pieces)} or {other}; "
            "separate names with * or a space, or brace subscripts (d_{hr})",
        )
    out, at = [], pos
    for piece in pieces:
        out.append(Token("sym", piece, at, table.words[piece]))
        at += len(piece)
    return out


# --------------------------------------------------------------------------------------------- scanner


def _strip_dollars(text: str) -> tuple[int, int]:
    """Bounds of the formula inside optional `$...$` / `$$...$$` (offsets stay those of `text`)."""
    start, end = 0, len(text)
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    for fence in ("$$", "$"):
        if end - start >= 2 * len(fence) and text.startswith(fence, start) and text.endswith(fence, 0, end):
            return start + len(fence), end - len(fence)
    return start, end


class _Scanner:
    """One left-to-right pass producing tokens and checking brackets, depth and literal sizes."""

    def __init__(self, text: str, table: NameTable) -> None:
        self.text, self.table = text, table
        self.start, self.end = _strip_dollars(text)
        self.tokens: list[Token] = []
        self.open: list[Token] = []  # brackets not closed yet

    def run(self) -> list[Token]:
        text, i = self.text, self.start
        while i < self.end:
            c = text[i]
            if c.isspace() or c == "~":
                i += 1
            elif c in _DIGITS:
                i = self._number(i)
            elif c in _LETTERS:
                i = self._run(i)
            elif c == "\\":
                i = self._command(i)
            elif c == "*" and text.startswith("**", i):
                self.tokens.append(Token("^", "**", i))
                i += 2
            elif c in "+-*/^":
                self.tokens.append(Token(c, c, i))
                i += 1
            elif c in "([{":
                self._push(c, i)
                i += 1
            elif c in ")]}":
                self._pop(c, i)
                i += 1
            else:
                raise located(c, i, self._why_not(c))
        if self.open:
            tok = self.open[-1]
            raise located(tok.text, tok.pos, f"unbalanced: never closed (expected {_CLOSER[tok.text]!r})")
        if not self.tokens:
            raise located("", self.end, "empty formula")
        self.tokens.append(Token("end", "", self.end))
        return self.tokens

    @staticmethod
    def _why_not(c: str) -> str:
        if c == ".":
            return "'.' is only allowed inside a decimal number such as 0.5"
        if c == "_":
            return "'_' only marks a subscript after a name (d_h, d_{cq})"
        if c == "$":
            return "'$' may only enclose the whole formula"
        return "character not allowed in a formula (use digits, names, + - * / ^ ** ( ) [ ] { } and LaTeX commands)"

    def _number(self, i: int) -> int:
        text, j = self.text, i
        while j < self.end and text[j] in _DIGITS:
            j += 1
        whole, frac = text[i:j], ""
        if j < self.end and text[j] == ".":
            k = j + 1
            while k < self.end and text[k] in _DIGITS:
                k += 1
            if k == j + 1:
                raise located(text[i : j + 1], i, "a decimal point must be followed by digits (0.5)")
            frac, j = text[j + 1 : k], k
        if len(whole) + len(frac) > MAX_DIGITS:
            raise located(text[i : min(j, i + 12)] + "...", i, f"numeric literal longer than {MAX_DIGITS} digits")
        # Exact: 0.5 becomes 1/2. int() of a checked digit string is the only conversion used.
        value = sympy.Rational(int(whole + frac), 10 ** len(frac)) if frac else sympy.Integer(int(whole))
        self.tokens.append(Token("num", text[i:j], i, value))
        return j

    def _run(self, i: int) -> int:
        """A run of letters/digits with subscripts `_x` or `_{xy}`, then split into names."""
        text, j = self.text, i
        while j < self.end:
            c = text[j]
            if c in _ALNUM:
                j += 1
            elif c == "_" and text.startswith("{", j + 1):
                close = text.find("}", j + 2, self.end)
                inner = text[j + 2 : close] if close > 0 else ""
                if not inner or any(ch not in _ALNUM for ch in inner):
                    raise located(text[j : j + 12], j, "a braced subscript must be ASCII letters/digits, like d_{cq}")
                j = close + 1
            elif c == "_" and j + 1 < self.end and text[j + 1] in _ALNUM:
                j += 2
            elif c == "_":
                raise located(c, j, "'_' must be followed by a subscript (d_h, d_{cq})")
            else:
                break
            if j - i > MAX_RUN:
                raise located(text[i : i + 12] + "...", i, f"run of names longer than {MAX_RUN} characters")
        self.tokens.extend(_split_run(text[i:j], i, self.table))
        return j

    def _command(self, i: int) -> int:
        text, j = self.text, i + 1
        if j >= self.end:
            raise located("\\", i, "a backslash must start a LaTeX command")
        if text[j] in _LETTERS:
            while j < self.end and text[j] in _LETTERS:
                j += 1
        else:
            j += 1
        name = text[i + 1 : j]
        if name in _SPACING:
            return j
        if name in _TIMES:
            self.tokens.append(Token("*", text[i:j], i))
        elif name in _FRAC:
            self.tokens.append(Token("frac", text[i:j], i))
        elif name == "{":
            self._push(r"\{", i)
        elif name == "}":
            self._pop(r"\}", i)
        elif name in ("left", "right"):
            return self._sized_delimiter(name, i, j)
        elif name in _NAME_WRAPPERS:
            return self._wrapped_name(name, i, j)
        else:
            raise located(text[i:j], i, f"unsupported LaTeX command; supported: {_SUPPORTED}")
        return j

    def _sized_delimiter(self, name: str, i: int, j: int) -> int:
        """`\\left(` ... `\\right)`: the delimiter follows, maybe after spaces."""
        text = self.text
        while j < self.end and text[j].isspace():
            j += 1
        delims = _LEFT_DELIMS if name == "left" else _RIGHT_DELIMS
        for delim in delims:
            if text.startswith(delim, j) and j + len(delim) <= self.end:
                spelled = "\\" + name + delim
                (self._push if name == "left" else self._pop)(spelled, i)
                return j + len(delim)
        raise located(text[i:j + 1], i, f"\\{name} must be followed by one of {' '.join(delims)}")

    def _wrapped_name(self, name: str, i: int, j: int) -> int:
        """`\\mathrm{PP}`: an atomic name, looked up whole (never split)."""
        text = self.text
        close = text.find("}", j, self.end) if text.startswith("{", j) else -1
        inner = text[j + 1 : close] if close > 0 else ""
        if not inner or any(ch not in _ALNUM for ch in inner):
            raise located(text[i : j + 12], i, f"\\{name} needs a plain name in braces, like \\mathrm{{PP}}")
        symbol = self.table.wrapped.get(f"\\mathrm{{{inner}}}")
        if symbol is None:
            symbol = self.table.words.get(inner)
        if symbol is None:
            raise located(text[i : close + 1], i, f"unknown name; {self.table.known()}")
        self.tokens.append(Token("sym", text[i : close + 1], i, symbol))
        return close + 1

    def _push(self, spelled: str, i: int) -> None:
        tok = Token("open", spelled, i)
        self.open.append(tok)
        if len(self.open) > MAX_DEPTH:
            raise located(spelled, i, f"brackets nested deeper than the limit of {MAX_DEPTH}")
        self.tokens.append(tok)

    def _pop(self, spelled: str, i: int) -> None:
        if not self.open:
            raise located(spelled, i, "unbalanced: closes a bracket that was never opened")
        opener = self.open.pop()
        if _CLOSER[opener.text] != spelled:
            raise located(
                spelled,
                i,
                f"unbalanced: {opener.text!r} opened at column {opener.pos + 1} needs {_CLOSER[opener.text]!r}",
            )
        self.tokens.append(Token("close", spelled, i))


def tokenize(text: str, table: NameTable | None = None) -> list[Token]:
    """Tokens of `text`, ending with an `end` token; raises SymmemError on anything outside the language."""
    if not isinstance(text, str):
        raise SymmemError(f"formula = {type(text).__name__}: must be a string")
    if len(text) > MAX_CHARS:
        raise SymmemError(f"formula = {len(text)} characters: longer than the limit of {MAX_CHARS} characters")
    return _Scanner(text, table or _default_table()).run()
