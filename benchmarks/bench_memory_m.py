"""Issue 45: symmem at the micro-batch counts real runs use, side by side with the import floor
(`python -c "import sympy, jinja2, matplotlib.pyplot"`) in one run, alternately, as wall-time ratios.

Cases: torchtitan's ZBVZeroBubble at PP 4 with M = 4,096 and DualPipeV with M = 1,048,576 (the documented cap),
whose walks are bounded (`Schedule.walk_microbatches`); Megatron's 1F1B allocator replay of Llama-3-70B at PP 16
with M = 16 to 1,024, bounded to the warm-up and `REPLAYED_PAIRS` steady pairs and run by the C allocator; and the
512-GPU sweep ranked by time at a global batch of 1,024 with its default --top, every listed row's reserved memory
replayed. Target: each within 2x the floor. Run: `python benchmarks/bench_memory_m.py [--repeat N]`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

FLOOR = [sys.executable, "-c", "import sympy, jinja2, matplotlib.pyplot"]
MEMORY = [sys.executable, "-m", "symmem", "memory"]
TORCHTITAN = ["--model", "llama-3-8b", "--profile", "torchtitan", "--pp", "4", "--dp", "2", "-s", "4096"]
MEGATRON = ["--model", "llama-3-70b", "-s", "8192", "--profile", "megatron-te", "--gpu", "H100", "--tp", "4",
            "--pp", "16", "--dp", "8"]
CASES = {
    "memory zbv, PP 4, M 4,096": MEMORY + TORCHTITAN + ["--schedule", "zbv", "--microbatches", "4096"],
    "memory dualpipev, PP 4, M 1,048,576": MEMORY + TORCHTITAN + ["--schedule", "dualpipev", "--microbatches",
                                                                  "1048576"],
    "memory megatron-te 1F1B replay, PP 16, M 16": MEMORY + MEGATRON + ["--microbatches", "16"],
    "memory megatron-te 1F1B replay, PP 16, M 64": MEMORY + MEGATRON + ["--microbatches", "64"],
    "memory megatron-te 1F1B replay, PP 16, M 256": MEMORY + MEGATRON + ["--microbatches", "256"],
    "memory megatron-te 1F1B replay, PP 16, M 1,024": MEMORY + MEGATRON + ["--microbatches", "1024"],
    "sweep 512 GPUs by time, gbs 1,024": [sys.executable, "-m", "symmem", "sweep", "--model", "llama-3-70b",
                                          "--gpus", "512", "--gpu-memory", "80GB", "-s", "8192", "--profile",
                                          "megatron-te", "--gpu", "H100", "--rank-by", "time",
                                          "--global-batch-size", "1024"],
}


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    for name, flags in CASES.items():
        ratios, floors, walls = [], [], []
        for _ in range(args.repeat):  # alternately: the floor, then the case
            f, w = _wall(FLOOR), _wall(flags)
            floors.append(f)
            walls.append(w)
            ratios.append(w / f)
        print(f"{name:<48} {statistics.median(walls):7.2f} s  floor {statistics.median(floors):5.2f} s  "
              f"{statistics.median(ratios):6.2f}x the floor (median of {args.repeat} pairs)")


if __name__ == "__main__":
    main()
