"""symmem: closed-form GPU memory of large-model training, derived symbolically from layer dataflows.

The public API is loaded lazily (PEP 562): `import symmem` imports no sympy until a name is used, so that
`symmem --help` starts fast.

>>> from symmem import load_scenario, stage_params
>>> scn = load_scenario("paper")
>>> stage_params(scn, scn.stages[1]).total
6250364928
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# public name -> the module that defines it
_EXPORTS = {
    "StageMemory": "symmem.accounting.analysis", "StageParams": "symmem.accounting.analysis",
    "memory": "symmem.accounting.analysis", "model_totals": "symmem.accounting.analysis",
    "peak": "symmem.accounting.analysis", "stage_activation_expr": "symmem.accounting.analysis",
    "stage_memory": "symmem.accounting.analysis", "stage_params": "symmem.accounting.analysis",
    "stage_states": "symmem.accounting.analysis", "stage_terms": "symmem.accounting.analysis",
    "Recompute": "symmem.accounting.recompute", "policy": "symmem.accounting.recompute",
    "Precision": "symmem.accounting.states", "ZeroStage": "symmem.accounting.states",
    "recipe": "symmem.accounting.states",
    "check_formula": "symmem.check", "parse_formula": "symmem.check",
    "compare": "symmem.check.compare", "derive": "symmem.check.quantities",
    "ModelConfig": "symmem.config", "load_model": "symmem.config", "from_dict": "symmem.config",
    "SymmemError": "symmem.errors",
    "Family": "symmem.family",
    "Dataflow": "symmem.graph", "DataflowBuilder": "symmem.graph", "Dim": "symmem.graph", "Op": "symmem.graph",
    "Tensor": "symmem.graph", "Weight": "symmem.graph",
    "LayoutSpec": "symmem.parallel.layout", "Stage": "symmem.parallel.layout",
    "Parallel": "symmem.parallel.sizes", "Routing": "symmem.parallel.routing",
    "Schedule": "symmem.parallel.schedule",
    "latex": "symmem.render.latex", "rule_set": "symmem.rules",
    "Scenario": "symmem.scenario", "load_scenario": "symmem.scenario",
    "SYMBOLS": "symmem.symbols", "sym": "symmem.symbols",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'symmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from symmem.accounting.analysis import (  # noqa: F401
        StageMemory,
        StageParams,
        memory,
        model_totals,
        peak,
        stage_activation_expr,
        stage_memory,
        stage_params,
        stage_states,
        stage_terms,
    )
