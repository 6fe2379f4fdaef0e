"""`symmem measure --framework torchao-float8`: one HF Llama-family decoder layer with torchao 0.18.0's float8
training (`convert_to_float8_training`, `emulate=True`, on the CPU), measured (`symmem.validate.torchao_float8.
runner`) and predicted by the engine under the recipe `torchao-float8-<recipe>` (`...torchao_float8.predict`).

Compared: `saved` (the layer's own saved bytes, its input included when kept), `shared` (the rotary tables every
layer keeps) and `states` (parameters, gradients and AdamW state of the layer after one step). Exit 0 only when all
three are equal.
"""

from __future__ import annotations

import json

from symmem.errors import SymmemError


def run(args) -> int:
    from symmem._config_checks import check_config
    from symmem._files import read_json_object
    from symmem.cli.hf_checks import check_for_transformers
    from symmem.validate.torchao_float8 import predict as pr
    from symmem.validate.torchao_float8 import runner

    raw = read_json_object(args.config, "--config")
    recipe = args.recipe or "tensorwise"
    if recipe not in runner.RECIPES:
        raise SymmemError(f"--recipe = {recipe!r}: must be one of {', '.join(runner.RECIPES)}")
    options = runner.parse_options(args.option)
    if raw.get("model_type") != "llama":
        raise SymmemError(f"{args.config}: model_type = {str(raw.get('model_type'))[:40]!r}: torchao-float8 runs "
                          "measure Llama-family layers (model_type llama)")
    if args.dtype not in ("fp32", "bf16"):
        raise SymmemError(f"--dtype = {args.dtype!r}: torchao-float8 runs are fp32 (the recipe's FP32 parameters, "
                          "gradients and moments) or bf16 (every tensor BF16)")
    if args.b < 1 or args.s < 1:
        raise SymmemError(f"(b, s) = ({args.b}, {args.s}): both must be >= 1")
    check_config(raw, args.config)
    check_for_transformers(raw, args.config)
    pred = pr.predicted(raw, args.layer, args.b, args.s, recipe, args.attn, args.config, args.dtype)
    runner.require()
    from symmem.validate.harness import _import

    _import()  # torch and transformers, or a one-line SymmemError
    config = runner.float8_config(recipe, options)
    m = runner.measure_saved(raw, args.layer, args.b, args.s, config, args.attn, args.seed, args.dtype)
    states = runner.measure_states(raw, args.layer, args.b, args.s, config, args.attn, args.seed, args.dtype)
    measured = {"saved": m.saved_bytes - m.shared_saved_bytes, "shared": m.shared_saved_bytes, "states": states}
    match = {"saved": measured["saved"] == pred["saved_layer"], "shared": measured["shared"] == pred["saved_shared"],
             "states": states == pred["states"]}
    ok = all(match.values())
    settings = {k: getattr(config, k) for k in runner.OPTIONS}
    if args.json:
        print(json.dumps({"framework": "torchao-float8", "version": runner.VERSION, "config": args.config,
                          "recipe": recipe, "precision": pred["precision"], "options": settings, "emulate": True,
                          "layer": args.layer, "b": args.b, "s": args.s, "dtype": args.dtype, "attn": args.attn,
                          "unit": "bytes", "measured": measured,
                          "predicted": {"saved": pred["saved_layer"], "shared": pred["saved_shared"],
                                        "states": pred["states"], "expression": pred["expression"]},
                          "match": match, "equal": ok,
                          "notes": "saved: storages the layer keeps for backward, its input included when kept; "
                                   "shared: the rotary tables; states: the layer's parameters, gradients and AdamW "
                                   "state (exp_avg, exp_avg_sq, an FP32 step per parameter) after one step"},
                         indent=2, sort_keys=True))
        return 0 if ok else 1
    print(f"{args.config} layer {args.layer}: torchao {runner.VERSION} float8 training, recipe {recipe} "
          f"(emulate=True), b = {args.b}, s = {args.s}, {args.dtype}; predicted under --precision {pred['precision']}")
    print("  options: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    for key, m_val, p_val in (("saved", measured["saved"], pred["saved_layer"]),
                              ("shared", measured["shared"], pred["saved_shared"]),
                              ("states", states["total"], pred["states"]["total"])):
        print(f"  {key:<7} measured {m_val:>12,}  predicted {p_val:>12,}  {'(exact)' if match[key] else '(DIFFERENT)'}")
    print(f"  saved = {pred['expression']}")
    print("EQUAL" if ok else "DIFFERENT")
    return 0 if ok else 1
