"""Tables: one structure, three renderings (Markdown and LaTeX booktabs through jinja2, CSV through `csv`).

A cell is a plain value (str or int) or `Math` (a LaTeX formula already printed by `symmem.render.latex`).
Integers are exact; Markdown and LaTeX group their digits, CSV keeps them bare.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2


@dataclass(frozen=True)
class Math:
    """A formula cell: `latex` for LaTeX, `text` (plain) for Markdown and CSV."""

    latex: str
    text: str = ""


@dataclass(frozen=True)
class Table:
    """A generated table; shows as LaTeX (booktabs) in Jupyter."""

    id: str  # file stem, e.g. "table4_stage_params"
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    notes: tuple[str, ...] = field(default=())
    align: str = ""  # LaTeX column alignment; default: l then r

    def _repr_latex_(self) -> str:
        return to_latex(self)

    def _repr_markdown_(self) -> str:
        return to_markdown(self)

    def __post_init__(self) -> None:
        for r in self.rows:
            if len(r) != len(self.columns):
                raise ValueError(f"table {self.id}: row {r!r} has {len(r)} cells, {len(self.columns)} columns")


_TEX_ESCAPE = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
               "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}",
               # non-ASCII characters of our own texts that pdflatex's default input encoding does not set up
               "→": r"$\rightarrow$", "≥": r"$\geq$", "≤": r"$\leq$", "≈": r"$\approx$", "×": r"$\times$",
               "·": r"$\cdot$", "−": "-", "–": "--", "²": r"\textsuperscript{2}", "…": r"\ldots{}"}


def tex_escape(text: str) -> str:
    """Text for LaTeX: special characters escaped; line breaks and other control characters become spaces, so
    that text placed in a `%` comment stays in it and none ends a paragraph (a scenario name is user text); any
    other non-ASCII character, which pdflatex may have no glyph for (`中`, `ħ`), is written as its ASCII letters
    (`é` as e) or as `?`, so that the output always compiles."""
    return "".join(_tex_char(ch) for ch in text)


@lru_cache(maxsize=4096)
def _tex_char(ch: str) -> str:
    if ch in _TEX_ESCAPE:
        return _TEX_ESCAPE[ch]
    if ch.isspace() or not ch.isprintable():
        return " "
    if ch.isascii():
        return ch
    letters = "".join(c for c in unicodedata.normalize("NFKD", ch) if c.isascii() and c.isprintable())
    return "".join(_TEX_ESCAPE.get(c, c) for c in letters) if letters.strip() else "?"


def _md_cell(v) -> str:
    if isinstance(v, Math):
        return f"${v.latex}$"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", r"\|")


def _tex_cell(v) -> str:
    if isinstance(v, Math):
        return f"${v.latex}$"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}".replace(",", "{,}")
    return tex_escape(str(v))


def _csv_cell(v) -> str:
    if isinstance(v, Math):
        return v.text or v.latex
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


@lru_cache(maxsize=2)
def _env(tex: bool = False) -> jinja2.Environment:
    # jinja2 is imported here, at the first rendering: `symmem paper`'s forked child derives tables but renders
    # none, and needs none of it (imported before the fork, both processes waited 0.03 s for it).
    import jinja2

    # LaTeX is full of braces and percent signs: its templates use ((* *)) and ((( ))) delimiters instead.
    delimiters = dict(block_start_string="((*", block_end_string="*))", variable_start_string="(((",
                      variable_end_string=")))", comment_start_string="((=", comment_end_string="=))",
                      line_comment_prefix=None) if tex else {}
    return jinja2.Environment(
        loader=jinja2.PackageLoader("symmem.render", "templates"),
        **delimiters,
        autoescape=False,  # cells are escaped by the renderers above, per format
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def to_markdown(t: Table) -> str:
    return _env().get_template("table.md.j2").render(
        t=t, header=[c.replace("|", r"\|") for c in t.columns], rows=[[_md_cell(v) for v in r] for r in t.rows])


def _caption(title: str) -> tuple[str | None, str]:
    """A table is captioned by its own name, never by LaTeX's running count: "Table 8: X" is numbered 8 (the paper's
    number, set locally as \thetable), any other title is printed as it is, unnumbered."""
    m = re.match(r"^Table (\d+): (.*)$", title)
    return (m.group(1), m.group(2)) if m else (None, title)


def to_latex(t: Table, source: str = "") -> str:
    """`source`: LaTeX the caption adds after the title (profile, assumptions, \\cite; see symmem.render.sources)."""
    align = t.align or ("l" + "r" * (len(t.columns) - 1))
    number, title = _caption(t.title)
    return _env(tex=True).get_template("table.tex.j2").render(
        t=t, align=align, number=number, title=tex_escape(title), header=[tex_escape(c) for c in t.columns],
        rows=[[_tex_cell(v) for v in r] for r in t.rows], notes=[tex_escape(n) for n in t.notes],
        source=source)


def to_csv(t: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(t.columns)
    for r in t.rows:
        w.writerow([_csv_cell(v) for v in r])
    return buf.getvalue()


def render_all(t: Table, source: str = "") -> dict[str, str]:
    return {f"{t.id}.md": to_markdown(t), f"{t.id}.csv": to_csv(t), f"{t.id}.tex": to_latex(t, source)}


def index_markdown(tables: list[Table], title: str, intro: str, extra: dict[str, str] | None = None) -> str:
    return _env().get_template("index.md.j2").render(tables=tables, title=title, intro=intro, extra=extra or {})
