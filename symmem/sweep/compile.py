"""Compiled evaluation for sweeps: derive once per structural case, evaluate exactly over numpy arrays.

A *structural case* is everything the dataflow derivation depends on: model, pipeline layout (so PP), TP
convention, rule set, recomputation policy, routing model (and EP for a histogram), sequence-parallel flags, MTP
placement and activation dtype. Its stages' per-GPU expressions (`stage_params(..., symbolic_parallel=True)` and
`stage_activation_expr(..., symbolic_parallel=True)`) keep t, ep and etp as symbols; with the model's sizes
substituted they are polynomials in b, s, t, ep, etp (negative powers of the parallel sizes) with exact rational
coefficients. `Poly` holds such a polynomial and evaluates its ceiling exactly: scalar variables are substituted
with fractions, the rest become integer numerators over one denominator, evaluated in int64 when a bound computed
with Python integers proves that no intermediate overflows, and with Python integers (object arrays) otherwise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import sympy

from symmem.accounting.evaluate import as_expr, compile_expr
from symmem.accounting.params import GROUPS
from symmem.errors import SymmemError
from symmem.scenario import Scenario

VARIABLES = ("b", "s", "t", "ep", "etp")
INT64_SAFE = 2**62  # every intermediate is kept below this bound on the int64 path (int64 holds 2^63 - 1)

Powers = tuple[tuple[str, int], ...]


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


@dataclass(frozen=True)
class Poly:
    """sum(coefficient · prod(variable^exponent)) with exact rational coefficients; exponents may be negative."""

    terms: tuple[tuple[Fraction, Powers], ...]

    @staticmethod
    def compile(expr: sympy.Expr, constants: Mapping[sympy.Symbol, int], variables=VARIABLES) -> Poly:
        """The polynomial of `expr` in `variables` with every other symbol replaced by its constant."""
        wanted = set(variables)
        acc: dict[Powers, Fraction] = {}
        for coeff, powers in compile_expr(as_expr(expr)):
            c = coeff
            key = []
            for symbol, e in powers:
                if symbol.name in wanted:
                    key.append((symbol.name, e))
                elif symbol in constants:
                    c *= Fraction(constants[symbol]) ** e
                else:
                    raise SymmemError(f"symbol {symbol} in a derived expression is neither swept nor a model size")
            k = tuple(sorted(key))
            acc[k] = acc.get(k, Fraction(0)) + c
        return Poly._make(acc)

    @staticmethod
    def _make(acc: dict[Powers, Fraction]) -> Poly:
        return Poly(tuple(sorted(((c, k) for k, c in acc.items() if c), key=lambda t: t[1])))

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(name for _, powers in self.terms for name, _ in powers)

    def partial(self, values: Mapping[str, int]) -> Poly:
        """Substitute the variables given (exactly)."""
        acc: dict[Powers, Fraction] = {}
        for c, powers in self.terms:
            key = []
            for name, e in powers:
                if name in values:
                    c *= Fraction(int(values[name])) ** e
                else:
                    key.append((name, e))
            k = tuple(key)
            acc[k] = acc.get(k, Fraction(0)) + c
        return Poly._make(acc)

    def value(self, values: Mapping[str, int]) -> Fraction:
        p = self.partial(values)
        if p.variables:
            raise SymmemError(f"no value for {', '.join(sorted(p.variables))}")
        return sum((c for c, _ in p.terms), Fraction(0))

    def ceil(self, values: Mapping[str, int]) -> int:
        """The exact ceiling at one point (a fractional byte or parameter rounds up, as `analysis.to_int`)."""
        return _ceil(self.value(values))

    def integer_form(self) -> tuple[tuple[tuple[int, Powers], ...], dict[str, int], int]:
        """(numerator terms, shifts, d): self = sum(n · prod v^e) / (d · prod v^shift), every e >= 0."""
        shifts: dict[str, int] = {}
        for _, powers in self.terms:
            for name, e in powers:
                if e < 0:
                    shifts[name] = max(shifts.get(name, 0), -e)
        d = math.lcm(*(c.denominator for c, _ in self.terms)) if self.terms else 1
        out = []
        for c, powers in self.terms:
            exps = dict(powers)
            for name, sh in shifts.items():
                exps[name] = exps.get(name, 0) + sh
            out.append((int(c * d), tuple(sorted((n, e) for n, e in exps.items() if e))))
        return tuple(out), shifts, d

    def ceil_array(self, arrays: Mapping[str, object]) -> np.ndarray:
        """The exact ceiling over broadcastable arrays of positive integers (int64; object if it must be).

        Scalars are substituted first; the bound on the numerator is computed with Python integers from the
        arrays' maxima, so the int64 path is taken only when no product or sum can overflow."""
        scalars = {k: int(v) for k, v in arrays.items() if np.ndim(v) == 0}
        arrs = {k: np.asarray(v) for k, v in arrays.items() if np.ndim(v) != 0}
        poly = self.partial(scalars) if scalars else self
        missing = poly.variables - set(arrs)
        if missing:
            raise SymmemError(f"no value for {', '.join(sorted(missing))}")
        shape = np.broadcast_shapes(*(a.shape for a in arrs.values())) if arrs else ()
        terms, shifts, d = poly.integer_form()
        maxima = {k: int(a.max()) for k, a in arrs.items() if a.size}
        if any(int(a.min()) < 1 for a in arrs.values() if a.size):
            raise SymmemError("swept sizes must be positive integers")
        bound = sum(abs(n) * math.prod(maxima[v] ** e for v, e in powers) for n, powers in terms)
        den_bound = d * math.prod(maxima[v] ** sh for v, sh in shifts.items())
        dtype = np.int64 if max(bound, den_bound) < INT64_SAFE else object
        cache: dict[tuple[str, int], np.ndarray] = {}

        def power(name: str, e: int) -> np.ndarray:
            if (name, e) not in cache:
                base = arrs[name].astype(dtype)
                cache[(name, e)] = base if e == 1 else base ** e
            return cache[(name, e)]

        acc = np.zeros(shape, dtype=dtype)
        for n, powers in terms:
            term: object = n
            for name, e in powers:
                term = term * power(name, e)
            acc = acc + term
        den: object = d
        for name, sh in shifts.items():
            den = den * power(name, sh)
        if isinstance(den, int) and den == 1:
            return acc
        return -((-acc) // den)


@dataclass(frozen=True)
class StageClass:
    """Stages with identical expressions: `index` is the lowest stage index (the one named when it peaks)."""

    index: int
    members: tuple[int, ...]
    activation: Poly  # bytes per micro-batch on one GPU, in b, s, t, ep, etp
    params: tuple[Poly, ...]  # parameters per GPU by `GROUPS`, in t, ep, etp


@dataclass(frozen=True)
class CompiledCase:
    key: tuple
    pp: int
    classes: tuple[StageClass, ...]
    seconds: float  # time spent deriving and compiling
    created: float  # time.perf_counter() when compiled


def structural_key(scn: Scenario) -> tuple:
    """What the derived expressions depend on (not t, EP, ETP, DP, ZeRO, precision, schedule or M; b and s only
    through the Hugging Face dataflow's implementation, `Scenario.flow_impl`)."""
    par = scn.parallel
    hist_ep = par.ep if scn.routing.kind == "histogram" else None
    return (scn.model, scn.layout, par.pp, scn.convention, scn.rules_name, scn.recompute_name, scn.routing,
            par.sequence_parallel, par.moe_sp, scn.mtp, scn.act_bytes, hist_ep, getattr(scn, "flow_impl", None))


_CASES: dict[tuple, CompiledCase] = {}


def compile_case(scn: Scenario) -> CompiledCase:
    """Derive `scn`'s stage expressions once (symbolic in t, ep, etp) and compile them; cached per structure."""
    from symmem.accounting.analysis import stage_activation_expr, stage_params

    key = structural_key(scn)
    hit = _CASES.get(key)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    consts = scn.model.substitutions()
    groups: dict[tuple, list[int]] = {}
    for st in scn.stages:
        act = Poly.compile(stage_activation_expr(scn, st, symbolic_parallel=True), consts)
        per_gpu = stage_params(scn, st, symbolic_parallel=True).per_gpu_expr
        params = tuple(Poly.compile(per_gpu[g], consts, ("t", "ep", "etp")) for g in GROUPS)
        groups.setdefault((act, params), []).append(st.index)
    classes = tuple(StageClass(min(idx), tuple(idx), act, params) for (act, params), idx in groups.items())
    case = CompiledCase(key, scn.parallel.pp, tuple(sorted(classes, key=lambda c: c.index)),
                        time.perf_counter() - t0, t0)
    if len(_CASES) > 4096:
        _CASES.clear()
    _CASES[key] = case
    return case


def clear_cache() -> None:
    _CASES.clear()
