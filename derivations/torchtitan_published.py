"""torchtitan's published GPU measurements beside symmem's replay: the reserved memory torchtitan logged
("Memory(GiB)", `torch.cuda.memory_stats()["reserved_bytes.all.peak"]`, torchtitan/metrics.py at 9dec370) in its
own benchmarks, and what the `torchtitan-2412` profile replays for the same run (symmem/accounting/fsdp2_reserved.py:
the FSDP2 step through the caching allocator with expandable segments).

Sources (public): pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (the torchtitan team, H100 96 GB,
torch 1963fc8 of 2024-12-23, torchao eab345c, torchtitan 9dec370 of 2024-12-26; memory read at iteration 90, the
maximum over GPUs) and benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (Trainy, H200, torchtitan e7c0cae of
2025-06-13, compiled with Float8 and FSDP's float8 all-gather, memory at iteration 100). Only the eager BF16 runs are
what the profile models; the compiled and Float8 ones are listed with symmem's eager figure beside, not compared."""

from __future__ import annotations

from symmem.render.tables import Table
from symmem.units import fmt_gib

from ._common import main

H100_2412 = "benchmarks/llama3_h100_202412_torchtitan.md"
H200_2506 = "benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md"

# (source, table, model, GPUs, FSDP, other parallelism, local batch, sequence, AC, techniques, measured GiB);
# "eager" marks the runs the profile models (eager, BF16, FSDP only)
PUBLISHED = (
    (H100_2412, "Table 1", "llama-3-8b", 8, 8, "", 2, 8192, "selective-op", "eager", 82.4),
    (H100_2412, "Table 1", "llama-3-8b", 8, 8, "", 2, 8192, "selective-op", "torch.compile", 77.0),
    (H100_2412, "Table 1", "llama-3-8b", 8, 8, "", 2, 8192, "selective-op", "torch.compile + Float8", 76.8),
    (H100_2412, "Table 3", "llama-3-8b", 128, 128, "", 2, 8192, "selective-op", "eager", 67.0),
    (H100_2412, "Table 3", "llama-3-8b", 128, 128, "", 2, 8192, "selective-op", "torch.compile", 62.0),
    (H100_2412, "Table 3", "llama-3-8b", 128, 128, "", 2, 8192, "selective-op", "torch.compile + Float8", 61.8),
    (H100_2412, "Table 2", "llama-3-8b", 8, 8, "", 1, 32768, "full", "torch.compile + Float8", 83.9),
    (H100_2412, "Table 2", "llama-3-8b", 8, 4, "CP 2", 1, 65536, "full", "torch.compile + Float8", 84.2),
    (H100_2412, "Table 4", "Llama 3.1 70B", 256, 32, "TP 8", 16, 8192, "full", "torch.compile + Float8", 71.9),
    (H100_2412, "Table 5", "Llama 3.1 405B", 512, 8, "TP 8, PP 8 (1F1B)", 32, 8192, "full",
     "torch.compile + Float8 + AsyncTP", 82.5),
    (H200_2506, "Results", "llama-3-8b", 32, 32, "", 2, 8192, "selective-op",
     "torch.compile + Float8 (float8 all-gather)", 47.96),
    (H200_2506, "Results", "llama-3-8b", 64, 64, "", 2, 8192, "selective-op",
     "torch.compile + Float8 (float8 all-gather)", 46.97),
)
TOLERANCE = 0.05  # the bar for the eager BF16 runs


def rows() -> list[dict]:
    from symmem.accounting.fsdp2_reserved import replay
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario

    out = []
    for source, table, model, gpus, fsdp, other, b, s, ac, tech, measured in PUBLISHED:
        row = {"source": source, "table": table, "model": model, "gpus": gpus, "fsdp": fsdp, "other": other, "b": b,
               "s": s, "ac": ac, "tech": tech, "measured": measured, "reserved": None, "allocated": None,
               "at": None}
        if not other:  # FSDP alone: the profile's eager BF16 step
            scn = model_scenario(load_model(model)).replace(
                profile_name="torchtitan-2412", precision=recipe("fp32"), zero=zero_stage(3),
                parallel=Parallel(dp=fsdp), b=b, s=s, recompute_name=ac, gpu_memory=96 * 10**9)
            r = replay(scn)
            row.update(reserved=r.peak_reserved, allocated=r.peak_allocated, at=r.reserved_at)
        out.append(row)
    return out


def _status(r: dict) -> str:
    if r["reserved"] is None:
        # (torchtitan 0.3.0's TP and PP are modelled, the `torchtitan` profile; these runs are 9dec370's code)
        return f"not predicted: {r['other']} is not modelled for torchtitan 9dec370, this run's code"
    if r["tech"] != "eager":
        return "not compared: the run is compiled / Float8, the profile eager BF16"
    error = r["reserved"] / 2**30 / r["measured"] - 1
    return f"compared: {error:+.1%} ({'within' if abs(error) <= TOLERANCE else 'outside'} 5 %)"


def tables() -> list[Table]:
    names = {"llama-3-8b": "Llama 3.1 8B (preset llama-3-8b)"}
    body = tuple((
        f"{r['table']} ({'torchtitan, H100' if r['source'] == H100_2412 else 'Trainy, H200'})",
        names.get(r["model"], r["model"]),
        f"FSDP {r['fsdp']}" + (f", {r['other']}" if r["other"] else ""), str(r["gpus"]), str(r["b"]), f"{r['s']:,}",
        r["ac"], r["tech"], f"{r['measured']:.2f}",
        fmt_gib(r["reserved"]) if r["reserved"] is not None else "-",
        fmt_gib(r["allocated"]) if r["allocated"] is not None else "-", r["at"] or "-", _status(r))
        for r in rows())
    return [Table(
        "torchtitan_published",
        "torchtitan's published GPU memory (reserved, GiB = 2^30 bytes) beside symmem's FSDP2 replay "
        "(profile torchtitan-2412: eager BF16)",
        ("published run", "model", "parallelism", "GPUs", "local batch", "sequence", "activation checkpointing",
         "techniques", "measured reserved GiB", "symmem replayed reserved GiB (eager BF16)",
         "symmem replayed peak allocated GiB", "reserved reached at", "comparison"),
        body,
        ("Measured: torchtitan's logged memory, torch.cuda.memory_stats()['reserved_bytes.all.peak'] after a reset "
         "at the previous log step (torchtitan/metrics.py at 9dec370), the maximum over the GPUs; from pytorch/"
         f"torchtitan {H100_2412} (torch 1963fc8 2024-12-23, torchtitan 9dec370 2024-12-26, H100 96 GB, "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True as its run_llama_train.sh sets) and "
         f"{H200_2506} (torchtitan e7c0cae 2025-06-13, H200).",
         "symmem: profile torchtitan-2412 (symmem/profiles.py, symmem/rules/torchtitan.py): torchtitan 9dec370's "
         "Llama 3 (wq, wk, wv separate; its RMSNorm; SDPA's flash kernel; the loss cross_entropy(pred.float())), "
         "per-op selective checkpointing (its save list keeps the 1st, 3rd, 5th and 7th matrix products, wq, wv, w1, "
         "w2, and the SDPA outputs), FSDP2 with BF16 parameters and FP32 reduce, foreach AdamW. The reserved "
         "figure is the step replayed through the caching allocator with expandable segments "
         "(symmem/accounting/fsdp2_reserved.py: FSDP2's all-gather and reduce-scatter buffers on their streams, "
         "the root and last block unsharded, the backward prefetch; three steps, the steady one's peak); rank 0, "
         "the fullest shards. No constant is fitted to these measurements.",
         "Not modelled, so not compared: torch.compile (inductor's saved set and fusions), Float8 (torchao's "
         "scales and FP8 copies; the float8 all-gather), context, tensor and pipeline parallelism for torchtitan, "
         "AsyncTP. The eager figure beside a compiled or Float8 run shows how much those save, not an error. The "
         "Trainy runs used torchtitan e7c0cae, not the 9dec370 code the profile writes. NCCL's buffers are "
         "outside the allocator and outside both figures. Llama 3.1 8B has Llama 3 8B's shapes (preset "
         "llama-3-8b); its longer RoPE range does not matter here: torchtitan 9dec370 sizes its one RoPE table "
         "by the training sequence (2 x s rows)."),
        align="llllrrllrrrll")]


if __name__ == "__main__":
    main(tables)
