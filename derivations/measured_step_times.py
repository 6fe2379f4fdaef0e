"""The step-time model (symmem/steptime/) against the measured iteration times of ten Megatron-LM runs on 8x B200
(SimuMax's published measurements, symmem/data/megatron_b200.json: 22 iterations, six runs at 4, 8 and 32
micro-batches and four long-context CP runs at 4), judged two ways: in sample (the constants fitted on all 22
iterations, `symmem.steptime.CONSTANTS`) and out of sample (leave one run out: each run's iterations predicted by
the constants fitted on the other nine runs), with the peer simulator's published estimate beside both."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from symmem.render.tables import Table

from ._common import main


@lru_cache(maxsize=1)
def by_run() -> dict[str, list[tuple]]:
    """{run: [(StepFeatures, GPU, measured seconds, measured row)]} in the data file's order."""
    from symmem.hardware import gpu
    from symmem.scenario import load_scenario
    from symmem.steptime import NEUTRAL, features

    runs = json.loads(resources.files("symmem.data").joinpath("megatron_b200.json").read_text())["runs"]
    g = gpu("B200")
    out: dict[str, list[tuple]] = {}
    for run in runs:
        base = load_scenario(run["case"])
        for r in run["measured_step_time"]["by_num_microbatches"]:
            f = features(base.replace(microbatches=r["num_microbatches"]), g, NEUTRAL)
            out.setdefault(run["case"], []).append((f, g, r["real_ms"] / 1000, r))
    return out


@lru_cache(maxsize=1)
def fitted():
    """The constants fitted on every iteration (what `symmem.steptime.CONSTANTS` holds)."""
    from symmem.steptime import fit

    return fit([(f, g, m) for rs in by_run().values() for f, g, m, _r in rs])


@lru_cache(maxsize=1)
def rows() -> tuple[dict, ...]:
    from symmem.steptime import CONSTANTS, leave_one_run_out, seconds

    runs = by_run()
    loro = leave_one_run_out({k: [(f, g, m) for f, g, m, _r in rs] for k, rs in runs.items()})
    out = []
    for case, rs in runs.items():
        k_out, predicted = loro[case]
        for (f, g, m, r), p in zip(rs, predicted, strict=True):
            est = seconds(f, g, CONSTANTS)
            out.append({"case": case, "microbatches": r["num_microbatches"], "measured": r["real_ms"],
                        "features": f, "symmem": est * 1000, "error": 100 * (est - m) / m,
                        "loro": p * 1000, "loro_error": 100 * (p - m) / m, "loro_constants": k_out,
                        "peer": r["peer_SimuMax_ms"], "peer_error": r["peer_err_pct"]})
    return tuple(out)


def summary() -> dict[str, float]:
    rs = rows()

    def stats(key):
        e = [abs(r[key]) for r in rs]
        return sum(e) / len(e), max(e)

    (m_in, w_in), (m_out, w_out), (m_peer, w_peer) = stats("error"), stats("loro_error"), stats("peer_error")
    return {"in_mean": m_in, "in_worst": w_in, "loro_mean": m_out, "loro_worst": w_out, "peer_mean": m_peer,
            "peer_worst": w_peer}


def tables() -> list[Table]:
    from symmem.steptime import CONSTANTS

    rs, st, k = rows(), summary(), CONSTANTS
    body = tuple((r["case"], str(r["microbatches"]), f"{r['measured']:.1f}", f"{r['loro']:.1f}",
                  f"{r['loro_error']:+.2f}", f"{r['symmem']:.1f}", f"{r['error']:+.2f}", f"{r['peer']:.1f}",
                  f"{r['peer_error']:+.2f}") for r in rs)
    return [Table(
        "measured_step_times",
        "Measured iteration time of ten Megatron-LM runs against symmem's estimate, out of sample and in sample (ms)",
        ("run", "micro-batches", "measured", "symmem, run left out", "error %", "symmem, all runs fitted",
         "error %", "peer (SimuMax)", "peer error %"), body,
        (f"Leave one run out (each run predicted by the constants fitted on the other nine): mean absolute error "
         f"{st['loro_mean']:.2f} %, worst {st['loro_worst']:.2f} %. In sample (fitted on all 22 iterations): mean "
         f"{st['in_mean']:.2f} %, worst {st['in_worst']:.2f} %. The peer simulator's published estimates: mean "
         f"{st['peer_mean']:.2f} %, worst {st['peer_worst']:.2f} %.",
         f"The model (symmem/steptime/): per GEMM its local shape's tiled FLOPs at {k.gemm_efficiency:.4f} of the "
         f"dense BF16 peak plus its operands' bytes at HBM bandwidth; the fused attention's causal FLOPs at "
         f"{k.attention_efficiency:.4f} of the peak; memory-bound ops' bytes at HBM bandwidth; each collective's "
         f"bytes at {k.link_efficiency:.4f} of NVLink plus {k.latency_s * 1e6:.2f} us per ring step or kernel "
         f"launched; the pipeline's bubble at the other stages' mean; the data-parallel traffic and the optimizer "
         f"step's bytes; {k.fixed_s * 1000:.2f} ms per iteration. Five constants, fitted by non-negative least "
         "squares on the relative error.",
         "Measured: SimuMax's published runs (github.com/MooreThreads/SimuMax, "
         "docs/b200/b200_release_v1.2_summary.md): 8x NVIDIA B200, Megatron-LM 23e00ed0, TransformerEngine 2.11, "
         "BF16 (no FP8), micro-batch 1, no recomputation, 1F1B, distributed optimizer, no communication overlap; "
         "s = 4096 (the CP runs: s = 32,768, all-to-all CP); the fastest steady iteration on the highest rank."),
        align="lrrrrrrrr")]


def figure(formats: tuple[str, ...] = ("png", "pdf")) -> dict[str, bytes]:
    """Each measured iteration against symmem's out-of-sample estimate and the peer's, as the error in percent."""
    from symmem.render.plots import grouped_bars

    rs = rows()
    return grouped_bars(
        [([r["loro_error"] for r in rs], "symmem (run left out of the fit)"),
         ([r["peer_error"] for r in rs], "peer simulator (SimuMax)")],
        [f"{r['case'].split('_mbc')[0]}\nM={r['microbatches']}" for r in rs], width=0.38, figsize=(7.6, 3.8),
        ylabel="estimated - measured (% of measured)",
        title="Iteration time of ten Megatron-LM runs on 8x B200, each predicted with its run left out",
        tick_size=4.5, rotation=40, margins=(0.1, 0.3), zero_line=True, formats=formats)


if __name__ == "__main__":
    main(tables)
