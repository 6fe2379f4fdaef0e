"""`symmem measure`: one HF decoder layer (DeepSeek-V2/V3, Llama) measured in real PyTorch, next to what the
torch-eager rule set derives (`symmem.validate.predict`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from symmem.errors import SymmemError
from symmem.implementations import DTYPES


def _require_torch() -> None:
    from symmem.validate.harness import _MISSING

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
    from symmem.render.latex import plain
    from symmem.validate.predict import predict

    _require_torch()
    raw = _load(args.config)
    llama = raw.get("model_type") == "llama"
    if args.b < 1 or args.s < 1:
        raise SymmemError(f"(b, s) = ({args.b}, {args.s}): both must be >= 1")
    pred = predict(raw, args.layer, args.b, args.s, args.dtype, args.attn, args.experts, args.config)
    from symmem.validate import measure_layer

    m = measure_layer(raw, args.layer, args.b, args.s, dtype=args.dtype, attn=args.attn, experts=args.experts,
                      seed=args.seed)
    measured = m.saved_bytes - m.shared_saved_bytes
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
