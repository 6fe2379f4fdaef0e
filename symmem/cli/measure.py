"""`symmem measure`: one HF decoder layer (DeepSeek-V2/V3, Llama) measured in real PyTorch, next to what the
torch-eager rule set derives (`symmem.validate.predict`)."""

from __future__ import annotations

import argparse
import json
import os

from symmem._config_checks import check_config
from symmem._numbers import MAX_B, MAX_LAYERS, MAX_S
from symmem.cli.args import int_arg
from symmem.cli.hf_checks import check_for_transformers
from symmem.errors import SymmemError
from symmem.implementations import DTYPES

MAX_SEED = 2**32 - 1


def _require_torch() -> None:
    from symmem.validate.harness import _MISSING

    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise SymmemError(_MISSING) from None


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--framework", default="transformers", choices=("transformers", "megatron-core", "torchao-float8",
                                                                   "fsdp2"),
                   help="transformers: one HF decoder layer; megatron-core: one whole Megatron-Core 0.16.1 training "
                        "iteration per rank on the CPU (needs the megatron extra); torchao-float8: one HF Llama "
                        "decoder layer under torchao 0.18.0's float8 training (emulate=True); fsdp2: one FSDP2 "
                        "training step of torchtitan 0.3.0's Llama 3 or DeepSeek-V3 per rank on the CPU (needs the "
                        "torchtitan extra; --dp ranks, default 2)")
    p.add_argument("--hsdp-replicate", dest="hsdp_replicate", type=int_arg(1, 8), default=None,
                   help="fsdp2: HSDP's replicate degree (the mesh is replicate x --dp/replicate; default 1)")
    p.add_argument("--no-reshard-after-forward", dest="no_reshard_after_forward", action="store_true",
                   help="fsdp2: fully_shard(reshard_after_forward=False)")
    p.add_argument("--ac", default=None, help="fsdp2: torchtitan's activation checkpointing, none, full, "
                                              "selective-op (per-op SAC) or selective-layer:N (every N-th block) "
                                              "(default none)")
    p.add_argument("--recipe", default=None, help="torchao-float8: tensorwise (default), rowwise or "
                                                  "rowwise_with_gw_hp (Float8LinearConfig.from_recipe_name); "
                                                  "fsdp2: torchtitan's Float8 linears under that recipe (default: "
                                                  "none, BF16)")
    p.add_argument("--enable-fsdp-float8-all-gather", dest="fsdp_float8_all_gather", action="store_true",
                   help="fsdp2 with --recipe tensorwise: FSDP2 gathers the Float8 linears' weights in float8 "
                        "(torchao's Float8LinearConfig option)")
    p.add_argument("--compile", action="store_true",
                   help="fsdp2: torchtitan's torch.compile (each block and the loss, inductor; the CPU's C++ "
                        "backend); compares the states and the saved bytes (Llama 3 or DeepSeek-V3; TP 1, no PP, BF16)")
    p.add_argument("--option", action="append", metavar="KEY=BOOL",
                   help="torchao-float8: a Float8LinearConfig field set on the recipe, repeatable: pad_inner_dim, "
                        "force_recompute_fp8_weight_in_bwd, round_scales_to_power_of_2")
    p.add_argument("--config", required=True, help="an HF config.json of a DeepSeek-V2/V3 or Llama model (keep it "
                                                   "tiny: the model is built on the CPU); megatron-core: llama, gpt2 "
                                                   "or qwen2_moe")
    for flag, what in (("--tp", "tensor"), ("--pp", "pipeline"), ("--dp", "data"), ("--ep", "expert")):
        p.add_argument(flag, type=int_arg(1, 64), default=None,
                       help=f"{what}-parallel size (megatron-core; fsdp2: --dp, --tp and --pp; default 1, fsdp2's "
                            "--dp 2)")
    p.add_argument("--chunks", type=int_arg(1, 64), default=None,
                   help="virtual stages per pipeline rank: Megatron's interleaved 1F1B (megatron-core), torchtitan's "
                        "Interleaved1F1B with 2 (fsdp2); default 1")
    p.add_argument("--microbatches", type=int_arg(1, 64), default=None,
                   help="micro-batches of the iteration (megatron-core, default 1; fsdp2 with --pp, default 4)")
    p.add_argument("--recompute", default=None, choices=("none", "selective", "full"),
                   help="Megatron's recompute_granularity (megatron-core; default none)")
    p.add_argument("--layer", type=int_arg(0, MAX_LAYERS), default=None,
                   help="decoder layer index (transformers and torchao-float8, default 0; DeepSeek: dense below "
                        "first_k_dense_replace)")
    p.add_argument("-b", "--micro-batch-size", dest="b", type=int_arg(0, MAX_B), default=2)
    p.add_argument("-s", "--seq-length", dest="s", type=int_arg(0, MAX_S), default=5)
    p.add_argument("--dtype", default="fp32", choices=DTYPES, help="model and activation dtype")
    p.add_argument("--attn", default="eager", choices=("eager", "sdpa"), help="attn_implementation")
    p.add_argument("--experts", default="eager", choices=("eager", "grouped_mm"),
                   help="experts_implementation (models with routed experts; ignored for Llama)")
    p.add_argument("--seed", type=int_arg(0, MAX_SEED), default=0,
                   help=f"seed of the random weights and inputs (0 to {MAX_SEED:,})")
    p.add_argument("--json", action="store_true")


def _load(path: str) -> dict:
    from symmem._files import read_json_object

    return read_json_object(path, "--config")


def available_memory() -> int | None:
    """Bytes this machine has available (MemAvailable of /proc/meminfo), or None where that is unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def estimate_bytes(raw: dict, pred, b: int, s: int, dtype: str, name: str) -> int:
    """What `measure` would allocate, estimated from the engine before anything is built: the whole model's
    parameters (transformers builds every layer), twice what the layer keeps for backward (its transients), and
    the hidden states of the layers run before it."""
    from symmem.accounting.analysis import model_totals
    from symmem.config import from_dict
    from symmem.validate.predict import as_transformers_builds

    model = from_dict(as_transformers_builds(raw), name)  # the layers transformers builds
    itemsize = 4 if dtype == "fp32" else 2
    params = model_totals(model, "paper").total * itemsize
    hidden = b * s * model.value("h") * itemsize
    return params + 2 * (pred.layer_bytes + pred.shared_bytes) + 8 * hidden + (64 << 20)


_MEGATRON_FLAGS = {"tp": 1, "pp": 1, "dp": 1, "ep": 1, "chunks": 1, "microbatches": 1, "recompute": "none"}


def _run(args) -> int:
    from symmem.validate._quiet import quiet

    quiet()  # the libraries' installation messages, before they are imported (symmem/validate/_quiet.py)
    if args.framework in ("megatron-core", "fsdp2"):
        if args.layer is not None:  # they measure every layer of every rank: a layer index would be ignored
            raise SymmemError(f"--layer: only with --framework transformers or torchao-float8 ({args.framework} "
                              "measures every layer of each rank)")
    else:
        args.layer = 0 if args.layer is None else args.layer
    if args.framework != "torchao-float8":
        if args.option is not None:
            raise SymmemError("--option: only with --framework torchao-float8")
        if args.recipe is not None and args.framework != "fsdp2":
            raise SymmemError("--recipe: only with --framework torchao-float8 or fsdp2")
    if args.fsdp_float8_all_gather and args.framework != "fsdp2":
        raise SymmemError("--enable-fsdp-float8-all-gather: only with --framework fsdp2")
    if args.compile and args.framework != "fsdp2":
        raise SymmemError("--compile: only with --framework fsdp2 (torchtitan's torch.compile)")
    if args.framework != "fsdp2":
        for key in ("hsdp_replicate", "ac"):
            if getattr(args, key) is not None:
                raise SymmemError(f"--{key.replace('_', '-')}: only with --framework fsdp2")
        if args.no_reshard_after_forward:
            raise SymmemError("--no-reshard-after-forward: only with --framework fsdp2")
    if args.framework == "fsdp2":
        from symmem.cli import measure_fsdp2

        for key in _MEGATRON_FLAGS:
            if key not in ("dp", "tp", "pp", "chunks", "microbatches") and getattr(args, key) is not None:
                raise SymmemError(f"--{key}: not with --framework fsdp2 (FSDP over --dp ranks, TP over --tp, "
                                  "PP over --pp)")
        if (args.pp or 1) == 1:
            for key in ("chunks", "microbatches"):
                if getattr(args, key) is not None:
                    raise SymmemError(f"--{key}: with --framework fsdp2, only with --pp 2 or more")
        args.tp = args.tp or 1
        args.pp = args.pp or 1
        args.dp = args.dp or (2 if args.tp * args.pp == 1 else 1)
        args.hsdp_replicate = args.hsdp_replicate or 1
        args.ac = args.ac or "none"
        return measure_fsdp2.run(args)
    if args.framework == "megatron-core":
        from symmem.cli import measure_megatron

        for key, default in _MEGATRON_FLAGS.items():
            if getattr(args, key) is None:
                setattr(args, key, default)
        return measure_megatron.run(args)
    for key in _MEGATRON_FLAGS:
        if getattr(args, key) is not None:
            raise SymmemError(f"--{key}: only with --framework megatron-core")
    if args.framework == "torchao-float8":
        from symmem.cli import measure_torchao

        return measure_torchao.run(args)
    return _run_transformers(args)


def _run_transformers(args) -> int:
    from symmem.render.latex import plain
    from symmem.units import fmt_gib
    from symmem.validate.predict import predict

    raw = _load(args.config)
    llama = raw.get("model_type") == "llama"
    if args.b < 1 or args.s < 1:
        raise SymmemError(f"(b, s) = ({args.b}, {args.s}): both must be >= 1")
    check_config(raw, args.config)
    check_for_transformers(raw, args.config)
    pred = predict(raw, args.layer, args.b, args.s, args.dtype, args.attn, args.experts, args.config)
    need = estimate_bytes(raw, pred, args.b, args.s, args.dtype, args.config)
    have = available_memory()
    if have is not None and need > have:
        raise SymmemError(f"{args.config}: measuring would allocate about {need:,} bytes ({fmt_gib(need)} GiB) for "
                          f"the model's parameters and the layer's activations at b = {args.b}, s = {args.s}, more "
                          f"than the {fmt_gib(have)} GiB this machine has available; use a tiny config (few layers, "
                          "small sizes) or a smaller -b / -s")
    _require_torch()
    from symmem.validate import measure_layer

    m = measure_layer(raw, args.layer, args.b, args.s, dtype=args.dtype, attn=args.attn, experts=args.experts,
                      seed=args.seed)
    measured = m.saved_bytes - m.shared_saved_bytes
    params = {k: {"measured": m.param_counts.get(k), "predicted": pred.params.get(k)}
              for k in dict.fromkeys([*m.param_counts, *pred.params])}
    result = {
        "config": args.config, "layer": args.layer, "layer_kind": pred.layer_kind,
        "measured_layer_kind": m.layer_kind, "reference_layer_kind": pred.reference_kind, "layer_kind_note": pred.note,
        "b": args.b, "s": args.s,
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
    if pred.note:
        print(f"  note: {pred.note}")
    if pred.layer_kind in ("dense", "moe") and m.layer_kind != pred.layer_kind:
        print(f"  layer kind: transformers built {m.layer_kind}, the prediction is for {pred.layer_kind}")
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
