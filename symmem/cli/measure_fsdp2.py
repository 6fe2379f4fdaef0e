"""`symmem measure --framework fsdp2`: one training step of PyTorch FSDP2 over torchtitan 0.3.0's Llama 3 on the
CPU, per rank, measured (`symmem.validate.fsdp2.runner`) and predicted by the `torchtitan-cpu` profile
(`symmem.validate.fsdp2.predict`).

Compared per rank, to the byte: `states` (the FP32 sharded parameters, their gradients, AdamW's moments and step
scalars) and `saved` (what each transformer block, and the rest of the model, keeps for backward). Exit 0 when
both are equal on every rank. The rank's peak of live storages is measured and shown, not predicted: FSDP2's
all-gathered BF16 blocks, its prefetch and its reduce-scatter buffers are not in the timeline yet.
"""

from __future__ import annotations

import json

from symmem.errors import SymmemError

MAX_WORLD = 8
AC = ("none", "full", "selective-op")


def _settings(raw: dict, args, name: str):
    from symmem.validate.fsdp2.runner import Settings

    if raw.get("model_type") != "llama":
        raise SymmemError(f"{name}: model_type = {raw.get('model_type')!r}: --framework fsdp2 runs torchtitan's "
                          "Llama 3 (model_type llama)")
    if raw.get("tie_word_embeddings"):
        raise SymmemError(f"{name}: tie_word_embeddings = true: torchtitan's Llama 3 unties them")
    world = args.dp
    if world < 2 or world > MAX_WORLD:
        raise SymmemError(f"--dp = {world}: the FSDP world must be 2 to {MAX_WORLD} processes on the CPU")
    rep = args.hsdp_replicate
    if world % rep:
        raise SymmemError(f"--hsdp-replicate = {rep}: must divide --dp = {world} (HSDP's mesh is replicate x shard)")
    if args.ac not in AC:
        raise SymmemError(f"--ac = {args.ac!r}: one of {', '.join(AC)} (torchtitan's per-layer selective mode is "
                          "not predicted yet)")
    if args.b < 1 or args.s < 1:
        raise SymmemError(f"(b, s) = ({args.b}, {args.s}): both must be >= 1")
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
            "max_position_embeddings")
    for k in keys:
        v = raw.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SymmemError(f"{name}: {k} = {v!r}: must be a positive integer")
    if raw["hidden_size"] % raw["num_attention_heads"]:
        raise SymmemError(f"{name}: hidden_size = {raw['hidden_size']}: must divide by num_attention_heads")
    if args.s > raw["max_position_embeddings"]:
        raise SymmemError(f"-s = {args.s}: more than max_position_embeddings = {raw['max_position_embeddings']}")
    size = raw["hidden_size"] * (raw["intermediate_size"] + raw["vocab_size"]) * raw["num_hidden_layers"]
    if size > 50_000_000:
        raise SymmemError(f"{name}: about {size:,} parameters: keep it tiny, the model is built on the CPU per rank")
    return Settings(dim=raw["hidden_size"], n_layers=raw["num_hidden_layers"], n_heads=raw["num_attention_heads"],
                    n_kv_heads=raw.get("num_key_value_heads") or raw["num_attention_heads"],
                    vocab=raw["vocab_size"], ffn_hidden=raw["intermediate_size"],
                    max_seq_len=raw["max_position_embeddings"], world=world, replicate=rep,
                    reshard_after_forward=not args.no_reshard_after_forward, ac=args.ac, b=args.b, s=args.s,
                    seed=args.seed)


def run(args) -> int:
    from symmem._files import read_json_object
    from symmem.validate.fsdp2 import runner
    from symmem.validate.fsdp2.predict import predicted

    raw = read_json_object(args.config, "--config")
    st = _settings(raw, args, args.config)
    pred = predicted(st, raw)
    runner.require()
    measured = runner.run(st)
    ranks = []
    for m, p in zip(measured, pred, strict=True):
        ranks.append({"rank": m["rank"], "measured": {k: m[k] for k in ("states", "states_by_kind", "saved", "peak",
                                                                         "peak_phase", "peak_op")},
                      "predicted": {k: p[k] for k in ("states", "states_by_kind", "saved")},
                      "states_match": m["states"] == p["states"], "saved_match": m["saved"] == p["saved"]})
    ok = all(r["states_match"] and r["saved_match"] for r in ranks)
    out = {"framework": "fsdp2", "torchtitan": "0.3.0", "config": args.config, "world": st.world,
           "hsdp_replicate": st.replicate, "reshard_after_forward": st.reshard_after_forward, "ac": st.ac,
           "b": st.b, "s": st.s, "unit": "bytes", "match": ok, "ranks": ranks,
           "notes": "profile torchtitan-cpu (symmem/rules/torchtitan.py, symmem/accounting/fsdp.py); peak: "
                    "measured, not predicted (FSDP2's unsharded blocks, prefetch and reduce-scatter buffers are not "
                    "in the timeline yet)"}
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0 if ok else 1
    print(f"{args.config}: FSDP2 + torchtitan 0.3.0 Llama 3 on {st.world} CPU ranks"
          + (f" (HSDP {st.replicate} x {st.world // st.replicate})" if st.replicate > 1 else "")
          + f", reshard_after_forward {st.reshard_after_forward}, AC {st.ac}, b = {st.b}, s = {st.s}")
    for r in ranks:
        m, p = r["measured"], r["predicted"]
        print(f"  rank {r['rank']}: states {m['states']:,} measured, {p['states']:,} predicted "
              f"({'EQUAL' if r['states_match'] else 'DIFFERENT'}); saved per block and outside "
              f"{'EQUAL' if r['saved_match'] else 'DIFFERENT'} ({sum(m['saved'].values()):,} bytes); peak "
              f"{m['peak']:,} measured at {m['peak_phase']}, {m['peak_op']} (not predicted)")
    return 0 if ok else 1
