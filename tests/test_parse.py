"""The safe formula parser: paper formulas, syntax variants, longest-match names, hostile input, limits."""

from __future__ import annotations

import builtins
import inspect
import re
import uuid
from pathlib import Path

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import symmem.check.lexer as lexer_module
import symmem.check.parse as parse_module
from symmem.blocks.symbols import L, N, N_r, V, d_c, d_cq, d_h, d_hr, h, h_E, n_h
from symmem.check import parse_formula
from symmem.errors import SymmemError
from symmem.symbols import SYMBOLS, b, pp, s, t


def same(a: sympy.Expr, b_: sympy.Expr) -> bool:
    return sympy.expand(a - b_) == 0


# ------------------------------------------------------------------------------------ the paper's formulas

MLA = 10 * b * s * h + 8 * b * s * (d_cq + d_c) + 16 * b * s * d_h * n_h + 8 * b * s * d_hr * n_h + 10 * b * n_h * s**2
MOE = (
    20 * b * s * h
    + 16 * b * s * N
    + 8 * b * s * N_r
    + 4 * b * s * (N_r / N) * (96 * h + 256 * h_E)
    + 32 * b * s * h_E
)
SHARED = 8 * b * s * h + 8 * b * s * N_r

PAPER_LATEX = [
    (r"10bsh + 8bs(d_{cq}+d_c) + 16bsd_hn_h + 8bsd_{hr}n_h + 10bn_hs^2", MLA),
    (r"20bsh + 16bsN + 8bsN_r + 4bs(N_r/N)(96h+256h_E) + 32bsh_E", MOE),
    (r"8bsh + 8bsN_r", SHARED),
]

PAPER_PLAIN = [
    ("10*b*s*h + 8*b*s*(d_cq + d_c) + 16*b*s*d_h*n_h + 8*b*s*d_hr*n_h + 10*b*n_h*s**2", MLA),
    ("20*b*s*h + 16*b*s*N + 8*b*s*N_r + 4*b*s*(N_r/N)*(96*h + 256*h_E) + 32*b*s*h_E", MOE),
    ("8*b*s*h + 8*b*s*N_r", SHARED),
]


@pytest.mark.parametrize(("text", "expected"), PAPER_LATEX + PAPER_PLAIN)
def test_paper_formulas(text: str, expected: sympy.Expr) -> None:
    assert same(parse_formula(text), expected)


@pytest.mark.parametrize(("text", "expected"), PAPER_LATEX)
def test_paper_formulas_in_dollars_and_display_spacing(text: str, expected: sympy.Expr) -> None:
    assert same(parse_formula(f"${text}$"), expected)
    assert same(parse_formula(f"  $$ {text} $$ "), expected)
    spaced = text.replace("+", r"\,+\;").replace("(", r"\left(").replace(")", r"\right)")
    assert same(parse_formula(spaced), expected)


def test_moe_formula_with_frac_cdot_times() -> None:
    text = r"20bsh + 16bsN + 8bsN_{r} + 4bs\frac{N_{r}}{N}\left(96h + 256h_{E}\right) + 32\cdot b\times s\,h_{E}"
    assert same(parse_formula(text), MOE)


# ------------------------------------------------------------------------------------ syntax variants


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\frac{N_r}{N}", N_r / N),
        (r"\dfrac{N_r}{N}", N_r / N),
        (r"\tfrac{1}{2}s", s / 2),
        (r"\frac{\frac{b}{s}}{h}", b / (s * h)),
        (r"\left(b+s\right)h", (b + s) * h),
        (r"\left[b+s\right]\left\{h\right\}", (b + s) * h),
        (r"[b+s]{h}\{t\}", (b + s) * h * t),
        (r"b \cdot s", b * s),
        (r"b \times s", b * s),
        (r"b\,s\;h\!t\ N~V\:L\quad b", b * s * h * t * N * V * L * b),
        ("0.5s", s / 2),
        ("1.25", sympy.Rational(5, 4)),
        ("s^2", s**2),
        ("s^{2}", s**2),
        ("s**2", s**2),
        ("s^(3)", s**3),
        ("s^{ 16 }", s**16),
        ("s^0", sympy.Integer(1)),
        ("(bs)^2", b**2 * s**2),
        ("(s^4)^4", s**16),
        ("2^{10}", sympy.Integer(1024)),
        ("s^2b", s**2 * b),
        ("-s", -s),
        ("+s", s),
        ("-s^2", -(s**2)),
        ("-(b+s)", -b - s),
        ("2*-s", -2 * s),
        ("b - -s", b + s),
        ("b/s/t", b / (s * t)),
        ("b/s*t", b * t / s),
        ("bsh/t", b * s * h / t),
        ("2(b)(s)", 2 * b * s),
        ("2(b+1)(s+1)", 2 * (b + 1) * (s + 1)),
        ("(b)(s)h", b * s * h),
        (r"\mathrm{PP}t", pp * t),
        (r"\mathrm{pp}", pp),
        (r"\text{PP}", pp),
        ("0", sympy.Integer(0)),
    ],
)
def test_syntax_variants(text: str, expected: sympy.Expr) -> None:
    assert same(parse_formula(text), expected)


def test_decimals_are_exact() -> None:
    result = parse_formula("0.1")
    assert result == sympy.Rational(1, 10)
    assert isinstance(result, sympy.Rational)


# ------------------------------------------------------------------------------------ names: longest match


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bsd_hn_h", b * s * d_h * n_h),
        ("16bsd_hn_h", 16 * b * s * d_h * n_h),
        ("8bsd_{hr}n_h", 8 * b * s * d_hr * n_h),
        ("8bsd_hrn_h", 8 * b * s * d_hr * n_h),
        ("10bn_hs^2", 10 * b * n_h * s**2),
        ("bsN_r", b * s * N_r),
        ("bsN", b * s * N),
        ("h_E", h_E),
        ("h_{E}", h_E),
        ("hh_E", h * h_E),
        ("d_h", d_h),
        ("d_{h}", d_h),
        ("n_h", n_h),
        ("n_{h}", n_h),
        ("d_cq", d_cq),
        ("d_{cq}", d_cq),
        ("d_{c}", d_c),
        ("N_{r}", N_r),
        ("d_{hr}", d_hr),
        ("tpp", t * pp),
    ],
)
def test_longest_match(text: str, expected: sympy.Expr) -> None:
    assert same(parse_formula(text), expected)


def test_every_symbol_by_name_and_latex() -> None:
    for spec in SYMBOLS.values():
        assert parse_formula(spec.name) == spec.symbol
        assert parse_formula(spec.latex) == spec.symbol


def test_extra_names_from_the_caller() -> None:
    t_mb = sympy.Symbol("T_mb", positive=True, integer=True)
    e_tok = sympy.Symbol("E_tok", positive=True, integer=True)
    extra = {"T_mb": t_mb, "E_{tok}": e_tok}
    assert same(parse_formula("2T_mbs", extra), 2 * t_mb * s)
    assert same(parse_formula(r"2T_{mb}E_tok h", extra), 2 * t_mb * e_tok * h)
    assert same(parse_formula(r"\frac{E_{tok}}{T_{mb}}", extra), e_tok / t_mb)
    # the defaults stay available next to the extras
    assert same(parse_formula("bsh", extra), b * s * h)


def test_bad_extra_names_are_refused() -> None:
    with pytest.raises(SymmemError, match="symbols key"):
        parse_formula("b", {"E tok": sympy.Symbol("x")})
    with pytest.raises(SymmemError, match="symbols key"):
        parse_formula("b", {"x": "not a symbol"})  # type: ignore[dict-item]


def test_ambiguous_split_is_refused_and_can_be_disambiguated() -> None:
    sh = sympy.Symbol("sh", positive=True)
    extra = {"sh": sh}
    with pytest.raises(SymmemError, match="ambiguous run of names"):
        parse_formula("bsh", extra)  # b*sh or b*s*h
    assert same(parse_formula("b s h", extra), b * s * h)
    assert same(parse_formula("b*s*h", extra), b * s * h)
    assert same(parse_formula(r"b\mathrm{sh}", extra), b * sh)


def test_longest_match_is_forced_or_refused() -> None:
    # with `r` known, LaTeX's d_h r and the plain name d_hr both read `d_hr`: refused
    r = sympy.Symbol("r", positive=True)
    with pytest.raises(SymmemError, match="ambiguous"):
        parse_formula("d_hr", {"r": r})
    assert same(parse_formula("d_{hr}", {"r": r}), d_hr)
    assert same(parse_formula("d_{h}r", {"r": r}), d_h * r)


def test_longest_match_failure_names_the_working_split() -> None:
    ab, a, bc = (sympy.Symbol(n) for n in ("ab", "a", "bc"))
    with pytest.raises(SymmemError, match=r"a\*bc"):
        parse_formula("abc", {"ab": ab, "a": a, "bc": bc})


@pytest.mark.parametrize("text", ["x", "bsx", "lambda", r"\mathrm{XX}", "N_{rs}", "sqrt"])
def test_unknown_names_list_the_known_symbols(text: str) -> None:
    with pytest.raises(SymmemError, match="known symbols: b, s, h, d_cq"):
        parse_formula(text)


def test_number_after_name_is_refused() -> None:
    with pytest.raises(SymmemError, match="numbers before names"):
        parse_formula("bs2")
    with pytest.raises(SymmemError, match="number cannot follow"):
        parse_formula("s 2")


# ------------------------------------------------------------------------------------ hostile input

HOSTILE = [
    "__import__('os').system('x')",
    "lambda x: x",
    "a.b",
    "b.s",
    "__class__",
    "s.__class__",
    "'s'",
    '"s"',
    "b, s",
    "b; s",
    "b = s",
    "b @ s",
    "`s`",
    "s(0",
    "b:s",
    "s!",
    "s % 2",
    "s & h",
    "s | h",
    "s < h",
    "s # comment",
    "β",
    "é",
    "\x00",
    r"\sqrt{s}",
    r"\input{/etc/passwd}",
    r"\alpha",
    r"\def\x{1}",
    r"\\",
    "\\",
    "",
    "   ",
    "$$",
    "$s",
    "s$",
    "(s",
    "s)",
    "((s)",
    "{s",
    "[s)",
    r"\left(s)",
    r"(s\right)",
    r"\left<s\right>",
    "()",
    "{}",
    "s+",
    "s*",
    "s-",
    "s/",
    "s^",
    "s**",
    "*s",
    "/s",
    "^2",
    "s***2",
    "s^2^3",
    "9^9^9^9",
    "2^{1000000}",
    "s^b",
    "s^{b}",
    "s^{-1}",
    "s**-1",
    "s^{17}",
    "s^{1+1}",
    "s^{0.5}",
    "s^23",
    "((s^4)^4)^2",
    "s/0",
    r"\frac{s}{0}",
    r"\frac{s}{b-b}",
    r"\frac12",
    r"\frac{s}",
    "x/2s",
    "b/2s",
    "bsh/tdp",
    "N_r/N(96h)",
    "1.",
    ".5",
    "1" * 41,
    "d_",
    "d_{}",
    "d_{c q}",
    "d_{\\mathrm{cq}}",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_input_is_refused_with_one_line(text: str) -> None:
    with pytest.raises(SymmemError) as info:
        parse_formula(text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("formula")


def test_error_names_token_and_column() -> None:
    with pytest.raises(SymmemError, match=r"'\\sqrt' at column 4: unsupported LaTeX command"):
        parse_formula(r"2s+\sqrt{h}")
    with pytest.raises(SymmemError, match=r"'_' at column 1"):
        parse_formula("__import__('os')")
    with pytest.raises(SymmemError, match=r"end of formula at column 3: .* after '\+'"):
        parse_formula("s+")
    with pytest.raises(SymmemError, match=r"'\(' at column 2: unbalanced"):
        parse_formula("b(s")


def test_non_string_is_refused() -> None:
    with pytest.raises(SymmemError):
        parse_formula(42)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ nothing is executed


def test_python_payload_is_not_executed() -> None:
    marker = Path(f"/tmp/PWNED_{uuid.uuid4().hex}")
    for payload in (
        f"__import__('os').system('touch {marker}')",
        f"b*__import__('os').system('touch {marker}')",
        f"(lambda: __import__('os').system('touch {marker}'))()",
        f"s.__class__.__init__.__globals__['os'].system('touch {marker}')",
    ):
        with pytest.raises(SymmemError):
            parse_formula(payload)
    assert not marker.exists()


def test_parse_does_not_use_eval_exec_or_sympify(monkeypatch: pytest.MonkeyPatch) -> None:
    import sympy.parsing.sympy_parser as sympy_parser

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("string evaluation was used")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(sympy, "sympify", forbidden)
    monkeypatch.setattr(sympy, "parse_expr", forbidden, raising=False)
    monkeypatch.setattr(sympy_parser, "parse_expr", forbidden)
    for text, expected in PAPER_LATEX + PAPER_PLAIN:
        assert same(parse_formula(text), expected)
    assert same(parse_formula(r"\frac{N_r}{N}\left(0.5h\right)^{2}"), N_r * h**2 / (4 * N))


def test_source_has_no_string_evaluation() -> None:
    banned = re.compile(r"\b(eval|exec|sympify|parse_expr|S)\(|(?<![\w.])compile\(|__import__|importlib")
    for module in (lexer_module, parse_module):
        source = inspect.getsource(module)
        assert not banned.search(source), module.__name__


# ------------------------------------------------------------------------------------ limits


def test_length_limit() -> None:
    with pytest.raises(SymmemError, match="10000 characters"):
        parse_formula("b+" * 50_000 + "s")  # 100,001 characters
    with pytest.raises(SymmemError, match="10000 characters"):
        parse_formula("s" * 100_000)


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(SymmemError):
        parse_formula("(" * 10_000 + "s" + ")" * 10_000)  # refused by length
    with pytest.raises(SymmemError, match="deeper than the limit of 200"):
        parse_formula("(" * 4_000 + "s" + ")" * 4_000)
    with pytest.raises(SymmemError, match="deeper than the limit of 200"):
        parse_formula("(" * 201 + "s" + ")" * 201)
    with pytest.raises(SymmemError, match="deeper than the limit of 200"):
        parse_formula(r"\frac{" * 201 + "s" + "}{2}" * 201)


def test_nesting_at_the_limit_is_accepted() -> None:
    assert parse_formula("(" * 200 + "s" + ")" * 200) == s
    assert parse_formula("-(" * 200 + "s" + ")" * 200) == s
    assert parse_formula(r"\left(" * 100 + "{" * 100 + "s" + "}" * 100 + r"\right)" * 100) == s


def test_literal_limit() -> None:
    assert parse_formula("9" * 40) == sympy.Integer(int("9" * 40))
    with pytest.raises(SymmemError, match="40 digits"):
        parse_formula("9" * 41)
    with pytest.raises(SymmemError, match="40 digits"):
        parse_formula("0." + "1" * 40)


def test_long_but_legal_input_is_fine() -> None:
    text = " + ".join(["10bsh", "8bs(d_{cq}+d_c)"] * 380)  # about 9,900 characters
    assert len(text) < 10_000
    assert same(parse_formula(text), 380 * (10 * b * s * h + 8 * b * s * (d_cq + d_c)))
    many_signs = "-" * 9_000 + "s"
    assert parse_formula(many_signs) == s


def test_biggest_numbers_stay_small() -> None:
    # the worst the limits allow: a 40-digit literal to the 16th power
    value = parse_formula("(" + "9" * 40 + ")^{16}")
    assert value == sympy.Integer(int("9" * 40)) ** 16


# ------------------------------------------------------------------------------------ property tests

_LEAF_SYMBOLS = [spec for spec in SYMBOLS.values()]


@st.composite
def leaves(draw: st.DrawFn) -> tuple[sympy.Expr, str, str]:
    """(expression, plain text, LaTeX text) of a symbol or a small integer."""
    if draw(st.booleans()):
        spec = draw(st.sampled_from(_LEAF_SYMBOLS))
        return spec.symbol, spec.name, spec.latex
    n = draw(st.integers(min_value=0, max_value=99))
    return sympy.Integer(n), str(n), str(n)


def _combine(children: st.SearchStrategy) -> st.SearchStrategy:
    def build(draw: st.DrawFn) -> tuple[sympy.Expr, str, str]:
        op = draw(st.sampled_from(["+", "-", "*", "/", "neg", "juxt"]))
        a, pa, la = draw(children)
        if op == "neg":
            return -a, f"-({pa})", rf"-\left({la}\right)"
        if op == "/":  # divide by a symbol or a positive integer, never by zero
            spec = draw(st.sampled_from(_LEAF_SYMBOLS))
            return a / spec.symbol, f"({pa})/{spec.name}", rf"\frac{{{la}}}{{{spec.latex}}}"
        c, pc, lc = draw(children)
        if op == "+":
            return a + c, f"({pa}) + ({pc})", f"{{{la}}} + {{{lc}}}"
        if op == "-":
            return a - c, f"({pa}) - ({pc})", rf"\left[{la}\right] - \left[{lc}\right]"
        if op == "*":
            return a * c, f"({pa})*({pc})", rf"({la}) \cdot ({lc})"
        return a * c, f"({pa})({pc})", f"({la})({lc})"

    return st.composite(build)()


def _powers(leaf: tuple[sympy.Expr, str, str], k: int) -> tuple[sympy.Expr, str, str]:
    e, p, l_ = leaf
    return e**k, f"{p}**{k}", f"{l_}^{{{k}}}"


_atoms = st.one_of(leaves(), st.builds(_powers, leaves(), st.integers(min_value=0, max_value=4)))
_trees = st.recursive(_atoms, _combine, max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(_trees)
def test_printed_expressions_parse_back(tree: tuple[sympy.Expr, str, str]) -> None:
    expected, plain, latex = tree
    assert sympy.cancel(parse_formula(plain) - expected) == 0
    assert sympy.cancel(parse_formula(f"${latex}$") - expected) == 0


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=999),
            st.lists(
                st.tuples(st.sampled_from(_LEAF_SYMBOLS), st.booleans(), st.integers(0, 3)), min_size=1, max_size=6
            ),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_juxtaposed_names_parse_as_products(monomials: list) -> None:
    """Names written back to back, in either spelling, always split into the intended product.

    This holds because no spelling in the default table starts where another one could end
    (no name starts with `_`, `q` or `r`), so longest match is always forced.
    """
    expected = sympy.Integer(0)
    parts = []
    for coefficient, factors in monomials:
        term = sympy.Integer(coefficient)
        text = str(coefficient)
        for spec, use_latex, k in factors:
            term *= spec.symbol**k
            text += (spec.latex if use_latex else spec.name) + (f"^{{{k}}}" if k != 1 else "")
        expected += term
        parts.append(text)
    assert same(parse_formula(" + ".join(parts)), expected)


def test_every_pair_of_declared_names_juxtaposes_unambiguously() -> None:
    """Every family's symbols are declared in one table: any two spellings written back to back must still read
    as their product (a new symbol such as `cp` must not make `n_h` + `cp` read as another name + `p`)."""
    from symmem.family import registry

    registry()
    specs = list(SYMBOLS.values())
    for first in specs:
        for second in specs:
            for sa in (first.name, first.latex):
                for sb in (second.name, second.latex):
                    assert same(parse_formula(sa + sb), first.symbol * second.symbol), (sa, sb)
