"""torchtitan's published GPU measurements beside symmem's replay: the reserved memory torchtitan logged
("Memory(GiB)", `torch.cuda.memory_stats()["reserved_bytes.all.peak"]`, torchtitan/metrics.py at 9dec370) in its
own benchmarks, and what the profile of the run's code replays for the same run (symmem/accounting/fsdp2_reserved.py:
the FSDP2 step through the caching allocator with expandable segments): `torchtitan-2412` (torchtitan 9dec370) for
torchtitan's H100 runs, `torchtitan-2506` (e7c0cae) for Trainy's H200 runs.

Sources (public): pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (the torchtitan team, H100 96 GB,
torch 1963fc8 of 2024-12-23, torchao eab345c, torchtitan 9dec370 of 2024-12-26; memory read at iteration 90, the
maximum over GPUs) and benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (Trainy, H200, torchtitan e7c0cae of
2025-06-11, dated 2025-06-13 in the page's table, compiled with Float8 and FSDP's float8 all-gather, memory at
iteration 100). Compared: the eager, compiled (`--compile`), Float8 and CP runs of 9dec370 (Table 2's four, CP 1 to 8)
and Trainy's compiled Float8 runs with the float8 all-gather; the TP and PP runs (Tables 4 to 6, every row) are
listed, not predicted."""

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
    (H100_2412, "Table 2", "llama-3-8b", 8, 2, "CP 4", 1, 131072, "full", "torch.compile + Float8", 84.0),
    (H100_2412, "Table 2", "llama-3-8b", 8, 1, "CP 8", 1, 262144, "full", "torch.compile + Float8", 84.5),
    (H100_2412, "Table 4", "Llama 3.1 70B", 256, 32, "TP 8", 16, 8192, "full", "torch.compile + Float8", 71.9),
    (H100_2412, "Table 4", "Llama 3.1 70B", 256, 32, "TP 8", 16, 8192, "full", "torch.compile + Float8 + AsyncTP",
     67.6),
    (H100_2412, "Table 5", "Llama 3.1 405B", 512, 8, "TP 8, PP 8 (1F1B)", 32, 8192, "full",
     "torch.compile + Float8 + AsyncTP", 82.5),
    (H100_2412, "Table 5", "Llama 3.1 405B", 512, 8, "TP 8, PP 8 (interleaved 1F1B)", 32, 8192, "full",
     "torch.compile + Float8 + AsyncTP", 72.7),
    *((H100_2412, "Table 6", "Llama 3.1 405B", 512, 8 // cp, "TP 8, PP 8 (1F1B)" + (f", CP {cp}" if cp > 1 else ""),
       8, 32768 * cp, "full", "torch.compile + Float8 + AsyncTP", gib)
      for cp, gib in ((1, 75.3), (2, 75.9), (4, 77.1), (8, 84.9))),
    (H200_2506, "Results", "llama-3-8b", 32, 32, "", 2, 8192, "selective-op",
     "torch.compile + Float8 (float8 all-gather)", 47.96),
    (H200_2506, "Results", "llama-3-8b", 64, 64, "", 2, 8192, "selective-op",
     "torch.compile + Float8 (float8 all-gather)", 46.97),
)
TOLERANCE = 0.05  # the bar for the eager BF16 runs
# each run's code: torchtitan 9dec370 (profile torchtitan-2412) for torchtitan's H100 runs, e7c0cae (torchtitan-2506)
# for Trainy's H200 runs
PROFILE = {H100_2412: "torchtitan-2412", H200_2506: "torchtitan-2506"}

# torchtitan's published throughput (TPS/GPU: tokens per second per GPU, read at iteration 90) of the same H100 runs
# (H100_2412 Tables 1 and 3; Llama 3.1 8B, local batch 2, sequence 8,192, selective activation checkpointing):
# (table, FSDP, techniques, TPS/GPU); the eager ones are what the profile models
THROUGHPUT = (
    ("Table 1", 8, "eager", 5762), ("Table 1", 8, "torch.compile", 6667),
    ("Table 1", 8, "torch.compile + Float8", 8532),
    ("Table 3", 128, "eager", 5605), ("Table 3", 128, "torch.compile", 6514),
    ("Table 3", 128, "torch.compile + Float8", 8380),
)
THROUGHPUT_TOLERANCE = 0.10  # issue 46's bar for the two eager runs
# the runs' GPUs as H100_2412 describes them: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", 400 Gb/s RDMA a
# GPU, the 500 W power limit (not modelled: the clocks it holds are not published); else the H100's datasheet
RUN_HBM = 2400 * 10**9


def rows() -> list[dict]:
    from symmem.accounting.fsdp2_reserved import replay
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.profiles import with_fsdp_float8_all_gather
    from symmem.scenario import model_scenario

    out = []
    for source, table, model, gpus, fsdp, other, b, s, ac, tech, measured in PUBLISHED:
        row = {"source": source, "table": table, "model": model, "gpus": gpus, "fsdp": fsdp, "other": other, "b": b,
               "s": s, "ac": ac, "tech": tech, "measured": measured, "reserved": None, "allocated": None,
               "at": None}
        cp = int(other.split()[1]) if other.startswith("CP ") else 1
        if not other or cp > 1:  # FSDP (with CP): the profile's step, compiled and in Float8 where the run was
            trainy = source == H200_2506  # torchtitan e7c0cae's code: profile torchtitan-2506
            scn = model_scenario(load_model(model)).replace(
                profile_name=PROFILE[source], zero=zero_stage(3),
                precision=recipe("torchao-float8-tensorwise" if "Float8" in tech else "fp32"),
                parallel=Parallel(dp=fsdp, cp=cp), b=b, s=s, recompute_name=ac,
                gpu_memory=(141 if trainy else 96) * 10**9, compiled=tech != "eager")
            if "all-gather" in tech:
                scn = with_fsdp_float8_all_gather(scn)
            r = replay(scn)
            row.update(reserved=r.peak_reserved, allocated=r.peak_allocated, at=r.reserved_at)
        out.append(row)
    return out


def throughput_rows() -> list[dict]:
    """Each published throughput beside the step-time model's tokens/s/GPU for the eager runs (profile
    torchtitan-2412, FSDP2's prefetched traffic overlapped, `steptime.model._dp_exposed`): on the H100's datasheet
    figures and on the runs' own memory bandwidth."""
    import dataclasses

    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.hardware import gpu
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario
    from symmem.steptime import CONSTANTS, breakdown, features

    h100 = gpu("H100")
    runs_gpu = dataclasses.replace(h100, name="H100 96GB HBM2e", hbm=RUN_HBM, memory=96 * 10**9)
    out = []
    for table, fsdp, tech, measured in THROUGHPUT:
        row = {"table": table, "fsdp": fsdp, "tech": tech, "measured": measured, "datasheet": None, "runs": None}
        if tech == "eager":
            scn = model_scenario(load_model("llama-3-8b")).replace(
                profile_name="torchtitan-2412", precision=recipe("fp32"), zero=zero_stage(3),
                parallel=Parallel(dp=fsdp), b=2, s=8192, recompute_name="selective-op", gpu_memory=96 * 10**9)
            for key, g in (("datasheet", h100), ("runs", runs_gpu)):
                seconds = sum(breakdown(features(scn, g), g, CONSTANTS).values())
                row[key] = scn.b * scn.s / seconds  # one micro-batch of b x s tokens a GPU an iteration
        out.append(row)
    return out


def _status(r: dict) -> str:
    if r["reserved"] is None:
        # (torchtitan 0.3.0's TP and PP are modelled, the `torchtitan` profile; these runs are 9dec370's code)
        return f"not predicted: {r['other']} is not modelled for torchtitan 9dec370, this run's code"
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
        "(profile torchtitan-2412 or torchtitan-2506, the run's code: eager or compiled, BF16 or Float8, as the run)",
        ("published run", "model", "parallelism", "GPUs", "local batch", "sequence", "activation checkpointing",
         "techniques", "measured reserved GiB", "symmem replayed reserved GiB",
         "symmem replayed peak allocated GiB", "reserved reached at", "comparison"),
        body,
        ("Measured: torchtitan's logged memory, torch.cuda.memory_stats()['reserved_bytes.all.peak'] after a reset "
         "at the previous log step (torchtitan/metrics.py at 9dec370), the maximum over the GPUs; from pytorch/"
         f"torchtitan {H100_2412} (torch 1963fc8 2024-12-23, torchtitan 9dec370 2024-12-26, H100 96 GB, "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True as its run_llama_train.sh sets) and "
         f"{H200_2506} (torchtitan e7c0cae, committed 2025-06-11, 2025-06-13 in the page's table; H200).",
         "symmem: profile torchtitan-2412 (symmem/profiles.py, symmem/rules/torchtitan.py): torchtitan 9dec370's "
         "Llama 3 (wq, wk, wv separate; its RMSNorm; SDPA's flash kernel; the loss cross_entropy(pred.float())), "
         "per-op selective checkpointing (its save list keeps the 1st, 3rd, 5th and 7th matrix products, wq, wv, w1, "
         "w2, and the SDPA outputs), FSDP2 with BF16 parameters and FP32 reduce, foreach AdamW. The reserved "
         "figure is the step replayed through the caching allocator with expandable segments "
         "(symmem/accounting/fsdp2_reserved.py: FSDP2's all-gather and reduce-scatter buffers on their streams, "
         "the root and last block unsharded, the backward prefetch; three steps, the steady one's peak); rank 0, "
         "the fullest shards. No constant is fitted to these measurements.",
         "torch.compile (`--compile`, symmem/accounting/compiled.py): each block's saved values are the cut "
         "of torch's min-cut partitioner over the dataflow (held to the byte on the CPU, symmem measure "
         "--framework fsdp2 --compile); the loss runs eagerly, as at 9dec370 (its train.py leaves the loss's "
         "compile commented out); the blocks' transients in the replay are still the eager ops' (inductor's "
         "fused kernels are not modelled), which the peak, at the loss's backward, does not meet.",
         "Float8 (`--precision torchao-float8-tensorwise --compile`): torchao's tensorwise Float8 linears, every "
         "linear but the output (9dec370 left it out), in the partitioner's cut (each product's input recomputed, "
         "each module's amax and scale kept), the weights gathered in BF16 (the runs' configs say nothing of "
         "FSDP's float8 all-gather, off by default at 9dec370); the replay leaves out the casts' float8 copies, "
         "alive only while their product runs, not at the loss's backward where the figure peaks.",
         "Context parallelism (`--cp`, derived, not measured: torch's context_parallel runs on CUDA only): FSDP2 "
         "shards over DP x CP (9dec370's dp_shard_cp mesh); every activation on s/CP rows, what one device keeps of "
         "its rows (the attention's saved local q, k, v and merged output and logsumexp); the ring attention's "
         "transients from torch's source (the kv shards all-gathered, 9dec370's default rotate method; the merge's "
         "FP32 outputs; the backward's FP32 accumulators and the kv gradients passed on); the RoPE table twice, "
         "the copy context_parallel keeps to restore it beside the table sharded in place. The figure peaks at the "
         "loss's backward, on each rank's s/CP rows.",
         "Trainy's H200 runs: profile torchtitan-2506, their code (torchtitan e7c0cae, torch 2.8.0a0, torchao "
         "0afa4c1): 9dec370's model and FSDP units with nn.RMSNorm, one RoPE table of s rows, fused AdamW, and the "
         "loss compiled with the blocks (components/loss.py:25-30 there): it keeps the BF16 logits and two FP32 "
         "values a row, and its backward writes the BF16 gradient of the logits directly (inductor's kernels, read "
         "on the CPU), where the eager loss holds three FP32 logits-sized tensors. FSDP2's float8 all-gather: each "
         "Float8 linear's weight gathered at 1 byte an element (the output stays BF16, filtered by the run's "
         "llama3_8b.toml), the compiled blocks' saved set under per-op AC measured on the CPU on torchtitan 0.3.0's "
         "block (its q, k and v one product), and on e7c0cae's own block under the runs' torch 2.8.0 and torchao "
         "0.12.0 alike (tools/compile_study/e7c0cae_float8_blocks.py: the same bytes as under this project's torch "
         "and torchao, the profile's cut); the run's "
         "force_recompute_fp8_weight_in_bwd does nothing at its torchao (pytorch/ao 03c850a, before 0afa4c1). The "
         "replay comes out 8-10 % under the two measurements: its peak allocation falls by the compiled loss's "
         "15.7 GiB from 9dec370's code, about what the runs fall, but what it reserves beyond that allocation "
         "falls from 8.3 to 3.5 GiB; the allocator's layout over the step is the likely place of the 4 to 5 GiB, "
         "not found (docs/torchtitan.md). Not the versions: inductor's CUDA code for the compiled loss under torch "
         "2.8.0 allocates what 2.13's does.",
         "Not modelled, so not predicted: tensor and pipeline parallelism for torchtitan 9dec370, AsyncTP. "
         "NCCL's buffers are outside the allocator and outside both figures. Llama 3.1 8B has Llama 3 8B's "
         "shapes (preset llama-3-8b); its longer RoPE range does not matter here: torchtitan 9dec370 sizes its one "
         "RoPE table by the training sequence (2 x s rows)."),
        align="llllrrllrrrll"), _throughput_table()]


def _throughput_table() -> Table:
    body = []
    for r in throughput_rows():
        cells = [f"{r['table']} (torchtitan, H100)", f"FSDP {r['fsdp']}", r["tech"], f"{r['measured']:,}"]
        for key in ("datasheet", "runs"):
            v = r[key]
            cells += ["-", "-"] if v is None else [f"{v:,.0f}", f"{100 * (v / r['measured'] - 1):+.1f}"]
        if r["runs"] is None:
            cells.append("not compared: compiled / Float8, the profile eager BF16")
        else:
            err = r["runs"] / r["measured"] - 1
            inside = "within" if abs(err) <= THROUGHPUT_TOLERANCE else "outside"
            cells.append(f"compared: {err:+.1%} ({inside} 10 %)")
        body.append(tuple(cells))
    return Table(
        "torchtitan_published_throughput",
        "torchtitan's published throughput (tokens/s per GPU) of Llama 3.1 8B on H100 beside symmem's step-time "
        "model (profile torchtitan-2412: eager BF16, FSDP2's traffic overlapped)",
        ("published run", "parallelism", "techniques", "measured TPS/GPU", "symmem, H100 datasheet", "error %",
         "symmem, the runs' H100 (2.4 TB/s HBM2e)", "error %", "comparison"),
        tuple(body),
        (f"Measured: {H100_2412} (pytorch/torchtitan): TPS/GPU read at the 90th iteration; local batch 2, "
         "sequence 8,192, selective (per-op) activation checkpointing, one micro-batch an iteration; its GPUs "
         "H100 96 GB HBM2e at 2.4 TB/s, 400 Gb/s RDMA a GPU between hosts, a 500 W power limit.",
         "symmem: the step-time model (symmem/steptime/) as `symmem memory --profile torchtitan-2412 --gpu H100` "
         "computes it, its five constants fitted on Megatron-LM runs on B200 (none on these); FSDP2's all-gathers "
         "and reduce-scatters run beside the compute, the first unit's and last unit's share waited for "
         "(steptime.model._dp_exposed); the attention a fused kernel (SDPA's). The second pair of columns takes "
         "the runs' memory bandwidth (2.4 TB/s) for the datasheet's 3.35; the 500 W power limit's clocks are not "
         "modelled. Compiled and Float8 runs are listed, not compared (neither is modelled for time)."),
        align="lllrrrrrl")


if __name__ == "__main__":
    main(tables)
