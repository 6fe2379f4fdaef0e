"""torchtitan's headline configurations under the `torchtitan` profile (FSDP2 + torchtitan 0.3.0's Llama 3 on GPUs):
per GPU, the model states as FSDP2 lays them out (padded shards), the activations per micro-batch, the RoPE caches,
the timeline peak and the reserved estimate, with the assumptions each row rests on.

Configurations: Llama 3 8B (torchtitan's own headline: 8 GPUs, FSDP, local batch 2, sequence 8,192, per-op
selective activation checkpointing) with no, per-op selective and full checkpointing; Llama 3 8B on 64 GPUs; Llama 3
70B under FSDP over 64 and 128 GPUs with full
checkpointing. What the profile does not model yet is named in the notes."""

from __future__ import annotations

from symmem.render.tables import Table
from symmem.units import fmt_gib

from ._common import main

ROWS = (("llama-3-8b", 8, 2, 8192, "none"), ("llama-3-8b", 8, 2, 8192, "selective-op"),
        ("llama-3-8b", 8, 2, 8192, "full"), ("llama-3-8b", 64, 1, 8192, "full"),
        ("llama-3-70b", 64, 1, 8192, "full"), ("llama-3-70b", 128, 1, 8192, "full"))


def rows() -> list[dict]:
    from symmem.accounting.analysis import memory
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario

    out = []
    for name, gpus, b, s, ac in ROWS:
        scn = model_scenario(load_model(name)).replace(
            profile_name="torchtitan", precision=recipe("fp32"), zero=zero_stage(3), parallel=Parallel(dp=gpus),
            b=b, s=s, recompute_name=ac, gpu_memory=80 * 10**9, gpu_name="H100")
        (m,) = memory(scn)
        low, high = m.reserved
        ev = m.peak.event
        out.append({"model": name, "gpus": gpus, "b": b, "s": s, "ac": ac, "states": m.states.total,
                    "activations": m.activation_per_microbatch, "peak": m.peak_allocated,
                    "event": f"{ev.phase}, {ev.part}, {ev.op}", "low": low, "high": high})
    return out


def tables() -> list[Table]:
    body = tuple((r["model"], f"FSDP {r['gpus']}", str(r["b"]), f"{r['s']:,}", r["ac"], f"{r['states']:,}",
                  fmt_gib(r["states"]), fmt_gib(r["activations"]), fmt_gib(r["peak"]), r["event"],
                  f"{fmt_gib(r['low'])}-{fmt_gib(r['high'])}") for r in rows())
    return [Table(
        "torchtitan_configs",
        "torchtitan (FSDP2) headline configurations under the torchtitan profile, per GPU (GiB = 2^30 bytes)",
        ("model", "parallelism", "local batch", "sequence", "activation checkpointing", "model states (bytes)",
         "model states GiB", "activations per micro-batch GiB", "symmem timeline peak GiB", "peak at",
         "reserved estimate GiB"),
        body,
        ("Profile torchtitan (symmem/profiles.py, symmem/rules/torchtitan.py, symmem/accounting/fsdp.py): torchtitan "
         "0.3.0's Llama 3 (fused wqkv, nn.RMSNorm fused on the GPU, SDPA/flex attention keeping q, k, v, output and "
         "FP32 logsumexp, the FP32 log-softmax of the loss and its FP32 transients: the .float() copy in the forward, "
         "two FP32 gradients of the logits' size at its backward; per-op selective checkpointing keeps each block's input, "
         "the outputs of its 1st, 3rd and 5th matrix products (wqkv, w1, w2) and the attention's output and "
         "logsumexp), FSDP2 with BF16 compute and FP32 reduce: FP32 sharded "
         "parameters and gradients padded to ceil(d0/N) rows, AdamW's FP32 moments, fused AdamW's step scalars on "
         "the device; every layer's own RoPE cache (max_position_embeddings x head_dim/2, complex64).",
         "Held to the byte on the CPU (states and saved bytes per rank: symmem measure --framework fsdp2, "
         "tests/validate/test_fsdp2.py) through the torchtitan-cpu variant, which differs only in RMSNorm's rule.",
         "Not modelled yet, so not in these figures: FSDP2's all-gathered BF16 block and the prefetched next one, "
         "its reduce-scatter buffers, the per-layer selective checkpointing (every N-th block), TP/CP/PP, "
         "torch.compile and Float8. The timeline peak is the engine's over the saved activations, gradients and "
         "transients of the dataflow; the reserved estimate is that peak x (1 + 5..30 %) + 0.8-2 GB (no allocator "
         "replay for this profile: 0.3.0 groups the embedding and [norm, output] as FSDP units of their own). The "
         "code of torchtitan's published H100 runs (9dec370) is profile torchtitan-2412, replayed and compared in "
         "torchtitan_published.md."),
        align="lllrlrrrrlr")]


if __name__ == "__main__":
    main(tables)
