"""Recursive-descent parser: tokens from `lexer.py` -> a sympy expression, built node by node.

Grammar (lowest to highest precedence):

    sum     := product (('+' | '-') product)*
    product := signed (('*' | '/') signed | power)*      -- a bare `power` is juxtaposition: `8bs(...)`
    signed  := ('+' | '-')* power
    power   := atom ('^' exponent)?                      -- `^` and `**`; binds to the last atom only
    atom    := number | symbol | group | '\\frac' '{' sum '}' '{' sum '}'
    group   := '(' sum ')' | '[' sum ']' | '{' sum '}' | '\\left(' sum '\\right)' | ...
    exponent:= integer 0..16 | '{' integer '}' | '(' integer ')'

Choices that refuse rather than guess (each is a plausible misreading of a hand-typed formula):
  * a number cannot follow another factor without an operator (`s 2`, `(a)3`): write `2s` or `s*2`;
  * after `/` the divisor is one factor; `x/2s` is refused, write `(x/2)s`, `x/(2s)` or `\\frac{x}{2s}`;
  * `s^23` is refused (LaTeX reads s^2 * 3, plain syntax s^23): write `s^{23}` or `s**23`;
  * `s^2^3` is refused; nested powers may be parenthesised, but their exponents multiply to at most 16.
The exponent bounds keep every number small: no literal is raised beyond a total power of 16, so no
input of at most 10,000 characters can make sympy build a huge integer.

Only three Python frames are used per bracket level and the lexer caps nesting at 200, so the parser
stays well inside Python's recursion limit.
"""

from __future__ import annotations

import sympy

from symmem.check.lexer import Token, located

MAX_EXPONENT = 16

_FACTOR_START = frozenset({"num", "sym", "open", "frac"})

# (expression, weight): weight is the product of the exponents of nested powers inside the expression,
# 1 when it has none. `(s^4)^4` has weight 16; anything above MAX_EXPONENT is refused.
Node = tuple[sympy.Expr, int]


class Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0

    # -- token helpers

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind != "end":
            self.i += 1
        return tok

    def after(self, tok: Token) -> str:
        """` after '+'`: names the token before `tok`, so that `s+` reads as a trailing operator."""
        at = self.tokens.index(tok)
        return f" after {self.tokens[at - 1].text!r}" if at > 0 else ""

    # -- grammar

    def parse(self) -> sympy.Expr:
        expr, _ = self.sum()
        tok = self.peek()
        if tok.kind != "end":  # only a stray closer can stop `sum` early; the lexer balanced them
            raise located(tok.text, tok.pos, "unexpected here")
        return expr

    def sum(self, opener: Token | None = None) -> Node:
        """A sum; with `opener`, the bracketed sum after it, up to its closer (paired by the lexer).

        Brackets are handled here rather than in a `group` function so that each bracket level costs
        only three Python frames (sum, product, operand): 200 levels stay far below the recursion limit.
        """
        if opener is not None and self.peek().kind == "close":
            raise located(opener.text, opener.pos, "empty brackets")
        # Collect terms and build one Add: adding one at a time would be quadratic in sympy.
        first, weight = self.product()
        terms = [first]
        while self.peek().kind in "+-":
            op = self.take()
            term, w = self.product()
            terms.append(term if op.kind == "+" else -term)
            weight = max(weight, w)
        if opener is not None:
            closer = self.take()
            if closer.kind != "close":  # unreachable for balanced input, kept as a guard
                raise located(closer.text, closer.pos, f"expected the closer of {opener.text!r}")
        return sympy.Add(*terms), weight

    def product(self) -> Node:
        first, weight = self.operand(signs=True)
        factors = [first]
        while True:
            tok = self.peek()
            if tok.kind in ("*", "/"):
                self.take()
                factor, w = self.operand(signs=True)
                if tok.kind == "/":
                    factor = self.reciprocal(factor, tok)
                    nxt = self.peek()
                    if nxt.kind in _FACTOR_START:
                        raise located(
                            nxt.text,
                            nxt.pos,
                            "ambiguous product after '/': write (a/b)c, a/(bc) or \\frac{a}{bc}",
                        )
            elif tok.kind in _FACTOR_START:  # juxtaposition: `10bsh`, `8bs(d_c)`, `2(a)(b)`
                if tok.kind == "num":
                    rule = "a number cannot follow a factor without an operator; write 2s or s*2"
                    raise located(tok.text, tok.pos, rule)
                factor, w = self.operand(signs=False)
            else:
                return sympy.Mul(*factors), weight
            factors.append(factor)
            weight = max(weight, w)

    def operand(self, signs: bool) -> Node:
        """`signed`, `power` and `atom` of the grammar in one function (see `sum` for why)."""
        negative = False
        while signs and self.peek().kind in "+-":  # a loop, not recursion: `------s` is cheap
            negative ^= self.take().kind == "-"
        tok = self.take()
        if tok.kind in ("num", "sym"):
            base, weight = tok.value, 1
        elif tok.kind == "open":
            base, weight = self.sum(tok)
        elif tok.kind == "frac":
            top, w1 = self.sum(self.brace(tok, "numerator"))
            bottom, w2 = self.sum(self.brace(tok, "denominator"))
            base, weight = top * self.reciprocal(bottom, tok), max(w1, w2)
        else:
            raise located(tok.text, tok.pos, "expected a number, a name or a bracket" + self.after(tok))
        if self.peek().kind == "^":
            caret = self.take()
            exponent = self.exponent(caret)
            weight *= max(exponent, 1)
            if weight > MAX_EXPONENT:
                rule = f"nested powers multiply to {weight}, above the limit of {MAX_EXPONENT}"
                raise located(caret.text, caret.pos, rule)
            nxt = self.peek()
            if nxt.kind == "^":
                raise located(nxt.text, nxt.pos, "double exponent: use parentheses, (a^b)^c")
            base = sympy.Pow(base, exponent)
        return (-base if negative else base), weight

    def exponent(self, caret: Token) -> int:
        """Only a small integer literal: symbolic or negative exponents are no memory formula."""
        tok = self.take()
        rule = f"an exponent must be an integer literal from 0 to {MAX_EXPONENT}"
        closer = None
        if tok.kind == "open" and tok.text in ("{", "("):
            closer, tok = tok, self.take()
        if tok.kind != "num" or "." in tok.text:
            raise located(tok.text, tok.pos, f"{rule} after {caret.text!r}")
        if closer is None and caret.text == "^" and len(tok.text) > 1:
            hint = f"write ^{{{tok.text}}} (or ^{tok.text[0]} {tok.text[1:]})"
            raise located(tok.text, tok.pos, f"ambiguous exponent: {hint}")
        if closer is not None:
            end = self.take()
            if end.kind != "close":
                raise located(end.text, end.pos, rule + f" alone inside {closer.text!r}")
        value = int(tok.value)
        if value > MAX_EXPONENT:
            raise located(tok.text, tok.pos, rule)
        return value

    def brace(self, frac: Token, part: str) -> Token:
        tok = self.take()
        if tok.kind != "open" or tok.text != "{":
            raise located(tok.text, tok.pos, f"{frac.text} needs its {part} in braces: {frac.text}{{a}}{{b}}")
        return tok

    @staticmethod
    def reciprocal(expr: sympy.Expr, at: Token) -> sympy.Expr:
        if expr == 0:
            raise located(at.text, at.pos, "division by zero")
        return sympy.Pow(expr, -1)
