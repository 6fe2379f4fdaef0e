"""What the torch-eager rule set predicts for one Hugging Face decoder layer: the prediction behind `symmem measure`.

The prediction goes through the engine like any scenario (`rules = "torch-eager"`, `dataflow = "hf"`, one GPU,
the requested dtype and implementations; `symmem.accounting.analysis.stage_terms`), so a match validates the
derivation, not a formula typed for the occasion. Bytes are split as the harness flags them: the layer's own (its
input included when it keeps it) and the tensors all layers share (the rotary tables, counted once per stage).
Parameters are compared per HF module with the dataflow's weights. Needs no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from symmem.errors import SymmemError
from symmem.implementations import DTYPES  # noqa: F401 - re-exported


@dataclass(frozen=True)
class Prediction:
    layer_kind: str
    expression: sympy.Expr  # the layer's bytes, in b, s and the model's symbols
    shared_expression: sympy.Expr  # the rotary tables, shared by all layers
    layer_bytes: int
    shared_bytes: int
    params: dict[str, int]  # per HF module (`self_attn.q_a_proj`, `mlp.experts`, ...) and "total"
    paper_params: int  # the same layer's weights in the paper's dataflow: the same total


def scenario_for(raw: dict, b: int, s: int, dtype: str, attn: str, experts: str, name: str = "config"):
    """The one-GPU scenario that predicts a layer measured with these settings."""
    from symmem.config import from_dict
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import ACT_DTYPES, Scenario

    if dtype not in ACT_DTYPES:
        raise SymmemError(f"--dtype = {dtype!r}: must be one of {', '.join(ACT_DTYPES)}")
    for key, default in (("attention_bias", False), ("mlp_bias", False)):
        if raw.get(key, default):
            raise SymmemError(f"{name}: {key} = {raw[key]!r}: the hf dataflow models layers without biases")
    if raw.get("attention_dropout") or 0:
        raise SymmemError(f"{name}: attention_dropout = {raw['attention_dropout']!r}: the hf dataflow models "
                          "attention_dropout = 0 (HF's DeepSeek configs)")
    model = from_dict(raw, name)
    return Scenario(name="measure", model=model, parallel=Parallel(), mtp=False, b=b, s=s, rules_name="torch-eager",
                    act_bytes=ACT_DTYPES[dtype], dataflow="hf", attn_impl=attn, experts_impl=experts)


def predict(raw: dict, layer: int, b: int, s: int, dtype: str = "fp32", attn: str = "eager",
            experts: str = "eager", name: str = "config") -> Prediction:
    """What the torch-eager rule set derives for decoder layer `layer` of the HF model `raw` (a config dict)."""
    from symmem.accounting.analysis import stage_terms, to_int, values
    from symmem.graph import global_size
    from symmem.model import layer_flow, stage_parts
    from symmem.parallel.layout import Stage

    scn = scenario_for(raw, b, s, dtype, attn, experts, name)
    kinds = scn.model.layer_kinds()
    if not (isinstance(layer, int) and 0 <= layer < len(kinds)):
        raise SymmemError(f"--layer = {layer!r}: must be in [0, {len(kinds)})")
    stage = Stage(0, (layer,), False, False, 0)
    terms = stage_terms(scn, stage)
    shared_parts = {p.name for p in stage_parts(scn.model, stage, scn.convention, scn.flow_impl) if p.kind == "shared"}
    expr = sympy.expand(sum((t.total for t in terms if t.part not in shared_parts), sympy.Integer(0)))
    shared = sympy.expand(sum((t.total for t in terms if t.part in shared_parts), sympy.Integer(0)))
    vals = values(scn)
    subs = scn.model.substitutions()
    params: dict[str, int] = {}
    for _op, w in _layer_flow(scn, layer).weights():
        owner = w.name.rsplit(".", 1)[0]
        params[owner] = params.get(owner, 0) + to_int(global_size(w.dims), subs)
    params["total"] = sum(params.values())
    paper = sum(to_int(global_size(w.dims), subs) for _op, w in layer_flow(scn.model, kinds[layer], "paper").weights())
    return Prediction(kinds[layer], expr, shared, to_int(expr, vals), to_int(shared, vals), params, paper)


def _layer_flow(scn, layer: int):
    from symmem.model import stage_parts
    from symmem.parallel.layout import Stage

    parts = stage_parts(scn.model, Stage(0, (layer,), False, False, 0), scn.convention, scn.flow_impl)
    return next(part.flow for part in parts if part.is_layers)
