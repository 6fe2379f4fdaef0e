"""torchtitan's headline configurations under the `torchtitan` profile (FSDP2 + torchtitan 0.3.0's Llama 3 on GPUs):
per GPU, the model states as FSDP2 lays them out (padded shards), the activations per micro-batch, the RoPE caches,
the timeline peak and the replayed reserved memory, with the assumptions each row rests on.

Configurations: Llama 3 8B (torchtitan's own headline: 8 GPUs, FSDP, local batch 2, sequence 8,192, per-op
selective activation checkpointing) with no, per-op selective and full checkpointing; Llama 3 8B on 64 GPUs; Llama 3
70B under FSDP over 64 and 128 GPUs with full checkpointing, and over 64 GPUs as FSDP 8 x TP 8 (with sequence
parallelism; the replay does not write TP, so that row has no replayed figures). What the profile does not model
yet is named in the notes."""

from __future__ import annotations

from symmem.render.tables import Table
from symmem.units import fmt_gib

from ._common import main

# (model, FSDP degree, local batch, sequence, checkpointing[, TP degree])
ROWS = (("llama-3-8b", 8, 2, 8192, "none"), ("llama-3-8b", 8, 2, 8192, "selective-op"),
        ("llama-3-8b", 8, 2, 8192, "full"), ("llama-3-8b", 64, 1, 8192, "full"),
        ("llama-3-70b", 64, 1, 8192, "full"), ("llama-3-70b", 128, 1, 8192, "full"),
        ("llama-3-70b", 8, 1, 8192, "full", 8))


def rows() -> list[dict]:
    from symmem.accounting.analysis import memory
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario

    out = []
    from symmem.accounting.fsdp2_reserved import refusal, replay

    for name, gpus, b, s, ac, *tp in ROWS:
        tp = tp[0] if tp else 1
        scn = model_scenario(load_model(name)).replace(
            profile_name="torchtitan", precision=recipe("fp32"), zero=zero_stage(3),
            parallel=Parallel(dp=gpus, tp=tp, sequence_parallel=True),
            b=b, s=s, recompute_name=ac, gpu_memory=80 * 10**9, gpu_name="H100")
        (m,) = memory(scn)
        r = replay(scn) if refusal(scn) is None else None
        ev = m.peak.event
        out.append({"model": name, "gpus": gpus, "tp": tp, "b": b, "s": s, "ac": ac, "states": m.states.total,
                    "activations": m.activation_per_microbatch, "peak": m.peak_allocated,
                    "event": f"{ev.phase}, {ev.part}, {ev.op}", "reserved": r and r.peak_reserved,
                    "replay_allocated": r and r.peak_allocated,
                    "reserved_at": r.reserved_at if r else f"not replayed: {refusal(scn).split(':')[0]}"})
    return out


def tables() -> list[Table]:
    def gib(v) -> str:
        return "-" if v is None else fmt_gib(v)

    body = tuple((r["model"], f"FSDP {r['gpus']}" + (f" x TP {r['tp']}" if r["tp"] > 1 else ""), str(r["b"]),
                  f"{r['s']:,}", r["ac"], f"{r['states']:,}",
                  fmt_gib(r["states"]), fmt_gib(r["activations"]), fmt_gib(r["peak"]), r["event"],
                  gib(r["replay_allocated"]), gib(r["reserved"]), r["reserved_at"]) for r in rows())
    return [Table(
        "torchtitan_configs",
        "torchtitan (FSDP2) headline configurations under the torchtitan profile, per GPU (GiB = 2^30 bytes)",
        ("model", "parallelism", "local batch", "sequence", "activation checkpointing", "model states (bytes)",
         "model states GiB", "activations per micro-batch GiB", "symmem timeline peak GiB", "peak at",
         "replayed peak allocated GiB", "replayed reserved GiB", "reserved reached at"),
        body,
        ("Profile torchtitan (symmem/profiles.py, symmem/rules/torchtitan.py, symmem/accounting/fsdp.py): torchtitan "
         "0.3.0's Llama 3 (fused wqkv, nn.RMSNorm fused on the GPU, SDPA/flex attention keeping q, k, v, output and "
         "FP32 logsumexp, the FP32 log-softmax of the loss and its FP32 transients: the .float() copy in the forward, "
         "two FP32 gradients of the logits' size at its backward; per-op selective checkpointing keeps each block's "
         "input, "
         "the outputs of its 1st, 3rd and 5th matrix products (wqkv, w1, w2) and the attention's output and "
         "logsumexp), FSDP2 with BF16 compute and FP32 reduce: FP32 sharded "
         "parameters and gradients padded to ceil(d0/N) rows, AdamW's FP32 moments, fused AdamW's step scalars on "
         "the device; every layer's own RoPE cache (max_position_embeddings x head_dim/2, complex64).",
         "Held to the byte on the CPU (states and saved bytes per rank: symmem measure --framework fsdp2, "
         "tests/validate/test_fsdp2.py) through the torchtitan-cpu variant, which differs only in RMSNorm's rule.",
         "TP (the FSDP 8 x TP 8 row) is torchtitan 0.3.0's with sequence parallelism (models/llama3/sharding.py): the "
         "all-gathered inputs of the column-parallel linears kept whole, the vocabulary-parallel embedding's mask, "
         "loss-parallel's FP32 log-probabilities of V/8; at b = 1 each all-gather's output and the custom op's copy "
         "held until the backward beside the gathered input (torch/distributed/_functional_collectives.py: the view "
         "path of a gather along the sequence; here lm_head's only, the blocks run under full AC); held to the byte "
         "on the CPU at TP 2; not replayed.",
         "Not modelled yet, so not in these figures: CP/PP, torch.compile and Float8 (0.3.0 has no per-layer "
         "checkpointing; torchtitan-2412 has it). The timeline peak is the engine's over the saved activations, "
         "gradients and "
         "transients of the dataflow (two layers gathered, ZeRO-3's generic model). The replayed figures are the step "
         "through PyTorch's caching allocator with expandable segments (symmem/accounting/fsdp2_reserved.py) as "
         "0.3.0 wraps and steps: the embedding and [norm, lm_head] as FSDP units of their own, every block "
         "resharded after forward, zero_grad(set_to_none=False), fused AdamW; the same replay, written for 9dec370, "
         "is within 3 % of torchtitan's published runs (torchtitan_published.md); 0.3.0 has no published "
         "measurement to hold these against."),
        align="lllrlrrrrlrrl")]


if __name__ == "__main__":
    main(tables)
