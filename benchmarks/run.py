"""symmem's benchmarks. Run: `python benchmarks/run.py` (add `--quick` for fewer repetitions).

Machines here are shared and noisy, so every figure is reported beside a reference measured in the same run,
as a ratio: wall times against the bare interpreter start with sympy imported, derivation against evaluation.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time


def wall(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_paper(repeat: int) -> None:
    with tempfile.TemporaryDirectory() as out:
        floor = wall([sys.executable, "-c", "import sympy, jinja2"], repeat)
        paper = wall([sys.executable, "-m", "symmem", "paper", "--out", out], repeat)
    print(f"symmem paper, cold start: {paper:.2f} s wall (median of {repeat}); "
          f"python + import sympy, jinja2: {floor:.2f} s; ratio {paper / floor:.1f}x; target < 3 s: "
          f"{'met' if paper < 3 else 'MISSED'}")


def bench_derivation(repeat: int) -> None:
    import symmem.analysis as A
    import symmem.evaluate as E
    import symmem.model as M
    from symmem.activations import kept_tensors
    from symmem.scenario import load_scenario

    def clear() -> None:
        for f in (A._terms, A._summed, A._stage_counts, A.model_totals, M.layer_flow, M.embedding_flow,
                  M.head_flow, M.mtp_flow, kept_tensors, E.compile_expr):
            f.cache_clear()

    derive, evaluate = [], []
    for _ in range(repeat):
        clear()
        scn = load_scenario("paper").replace(mtp=True)
        t0 = time.perf_counter()
        for st in scn.stages:
            A.stage_activation_expr(scn, st)
            A.stage_params(scn, st)
        derive.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        A.memory(scn)
        evaluate.append(time.perf_counter() - t0)
    d, e = statistics.median(derive), statistics.median(evaluate)
    print(f"derive every DeepSeek-V3 stage (16 stages, activations + parameters, caches cleared): {d * 1000:.0f} ms; "
          f"then evaluate the per-GPU breakdown of all stages: {e * 1000:.1f} ms; ratio {d / e:.0f}x; "
          f"target < 1 s: {'met' if d < 1 else 'MISSED'}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    repeat = 3 if args.quick else 5
    bench_derivation(repeat)
    bench_paper(repeat)
    import bench_sweep  # benchmarks/bench_sweep.py: the sweep planner's compiled path against its loop

    bench_sweep.run(args.quick)


if __name__ == "__main__":
    main()
