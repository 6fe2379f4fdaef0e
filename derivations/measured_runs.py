"""Ten real Megatron-LM runs (8x B200; six at s = 4096, four long-context runs under all-to-all CP at 32,768)
against symmem's derived peak under the `megatron-te` profile.

The measurements are SimuMax's published ones (github.com/MooreThreads/SimuMax, docs/b200/b200_release_v1.2_summary.md
and the launchers under simu_tools/megatron_scripts/), shipped as symmem/data/megatron_b200.json: the maximum over
the ranks of a stage of torch.cuda.max_memory_allocated() (and max_memory_reserved()), in MiB / 1024. The peer
simulator's predictions (SimuMax's own) are shown beside ours; neither is ground truth but the measurement.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from symmem.accounting.analysis import memory
from symmem.accounting.reserved import replay_stage
from symmem.render.tables import Table
from symmem.scenario import load_scenario

from ._common import main

GIB = 2**30


@lru_cache(maxsize=1)
def runs() -> tuple[dict, ...]:
    return tuple(json.loads(resources.files("symmem.data").joinpath("megatron_b200.json").read_text())["runs"])


def _stage_ranks(run: dict, stage: int) -> list[float]:
    """Each rank's measured max reserved (MiB) of pipeline stage `stage`: Megatron's rank order puts PP outermost
    (tp-cp-ep-dp-pp), so stage i holds ranks i·W/PP to (i+1)·W/PP - 1."""
    per_stage = run["parallelism"]["world_size"] // run["parallelism"]["pp"]
    per_rank = run["measured"]["per_rank_mb"]
    return [per_rank[str(r)]["max_reserved_mb"] for r in range(stage * per_stage, (stage + 1) * per_stage)]


def _stage_keys(run: dict) -> list[str]:
    return list(run["measured"]["per_stage_alloc_gib_derived"])


@lru_cache(maxsize=1)
def comparison() -> tuple[dict, ...]:
    """One row per run and stage: measured, symmem's peak (with its event) and reserved range, the peer's (derived
    once per process: the table and the figure share it; `with_reserved` adds the replayed reserved memory)."""
    rows = []
    for run in runs():
        scn = load_scenario(run["case"])
        peer = run["peer_simulator_SimuMax"]["peak_alloc_by_stage_gib"]
        for key, stage in zip(_stage_keys(run), memory(scn), strict=True):
            meas = run["measured"]["per_stage_alloc_gib_derived"][key]
            reserved = run["measured"]["per_stage_reserved_gib_derived"][key]
            peer_key = key if key in peer else "first_stage"
            ours = stage.peak_allocated / GIB
            low, high = stage.reserved
            ev = stage.peak.event
            measured_ranks = _stage_ranks(run, stage.stage.index)
            rows.append({
                "case": run["case"], "stage": key.removesuffix("_stage").replace("all_ranks", "all"),
                "measured": meas, "symmem": ours, "symmem_bytes": stage.peak_allocated,
                "error": 100 * (ours - meas) / meas, "peer": peer[peer_key],
                "peer_error": 100 * (peer[peer_key] - meas) / meas,
                "event": f"{ev.phase}, {ev.part}, {ev.op}",
                "reserved": reserved, "reserved_low": low / GIB, "reserved_high": high / GIB,
                "reserved_rank_spread": 100 * (max(measured_ranks) - min(measured_ranks)) / min(measured_ranks),
                "sum": stage.allocated / GIB,
            })
    return tuple(rows)


@lru_cache(maxsize=1)
def with_reserved() -> tuple[dict, ...]:
    """`comparison()`'s rows with the reserved memory the caching-allocator replay derives (the table's; the figure
    needs none of it, so `symmem paper` replays beside the figures, not before them)."""
    rows = []
    for run in runs():
        scn = load_scenario(run["case"])
        par = scn.parallel
        # the stage's ranks (the measurement is the max over them), one per distinct pair of DDP shards: the replay
        # of a rank depends on nothing else
        experts = scn.model.family.routed_experts is not None
        ranks = {(r // par.tp % par.dense_shard, r // (par.etp * par.ep) % par.expert_dp if experts else 0): r
                 for r in range(par.tp * par.cp * par.dp)}
        for stage in scn.stages:
            derived = max(replay_stage(scn, stage, r).peak_reserved for r in ranks.values())
            rows.append(derived)
    return tuple({**row, "reserved_derived": d / GIB, "reserved_bytes": d,
                  "reserved_error": 100 * (d / GIB - row["reserved"]) / row["reserved"]}
                 for row, d in zip(comparison(), rows, strict=True))


def _role(case: str) -> str:
    """Every row was available while the profile was built; the CP rows' one change (TE's pre-all-to-all attention
    output, symmem/rules/megatron_te.py) was read from TransformerEngine's source after they were reported low."""
    return "given; a2a term read from TE" if "_cp" in case else "given"


def tables() -> list[Table]:
    rows = with_reserved()
    body = tuple((r["case"], r["stage"], f"{r['measured']:.3f}", f"{r['symmem']:.3f}", f"{r['error']:+.2f}",
                  r["event"], f"{r['peer']:.3f}", f"{r['peer_error']:+.2f}", f"{r['reserved']:.3f}",
                  f"{r['reserved_derived']:.3f}", f"{r['reserved_error']:+.2f}", f"{r['reserved_rank_spread']:.2f}",
                  _role(r["case"])) for r in rows)
    return [Table(
        "measured_runs", "Measured peak memory of ten Megatron-LM runs against symmem's derived peak (GiB)",
        ("run", "stage", "measured max allocated", "symmem peak_allocated", "error %", "symmem peak event",
         "peer (SimuMax)", "peer error %", "measured max reserved", "symmem reserved", "reserved error %",
         "measured spread over the stage's ranks %", "role"),
        body,
        ("Measured: SimuMax's published runs (github.com/MooreThreads/SimuMax, "
         "docs/b200/b200_release_v1.2_summary.md): 8x NVIDIA B200, Megatron-LM 23e00ed0, TransformerEngine 2.11, "
         "BF16, micro-batch 1, s = 4096 (the CP runs: s = 32,768, --cp-comm-type a2a, TP x CP = 8), 1F1B, no "
         "recomputation, no FP8, "
         "distributed optimizer; max over the ranks of a stage of torch.cuda.max_memory_allocated().",
         "symmem: the megatron-te profile (symmem/profiles.py, symmem/rules/megatron_te.py) on the scenario named "
         "like the run (symmem memory --scenario RUN --json); the peak is the largest event of the step's "
         "timeline, derived from the dataflows.",
         "symmem reserved: PyTorch's caching allocator replayed over the allocations and frees of model build, "
         "DDP buffers, the distributed optimizer and two 1F1B iterations (a third changes no figure), in the order "
         "Megatron-Core makes them "
         "(symmem/accounting/reserved.py, symmem/accounting/allocator.py), the largest over the stage's ranks, as "
         "the measurement is; NCCL's buffers are outside the allocator and the measurement.",
         "Role: every number here was available while the profile and the replay were built (the given runs); "
         "none is a prediction of an unseen run. Identical ranks of a stage differ in measured reserved by the "
         "spread shown; the replay differs between ranks only by their shards of the DDP buffers.",
         "The DeepSeek-V2 peaks fall in the attention backward, whose cuDNN FP32 dQ/dK/dV accumulators are a "
         "named hypothesis (docs/measured_runs.md)."),
        align="llrrrlrrrrrrl")]


def figure(formats: tuple[str, ...] = ("png", "pdf"), rows: tuple[dict, ...] | None = None) -> dict[str, bytes]:
    """Measured, symmem and peer per run and stage, side by side: {format: bytes}. `rows`: `comparison()`'s, where
    another process derived them (`symmem paper`'s figures are drawn in a child); derived here by default."""
    from symmem.render.plots import grouped_bars

    rows = comparison() if rows is None else rows
    return grouped_bars(
        [([r[key] for r in rows], label) for key, label in (("measured", "measured"),
                                                            ("symmem", "symmem (megatron-te)"),
                                                            ("peer", "peer simulator (SimuMax)"))],
        [f"{r['case'].split('_mbc')[0]}\n{r['stage']}" for r in rows], width=0.27, figsize=(7.6, 4.0),
        ylabel="max allocated per GPU (GiB)",
        title="Ten Megatron-LM runs on B200: measured peak against symmem and the peer simulator", tick_size=5.5,
        rotation=30, margins=(0.11, 0.22), formats=formats)


if __name__ == "__main__":
    main(tables)
