"""symmem's benchmarks. Run: `python benchmarks/run.py` (add `--quick` for fewer repetitions).

Machines here are shared and noisy, so every figure is reported beside a reference measured in the same run,
as a ratio: wall times against the bare interpreter start with sympy imported, derivation against evaluation.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def wall(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


_DERIVE = """
import time
from symmem.scenario import load_scenario
import symmem.accounting.analysis as A
scn = load_scenario("paper").replace(mtp=True)
t0 = time.perf_counter()
for st in scn.stages:
    A.stage_activation_expr(scn, st)
    A.stage_params(scn, st)
t1 = time.perf_counter()
A.memory(scn)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def bench_derivation(repeat: int) -> None:
    """In a fresh interpreter each time, so that no cache (ours or sympy's) is warm."""
    derive, evaluate = [], []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", _DERIVE], check=True, capture_output=True, text=True).stdout
        d, e = map(float, out.split())
        derive.append(d)
        evaluate.append(e)
    d, e = statistics.median(derive), statistics.median(evaluate)
    print(f"derive every DeepSeek-V3 stage (16 stages with MTP, activations + parameters, fresh interpreter): "
          f"{d * 1000:.0f} ms; then evaluate the per-GPU breakdown of all stages: {e * 1000:.1f} ms; ratio "
          f"{d / e:.0f}x; target < 1 s: {'met' if d < 1 else 'MISSED'}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    repeat = 3 if args.quick else 5
    bench_derivation(repeat)
    import bench_paper as paper_floor  # benchmarks/bench_paper.py: symmem paper against its floor, all cores and one

    paper_floor.run(repeat)
    import bench_sweep  # benchmarks/bench_sweep.py: the sweep planner's compiled path against its loop

    bench_sweep.run(args.quick)
    import bench_html  # benchmarks/bench_html.py: the symmem html page in headless Chromium

    bench_html.run(args.quick)


if __name__ == "__main__":
    main()
