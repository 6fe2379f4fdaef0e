"""The exact evaluator's fast paths against sympy itself, on random expressions of the kind the engine builds:
products of sizes over parallel degrees, sums of them, powers, and the step atoms floor and Min."""

from fractions import Fraction

import sympy
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from symmem.accounting.evaluate import evaluate, evaluate_form, expand_sum, expanded, expanded_sum, sum_form

X = sympy.symbols("b s h t n_h", positive=True, integer=True)
VALUES = dict(zip(X, (3, 4096, 7168, 2, 128), strict=True))

_atom = st.one_of(st.sampled_from(X), st.integers(-7, 9).map(sympy.Integer),
                  st.fractions(min_value=-3, max_value=3, max_denominator=8).map(
                      lambda f: sympy.Rational(f.numerator, f.denominator)))


def _grow(children):
    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda a: sympy.Add(*a)),
        st.lists(children, min_size=2, max_size=3).map(lambda a: sympy.Mul(*a)),
        st.tuples(st.sampled_from(X), st.integers(-2, 3)).map(lambda p: p[0] ** p[1]),
        st.tuples(children, st.integers(0, 3)).map(lambda p: p[0] ** p[1]),
        st.sampled_from(X).map(lambda x: sympy.floor(x / 3)),
        st.sampled_from(X).map(lambda x: sympy.Min(x, 1000)),
    )


EXPRS = st.recursive(_atom, _grow, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(EXPRS)
def test_evaluate_equals_sympys_substitution(expr):
    expected = expr.xreplace({k: sympy.Integer(v) for k, v in VALUES.items()})
    assume(expected.is_Rational)  # not a division by zero at these values
    got = evaluate(expr, VALUES)
    assert got == Fraction(int(expected.p), int(expected.q))


@settings(max_examples=300, deadline=None)
@given(EXPRS)
def test_expanded_is_sympys_expand(expr):
    assert expanded(expr) == sympy.expand(expr)
    assert expanded(sympy.expand(expr)) == sympy.expand(expr)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), EXPRS), min_size=1, max_size=4))
def test_sums_built_from_polynomials_equal_sympys(pairs):
    total = sympy.Add(*[w * e for w, e in pairs])
    assert expand_sum(pairs) == sympy.expand(total)
    fast = expanded_sum(tuple(pairs))
    assert fast is None or fast == sympy.expand(total)
    form = sum_form(tuple(pairs))
    if form is not None:
        value = total.xreplace({k: sympy.Integer(v) for k, v in VALUES.items()})
        assume(value.is_Rational)
        assert evaluate_form(form, VALUES) == Fraction(int(value.p), int(value.q))
