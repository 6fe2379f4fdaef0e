"""Issue 45: what bounding Megatron's allocator replay to the warm-up and `REPLAYED_PAIRS` steady 1F1B pairs costs
in accuracy. For six models under megatron-te at M = 256, every stage's replayed reserved figure with the bound
(the default) beside the whole step's (the bound lifted), and the replays' wall times. The allocator's state never
repeats, so the bound is not proven exact; this survey is what `symmem/accounting/reserved.py` and `symmem memory`
quote. Run: `python benchmarks/replay_truncation.py [--microbatches 256]` (about two minutes).
"""

from __future__ import annotations

import argparse
import time

import symmem.accounting.reserved as R
from symmem.cli.args import scenario_from_args
from symmem.cli.main import build_parser

CASES = [
    "--model llama-3-70b -s 8192 --tp 4 --pp 16 --dp 8",
    "--model llama-3-70b -s 4096 --tp 8 --pp 8 --dp 8",
    "--model llama-3-8b -s 8192 --tp 2 --pp 4 --dp 8",
    "--model deepseek-v3 -s 4096 --tp 1 --pp 16 --ep 8 --dp 8",
    "--model qwen3-30b-a3b -s 4096 --tp 2 --pp 4 --ep 4 --dp 4",
    "--model mixtral-8x7b -s 4096 --tp 2 --pp 4 --ep 4 --dp 4",
]


def figures(scn, pairs: int) -> tuple[list[int], float]:
    R._replay.cache_clear()
    R.REPLAYED_PAIRS = pairs
    t = time.perf_counter()
    out = [R.stage_reserved(scn, st) for st in scn.stages]
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--microbatches", type=int, default=256)
    m = ap.parse_args().microbatches
    bound = R.REPLAYED_PAIRS
    worst = (0, 0.0)
    print(f"M = {m}; bound {bound} steady pairs; MiB = 2^20 bytes")
    print(f"{'case':<60} {'stages off':>10} {'worst MiB':>9} {'worst %':>8} {'whole s':>8} {'bound s':>8}")
    for case in CASES:
        scn = scenario_from_args(build_parser().parse_args(
            f"memory {case} --profile megatron-te --gpu H100 --microbatches {m}".split()))
        whole, t_whole = figures(scn, 1 << 40)
        cut, t_cut = figures(scn, bound)
        off = [(w - c, (w - c) / w) for w, c in zip(whole, cut, strict=True) if w != c]
        big = max(off, key=lambda d: abs(d[0]), default=(0, 0.0))
        worst = max(worst, big, key=lambda d: abs(d[0]))
        print(f"{case:<60} {len(off):>6} / {len(whole):<3} {big[0] / 2**20:>9.0f} {100 * big[1]:>7.3f}% "
              f"{t_whole:>8.1f} {t_cut:>8.1f}")
    print(f"worst: the whole step's figure {worst[0] / 2**20:+.0f} MiB ({100 * worst[1]:+.3f} %) from the bound's")
    R.REPLAYED_PAIRS = bound


if __name__ == "__main__":
    main()
