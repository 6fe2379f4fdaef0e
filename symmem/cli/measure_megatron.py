"""`symmem measure --framework megatron-core`: one training iteration of Megatron-Core 0.16.1 (local spec) on the
CPU, per rank, measured (`symmem.validate.megatron_core`) and predicted (`symmem.rules.megatron_local`).

Compared per rank: `states` (parameters, DDP buffers, optimizer tensors), `saved` (what each transformer layer of
the rank keeps for backward in one micro-batch; the total is printed, the comparison is layer by layer) and `peak`
(the most live bytes at any op boundary of the iteration; predicted by `symmem.rules.megatron_local_peak` as the
largest of five events: the optimizer step, the cross-entropy's forward, the first GEMM of the backward, the final
norm's backward and the last layer's attention backward; not with MoE layers at TP > 1: there the run is DIFFERENT,
exit 1, and says what is not modelled).
"""

from __future__ import annotations

import json

from symmem.errors import SymmemError

MAX_WORLD = 8  # processes on this machine: each builds the model and runs gloo
RECOMPUTE = ("none", "selective", "full")

# What is refused, with the reason and what would make it work.
NOT_ON_CPU = {
    "ep": "--ep = {v}: expert parallelism > 1 is not predicted: it runs on the CPU (gloo's all-to-all takes uneven "
          "splits once the bridge hands them over as NumPy; an EP 2 x DP 2 iteration of a tiny MoE completes), but "
          "the expert-parallel DDP buffer and optimizer, each rank's E/EP experts and its share of the routed "
          "tokens (data-dependent saved bytes) are not modelled",
}


def check(raw: dict, args, name: str):
    from symmem._config_checks import check_config
    from symmem.config import from_dict
    from symmem.rules.megatron_local import Dims

    # what symmem memory refuses of the config, refused here too, under the user's file name (GPT-2's n_embd must be
    # a multiple of n_head: Megatron would build kv_channels = n_embd // n_head, another model)
    check_config(raw, name)
    from_dict(raw, name)
    d = Dims.from_hf(raw, name)
    if args.ep != 1:
        raise SymmemError(NOT_ON_CPU["ep"].format(v=args.ep))
    if args.b < 1 or args.s < 1:
        raise SymmemError(f"(b, s) = ({args.b}, {args.s}): both must be >= 1")
    world = args.tp * args.pp * args.dp
    if world > MAX_WORLD:
        raise SymmemError(f"TP x PP x DP = {world}: at most {MAX_WORLD} processes on the CPU")
    for label, value, div in (("num_attention_heads", d.heads, args.tp), ("num_key_value_heads", d.groups, args.tp),
                              ("the FFN width", d.ffn, args.tp), ("vocab_size", d.vocab, args.tp),
                              ("the layer count", d.layers, args.pp)):
        if value % div:
            flag = "--pp" if label == "the layer count" else "--tp"
            raise SymmemError(f"{name}: {label} = {value}: must divide by {flag} = {div}")
    if args.chunks > 1:
        if args.pp == 1:
            raise SymmemError(f"--chunks = {args.chunks}: virtual pipeline stages need --pp > 1")
        if d.layers % (args.pp * args.chunks):
            raise SymmemError(f"{name}: the layer count = {d.layers}: must divide by --pp x --chunks = "
                              f"{args.pp * args.chunks}")
        # the interleaved schedule takes M in groups of PP (model_parallel_config.py:447-448, schedules.py:995-1014)
        if args.microbatches % args.pp:
            raise SymmemError(f"--microbatches = {args.microbatches}: with --chunks > 1 must be a multiple of "
                              f"--pp = {args.pp} (Megatron's interleaved schedule)")
    if d.experts and (d.moe_ffn % args.tp or d.shared_ffn % args.tp):
        raise SymmemError(f"{name}: the expert widths must divide by --tp = {args.tp}")
    if d.positions and args.s > d.positions:
        raise SymmemError(f"-s = {args.s}: more than n_positions = {d.positions}")
    if d.tied and args.pp > 1:
        raise SymmemError(f"{name}: tie_word_embeddings with --pp > 1: the shared embedding's gradient all-reduce "
                          "and own DDP bucket are not modelled; untie the embeddings or use --pp 1")
    return d


def predicted(d, args, rank: dict) -> dict:
    from symmem.rules import megatron_local as ml
    from symmem.rules import megatron_local_peak as mp

    bf16 = args.dtype == "bf16"
    states = ml.states(d, args.tp, args.pp, args.dp, rank["pp_rank"], rank["dp_rank"], bf16, vpp=args.chunks)
    try:
        saved = ml.saved_per_layer(d, args.tp, args.pp, rank["pp_rank"], args.b, args.s, bf16, args.recompute,
                                   vpp=args.chunks)
    except SymmemError as exc:
        saved, why = None, str(exc)
    else:
        why = None
    peak, peak_notes = mp.peak(d, args.tp, args.pp, args.dp, rank["pp_rank"], rank["dp_rank"], args.b, args.s, bf16,
                               args.microbatches, args.recompute, vpp=args.chunks)
    return {"peak": None if peak is None else peak[0], "peak_at": None if peak is None else peak[1],
            "states": states["total"], "states_by_kind": states,
            "saved": None if saved is None else sum(saved.values()), "saved_per_layer": saved,
            "not_modelled": [*peak_notes, *([why] if why else [])]}


def run(args) -> int:
    from symmem._files import read_json_object
    from symmem.validate.megatron_core.runner import Settings, require
    from symmem.validate.megatron_core.runner import run as run_ranks

    raw = read_json_object(args.config, "--config")
    if args.dtype not in ("fp32", "bf16"):
        raise SymmemError(f"--dtype = {args.dtype!r}: megatron-core runs take fp32 or bf16")
    d = check(raw, args, args.config)
    require()
    st = Settings(raw=raw, tp=args.tp, pp=args.pp, dp=args.dp, ep=args.ep, vpp=args.chunks,
                  microbatches=args.microbatches,
                  recompute=args.recompute, b=args.b, s=args.s, dtype=args.dtype, seed=args.seed)
    ranks = []
    for m in run_ranks(st):
        pred = predicted(d, args, m)
        layers = {k: v for k, v in m["saved"].items() if k.startswith("layer ")}
        measured = {"peak": m["peak"], "peak_op": m["peak_op"], "peak_phase": m["peak_phase"],
                    "at_peak": m["at_peak"],
                    "states": m["states"], "states_by_kind": m["states_by_kind"], "saved": sum(layers.values()),
                    "saved_per_layer": layers, "saved_outside_layers": m["saved"].get("outside layers", 0)}
        match = {"peak": pred["peak"] == measured["peak"], "states": pred["states"] == measured["states"],
                 "saved": pred["saved_per_layer"] == layers}
        ranks.append({"rank": m["rank"], "tp_rank": m["tp_rank"], "pp_rank": m["pp_rank"], "dp_rank": m["dp_rank"],
                      "measured": measured, "predicted": pred, "match": match})
    ok = all(all(r["match"].values()) for r in ranks)
    if args.json:
        print(json.dumps({"framework": "megatron-core", "version": "0.16.1", "config": args.config,
                          "tp": args.tp, "pp": args.pp, "dp": args.dp, "ep": args.ep, "chunks": args.chunks,
                          "microbatches": args.microbatches, "recompute": args.recompute, "b": args.b, "s": args.s,
                          "dtype": args.dtype, "unit": "bytes", "ranks": ranks, "match": ok,
                          "notes": "saved: per transformer layer of the rank, first micro-batch; compared layer by "
                                   "layer. saved_outside_layers (embedding, output layer, loss, full "
                                   "recomputation's checkpoints) is measured, not yet predicted. peak: every live "
                                   "storage of the process at an op boundary, states and the runner's inputs "
                                   "included; predicted as the largest of five events (the optimizer "
                                   "step, the cross-entropy's forward, the output layer's weight gradient, the final "
                                   "norm's backward and the last layer's attention backward; peak_at names it)."},
                         indent=2, sort_keys=True))
        return 0 if ok else 1
    print(f"{args.config}: Megatron-Core 0.16.1 (local spec, CPU, gloo), TP {args.tp} PP {args.pp} DP {args.dp} "
          f"EP {args.ep}" + (f", {args.chunks} chunks per stage" if args.chunks > 1 else "")
          + f", M = {args.microbatches}, recompute {args.recompute}, b = {args.b}, s = {args.s}, "
          f"{args.dtype}")
    for r in ranks:
        m, p = r["measured"], r["predicted"]

        def cell(key, p=p, r=r):
            value = p[key]
            return "-" if value is None else f"{value:,}" + ("" if r["match"][key] else " (DIFFERENT)")

        print(f"  rank {r['rank']} (tp {r['tp_rank']}, pp {r['pp_rank']}, dp {r['dp_rank']})")
        print(f"    states  measured {m['states']:>12,}  predicted {cell('states')}")
        print(f"    saved   measured {m['saved']:>12,}  predicted {cell('saved')}  (layers: "
              + ", ".join(f"{k.split()[1]}: {v:,}" for k, v in m["saved_per_layer"].items()) + ")")
        print(f"    peak    measured {m['peak']:>12,}  predicted {cell('peak')}  (measured at {m['peak_op']}, "
              f"{m['peak_phase']}" + (f"; predicted at the {p['peak_at']}" if p["peak_at"] else "") + ")")
        for note in p["not_modelled"]:
            print(f"    not modelled: {note}")
    print("EQUAL" if ok else "DIFFERENT")
    return 0 if ok else 1
