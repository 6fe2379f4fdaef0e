"""The step-time model (symmem/steptime.py) against the measured iteration times of six Megatron-LM runs on 8x B200
(SimuMax's published measurements, symmem/data/megatron_b200.json: 18 iterations at 4, 8 and 32 micro-batches),
with the peer simulator's error beside it. The model's four constants are fitted on these same rows (in sample)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from symmem.render.tables import Table

from ._common import main


@lru_cache(maxsize=1)
def rows() -> tuple[dict, ...]:
    from symmem.hardware import gpu
    from symmem.scenario import load_scenario
    from symmem.steptime import features, seconds

    runs = json.loads(resources.files("symmem.data").joinpath("megatron_b200.json").read_text())["runs"]
    out = []
    for run in runs:
        base = load_scenario(run["case"])
        for r in run["measured_step_time"]["by_num_microbatches"]:
            f = features(base.replace(microbatches=r["num_microbatches"]))
            est = seconds(f, gpu("B200")) * 1000
            out.append({"case": run["case"], "microbatches": r["num_microbatches"], "measured": r["real_ms"],
                        "features": f, "symmem": est, "error": 100 * (est - r["real_ms"]) / r["real_ms"],
                        "peer": r["peer_SimuMax_ms"], "peer_error": r["peer_err_pct"]})
    return tuple(out)


def tables() -> list[Table]:
    from symmem.steptime import EFFICIENCY, FIXED_SECONDS, TP_BANDWIDTH

    rs = rows()
    mae = sum(abs(r["error"]) for r in rs) / len(rs)
    worst = max(abs(r["error"]) for r in rs)
    peer = sum(abs(r["peer_error"]) for r in rs) / len(rs)
    body = tuple((r["case"], str(r["microbatches"]), f"{r['measured']:.1f}", f"{r['symmem']:.1f}", f"{r['error']:+.2f}",
                  f"{r['peer']:.1f}", f"{r['peer_error']:+.2f}") for r in rs)
    return [Table(
        "measured_step_times", "Measured iteration time of six Megatron-LM runs against symmem's estimate (ms)",
        ("run", "micro-batches", "measured", "symmem", "error %", "peer (SimuMax)", "peer error %"), body,
        (f"symmem: mean absolute error {mae:.2f} %, worst {worst:.2f} %; the peer: mean {peer:.2f} %.",
         f"Constants fitted on these 18 rows (in sample): efficiency {EFFICIENCY['dense']} of dense BF16 peak for "
         f"dense models, {EFFICIENCY['moe']} for MoE models; exposed TP collectives at {TP_BANDWIDTH} of NVLink; "
         f"{FIXED_SECONDS * 1000:.2f} ms per iteration (symmem/steptime.py).",
         "Measured: SimuMax's published runs (github.com/MooreThreads/SimuMax, "
         "docs/b200/b200_release_v1.2_summary.md): the fastest steady iteration on the highest rank."),
        align="lrrrrrr")]


def figure(formats: tuple[str, ...] = ("png", "pdf")) -> dict[str, bytes]:
    """Each measured iteration against symmem's estimate and the peer's, as the error in percent: {format: bytes}."""
    from symmem.render.plots import grouped_bars

    rs = rows()
    return grouped_bars(
        [([r["error"] for r in rs], "symmem (fitted, in sample)"),
         ([r["peer_error"] for r in rs], "peer simulator (SimuMax)")],
        [f"{r['case'].split('_mbc')[0]}\nM={r['microbatches']}" for r in rs], width=0.38, figsize=(7.6, 3.8),
        ylabel="estimated - measured (% of measured)",
        title="Iteration time of six Megatron-LM runs on 8x B200 at 4, 8 and 32 micro-batches", tick_size=5,
        rotation=40, margins=(0.1, 0.27), zero_line=True, formats=formats)


if __name__ == "__main__":
    main(tables)
