"""symmem: closed-form GPU memory of MoE training, derived symbolically from layer dataflows.

>>> from symmem import load_scenario, stage_params
>>> scn = load_scenario("paper")
>>> stage_params(scn, scn.stages[1]).total
6250364928
"""

from .analysis import (
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
from .check import parse_formula
from .check.compare import compare
from .config import ModelConfig, load_model
from .errors import SymmemError
from .graph import Dataflow, DataflowBuilder, Dim, Op, Tensor, Weight
from .layout import LayoutSpec, Stage
from .parallel import Parallel
from .recompute import Recompute, policy
from .render.latex import latex
from .routing import Routing
from .rules import rule_set
from .scenario import Scenario, load_scenario
from .schedule import Schedule
from .states import Precision, ZeroStage, recipe
from .symbols import SYMBOLS, sym

__version__ = "0.1.0"

__all__ = [
    "SYMBOLS", "Dataflow", "DataflowBuilder", "Dim", "LayoutSpec", "ModelConfig", "Op", "Parallel", "Precision",
    "Recompute", "Routing", "Scenario", "Schedule", "Stage", "StageMemory", "StageParams", "SymmemError", "Tensor",
    "Weight", "ZeroStage", "compare", "latex", "load_model", "load_scenario", "memory", "model_totals",
    "parse_formula", "peak", "policy", "recipe", "rule_set", "stage_activation_expr", "stage_memory",
    "stage_params", "stage_states", "stage_terms", "sym",
]
