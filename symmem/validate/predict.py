"""What the torch-eager rule set predicts for one Hugging Face decoder layer: the prediction behind `symmem measure`.

The prediction goes through the engine like any scenario (`rules = "torch-eager"`, `dataflow = "hf"`, one GPU, the
requested dtype and implementations; `symmem.accounting.analysis.stage_terms`), so a match validates the
derivation, not a formula typed for the occasion. It is for the layer transformers builds: where transformers
decides a layer's kind by another rule than the model family (DeepSeek-V3/V2's moe_layer_freq, which transformers
5.24 ignores), the prediction follows transformers and says so (`Prediction.note`). Bytes are split as the harness
flags them: the layer's own (its input included when it keeps it) and the tensors all layers share (the rotary
tables, counted once per stage). Parameters are compared per HF module with the dataflow's weights. Needs no
torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from symmem.errors import SymmemError
from symmem.implementations import DTYPES  # noqa: F401 - re-exported


@dataclass(frozen=True)
class Prediction:
    layer_kind: str  # the kind transformers builds for the layer, which the prediction is for
    expression: sympy.Expr  # the layer's bytes, in b, s and the model's symbols
    shared_expression: sympy.Expr  # the rotary tables, shared by all layers
    layer_bytes: int
    shared_bytes: int
    params: dict[str, int]  # per HF module (`self_attn.q_a_proj`, `mlp.experts`, ...) and "total"
    paper_params: int  # the same layer's weights in the paper's dataflow: the same total
    reference_kind: str = ""  # the kind by the family's (DeepSeek's) rule, which symmem's other commands use
    note: str | None = None  # one line saying why the two kinds differ, when they do


# transformers 5.24 gives a DeepSeek-V3/V2 decoder layer an MoE block iff layer_idx >= first_k_dense_replace
# (models/deepseek_v3/modeling_deepseek_v3.py:493, models/deepseek_v2/modeling_deepseek_v2.py:428): it never reads
# moe_layer_freq. DeepSeek's reference code (modeling_deepseek.py published with the DeepSeek-V2/V3 checkpoints,
# `DeepseekV3DecoderLayer.__init__`: layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0) and
# symmem's family (`symmem.families.deepseek.DeepSeek.layer_kinds`) apply it. For these model types, what
# transformers builds is the config with moe_layer_freq = 1.
TRANSFORMERS_KIND_RULE = {
    "deepseek_v3": "models/deepseek_v3/modeling_deepseek_v3.py:493",
    "deepseek_v2": "models/deepseek_v2/modeling_deepseek_v2.py:428",
}


def as_transformers_builds(raw: dict) -> dict:
    """The config as transformers 5.24 reads it for the layer kinds: `raw` itself, or for a DeepSeek-V3/V2 config
    with moe_layer_freq other than 1, a copy with moe_layer_freq = 1 (transformers ignores the key)."""
    if raw.get("model_type") in TRANSFORMERS_KIND_RULE and raw.get("moe_layer_freq", 1) != 1:
        return {**raw, "moe_layer_freq": 1}
    return raw


def _article(kind: str) -> str:
    return "an MoE layer" if kind == "moe" else f"a {kind} layer"


def kind_note(raw: dict, layer: int, built: str, reference: str) -> str:
    """One line: why layer `layer` is `built` in transformers and `reference` by DeepSeek's rule."""
    where = TRANSFORMERS_KIND_RULE[raw["model_type"]]
    return (f"layer {layer} is {_article(built)} in transformers 5.24, which reads only first_k_dense_replace = "
            f"{raw.get('first_k_dense_replace')} (transformers/{where}) and ignores moe_layer_freq = "
            f"{raw.get('moe_layer_freq')}; by DeepSeek's rule, as symmem's other commands count it, it is "
            f"{_article(reference)}. Predicted as transformers builds it.")


def scenario_for(raw: dict, b: int, s: int, dtype: str, attn: str, experts: str, name: str = "config",
                 precision: str = "paper"):
    """The one-GPU scenario that predicts a layer measured with these settings (under precision recipe
    `precision`, whose rules on saved tensors, if any, apply)."""
    from symmem.accounting.states import recipe
    from symmem.config import from_dict
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import ACT_DTYPES, Scenario

    if dtype not in ACT_DTYPES:
        raise SymmemError(f"--dtype = {dtype!r}: must be one of {', '.join(ACT_DTYPES)}")
    model = from_dict(raw, name)
    if not model.family.hf_biases_and_dropout:  # DeepSeek's and Llama's hf dataflows: neither
        for key, default in (("attention_bias", False), ("mlp_bias", False)):
            if raw.get(key, default):
                raise SymmemError(f"{name}: {key} = {raw[key]!r}: the hf dataflow models layers without biases")
        if raw.get("attention_dropout") or 0:
            raise SymmemError(f"{name}: attention_dropout = {raw['attention_dropout']!r}: the hf dataflow models "
                              "attention_dropout = 0 (HF's DeepSeek configs)")
    return Scenario(name="measure", model=model, parallel=Parallel(), mtp=False, b=b, s=s, rules_name="torch-eager",
                    act_bytes=ACT_DTYPES[dtype], dataflow="hf", attn_impl=attn, experts_impl=experts,
                    precision=recipe(precision))


def predict(raw: dict, layer: int, b: int, s: int, dtype: str = "fp32", attn: str = "eager",
            experts: str = "eager", name: str = "config", precision: str = "paper") -> Prediction:
    """What the torch-eager rule set derives for decoder layer `layer` of the HF model `raw` (a config dict)."""
    from symmem.accounting.analysis import stage_terms, to_int, values
    from symmem.graph import global_size
    from symmem.model import layer_flow, stage_parts
    from symmem.parallel.layout import Stage

    reference = scenario_for(raw, b, s, dtype, attn, experts, name).model.layer_kinds()  # checks the config too
    built = as_transformers_builds(raw)
    scn = scenario_for(built, b, s, dtype, attn, experts, name, precision)
    kinds = scn.model.layer_kinds()
    if not (isinstance(layer, int) and 0 <= layer < len(kinds)):
        raise SymmemError(f"--layer = {layer!r}: must be in [0, {len(kinds)})")
    note = kind_note(raw, layer, kinds[layer], reference[layer]) if kinds[layer] != reference[layer] else None
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
    return Prediction(kinds[layer], expr, shared, to_int(expr, vals), to_int(shared, vals), params, paper,
                      reference[layer], note)


def _layer_flow(scn, layer: int):
    from symmem.model import stage_parts
    from symmem.parallel.layout import Stage

    parts = stage_parts(scn.model, Stage(0, (layer,), False, False, 0), scn.convention, scn.flow_impl)
    return next(part.flow for part in parts if part.is_layers)
