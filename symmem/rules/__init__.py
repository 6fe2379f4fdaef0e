"""Rule sets: for every op kind, which tensors autograd keeps for backward, at which dtype.

The paper's convention (Korthikanti et al. 2022 style) and PyTorch eager autograd are two rule sets over the
same dataflows: choosing one is choosing a table, never a code path.
"""

from __future__ import annotations

from symmem.errors import SymmemError
from symmem.rules._base import Rule, RuleSet, Saved, as_dtype, combine, inputs, nothing, outputs

__all__ = ["Rule", "RuleSet", "Saved", "as_dtype", "combine", "inputs", "nothing", "outputs", "rule_set",
           "rule_set_names"]


def _registry() -> dict[str, RuleSet]:
    # imported here: the rule modules build their tables from the helpers above
    from symmem.rules import megatron_local_ops, megatron_te, paper, torch_eager, torchtitan

    return {**{r.RULES.name: r.RULES for r in (paper, torch_eager, megatron_te, megatron_local_ops, torchtitan)},
            torchtitan.RULES_CPU.name: torchtitan.RULES_CPU,
            torchtitan.RULES_2412.name: torchtitan.RULES_2412, torchtitan.RULES_2506.name: torchtitan.RULES_2506}


def rule_set(name: str) -> RuleSet:
    """The rule set called `name`: `paper`, `torch-eager`, `megatron-te`, `megatron-local`, `torchtitan` or
    `torchtitan-cpu`, `torchtitan-2412` or `torchtitan-2506`.

    >>> rule_set("paper").rules["softmax"].__name__
    'rule'
    """
    sets = _registry()
    try:
        return sets[name]
    except KeyError:
        raise SymmemError(f"rules = {name!r}: unknown rule set; known: {', '.join(sets)}") from None


def rule_set_names() -> tuple[str, ...]:
    """The names of every rule set."""
    return tuple(_registry())
