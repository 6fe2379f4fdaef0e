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
from functools import cached_property, lru_cache

import numpy as np
import sympy

from symmem.accounting.evaluate import as_expr, compile_expr
from symmem.accounting.params import GROUPS
from symmem.errors import SymmemError
from symmem.model import layer_flow
from symmem.scenario import Scenario
from symmem.symbols import s as s_symbol
from symmem.symbols import sym

VARIABLES = ("b", "s", "t", "ep", "etp", "cp")
PARALLEL = ("t", "ep", "etp")  # what parameter counts and the ZeRO extras vary with
SWEPT_AXES = "sweep"  # Parallel.axis_sizes: t, EP, ETP and CP symbolic


def swept_axes(scn: Scenario) -> bool | str:
    """How a case keeps the parallel sizes: t, EP, ETP symbolic, and CP too where it is above 1 (a rule set may
    hold buffers only under context parallelism, which a symbolic CP cannot tell from CP = 1: such arrangements
    are their own case, `structural_key`)."""
    return SWEPT_AXES if scn.parallel.cp > 1 else True
def derived_parallel(par, rules):
    """The parallel sizes a case is derived at: sequence parallelism at TP 1 changes no size, but a rule set whose
    workspaces exist only under it (megatron-te's all-gather buffers: none when the sp axis is 1) cannot see t = 1
    in a symbolic t, so those arrangements are derived apart, with sequence parallelism off (the same bytes, as the
    engine has them)."""
    import dataclasses

    if par.tp == 1 and par.sequence_parallel and bool(rules.workspaces):
        return dataclasses.replace(par, sequence_parallel=False, moe_sequence_parallel=False)
    return par


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
        expr = as_expr(expr)
        if expr.has(*_STEPS):  # step functions of s (V3.2, V4): numbers once s is among the constants
            vals = {k: sympy.Integer(v) for k, v in constants.items()}
            expr = expr.xreplace({a: a.xreplace(vals) for a in expr.atoms(*_STEPS)})
        acc: dict[Powers, Fraction] = {}
        try:
            compiled = compile_expr(expr)
        except ValueError as e:
            raise SymmemError(f"a derived expression is no polynomial in the swept sizes ({e})") from None
        for coeff, powers in compiled:
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
        return self._integer_form

    @cached_property  # a sweep evaluates the same candidate polynomials tile after tile
    def _integer_form(self) -> tuple[tuple[tuple[int, Powers], ...], dict[str, int], int]:
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

    def fraction_array(self, arrays: Mapping[str, object]) -> tuple[object, object]:
        """(numerator, denominator) arrays (int64; object if it must be) of the exact value over arrays."""
        poly = Poly(self.terms)
        terms, shifts, d = poly.integer_form()
        num = Poly(tuple((Fraction(n), powers) for n, powers in terms)).ceil_array(arrays)
        den = Poly(((Fraction(d), tuple((v, sh) for v, sh in shifts.items())),)).ceil_array(
            {k: v for k, v in arrays.items() if k in shifts}) if shifts else d
        return num, den

    def ceil_array(self, arrays: Mapping[str, object], maxima: Mapping[str, int] | None = None,
                   powers: dict | None = None) -> np.ndarray:
        """The exact ceiling over broadcastable arrays of positive integers (int64; object if it must be).

        Scalars are substituted first; the bound on the numerator is computed with Python integers from the
        arrays' maxima, so the int64 path is taken only when no product or sum can overflow. `maxima`, when given,
        are the arrays' maxima, already checked positive (`array_maxima`: computed once for many polynomials);
        `powers`, a cache of the arrays' powers shared by the polynomials evaluated over the same arrays."""
        scalars = {k: int(v) for k, v in arrays.items() if np.ndim(v) == 0}
        arrs = {k: np.asarray(v) for k, v in arrays.items() if np.ndim(v) != 0}
        poly = self.partial(scalars) if scalars else self
        missing = poly.variables - set(arrs)
        if missing:
            raise SymmemError(f"no value for {', '.join(sorted(missing))}")
        shape = np.broadcast_shapes(*(a.shape for a in arrs.values())) if arrs else ()
        terms, shifts, d = poly.integer_form()
        if maxima is None:
            maxima = array_maxima(arrs)
        bound = sum(abs(n) * math.prod(maxima[v] ** e for v, e in powers) for n, powers in terms)
        den_bound = d * math.prod(maxima[v] ** sh for v, sh in shifts.items())
        dtype = np.int64 if max(bound, den_bound) < INT64_SAFE else object
        cache: dict = powers if powers is not None else {}

        def power(name: str, e: int) -> np.ndarray:
            key = (name, e, dtype is object)
            if key not in cache:
                base = arrs[name].astype(dtype)
                cache[key] = base if e == 1 else base ** e
            return cache[key]

        # Terms grouped by their power of the variable with the largest array (b, in a sweep): each group is summed
        # on the smaller shape without that axis, and the full shape is reached once per group, not once per term.
        # Exact: every partial sum is bounded by `bound` too (all values are >= 1).
        big = max(arrs, key=lambda k: arrs[k].size) if arrs else None
        groups: dict[int, object] = {}
        for n, powers in terms:
            k, term = 0, n
            for name, e in powers:
                if name == big:
                    k = e
                else:
                    term = term * power(name, e)
            groups[k] = groups[k] + term if k in groups else term
        acc = np.zeros(shape, dtype=dtype)
        for k, group in sorted(groups.items()):
            acc += group * power(big, k) if k else group
        den: object = d
        for name, sh in shifts.items():
            den = den * power(name, sh)
        if isinstance(den, int) and den == 1:
            return acc
        return -((-acc) // den)


def array_maxima(arrays: Mapping[str, object]) -> dict[str, int]:
    """Each non-empty array's maximum (Python int), after checking that every value is a positive integer."""
    arrs = {k: np.asarray(v) for k, v in arrays.items() if np.ndim(v) != 0 and np.size(v)}
    if any(int(a.min()) < 1 for a in arrs.values()):
        raise SymmemError("swept sizes must be positive integers")
    return {k: int(a.max()) for k, a in arrs.items()}


@dataclass(frozen=True)
class PeakEvent:
    """One candidate peak event of a stage (`timeline.stage_events`) split by what the sweep varies: bytes alive
    = (k − 1) · saved + `own` + `zero2` under ZeRO-2 (the layer's unreduced gradients) or `zero3` under ZeRO-3
    (its gathered parameters, and those gradients in backward)."""

    label: str  # "phase part op"
    own: Poly  # in b, s, t, ep, etp
    zero2: Poly  # in t, ep, etp
    zero3: Poly


@dataclass(frozen=True)
class PeakGroup:
    """Candidates sharing their ZeRO extras: only those no other candidate dominates (see `prune`)."""

    candidates: tuple[Poly, ...]
    zero2: Poly
    zero3: Poly

    @cached_property
    def scaled(self) -> tuple[tuple[Poly, ...], Poly]:
        """The candidates over one common denominator: (numerators, denominator), each numerator an integer
        polynomial with non-negative exponents (candidate × denominator). The ceiling is monotone, so the largest
        candidate's ceiling is ceil(max(numerators) / denominator): one division per group, not per candidate."""
        forms = [p.integer_form() for p in self.candidates]
        shifts: dict[str, int] = {}
        for _, sh, _ in forms:
            for name, e in sh.items():
                shifts[name] = max(shifts.get(name, 0), e)
        d = math.lcm(*(f[2] for f in forms)) if forms else 1
        nums = []
        for p in self.candidates:
            acc: dict[Powers, Fraction] = {}
            for c, powers in p.terms:
                exps = dict(powers)
                for name, e in shifts.items():
                    exps[name] = exps.get(name, 0) + e
                k = tuple(sorted((n, e) for n, e in exps.items() if e))
                acc[k] = acc.get(k, Fraction(0)) + c * d
            nums.append(Poly._make(acc))
        return tuple(nums), Poly(((Fraction(d), tuple(sorted(shifts.items()))),))


@dataclass(frozen=True)
class StageClass:
    """Stages with identical expressions: `index` is the lowest stage index (the one named when it peaks)."""

    index: int
    members: tuple[int, ...]
    activation: Poly  # bytes per micro-batch on one GPU, in b, s, t, ep, etp (the sum's saved tensors)
    params: tuple[Poly, ...]  # parameters per GPU by `GROUPS`, in t, ep, etp
    saved: Poly  # the timeline's saved bytes per micro-batch (what each other micro-batch in flight holds)
    events: tuple[PeakEvent, ...]  # every candidate, in the timeline's order (which binds: the first maximum)
    groups: tuple[PeakGroup, ...]  # the undominated candidates, evaluated vectorised


@dataclass(frozen=True)
class CompiledCase:
    key: tuple
    pp: int
    classes: tuple[StageClass, ...]
    seconds: float  # time spent deriving and compiling
    created: float  # time.perf_counter() when compiled


def _dominates(p: dict, q: Poly) -> bool:
    """p ≥ q for every positive value of the variables: p − q has only non-negative coefficients."""
    return all(p.get(k, 0) >= c for c, k in q.terms) and all(c >= 0 for c in p.values())


def dominates(p: Poly, q: Poly) -> bool:
    """p ≥ q for every positive value of the variables: p − q has only non-negative coefficients."""
    return _dominated(q, {k: c for c, k in p.terms})


def prune(polys: list[Poly]) -> tuple[Poly, ...]:
    """The polynomials that no other one dominates (of equal ones, one): their maximum is everyone's.

    Dominance is a partial order and implies a value at least as large at every positive point (all variables 1
    here), so in order of decreasing value a dominated polynomial comes after one that dominates it and is
    dominated by a kept one (transitivity): only the kept ones need be checked."""
    unique = sorted(set(polys), key=lambda p: sum((c for c, _ in p.terms), Fraction(0)), reverse=True)
    kept: list[tuple[Poly, dict]] = []
    for p in unique:
        if not any(_dominated(p, qd) for _, qd in kept):
            kept.append((p, {k: c for c, k in p.terms}))
    return tuple(p for p, _ in kept)


def _dominated(p: Poly, qd: dict) -> bool:
    """q − p has only non-negative coefficients (q given as a dict)."""
    pk = set()
    for c, k in p.terms:
        pk.add(k)
        if qd.get(k, 0) < c:
            return False
    return all(c >= 0 for k, c in qd.items() if k not in pk)


def case_variables(scn: Scenario) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(variables of the activation and event polynomials, variables of the parameter and ZeRO-extra ones): the
    parallel sizes, and the vocabulary V where the profile pads it per TP (Megatron: a multiple of 128·TP), so
    that one derivation serves every TP."""
    v = ("V",) if scn.profile.padded_vocabulary is not None and scn.model.has("V") else ()
    return VARIABLES + v, PARALLEL + v


def case_constants(scn: Scenario) -> dict:
    """The model's sizes as the profile allocates them, without those that are variables of the case."""
    consts = scn.size_values()  # a copy
    if "V" in case_variables(scn)[0]:
        del consts[sym("V")]
    return consts


def peak_events(scn: Scenario, stage, consts, known: dict | None = None) -> tuple[Poly, tuple[PeakEvent, ...],
                                                                             tuple[PeakGroup, ...]]:
    """The stage's candidate peak events (`timeline.stage_events`) with t, ep, etp and CP symbolic, compiled;
    `known` the amounts compiled already under the same `consts` (the stages of one case share their layers')."""
    from symmem.accounting import timeline as T
    from symmem.accounting.activations import tensor_bytes
    from symmem.accounting.analysis import _activation_key, _tokens_per_expert
    from symmem.model import stage_parts

    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
    axes = scn.parallel.axis_sizes(swept_axes(scn))
    e_tok = _tokens_per_expert(_activation_key(scn), axes)
    variables, parallel = case_variables(scn)
    # in flight 2: the one other micro-batch's amount is the saved bytes per micro-batch; ZeRO-3: every extra
    extra = scn.profile.backward_tensors(scn, stage) if scn.profile.backward_tensors else ()
    back = tuple(T.Amount(T.PIPELINE, name, tensor_bytes(t, axes, scn.act_bytes, sympy.Integer(0)))
                 for name, t in extra)  # the pipeline schedule's gradient buffers, as `analysis` adds them
    events = T.stage_events(parts, scn.rules, scn.policy, axes, scn.act_bytes, e_tok, Fraction(2), 3,
                            scn.gathered, scn.precision.grad_bytes, back)
    known = {} if known is None else known

    def comp(amounts, variables=variables) -> Poly:
        """Sum of amounts, each compiled once (the same storages recur in many events)."""
        acc: dict = {}
        for a in amounts:
            key = (a.nbytes, variables)
            if key not in known:  # integer coefficients as int: adding them is much faster than Fractions
                known[key] = tuple((int(c) if c.denominator == 1 else c, k)
                                   for c, k in Poly.compile(a.nbytes, consts, variables).terms)
            for c, k in known[key]:
                acc[k] = acc.get(k, 0) + c
        return Poly._make({k: Fraction(c) for k, c in acc.items()})

    saved = None
    out: list[PeakEvent] = []
    for ev in events:
        if ev.phase == "optimizer step":
            continue  # no dynamic bytes: every other event holds at least as much
        other = [a for a in ev.amounts if a.component == T.SAVED_OTHER]
        zero3 = [a for a in ev.amounts if a.component in (T.GATHERED, T.UNREDUCED)]
        zero2 = [a for a in zero3 if a.component == T.UNREDUCED]
        own = [a for a in ev.amounts if a.component not in (T.SAVED_OTHER, T.GATHERED, T.UNREDUCED)]
        if saved is None:
            saved = comp(other)
        out.append(PeakEvent(" ".join(x for x in (ev.phase, ev.part, ev.op) if x), comp(own),
                             comp(zero2, parallel), comp(zero3, parallel)))
    by_extra: dict[tuple[Poly, Poly], list[Poly]] = {}
    for e in out:
        by_extra.setdefault((e.zero2, e.zero3), []).append(e.own)
    groups = tuple(PeakGroup(prune(c), z2, z3) for (z2, z3), c in by_extra.items())
    return saved if saved is not None else Poly(()), tuple(out), groups


_STEPS = (sympy.floor, sympy.ceiling, sympy.Min, sympy.Max)


@lru_cache(maxsize=256)
def _stepwise_in_s(model, convention: str, impl) -> bool:
    """Whether a tensor of the model's layers is a step function of s (V3.2's Min(k_I, s) selected keys, V4's
    floor(s/m_C) compressed entries, ...): its expressions are then no polynomial in s, and each s is compiled on
    its own, with those sizes evaluated at that s."""
    for kind in dict.fromkeys(model.layer_kinds()):
        flow = layer_flow(model, kind, convention, impl)
        for tensor in flow.tensors.values():
            if any(d.size.has(*_STEPS) for d in tensor.dims):
                return True
    return False


def stepwise_in_s(scn: Scenario) -> bool:
    return _stepwise_in_s(scn.model, scn.convention, scn.flow_impl)


def structural_key(scn: Scenario) -> tuple:
    """What the derived expressions depend on (not t, EP, ETP, DP, ZeRO, precision, schedule or M; b and s only
    through the Hugging Face dataflow's implementation, `Scenario.flow_impl`): among the rest, the profile (its
    rule set and pipeline buffers), CP (a number in the expressions) and the sizes as the profile allocates them
    (Megatron's padded vocabulary, which depends on TP)."""
    model, convention, rules, policy, par, routing, act_bytes = scn.activation_key
    hist_ep = par.ep if routing.kind == "histogram" else None
    # the arrangement as the derivation sees it: TP, CP, EP and ETP are variables, DP is not in the expressions
    arrangement = (par.pp, par.sequence_parallel, par.moe_sp, par.cp > 1, par.cp_comm_type, hist_ep)
    sizes = tuple(sorted((str(k), v) for k, v in case_constants(scn).items()))
    return (model, convention, rules, policy, arrangement, routing, act_bytes, scn.layout, scn.profile_name, sizes,
            scn.mtp, scn.flow_impl, scn.gathered, scn.precision.grad_bytes,  # ZeRO-2/3 extras
            scn.s if stepwise_in_s(scn) else None)


_CASES: dict[tuple, CompiledCase] = {}


def compile_case(scn: Scenario) -> CompiledCase:
    """Derive `scn`'s stage expressions once (symbolic in t, ep, etp) and compile them; cached per structure."""
    from symmem.accounting.analysis import stage_activation_expr, stage_params
    from symmem.accounting.recompute import Recompute
    from symmem.model import stage_parts

    key = structural_key(scn)
    hit = _CASES.get(key)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    consts = case_constants(scn)
    variables, parallel = case_variables(scn)
    if stepwise_in_s(scn):  # one case per s (structural_key): the step functions of s are numbers here
        consts[s_symbol] = scn.s
    groups: dict[tuple, list[int]] = {}
    events: dict[tuple, tuple] = {}  # a stage's content -> its peak events (the middle stages of a pipeline alike)
    known: dict = {}  # the amounts compiled (`peak_events`): the stages share their layers' storages
    for st in scn.stages:
        act = Poly.compile(stage_activation_expr(scn, st, symbolic_parallel=swept_axes(scn)), consts, variables)
        per_gpu = stage_params(scn, st, symbolic_parallel=swept_axes(scn)).per_gpu_expr
        params = tuple(Poly.compile(per_gpu[g], consts, parallel) for g in GROUPS)
        # (`peak_events` reads of the stage its parts, compared without their layer indices, and what the profile's
        # backward tensors may read: `head` and `embedding`)
        content = (stage_parts(scn.model, st, scn.convention, scn.flow_impl), st.head, st.embedding,
                   # (per-layer checkpointing picks layers by their index: then the stage's own layers)
                   st.layers if scn.policy.kind is Recompute.SELECTIVE_LAYER else None)
        if content not in events:
            events[content] = peak_events(scn, st, consts, known)
        peak = events[content]
        groups.setdefault((act, params, peak), []).append(st.index)
    classes = tuple(StageClass(min(idx), tuple(idx), act, params, *peak) for (act, params, peak), idx in groups.items())
    case = CompiledCase(key, scn.parallel.pp, tuple(sorted(classes, key=lambda c: c.index)),
                        time.perf_counter() - t0, t0)
    if len(_CASES) > 4096:
        _CASES.clear()
    _CASES[key] = case
    return case


def clear_cache() -> None:
    _CASES.clear()
