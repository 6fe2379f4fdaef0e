"""`symmem measure --framework fsdp2`: one training step of PyTorch FSDP2 over torchtitan 0.3.0's Llama 3 (or
DeepSeek-V3, from an HF deepseek_v3 config) on the
CPU, per rank, measured (`symmem.validate.fsdp2.runner`) and predicted by the `torchtitan-cpu` profile
(`symmem.validate.fsdp2.predict`).

Compared per rank, to the byte: `states` (the FP32 sharded parameters, their gradients, AdamW's moments and step
scalars), `saved` (what each transformer block, and the rest of the model, keeps for backward), the gathered
parameters of each FSDP unit (each block, the root; under `--enable-fsdp-float8-all-gather` the Float8 weights in
float8 with their scales), the live bytes at
the step's start and each phase's most (`symmem.validate.fsdp2.peak`: the forward and the optimizer step to the
byte, the backward against the moments it reaches, a floor: FSDP2's order of prefetch and reduce-scatter varies
from run to run, and some runs hold a buffer more) where
the closed forms hold (FSDP or HSDP, every AC mode, the backward without AC only; under TP the start and the
optimizer step; elsewhere the phases are measured and said
not predicted), and the growth of the live bytes over an interior block and over the final norm and lm_head, which
counts what the autograd graph holds beside the saved tensors (`_growth`; the head's is shown, not counted in the
exit code: gloo's thread may hold lm_head's all-gather buffers a moment longer). Exit 0 when everything predicted
and counted is equal on every rank.
"""

from __future__ import annotations

import json

from symmem.errors import SymmemError

MAX_WORLD = 8
AC = ("none", "full", "selective-op")


def _layer_ac(text: str) -> bool:
    n = text.split(":", 1)[1] if text.startswith("selective-layer:") else ""
    return n.isdigit() and 1 <= int(n) <= 1_000_000


def _settings(raw: dict, args, name: str):
    from symmem.validate.fsdp2.runner import Settings

    if raw.get("model_type") not in ("llama", "deepseek_v3"):
        raise SymmemError(f"{name}: model_type = {raw.get('model_type')!r}: --framework fsdp2 runs torchtitan's "
                          "Llama 3 (model_type llama) and DeepSeek-V3 (deepseek_v3)")
    tie = raw.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):  # "false" is a string, not false: say what the file holds
        raise SymmemError(f"{name}: tie_word_embeddings = {tie!r:.40}: must be true or false")
    if tie:
        raise SymmemError(f"{name}: tie_word_embeddings = true: torchtitan's models untie them")
    tp = args.tp
    pp = getattr(args, "pp", 1)  # (a caller's namespace without PP: none)
    world = pp * args.dp * tp  # every rank the runner spawns (under --pp, checked there)
    if pp == 1 and (world < 2 or world > MAX_WORLD):
        raise SymmemError(f"--dp x --tp = {args.dp} x {tp}: the world must be 2 to {MAX_WORLD} processes on the CPU")
    rep = args.hsdp_replicate
    if args.dp % rep:
        raise SymmemError(f"--hsdp-replicate = {rep}: must divide --dp = {args.dp} (HSDP's mesh is replicate x shard)")
    if args.ac not in AC and not _layer_ac(args.ac):
        raise SymmemError(f"--ac = {args.ac!r}: one of {', '.join(AC)}, or selective-layer:N (every N-th block "
                          "checkpointed, N a whole number from 1)")
    if args.b < 1 or args.s < 1:
        raise SymmemError(f"(b, s) = ({args.b}, {args.s}): both must be >= 1")
    float8 = _float8(args)
    compiled = getattr(args, "compile", False)
    if compiled:
        for bad, why in ((tp > 1 and args.ac != "none",
                          f"--tp {tp} and --ac {args.ac}: torch 2.13's checkpoint fails under torch.compile with "
                          "DTensor's TP (it saves the device mesh); measured with --ac none"),
                         (tp > 1 and bool(float8), f"--tp {tp}: a compiled step under TP is measured in BF16"),
                         (pp > 1, f"--pp {pp}: a compiled pipeline stage is not measured"),
                         (bool(float8) and float8["float8"] != "tensorwise",
                          "--recipe: under torch.compile Float8 is measured for tensorwise"),
                         (bool(float8) and float8["float8_all_gather"] and args.ac not in ("selective-op", "full"),
                          f"--ac {args.ac} and the float8 all-gather: measured with --ac selective-op or full (without "
                          "checkpointing the partitioner's choice of kept weight copies is not modelled)")):
            if bad:
                raise SymmemError(f"--compile with {why}")
    if raw["model_type"] == "deepseek_v3":
        if float8:
            raise SymmemError("--recipe: Float8 is measured for torchtitan's Llama 3 (DeepSeek-V3's grouped experts "
                              "take another converter)")
        return _deepseek_settings(raw, args, name, world, rep)
    n_kv = raw.get("num_key_value_heads") or raw.get("num_attention_heads")
    _tp_divides(tp, args.s, (("num_attention_heads", raw.get("num_attention_heads")),
                             ("num_key_value_heads", n_kv), ("intermediate_size", raw.get("intermediate_size")),
                             ("vocab_size", raw.get("vocab_size"))))
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
                    max_seq_len=raw["max_position_embeddings"], world=world, replicate=rep, tp=tp,
                    reshard_after_forward=not args.no_reshard_after_forward, ac=args.ac, b=args.b, s=args.s,
                    seed=args.seed, compile=compiled, **float8)


def _float8(args) -> dict:
    """The runner's Float8 settings from `--recipe` and `--enable-fsdp-float8-all-gather` ({} for BF16)."""
    recipe = getattr(args, "recipe", None)
    ag = getattr(args, "fsdp_float8_all_gather", False)
    if recipe is None:
        if ag:
            raise SymmemError("--enable-fsdp-float8-all-gather: needs --recipe tensorwise (Float8 linears to gather)")
        return {}
    from symmem.validate.fsdp2.runner import FLOAT8_RECIPES

    if recipe not in FLOAT8_RECIPES:
        raise SymmemError(f"--recipe = {recipe!r}: one of {', '.join(FLOAT8_RECIPES)} (torchao's Float8 recipes)")
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        raise SymmemError("--recipe: torchtitan's Float8 linears are torchao's; install it: pip install -e "
                          "'.[torchtitan]' (torchao 0.18.0)")
    if ag and recipe != "tensorwise":
        raise SymmemError(f"--enable-fsdp-float8-all-gather with --recipe {recipe}: torchao gathers float8 weights "
                          "under tensorwise scaling only")
    if args.ac == "selective-op" and not getattr(args, "compile", False):
        raise SymmemError("--recipe with --ac selective-op: per-op checkpointing of Float8 linears "
                          "(aten._scaled_mm) is not modelled eagerly; use --ac none, full or selective-layer:N, or "
                          "--compile")
    if args.tp > 1:
        raise SymmemError("--recipe with --tp: Float8 under TP is not measured (torchao's float8 TP styles)")
    return {"float8": recipe, "float8_all_gather": ag}


def _tp_divides(tp: int, s: int, sizes) -> None:
    """TP must divide each of `sizes` ((config key, value); a value not an integer is the key checks' to refuse) and
    the sequence (sequence parallelism splits it; torchtitan/trainer.py:306-315)."""
    if tp == 1:
        return
    for key, v in sizes:
        if isinstance(v, int) and not isinstance(v, bool) and v % tp:
            raise SymmemError(f"--tp = {tp}: must divide {key} = {v} (uneven TP shards are not predicted)")
    if s % tp:
        raise SymmemError(f"--tp = {tp}: must divide -s = {s} (sequence parallelism splits the sequence; "
                          "torchtitan/trainer.py:306-315)")


DSV3_KEYS = ("hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
             "vocab_size", "max_position_embeddings", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
             "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _deepseek_settings(raw: dict, args, name: str, world: int, rep: int):
    """torchtitan 0.3.0's DeepSeek-V3 (`runner.MoESettings`) from an HF DeepSeek-V3 config: TP 1, no MTP."""
    from symmem.validate.fsdp2.runner import MoESettings, Settings

    tp = args.tp
    _tp_divides(tp, args.s, ((k, raw.get(k)) for k in ("num_attention_heads", "intermediate_size",
                                                       "moe_intermediate_size", "vocab_size")))
    for k in DSV3_KEYS:
        v = raw.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SymmemError(f"{name}: {k} = {v!r}: must be a positive integer")
    for k, default in (("q_lora_rank", None), ("first_k_dense_replace", 0), ("num_nextn_predict_layers", 0)):
        v = raw.get(k, default)
        if v is None and k == "q_lora_rank":  # null: no query latent
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SymmemError(f"{name}: {k} = {v!r}: must be a whole number" + (" or null" if default is None else ""))
    if raw.get("num_nextn_predict_layers"):
        raise SymmemError(f"{name}: num_nextn_predict_layers = {raw['num_nextn_predict_layers']}: torchtitan builds "
                          "no MTP module by default and the profile models none; set it to 0")
    if raw.get("moe_layer_freq", 1) != 1:
        raise SymmemError(f"{name}: moe_layer_freq = {raw['moe_layer_freq']!r}: torchtitan's DeepSeek-V3 makes every "
                          "block after first_k_dense_replace an MoE block (moe_layer_freq 1)")
    score = raw.get("scoring_func", "softmax")
    if score not in ("softmax", "sigmoid"):
        raise SymmemError(f"{name}: scoring_func = {score!r}: torchtitan's router runs softmax or sigmoid")
    if raw["num_experts_per_tok"] > raw["n_routed_experts"]:
        raise SymmemError(f"{name}: num_experts_per_tok = {raw['num_experts_per_tok']}: more than n_routed_experts")
    if raw.get("first_k_dense_replace", 0) > raw["num_hidden_layers"]:
        raise SymmemError(f"{name}: first_k_dense_replace = {raw['first_k_dense_replace']}: more than "
                          "num_hidden_layers")
    if args.s > raw["max_position_embeddings"]:
        raise SymmemError(f"-s = {args.s}: more than max_position_embeddings = {raw['max_position_embeddings']}")
    h, n = raw["hidden_size"], raw["n_routed_experts"]
    size = raw["num_hidden_layers"] * h * (raw["intermediate_size"] + 3 * n * raw["moe_intermediate_size"]) \
        + 2 * raw["vocab_size"] * h
    if size > 50_000_000:
        raise SymmemError(f"{name}: about {size:,} parameters: keep it tiny, the model is built on the CPU per rank")
    norm = raw.get("norm_topk_prob")
    moe = MoESettings(n_dense_layers=raw.get("first_k_dense_replace", 0), dense_hidden=raw["intermediate_size"],
                      moe_hidden=raw["moe_intermediate_size"], num_experts=n,
                      num_shared_experts=raw["n_shared_experts"], top_k=raw["num_experts_per_tok"],
                      kv_lora_rank=raw["kv_lora_rank"], qk_nope_head_dim=raw["qk_nope_head_dim"],
                      qk_rope_head_dim=raw["qk_rope_head_dim"], v_head_dim=raw["v_head_dim"],
                      q_lora_rank=raw.get("q_lora_rank") or 0, score_func=score, **_groups(raw, name, n),
                      route_norm=bool(norm) if norm is not None else True)  # transformers' V3 default
    return Settings(family="deepseek_v3", moe=moe, dim=h, n_layers=raw["num_hidden_layers"],
                    n_heads=raw["num_attention_heads"], vocab=raw["vocab_size"],
                    max_seq_len=raw["max_position_embeddings"], world=world, replicate=rep, tp=tp,
                    reshard_after_forward=not args.no_reshard_after_forward, ac=args.ac, b=args.b, s=args.s,
                    seed=args.seed, compile=getattr(args, "compile", False))


def _groups(raw: dict, name: str, experts: int) -> dict:
    """torchtitan's group-limited routing from `n_group`, `topk_group` (none for n_group absent, null or 1)."""
    n_group, topk = raw.get("n_group"), raw.get("topk_group")
    if n_group in (None, 1):
        return {}
    for key, v in (("n_group", n_group), ("topk_group", topk)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SymmemError(f"{name}: {key} = {v!r}: must be a positive integer")
    if experts % n_group or experts // n_group < 2 or topk > n_group:
        raise SymmemError(f"{name}: n_group = {n_group}, topk_group = {topk}: torchtitan's router needs n_group to "
                          f"divide n_routed_experts = {experts} in groups of 2 or more, and topk_group <= n_group")
    return {"n_group": n_group, "topk_group": topk}


def _same(match: bool | None) -> str:
    return "not predicted" if match is None else "EQUAL" if match else "DIFFERENT"


def run(args) -> int:
    from symmem._files import read_json_object
    from symmem.validate.fsdp2 import runner
    from symmem.validate.fsdp2.predict import predicted

    raw = read_json_object(args.config, "--config")
    if args.pp > 1:
        return _run_pipeline(raw, args)
    st = _settings(raw, args, args.config)
    pred = predicted(st, raw, args.config)
    runner.require()
    measured = runner.run(st)
    if st.compile:
        return _report_compiled(st, args, measured, pred)
    ranks = []
    for m, p in zip(measured, pred, strict=True):
        pk, by_phase = p["peaks"], m["peak_by_phase"]
        phases = _phases(pk, by_phase)
        growth = _growth(st, m, p)
        ranks.append({"rank": m["rank"], "measured": {k: m[k] for k in ("states", "states_by_kind", "saved", "peak",
                                                                         "peak_phase", "peak_op", "start")}
                      | {"peak_by_phase": {k: by_phase[k][0] for k in PHASES}},
                      "predicted": {k: p[k] for k in ("states", "states_by_kind", "saved", "start")}
                      | {"peak_by_phase": None if pk.why_not else {"forward": pk.forward,
                                                                   "backward moments": pk.backward,
                                                                   "optimizer step": pk.optimizer_step}},
                      "peak_not_predicted": pk.why_not or None, "phases": phases,
                      "forward_growth": {k: {"measured": got, "predicted": want} for k, (got, want) in growth.items()},
                      # the head's growth is shown, not counted: gloo's thread may still hold lm_head's all-gather
                      # input and output a moment after the wait (seen: +2,048 and +12,288 bytes on one rank)
                      "growth_match": all(got == want for k, (got, want) in growth.items() if k != HEAD),
                      "unsharded": {"measured": m["unsharded_param_bytes"], "predicted": p["unsharded"]},
                      "unsharded_match": m["unsharded_param_bytes"] == p["unsharded"],
                      "states_match": m["states"] == p["states"], "saved_match": m["saved"] == p["saved"],
                      "start_match": None if p["start"] is None else m["start"] == p["start"],
                      "peak_match": None if pk.why_not else all(ok is not False for ok, _ in phases.values())})
    ok = all(r["states_match"] and r["saved_match"] and r["unsharded_match"] and r["growth_match"]
             and r["start_match"] is not False
             and r["peak_match"] is not False for r in ranks)
    out = {"framework": "fsdp2", "torchtitan": "0.3.0", "config": args.config, "world": st.world,
           "hsdp_replicate": st.replicate, "tp": st.tp, "reshard_after_forward": st.reshard_after_forward, "ac": st.ac,
           "float8": st.float8, "fsdp_float8_all_gather": st.float8_all_gather,
           "b": st.b, "s": st.s, "unit": "bytes", "match": ok, "ranks": ranks,
           "notes": "profile torchtitan-cpu (symmem/rules/torchtitan.py, symmem/accounting/fsdp.py); the step's peaks: "
                    "symmem/validate/fsdp2/peak.py (the first step of a fresh model, on this CPU over gloo)"}
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0 if ok else 1
    model = "DeepSeek-V3" if st.family == "deepseek_v3" else "Llama 3"
    print(f"{args.config}: FSDP2 + torchtitan 0.3.0 {model} on {st.world} CPU ranks"
          + (f" (HSDP {st.replicate} x {st.world // (st.replicate * st.tp)})" if st.replicate > 1 else "")
          + (f" (FSDP {st.world // st.tp} x TP {st.tp}, sequence parallel)" if st.tp > 1 else "")
          + f", reshard_after_forward {st.reshard_after_forward}, AC {st.ac}, b = {st.b}, s = {st.s}"
          + (f", Float8 {st.float8} (torchao, emulated)" if st.float8 else "")
          + (", float8 all-gather" if st.float8_all_gather else ""))
    for r in ranks:
        m, p = r["measured"], r["predicted"]
        print(f"  rank {r['rank']}: states {m['states']:,} measured, {p['states']:,} predicted "
              f"({'EQUAL' if r['states_match'] else 'DIFFERENT'}); saved per block and outside "
              f"{'EQUAL' if r['saved_match'] else 'DIFFERENT'} ({sum(m['saved'].values()):,} bytes); gathered "
              f"parameters per unit {'EQUAL' if r['unsharded_match'] else 'DIFFERENT'} "
              f"({r['unsharded']['measured'].get('layer 0', 0):,} bytes block 0); live at the "
              f"start {m['start']:,} ({_same(r['start_match'])}); peak {m['peak']:,} at "
              f"{m['peak_phase']}, {m['peak_op']}")
        for what, g in r["forward_growth"].items():
            same = g["measured"] == g["predicted"]
            verdict = "EQUAL" if same else "DIFFERENT" if what != HEAD else (
                "different, not counted: gloo's thread may still hold lm_head's all-gather buffers")
            print(f"    live bytes' growth over {what}: {g['measured']:,} measured, {g['predicted']:,} predicted "
                  f"({verdict})")
        if r["peak_not_predicted"]:
            print(f"    each phase's most: measured, not predicted ({r['peak_not_predicted']})")
        for phase, (same, text) in r["phases"].items():
            print(f"    {phase}: {text}" + ("" if same is None else f" ({'EQUAL' if same else 'DIFFERENT'})"))
    return 0 if ok else 1


def _report_compiled(st, args, measured: list[dict], pred: list[dict]) -> int:
    """Under --compile the runner traces no live bytes (dynamo compiles nothing while a dispatch mode is active):
    the states, the saved bytes per block and outside, and the gathered parameters are compared."""
    ranks = [{"rank": m["rank"],
              "measured": {"states": m["states"], "states_by_kind": m["states_by_kind"], "saved": m["saved"]},
              "predicted": {"states": p["states"], "states_by_kind": p["states_by_kind"], "saved": p["saved"]},
              "unsharded": {"measured": m["unsharded_param_bytes"], "predicted": p["unsharded"]},
              "states_match": m["states"] == p["states"], "saved_match": m["saved"] == p["saved"],
              "unsharded_match": m["unsharded_param_bytes"] == p["unsharded"]}
             for m, p in zip(measured, pred, strict=True)]
    ok = all(r["states_match"] and r["saved_match"] and r["unsharded_match"] for r in ranks)
    if args.json:
        print(json.dumps({"framework": "fsdp2", "torchtitan": "0.3.0", "compile": True, "config": args.config,
                          "world": st.world, "hsdp_replicate": st.replicate,
                          "reshard_after_forward": st.reshard_after_forward, "ac": st.ac, "b": st.b, "s": st.s,
                          "unit": "bytes", "match": ok, "ranks": ranks,
                          "notes": "profile torchtitan-cpu with --compile (symmem/accounting/compiled.py: the "
                                   "partitioner's cut); live bytes and peaks not measured under compile"},
                         indent=2, sort_keys=True))
        return 0 if ok else 1
    model = "DeepSeek-V3" if st.family == "deepseek_v3" else "Llama 3"
    print(f"{args.config}: FSDP2 + torchtitan 0.3.0 {model}, compiled (each block and the loss, inductor), on "
          f"{st.world} CPU ranks" + (f" (HSDP {st.replicate} x {st.world // st.replicate})" if st.replicate > 1 else "")
          + f", reshard_after_forward {st.reshard_after_forward}, AC {st.ac}, b = {st.b}, s = {st.s}")
    for r in ranks:
        m, p = r["measured"], r["predicted"]
        print(f"  rank {r['rank']}: states {m['states']:,} measured, {p['states']:,} predicted "
              f"({'EQUAL' if r['states_match'] else 'DIFFERENT'}); gathered parameters per unit "
              f"{'EQUAL' if r['unsharded_match'] else 'DIFFERENT'}")
        for unit in m["saved"]:
            got, want = m["saved"][unit], p["saved"].get(unit)
            same = "EQUAL" if got == want else "DIFFERENT"
            print(f"    saved, {unit}: {got:,} measured, {want:,} predicted ({same})")
    print("  live bytes and the step's peaks: not measured under --compile (dynamo compiles nothing while the "
          "tracing dispatch mode is active)")
    return 0 if ok else 1


PHASES = ("forward", "backward", "optimizer step")
HEAD = "the final norm and lm_head"


def _growth(st, m: dict, p: dict) -> dict[str, tuple[int, int]]:
    """What the forward leaves alive beyond the hooks' saved tensors, (measured, predicted): the live bytes' growth
    over block 2 where it measures that block (`growth.interior_block_checked`) and from the final norm's start to
    lm_head's end (under TP at b = 1 each all-gather's two more copies, symmem/rules/torchtitan.py
    `_linear_tp_b1`)."""
    from symmem.validate.fsdp2.growth import interior_block_checked

    out = {}
    held = m["held_after_block"]
    if interior_block_checked(st):
        out["block 2"] = (held["layer 2"] - held["layer 1"], p["held_per_block"]["layer 2"])
    out[HEAD] = (m["head_growth"], p["head_growth"])
    return out


def _phases(pk, by_phase: dict) -> dict:
    """Per phase: (equal, a line) of the measured most against the closed form's (empty when not predicted)."""
    if pk.why_not:
        return {}
    out = {}
    for phase, want in (("forward", pk.forward), ("optimizer step", pk.optimizer_step)):
        got, op = by_phase[phase]
        out[phase] = ((None, f"{got:,} measured at {op}, not predicted ({pk.why_not_forward})") if want is None
                      else (got == want, f"{got:,} measured at {op}, {want:,} predicted"))
    got, op = by_phase["backward"]
    if pk.backward is None:
        out["backward"] = (None, f"{got:,} measured at {op}, not predicted ({pk.why_not_backward})")
        return out
    moment = next((name for name, v in pk.backward.items() if v == got), None)
    floor = min(pk.backward.values())
    listed = "; ".join(f"{name} {v:,}" for name, v in pk.backward.items())
    if moment:
        text = f"the moment '{moment}'"
    elif got > floor:  # FSDP2's order varies from run to run: a buffer more held at a moment (peak.py)
        text = (f"above the moments ({listed}): this run's order of FSDP2's prefetch and reduce-scatter held more "
                "(it varies from run to run)")
    else:
        text = f"below every moment predicted ({listed})"
    out["backward"] = (got >= floor, f"{got:,} measured at {op}: {text}")
    return out


def _run_pipeline(raw: dict, args) -> int:
    """`--pp P`: torchtitan's pipelining over FSDP2 (`symmem.validate.fsdp2.pipeline`: 1F1B, or Interleaved1F1B
    with `--chunks 2`), two steps of M micro-batches, compared per rank with the `torchtitan-cpu` scenario's model
    (`pipeline.expected`): to the byte, each stage's parameters, after every backward but a stage's last its
    gathered parameters, accumulated and sharded gradients and kept stage outputs, the receive buffers, the states;
    the peak beside, not counted in the exit code (the activations' timeline is the engine's, within 5 % on the
    cases of tests/validate/test_fsdp2_pipeline.py)."""
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.validate.fsdp2 import pipeline, runner

    chunks = args.chunks or 1
    if chunks not in (1, pipeline.CHUNKS):
        raise SymmemError(f"--chunks = {chunks}: torchtitan's Interleaved1F1B is run with {pipeline.CHUNKS} stages per "
                          "rank (its default), or 1 for 1F1B")
    m = args.microbatches or 4
    if getattr(args, "recipe", None) is not None:
        raise SymmemError("--pp with --recipe: the pipeline runner runs BF16 (Float8 is measured without --pp)")
    if args.hsdp_replicate != 1 or args.ac != "none" or args.no_reshard_after_forward:
        raise SymmemError("--pp: the pipeline runner runs FSDP (and TP) without --hsdp-replicate, --ac or "
                          "--no-reshard-after-forward (torchtitan turns resharding after forward off under PP itself)")
    world = args.pp * args.dp * args.tp
    if world > MAX_WORLD:
        raise SymmemError(f"--pp x --dp x --tp = {args.pp} x {args.dp} x {args.tp}: at most {MAX_WORLD} processes on "
                          "the CPU")
    argv = ["memory", "--model", args.config, "--profile", "torchtitan-cpu", "--pp", str(args.pp), "--dp",
            str(args.dp), "--tp", str(args.tp), "-b", str(args.b), "-s", str(args.s), "--microbatches", str(m),
            "--schedule", f"interleaved:{chunks}" if chunks > 1 else "1f1b"]
    if raw.get("model_type") == "deepseek_v3":
        argv.append("--no-mtp")
    scn = scenario_from_args(build_parser().parse_args(argv))  # the profile's own checks first, in one line
    st = _settings(raw, args, args.config)
    runner.require()
    measured = pipeline.run(st, args.pp, m, "Interleaved1F1B" if chunks > 1 else "1F1B")
    ranks = []
    for r in measured:
        want = pipeline.expected(scn, r["stage"])
        ranks.append({"rank": r["rank"], "stage": r["stage"], "equal": pipeline.compare(r, want),
                      "measured": {k: r[k] for k in ("chunk_params", "recv_buffers", "states", "peak", "peak_phase")}
                      | {"backwards": len(r["during_backward"])},
                      "predicted": {k: want[k] for k in ("chunk_params", "recv_buffers", "states", "peak")}})
    ok = all(all(r["equal"].values()) for r in ranks)
    out = {"framework": "fsdp2", "torchtitan": "0.3.0", "config": args.config, "pp": args.pp, "dp": args.dp,
           "tp": args.tp, "schedule": "Interleaved1F1B" if chunks > 1 else "1F1B", "microbatches": m, "b": args.b,
           "s": args.s, "unit": "bytes", "match": ok, "ranks": ranks,
           "notes": "profile torchtitan-cpu; symmem/validate/fsdp2/pipeline.py (expected, compare); docs/torchtitan.md"}
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0 if ok else 1
    print(f"{args.config}: torchtitan 0.3.0 under PP {args.pp} x FSDP {args.dp}" + (f" x TP {args.tp}" if args.tp > 1
                                                                                     else "")
          + f", {out['schedule']}, {m} micro-batches, b = {args.b}, s = {args.s}, on {world} CPU ranks (two steps)")
    for r in ranks:
        got, want = r["measured"], r["predicted"]
        error = 100 * (want["peak"] - got["peak"]) / got["peak"]
        print(f"  rank {r['rank']} (pipeline rank {r['stage']}): peak {got['peak']:,} measured at "
              f"{got['peak_phase']}, {want['peak']:,} predicted ({error:+.1f} %, not counted)")
        for what, same in r["equal"].items():
            print(f"    {what}: {'EQUAL' if same else 'DIFFERENT'}")
    return 0 if ok else 1
