"""Sweep benchmarks. Run: `python benchmarks/bench_sweep.py` (`--quick` for fewer repetitions); also run by
`python benchmarks/run.py`.

Measured side by side in one run, each in a child process pinned to one core:

* the per-configuration loop (a `Scenario` per configuration through `analysis.memory`, derivations warm) and
  the compiled path (one derivation per structural case, exact vectorised evaluation) on the same realistic
  space: configurations per second of each and their ratio;
* a sweep of more than 10 million configurations (ranges much wider than realistic) streamed in tiles:
  configurations per second, wall time, and the child's peak resident memory (getrusage maxrss);
* the planner's sweep under `--profile megatron-te` ranked by time at a global batch (issue 27): every
  configuration that fits timed on its tile's arrays (symmem/sweep/timetable.py), against timing each one by one.

Targets, the pass marks below: >= 10,000,000 configurations/s on one core ranking by the timeline's peak (a
maximum over the undominated candidate events of every stage, each compiled; the loop calls
`stage_memory(...).peak_allocated`), >= 100x the loop like for like (both on the realistic space), 10 million
configurations in < 1 GiB; ranked by time, >= 10,000,000 configurations/s on one core. The wide space's rate is
never divided by the loop's: the loop was timed on another space.

`--update-docs` rewrites the "Measured" table of docs/sweep.md (between its `bench_sweep` markers) from this run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

GIB = 2**30
RATE_TARGET = 10_000_000  # configurations per second, one core, ranking by the peak
RATIO_TARGET = 100  # times the per-configuration loop, on the same space
MEMORY_TARGET = GIB  # peak resident memory of the process sweeping more than 10 million configurations


def _one_core() -> None:
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass


def _base():
    from symmem.parallel.layout import LayoutSpec
    from symmem.parallel.schedule import Schedule
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import load_scenario

    scn = load_scenario("paper")
    return scn.replace(parallel=Parallel(sequence_parallel=True, moe_sequence_parallel=False), layout=LayoutSpec(),
                       schedule=Schedule(), microbatches=None)


def realistic_space():
    """What `symmem sweep --gpus 1024` enumerates for DeepSeek-V3 (TP 1-8, PP | 1024 up to 61, EP 1-256, b 1-8,
    recompute none/full, ZeRO 0-3)."""
    from symmem.parallel.schedule import Schedule
    from symmem.sweep.space import Space

    return Space(_base(), 1024, tp=(1, 2, 4, 8), pp=(1, 2, 4, 8, 16, 32), ep=tuple(2**i for i in range(9)),
                 etp=(1,), recompute=("none", "full"), schedule=(Schedule("1f1b"),), zero=(0, 1, 2, 3),
                 microbatches=(None,), s=(4096,), b=(1, 2, 4, 8))


def wide_space():
    """More than 10 million configurations: b 1-64, s 256-32768 by 256, on top of the realistic axes."""
    from symmem.parallel.schedule import Schedule
    from symmem.sweep.space import Space

    return Space(_base(), 1024, tp=(1, 2, 4, 8), pp=(1, 2, 4, 8, 16), ep=tuple(2**i for i in range(9)),
                 etp=(1,), recompute=("none", "full"), schedule=(Schedule("1f1b"),), zero=(0, 1, 2, 3),
                 microbatches=(None,), s=tuple(range(256, 32769, 256)), b=tuple(range(1, 65)))


def megatron_space():
    """The planner on the validated profile (issue 18): Llama-3-70B on 512 GPUs under `--profile megatron-te`,
    as a planner sweeps it: TP 1-8, CP 1-8, PP 1-16, recomputation none/selective/full, 1F1B and interleaved
    (2 and 4 chunks), M = PP or 16-128 micro-batches, s 4K-128K by 4K, b 1-32 (3.7 million configurations)."""
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.schedule import Schedule
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario
    from symmem.sweep.space import Space

    base = model_scenario(load_model("llama-3-70b")).replace(
        profile_name="megatron-te", precision=recipe("megatron"), zero=zero_stage(1),
        parallel=Parallel(sequence_parallel=True, moe_sequence_parallel=True))
    return Space(base, 512, tp=(1, 2, 4, 8), cp=(1, 2, 4, 8), pp=(1, 2, 4, 8, 16), ep=(1,), etp=(1,),
                 recompute=("none", "selective", "full"),
                 schedule=(Schedule("1f1b"), Schedule("interleaved", 2), Schedule("interleaved", 4)), zero=(1,),
                 microbatches=(None, 16, 32, 64, 128), s=tuple(range(4096, 131073, 4096)), b=tuple(range(1, 33)))


def megatron_time_space():
    """The planner ranking by time (issue 27): Llama-3-70B on 512 GPUs under megatron-te at a global batch of
    1,024 sequences, TP 1-8, CP 1-8, PP 1-16, three recomputations, 1F1B and interleaved (2 and 4 chunks), s 4K to
    128K by 4K, b 1-8."""
    import dataclasses

    from symmem.sweep.space import microbatch_candidates

    base = megatron_space()
    space = dataclasses.replace(base, b=tuple(range(1, 9)), base=base.base.replace(gpu_name="H100"))
    m = microbatch_candidates(space.gpus, space.tp, space.cp, space.pp, space.b, 1024)
    return dataclasses.replace(space, microbatches=m, global_batch=1024)


def child_megatron_time(repeat: int) -> dict:
    """The ranking as `symmem sweep --rank-by time --top 20` runs it (the compiled pass at the global batch, every
    configuration that fits timed on its tile's arrays, the fastest 20 kept, their binding events found): cold
    (deriving the memory's structural cases and the time tables) and `repeat` times warm; and, side by side, the
    one-by-one timing of every configuration that fits (`timing.rank_by_time`: a Scenario and `step_time` each,
    what the ranking did before, warm)."""
    from symmem.sweep.evaluate import finish_events
    from symmem.sweep.space import sweep
    from symmem.sweep.timing import rank_by_time

    space = megatron_time_space()

    def ranking():
        s = sweep(space, top=20, lazy_events=True, rank_by="time")
        s.ranked = finish_events(s.ranked)
        return s

    t0 = time.perf_counter()
    ranking()
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        s = ranking()
        warm.append(time.perf_counter() - t0)
    listed = sweep(space, top=0, lazy_events=True).ranked  # what fits, as records (by headroom)
    rank_by_time(space, listed, 20)  # warm its caches
    t0 = time.perf_counter()
    rank_by_time(space, listed, 20)
    one_by_one = time.perf_counter() - t0
    return {"configurations": space.size, "valid": s.valid, "fits": s.fits, "cold_seconds": cold,
            "warm_seconds": statistics.median(warm), "one_by_one_seconds": one_by_one}


def _cold_then_warm(space, repeat: int):
    """(cold summary, its seconds, the last warm summary, every warm run's seconds): the sweep once from empty
    derivation caches, then `repeat` times warm."""
    from symmem.sweep.compile import clear_cache
    from symmem.sweep.space import sweep

    clear_cache()
    t0 = time.perf_counter()
    cold = sweep(space, top=20)
    cold_s = time.perf_counter() - t0
    warm = []
    s = cold
    for _ in range(repeat):
        t0 = time.perf_counter()
        s = sweep(space, top=20)
        warm.append(time.perf_counter() - t0)
    return cold, cold_s, s, warm


def child_megatron(repeat: int) -> dict:
    """Compiled and loop rates on the megatron-te space, like for like (the loop on a sample of it)."""
    import random

    from symmem.sweep.space import compiled_records, reference_records

    space = megatron_space()
    cold, cold_s, s, warm = _cold_then_warm(space, repeat)
    valid = sorted(compiled_records(space, ordinals=())[0])
    sample = sorted(random.Random(18).sample(valid, 40))
    reference_records(space, sample)
    t0 = time.perf_counter()
    reference_records(space, sample)
    loop_s = time.perf_counter() - t0
    return {"configurations": space.size, "valid": s.valid, "cases": cold.cases, "cold_seconds": cold_s,
            "derive_seconds": cold.derive_seconds, "warm_seconds": statistics.median(warm),
            "loop_sample": len(sample), "loop_seconds": loop_s}


def child_rates(repeat: int) -> dict:
    """Compiled and loop rates on the realistic space, in this (pinned) process."""
    import random

    from symmem.sweep.space import compiled_records, reference_records

    space = realistic_space()
    cold, cold_s, s, warm = _cold_then_warm(space, repeat)
    warm_s = statistics.median(warm)
    # The loop, on a sample of the same valid configurations; derivations warmed by a first pass.
    valid = sorted(compiled_records(space)[0])
    sample = sorted(random.Random(6).sample(valid, 150))
    reference_records(space, sample)
    loops = []
    for _ in range(max(1, repeat // 2)):
        t0 = time.perf_counter()
        reference_records(space, sample)
        loops.append(time.perf_counter() - t0)
    loop_s = statistics.median(loops)
    return {"configurations": space.size, "valid": s.valid, "cases": cold.cases, "cold_seconds": cold_s,
            "derive_seconds": cold.derive_seconds, "warm_seconds": warm_s, "loop_sample": len(sample),
            "loop_seconds": loop_s}


def child_wide(repeat: int) -> dict:
    import resource

    from symmem.sweep.space import sweep

    space = wide_space()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        s = sweep(space, top=20, region=True)
        runs.append((time.perf_counter() - t0, s.derive_seconds))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    first = runs[0][0]
    warm = statistics.median(t for t, _ in runs[1:]) if len(runs) > 1 else first
    return {"configurations": space.size, "valid": s.valid, "fits": s.fits, "first_seconds": first,
            "derive_seconds": runs[0][1], "warm_seconds": warm, "maxrss_before": rss0, "maxrss": rss}


def _child(what: str, repeat: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", what, "--repeat", str(repeat)], check=True,
                         capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def run(quick: bool = False) -> dict:
    repeat = 3 if quick else 5
    r = _child("rates", repeat)
    w = _child("wide", 2 if quick else 3)
    mg = _child("megatron", 2 if quick else 3)
    mt = _child("megatron_time", 1 if quick else 2)
    loop_rate = r["loop_sample"] / r["loop_seconds"]
    real_rate = r["valid"] / r["warm_seconds"]
    wide_rate = w["valid"] / w["warm_seconds"]
    wide_first = w["valid"] / w["first_seconds"]
    print(f"sweep, per-configuration loop (Scenario + analysis.memory, derivations warm): {loop_rate:,.0f} "
          f"configurations/s ({r['loop_sample']} configurations in {r['loop_seconds']:.2f} s)")
    print(f"sweep, compiled, realistic space (DeepSeek-V3, 1024 GPUs, {r['configurations']:,} configurations, "
          f"{r['valid']:,} valid, {r['cases']} structural cases): {r['warm_seconds'] * 1000:.0f} ms warm = "
          f"{real_rate:,.0f} configurations/s, ratio {real_rate / loop_rate:,.0f}x the loop; cold (deriving "
          f"{r['derive_seconds']:.2f} s) {r['cold_seconds']:.2f} s = {r['valid'] / r['cold_seconds']:,.0f}/s, "
          f"ratio {r['valid'] / r['cold_seconds'] / loop_rate:,.0f}x")
    ok_rate = wide_rate >= RATE_TARGET
    ok_ratio = real_rate / loop_rate >= RATIO_TARGET  # like for like: the same realistic space
    ok_mem = w["maxrss"] < MEMORY_TARGET
    print(f"sweep, compiled, wide space ({w['configurations']:,} configurations, {w['valid']:,} valid, streamed "
          f"in tiles, one core): {w['warm_seconds']:.2f} s = {wide_rate:,.0f} configurations/s (first run, "
          f"deriving {w['derive_seconds']:.2f} s: {w['first_seconds']:.2f} s = {wide_first:,.0f}/s); "
          f"peak RSS {w['maxrss'] / 2**20:.0f} MiB ({w['maxrss_before'] / 2**20:.0f} MiB after imports)")
    mg_rate = mg["valid"] / mg["warm_seconds"]
    mg_loop = mg["loop_sample"] / mg["loop_seconds"]
    ok_mg = mg_rate >= RATE_TARGET and mg_rate / mg_loop >= RATIO_TARGET
    print(f"sweep, compiled, megatron-te (Llama-3-70B, 512 GPUs, {mg['configurations']:,} configurations, "
          f"{mg['valid']:,} valid, {mg['cases']} structural cases): {mg['warm_seconds']:.2f} s warm = {mg_rate:,.0f} "
          f"configurations/s; the loop on {mg['loop_sample']} of them {mg_loop:,.1f}/s: {mg_rate / mg_loop:,.0f}x; "
          f"cold (deriving {mg['derive_seconds']:.2f} s) {mg['cold_seconds']:.2f} s")
    print(f"  targets: >= {RATE_TARGET:,.0f}/s (wide space): {'met' if ok_rate else 'MISSED'}; >= {RATIO_TARGET:.0f}x "
          f"the loop, like for like (realistic space): {'met' if ok_ratio else 'MISSED'}; < 1 GiB: "
          f"{'met' if ok_mem else 'MISSED'}; megatron-te >= {RATE_TARGET:,.0f}/s and >= {RATIO_TARGET:.0f}x its "
          f"loop: {'met' if ok_mg else 'MISSED'}")
    mt_rate = mt["configurations"] / mt["warm_seconds"]
    ok_mt = mt_rate >= RATE_TARGET
    print(f"sweep ranked by time, megatron-te (Llama-3-70B, 512 GPUs, global batch 1,024, {mt['configurations']:,} "
          f"configurations, {mt['valid']:,} of the global batch, {mt['fits']:,} fit, each timed; top 20): "
          f"{mt['warm_seconds']:.3f} s warm = {mt_rate:,.0f} configurations/s (target >= {RATE_TARGET:,.0f}/s: "
          f"{'met' if ok_mt else 'MISSED'}); cold {mt['cold_seconds']:.2f} s; timing the {mt['fits']:,} that fit "
          f"one by one instead: {mt['one_by_one_seconds']:.2f} s ({mt['fits'] / mt['one_by_one_seconds']:,.0f}/s)")
    return {"rates": r, "wide": w, "megatron": mg, "megatron_time": mt, "megatron_time_rate": mt_rate,
            "loop_rate": loop_rate, "real_rate": real_rate,
            "wide_rate": wide_rate, "wide_first": wide_first, "megatron_rate": mg_rate, "megatron_loop": mg_loop,
            "met": {"rate": ok_rate, "ratio": ok_ratio, "memory": ok_mem, "megatron": ok_mg, "megatron_time": ok_mt}}


BEGIN, END = "<!-- bench_sweep:begin -->", "<!-- bench_sweep:end -->"


def markdown(res: dict) -> str:
    """The docs' "Measured" table, from one run's results."""
    r, w, loop = res["rates"], res["wide"], res["loop_rate"]
    mib = 2**20
    rows = [
        ("per-configuration loop (derivations warm; each configuration's per-stage timeline peak), realistic space",
         f"{loop:,.0f} configurations/s ({r['loop_sample']} sampled configurations in {r['loop_seconds']:.2f} s)"),
        (f"compiled, the default DeepSeek-V3 sweep on 1024 GPUs ({r['configurations']:,} configurations, "
         f"{r['valid']:,} valid), warm",
         f"{r['warm_seconds'] * 1000:.0f} ms: {res['real_rate']:,.0f}/s, {res['real_rate'] / loop:,.0f}x the loop "
         "(like for like)"),
        (f"the same, cold (deriving {r['cases']} structural cases with their candidate events, "
         f"{r['derive_seconds']:.2f} s)",
         f"{r['cold_seconds']:.2f} s: {r['valid'] / r['cold_seconds']:,.0f}/s, "
         f"{r['valid'] / r['cold_seconds'] / loop:,.0f}x the loop"),
        (f"compiled, {w['configurations']:,} configurations ({w['valid']:,} valid: b 1-64, s 256-32768 by 256), "
         "one core",
         f"{w['warm_seconds']:.2f} s: {res['wide_rate']:,.0f}/s (first run with derivation: "
         f"{w['first_seconds']:.2f} s = {res['wide_first']:,.0f}/s)"),
        (f"peak resident memory of the process sweeping those {w['configurations']:,}",
         f"{w['maxrss'] / mib:.0f} MiB ({w['maxrss_before'] / mib:.0f} MiB of it imports)"),
        (f"compiled, `--profile megatron-te`: Llama-3-70B on 512 GPUs, {res['megatron']['configurations']:,} "
         f"configurations ({res['megatron']['valid']:,} valid; TP, CP 1-8, PP 1-16, 3 recomputations, 3 schedules, "
         "5 M, s 4K-128K by 4K, b 1-32), warm, one core",
         f"{res['megatron']['warm_seconds']:.2f} s: {res['megatron_rate']:,.0f}/s, "
         f"{res['megatron_rate'] / res['megatron_loop']:,.0f}x its loop on {res['megatron']['loop_sample']} sampled "
         f"configurations ({res['megatron_loop']:,.1f}/s); cold, deriving {res['megatron']['cases']} cases: "
         f"{res['megatron']['cold_seconds']:.2f} s"),
        (f"ranked by time, `--profile megatron-te`: Llama-3-70B on 512 GPUs at a global batch of 1,024, "
         f"{res['megatron_time']['configurations']:,} configurations ({res['megatron_time']['valid']:,} of the "
         f"global batch, {res['megatron_time']['fits']:,} fit, each timed on its tile's arrays), the top 20, warm, "
         "one core",
         f"{res['megatron_time']['warm_seconds']:.3f} s: {res['megatron_time_rate']:,.0f}/s; cold (deriving the "
         f"memory's cases and the time tables) {res['megatron_time']['cold_seconds']:.2f} s; timing those that fit "
         f"one by one instead (a Scenario and step_time each): {res['megatron_time']['one_by_one_seconds']:.2f} s"),
    ]
    met = res["met"]
    lines = [BEGIN, "", "| what | figure |", "|---|---|", *[f"| {a} | {b} |" for a, b in rows], "",
             f"Targets, the benchmark's pass marks: at least {RATE_TARGET:,.0f} configurations/s on one core ranking "
             f"by the peak ({'met' if met['rate'] else 'MISSED'}), at least {RATIO_TARGET:.0f}x the loop like for "
             f"like ({'met' if met['ratio'] else 'MISSED'}), 10 million configurations in under 1 GiB "
             f"({'met' if met['memory'] else 'MISSED'}); under megatron-te, at least {RATE_TARGET:,.0f}/s and "
             f"{RATIO_TARGET:.0f}x its own loop ({'met' if met['megatron'] else 'MISSED'}); ranked by time (each "
             f"configuration that fits timed), at least {RATE_TARGET:,.0f}/s "
             f"({'met' if met.get('megatron_time') else 'MISSED'}). The wide space's rate "
             "is not divided by the loop's: the loop was timed on the realistic space.", "", END]
    return "\n".join(lines)


def update_docs(res: dict, path: str | None = None) -> None:
    doc = pathlib.Path(path or pathlib.Path(__file__).resolve().parent.parent / "docs" / "sweep.md")
    text = doc.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    doc.write_text(text[:start] + markdown(res) + text[end:])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", choices=("rates", "wide", "megatron", "megatron_time"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--update-docs", action="store_true", help="rewrite docs/sweep.md's Measured table from this run")
    args = p.parse_args()
    if args.child:
        _one_core()
        child = {"rates": child_rates, "wide": child_wide, "megatron": child_megatron,
                 "megatron_time": child_megatron_time}[args.child]
        print(json.dumps(child(args.repeat)))
        return
    res = run(args.quick)
    if args.update_docs:
        update_docs(res)


if __name__ == "__main__":
    main()
