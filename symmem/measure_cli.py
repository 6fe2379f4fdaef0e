"""`symmem measure`: one HF decoder layer (DeepSeek-V2/V3, Llama) measured in real PyTorch, next to what the
torch-eager rule set derives.

The prediction goes through the engine like any scenario (`rules = "torch-eager"`, `dataflow = "hf"`, one GPU,
the requested dtype and implementations; `symmem.analysis.stage_terms`), so a match validates the derivation,
not a formula typed for the occasion. Bytes are split as the harness flags them: the layer's own (its input
included when it keeps it) and the rotary tables all layers share (counted once per stage by the engine).
Parameters are compared per HF module with the dataflow's weights.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import sympy

from .errors import SymmemError

DTYPES = ("fp32", "bf16")


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
    from .config import from_dict
    from .parallel import Parallel
    from .scenario import ACT_DTYPES, Scenario

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
    from .analysis import stage_terms, to_int, values
    from .graph import global_size
    from .layout import Stage
    from .model import layer_flow, stage_parts

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
    from .layout import Stage
    from .model import stage_parts

    parts = stage_parts(scn.model, Stage(0, (layer,), False, False, 0), scn.convention, scn.flow_impl)
    return next(part.flow for part in parts if part.is_layers)


def _require_torch() -> None:
    from .validate.harness import _MISSING

    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise SymmemError(_MISSING) from None


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="an HF config.json of a DeepSeek-V2/V3 or Llama model (keep it "
                                                   "tiny: the model is built on the CPU)")
    p.add_argument("--layer", type=int, default=0, help="decoder layer index (DeepSeek: dense below "
                                                       "first_k_dense_replace)")
    p.add_argument("-b", "--micro-batch-size", dest="b", type=int, default=2)
    p.add_argument("-s", "--seq-length", dest="s", type=int, default=5)
    p.add_argument("--dtype", default="fp32", choices=DTYPES, help="model and activation dtype")
    p.add_argument("--attn", default="eager", choices=("eager", "sdpa"), help="attn_implementation")
    p.add_argument("--experts", default="eager", choices=("eager", "grouped_mm"),
                   help="experts_implementation (models with routed experts; ignored for Llama)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs")
    p.add_argument("--json", action="store_true")


def _load(path: str) -> dict:
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as e:
        raise SymmemError(f"--config = {path!r}: cannot read: {e.__class__.__name__}") from None
    except ValueError as e:
        raise SymmemError(f"--config = {path!r}: not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise SymmemError(f"--config = {path!r}: must hold a JSON object")
    return raw


def _run(args) -> int:
    from .render.latex import plain

    _require_torch()
    raw = _load(args.config)
    if args.b < 1 or args.s < 1:
        raise SymmemError(f"(b, s) = ({args.b}, {args.s}): both must be >= 1")
    pred = predict(raw, args.layer, args.b, args.s, args.dtype, args.attn, args.experts, args.config)
    from .validate import measure_layer

    m = measure_layer(raw, args.layer, args.b, args.s, dtype=args.dtype, attn=args.attn, experts=args.experts,
                      seed=args.seed)
    measured = m.saved_bytes - m.shared_saved_bytes
    llama = raw.get("model_type") == "llama"
    params = {k: {"measured": m.param_counts.get(k), "predicted": pred.params.get(k)}
              for k in dict.fromkeys([*m.param_counts, *pred.params])}
    result = {
        "config": args.config, "layer": args.layer, "layer_kind": pred.layer_kind, "b": args.b, "s": args.s,
        "dtype": args.dtype, "attn": args.attn, "experts": args.experts, "unit": "bytes",
        "measured": measured, "predicted": pred.layer_bytes, "match": measured == pred.layer_bytes,
        "expression": plain(pred.expression),
        "measured_shared": m.shared_saved_bytes, "predicted_shared": pred.shared_bytes,
        "shared_expression": plain(pred.shared_expression),
        "shared_match": m.shared_saved_bytes == pred.shared_bytes,
        "params": params, "params_match": all(v["measured"] == v["predicted"] for v in params.values()),
        "paper_dataflow_params": pred.paper_params,
        "notes": "measured: storages the layer keeps for backward, its input included when kept; shared: the "
                 "rotary tables every layer keeps (one tensor per model)"
                 + ("; b = 1 or s = 1: the value's reshape is a view of kv_b_proj's output"
                    if (args.b == 1 or args.s == 1) and not llama else "")
                 + ("; experts: ignored (Llama has no routed experts)" if llama else ""),
    }
    ok = result["match"] and result["shared_match"] and result["params_match"]
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0 if ok else 1
    print(f"{args.config} layer {args.layer} ({pred.layer_kind}), b = {args.b}, s = {args.s}, {args.dtype}, "
          f"attn {args.attn}" + ("" if llama else f", experts {args.experts}"))
    print(f"  measured  {measured:,} bytes")
    print(f"  predicted {pred.layer_bytes:,} bytes  {'(exact)' if result['match'] else '(DIFFERENT)'}")
    print(f"  = {result['expression']}")
    print(f"  shared rotary tables: measured {m.shared_saved_bytes:,}, predicted {pred.shared_bytes:,} "
          f"= {result['shared_expression']}")
    bad = [k for k, v in params.items() if v["measured"] != v["predicted"]]
    print(f"  parameters: {pred.params['total']:,} in {len(pred.params) - 1} modules, "
          + ("all equal to the measured counts" if not bad else "DIFFERENT: " + ", ".join(bad)))
    return 0 if ok else 1


COMMAND = ("measure one HF decoder layer in PyTorch and compare with the torch-eager derivation "
           "(needs the validate extra)", _add_args, _run)
