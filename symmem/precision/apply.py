"""A precision recipe applied to a rule set: the same table of op rules, each followed by the recipe's transform
of what the op keeps (`LowPrecision.transform`). Every reading of the rule set (activations, the timeline's peak,
`symmem check`) then sees the quantized copies; the recipe is a rule on saved tensors, not a code path."""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from symmem.graph import Dataflow, Op
from symmem.rules import Rule, RuleSet, Saved


def _wrapped(rule: Rule, lp) -> Rule:
    def wrapped(op: Op, flow: Dataflow) -> list[Saved]:
        return lp.transform(op, flow, rule(op, flow))

    return wrapped


@lru_cache(maxsize=64)  # one wrapped rule set per (rule set, recipe): derivations are cached by its identity
def with_precision(rules: RuleSet, precision) -> RuleSet:
    """`rules` under `precision` (a `Precision`); `rules` itself when the recipe changes no saved tensor."""
    lp = precision.low_precision
    if lp is None or not lp.changes_saved:
        return rules
    # every other field carried over (per-op AC's save list, GEMM groups and cache rule among them)
    return dataclasses.replace(rules, name=f"{rules.name}+{lp.name}",
                               description=f"{rules.description}; saved tensors under {lp.name}",
                               rules={kind: _wrapped(rule, lp) for kind, rule in rules.rules.items()})
