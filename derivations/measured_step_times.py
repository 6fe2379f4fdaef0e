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


def measured_iterations():
    """(run, its scenario at the iteration's micro-batch count, measured seconds, measured row) of every measured
    iteration of symmem/data/megatron_b200.json, in the file's order: what each model's rows are read from."""
    from symmem.scenario import load_scenario

    runs = json.loads(resources.files("symmem.data").joinpath("megatron_b200.json").read_text())["runs"]
    for run in runs:
        base = load_scenario(run["case"])
        for r in run["measured_step_time"]["by_num_microbatches"]:
            yield run["case"], base.replace(microbatches=r["num_microbatches"]), r["real_ms"] / 1000, r


@lru_cache(maxsize=1)
def by_run() -> dict[str, list[tuple]]:
    """{run: [(StepFeatures, GPU, measured seconds, measured row)]} in the data file's order."""
    from symmem.hardware import gpu
    from symmem.steptime import NEUTRAL, features

    g = gpu("B200")
    out: dict[str, list[tuple]] = {}
    for case, scn, seconds, r in measured_iterations():
        out.setdefault(case, []).append((features(scn, g, NEUTRAL), g, seconds, r))
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


# the kinds of run held out whole, one at a time (issue 46): what the model does on a kind of run it was not fitted
# on, which leaving one run out among its siblings hides
KINDS = (
    ("context parallel (s = 32,768)", lambda scn: scn.parallel.cp > 1),
    ("MoE (DeepSeek-V2)", lambda scn: scn.model.family.routed_experts is not None),
    ("Llama-3 70B shape (h = 8,192)", lambda scn: scn.model.family.routed_experts is None
     and scn.model.value("h") == 8192),
    ("Llama-3.1 405B shape (h = 16,384)", lambda scn: scn.model.value("h") == 16384),
    ("pipelined (PP 2)", lambda scn: scn.parallel.pp > 1),
    ("TP 8", lambda scn: scn.parallel.tp == 8),
)


@lru_cache(maxsize=1)
def by_kind() -> tuple[dict, ...]:
    """Per kind of run: the runs held out, and the errors (%) of their iterations predicted by the constants fitted
    on every other run, beside the in-sample, leave-one-run-out and peer errors of the same iterations."""
    from symmem.scenario import load_scenario
    from symmem.steptime import leave_out

    runs = by_run()
    rows_by_run = {k: [(f, g, m) for f, g, m, _r in rs] for k, rs in runs.items()}
    per_iteration = {(r["case"], r["microbatches"]): r for r in rows()}
    out = []
    for kind, is_kind in KINDS:
        held = {case for case in runs if is_kind(load_scenario(case))}
        _k, predicted = leave_out(rows_by_run, held)
        errors, same = [], []
        for case in runs:  # (the data file's order)
            if case in held:
                for (_f, _g, m, r), p in zip(runs[case], predicted[case], strict=True):
                    errors.append(100 * (p - m) / m)
                    same.append(per_iteration[(case, r["num_microbatches"])])
        out.append({"kind": kind, "runs": len(held), "iterations": len(errors), "errors": errors,
                    "in": [r["error"] for r in same], "loro": [r["loro_error"] for r in same],
                    "peer": [r["peer_error"] for r in same]})
    return tuple(out)


def _mean_worst(errors) -> tuple[float, float]:
    e = [abs(x) for x in errors]
    return sum(e) / len(e), max(e)


def summary() -> dict[str, float]:
    rs = rows()
    (m_in, w_in), (m_out, w_out), (m_peer, w_peer) = (_mean_worst(r[key] for r in rs)
                                                      for key in ("error", "loro_error", "peer_error"))
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
        align="lrrrrrrrr"), _by_kind_table(), _measured_kernels_table(), *_kernel_tables()]


def _error_cells(r: dict, keys) -> list[str]:
    """A kind's mean and worst absolute error (%) under each of `keys`, formatted for a table row."""
    cells = []
    for key in keys:
        mean, worst = _mean_worst(r[key])
        cells += [f"{mean:.2f}", f"{worst:.2f}"]
    return cells


def _by_kind_table() -> Table:
    kinds = by_kind()
    body = tuple((r["kind"], str(r["runs"]), str(r["iterations"]), *_error_cells(r, ("errors", "in", "loro", "peer")))
                 for r in kinds)
    means = [_mean_worst(r["errors"])[0] for r in kinds]
    worst = max(_mean_worst(r["errors"])[1] for r in kinds)
    return Table(
        "measured_step_times_by_kind",
        "The step-time model on kinds of run it was not fitted on: each kind of run held out whole, its iterations "
        "predicted by the constants fitted on every other run (absolute error, % of measured)",
        ("kind held out", "runs", "iterations", "kind out: mean", "worst", "in sample: mean", "worst",
         "one run out: mean", "worst", "peer: mean", "worst"), tuple(body),
        (f"Over the six kinds: the mean of their mean errors {sum(means) / len(means):.2f} %, the worst iteration "
         f"{worst:.2f} %. A kind's runs share what one run left out among its siblings does not: the context-"
         "parallel runs their sequence length (32,768, the attention efficiency fitted at 4,096 otherwise), the "
         "MoE runs their grouped GEMMs and token dispatch, a model shape its GEMMs' sizes. The constants are those "
         "of the model above, fitted by non-negative least squares on the relative error of the other runs' "
         "iterations; nothing else is refitted. The issue's targets for this table (mean at most 3 %, worst at most "
         "6 %) are not met: the model's single GEMM and attention efficiencies do not carry over to kinds they "
         "were not fitted on, which per-kernel hardware profiles are to replace (issue 46).",),
        align="lrrrrrrrrrr")


# ---- the kernel profile (symmem/data/kernels/B200.json: SimuMax's per-kernel measurements) in place of the fitted
# GEMM and attention efficiencies ----


@lru_cache(maxsize=1)
def kernel_rows() -> dict[str, list[tuple]]:
    """{run: [(StepFeatures with the profile's GEMM and attention times, GPU, measured seconds)]}."""
    from symmem.hardware import gpu
    from symmem.steptime.kernel_times import kernel_features
    from symmem.steptime.kernels import profile

    g, p = gpu("B200"), profile("B200")
    out: dict[str, list[tuple]] = {}
    for case, scn, seconds, _r in measured_iterations():
        out.setdefault(case, []).append((kernel_features(scn, g, p), g, seconds))
    return out


@lru_cache(maxsize=1)
def kernel_by_kind() -> tuple[dict, ...]:
    """Per kind of run (`KINDS`), and for all runs: the errors (%) of the kernel-profile model fitted on every
    other run (its three remaining constants, `kernels.fit_rest`) and fitted on all runs, beside the fitted
    model's kind-out errors (`by_kind`)."""
    from symmem.scenario import load_scenario
    from symmem.steptime import fit
    from symmem.steptime.kernels import fit_rest
    from symmem.steptime.model import seconds

    runs = kernel_rows()

    def errors(k, cases) -> list[float]:
        return [100 * (seconds(f, g, k) - m) / m for case in cases for f, g, m in runs[case]]

    def fitted_on(fitter, cases):
        return fitter([r for case in cases for r in runs[case]])

    k_all, s_all = fitted_on(fit_rest, runs), fitted_on(fit, runs)
    fitted_out = {r["kind"]: r["errors"] for r in by_kind()}
    out = []
    for kind, is_kind in KINDS:
        held = [case for case in runs if is_kind(load_scenario(case))]
        rest = [case for case in runs if case not in held]
        k, s = fitted_on(fit_rest, rest), fitted_on(fit, rest)
        out.append({"kind": kind, "constants": k, "errors": errors(k, held), "in": errors(k_all, held),
                    "slowed": errors(s, held), "slowed_constants": s, "fitted_out": fitted_out[kind]})
    every = errors(k_all, runs)
    out.append({"kind": "all runs (in sample)", "constants": k_all, "errors": every, "in": every,
                "slowed": errors(s_all, runs), "slowed_constants": s_all,
                "fitted_out": [r["error"] for r in rows()]})
    return tuple(out)


# ---- the measured-kernels model (symmem/steptime/measured.py): what `symmem memory --gpu B200` times these
# steps by ----


@lru_cache(maxsize=1)
def measured_kernel_rows() -> dict[str, list[tuple]]:
    """{run: [(steptime.measured.Iteration, measured seconds)]} in the data file's order."""
    from symmem.hardware import gpu
    from symmem.steptime import measured

    g = gpu("B200")
    out: dict[str, list[tuple]] = {}
    for case, scn, seconds, _r in measured_iterations():
        why = measured.applies(scn, g)
        if why is not None:
            raise AssertionError(f"{case}: {why}")  # every measured run is one the profile covers
        out.setdefault(case, []).append((measured.iteration(scn, g), seconds))
    return out


@lru_cache(maxsize=1)
def measured_kernel_by_kind() -> tuple[dict, ...]:
    """Per kind of run (`KINDS`), then all runs: the measured-kernels model's errors (%) fitted without the kind
    and fitted on all runs, beside the fitted model's kind-out errors (`by_kind`) and the peer's."""
    from symmem.scenario import load_scenario
    from symmem.steptime import measured

    runs = measured_kernel_rows()
    k_all = measured.fit([r for rs in runs.values() for r in rs])
    per_iteration = {(r["case"], r["microbatches"]): r for r in rows()}

    def errors(k, cases) -> list[float]:
        return [100 * (measured.seconds(it, k) - m) / m for case in cases for it, m in runs[case]]

    def peer(cases) -> list[float]:
        return [r["peer_error"] for case in cases for (c, _m), r in per_iteration.items() if c == case]

    fitted_out = {r["kind"]: r["errors"] for r in by_kind()}
    out = []
    for kind, is_kind in KINDS:
        held = [case for case in runs if is_kind(load_scenario(case))]
        k, _predicted = measured.leave_out(runs, set(held))
        out.append({"kind": kind, "constants": k, "errors": errors(k, held), "in": errors(k_all, held),
                    "fitted_out": fitted_out[kind], "peer": peer(held)})
    every = errors(k_all, runs)
    out.append({"kind": "all runs (in sample)", "constants": k_all, "errors": every, "in": every,
                "fitted_out": [r["error"] for r in rows()], "peer": peer(runs)})
    return tuple(out)


def _measured_kernels_table() -> Table:
    from symmem.steptime.kernels import profile
    from symmem.steptime.measured import KERNEL_CONSTANTS

    kinds = measured_kernel_by_kind()
    body = tuple((r["kind"], str(len(r["errors"])), *_error_cells(r, ("errors", "in", "fitted_out", "peer")))
                 for r in kinds)
    held = kinds[:-1]
    means = [_mean_worst(r["errors"])[0] for r in held]
    mean, worst = sum(means) / len(means), max(_mean_worst(r["errors"])[1] for r in held)
    f_means = [_mean_worst(r["fitted_out"])[0] for r in held]
    f_worst = max(_mean_worst(r["fitted_out"])[1] for r in held)
    k = kinds[-1]["constants"]
    shown = KERNEL_CONSTANTS["B200"]
    spread = {name: (min(getattr(r["constants"], name) for r in held), max(getattr(r["constants"], name)
                                                                           for r in held))
              for name in ("gemm_slowdown", "attention_slowdown", "launch_s", "fixed_s")}
    met = "met" if mean <= 3 and worst <= 6 else "not met"
    p = profile("B200")
    return Table(
        "measured_step_times_kernels",
        "The measured-kernels step-time model (what symmem memory --gpu B200 times these steps by) on the measured "
        "iterations: each kind of run held out whole (absolute error, % of measured)",
        ("kind held out", "iterations", "measured kernels, kind out: mean", "worst", "in sample: mean", "worst",
         "fitted model, kind out: mean", "worst", "peer: mean", "worst"), tuple(body),
        (f"Over the six kinds held out: the mean of their mean errors {mean:.2f} %, the worst iteration "
         f"{worst:.2f} %; the issue's targets (at most 3 % and 6 %) are {met}. The fitted model's, the same way: "
         f"{sum(f_means) / len(f_means):.2f} % and {f_worst:.2f} % (measured_step_times_by_kind).",
         "The model (symmem/steptime/measured.py): each GEMM's three passes at the time SimuMax's authors measured "
         "for its shape on B200 and the fused attention's forward and backward likewise (symmem/data/kernels/"
         f"B200.json, SimuMax commit {p.source['commit'][:7]}; between measured shapes the nearest ones), each "
         "collective at NCCL's time measured on a B200 node (SimuMax's config) for its kind and group size (bytes / "
         f"(efficiency x {p.link_gib:.0f} GiB/s) + latency per ring step + a fixed latency per call, SimuMax's "
         "formula), the pipeline's sends as measured p2p, the memory-bound ops and the optimizer step at the "
         "profile's default fraction of HBM bandwidth. Four constants remain, fitted by non-negative least "
         f"squares on the relative error: on all runs the GEMMs {k.gemm_slowdown:.4f} times as long as measured "
         f"alone, the attention {k.attention_slowdown:.4f} times, {k.launch_s * 1e6:.2f} us per kernel launched, "
         f"{k.fixed_s * 1000:.2f} ms per iteration (symmem.steptime.measured.KERNEL_CONSTANTS: "
         f"{shown.gemm_slowdown}, {shown.attention_slowdown}, {shown.launch_s * 1e6:.2f} us, "
         f"{shown.fixed_s * 1000:.2f} ms). Each kind held out, they range over "
         f"{spread['gemm_slowdown'][0]:.3f}-{spread['gemm_slowdown'][1]:.3f}, "
         f"{spread['attention_slowdown'][0]:.3f}-{spread['attention_slowdown'][1]:.3f}, "
         f"{spread['launch_s'][0] * 1e6:.2f}-{spread['launch_s'][1] * 1e6:.2f} us and "
         f"{spread['fixed_s'][0] * 1000:.2f}-{spread['fixed_s'][1] * 1000:.2f} ms: the slowdowns move little with "
         "the kind left out, the launch cost and the fixed seconds trade against each other; nothing here is a "
         "link efficiency or latency, which the fitted model could fix only from the 70B runs.",
         "Where symmem uses it: `symmem memory --gpu B200` and the sweep's time ranking time a BF16 step whose "
         "groups all sit in one node (in effect at most 8 GPUs; not FSDP2's prefetching, Megatron's overlap "
         "flags, the P2P CP ring, ZeRO-3 or DualPipe) by this model; any other step, and every other GPU, by the "
         "fitted one (`steptime.measured.applies` says why); the page's script times such a step the same way."),
        align="lrrrrrrrrr")


# (label, b, s, heads, kv heads, qk dim, v dim) of attention kernels on one GPU: the measured runs' own, and the
# 131,072-token shapes of Llama-3 70B and 405B under all-to-all CP 8 (runs not in the data file)
ATTENTION_SHAPES = (
    ("Llama-3 70B, TP 1 (s = 4,096)", 1, 4096, 64, 8, 128, 128),
    ("Llama-3 70B, TP 8 (s = 4,096)", 1, 4096, 8, 1, 128, 128),
    ("DeepSeek-V2 MLA, TP 1 (s = 4,096)", 1, 4096, 128, 128, 192, 128),
    ("Llama-3 70B, TP 1 x a2a CP 8 (s = 32,768)", 1, 32768, 8, 1, 128, 128),
    ("Llama-3.1 405B, TP 1 x a2a CP 8 (s = 32,768)", 1, 32768, 16, 2, 128, 128),
    ("Llama-3 70B, TP 1 x a2a CP 8 (s = 131,072)", 1, 131072, 8, 1, 128, 128),
    ("Llama-3.1 405B, TP 1 x a2a CP 8 (s = 131,072)", 1, 131072, 16, 2, 128, 128),
)


def _attention_pair(p, eff: float, b, s, h, kv, qk, v) -> tuple[float, float]:
    """(the fitted model's seconds, the measured kernel's) of one attention: Megatron's causal FLOPs forward and
    backward, 3·b·s²·heads·(qk + v), at `eff` of the peak; and the kernel at the efficiencies the table measured
    for its shape (`kernels.measured_attention_efficiency`; the model times it at `kernels.attention_efficiency`,
    which at 131,072 tokens is the 32,768-token figure: docs/step_time.md, "Long sequences")."""
    from symmem.steptime.kernels import attention_flops, measured_attention_efficiency

    fwd, bwd = attention_flops(b, s, h, kv, qk, v)
    ef, eb = measured_attention_efficiency(p, s, h, max(kv, 1), qk, v)
    return 3 * b * s * s * h * (qk + v) / (p.peak * eff), (fwd / ef + bwd / eb) / p.peak


def _kernel_tables() -> list[Table]:
    from symmem.steptime import CONSTANTS
    from symmem.steptime.kernels import profile

    kinds = kernel_by_kind()
    body = tuple((r["kind"], str(len(r["errors"])), *_error_cells(r, ("errors", "in", "slowed", "fitted_out")))
                 for r in kinds)
    held = kinds[:-1]
    means = [_mean_worst(r["errors"])[0] for r in held]
    worst = max(_mean_worst(r["errors"])[1] for r in held)
    k = kinds[-1]["constants"]
    s = kinds[-1]["slowed_constants"]
    s_in = _mean_worst(kinds[-1]["slowed"])
    s_means = [_mean_worst(r["slowed"])[0] for r in held]
    s_worst, s_worst_kind, s_worst_runs = max((_mean_worst(r["slowed"])[1], r["kind"], len(r["slowed"]))
                                              for r in held)
    slowed_better = sum(_mean_worst(r["slowed"])[0] < _mean_worst(r["fitted_out"])[0] for r in held)
    p = profile("B200")
    better = sum(_mean_worst(r["fitted_out"])[0] < _mean_worst(r["errors"])[0] for r in held)
    cp_in = [abs(e) for e in held[0]["in"]]
    cp_side = "under" if all(e < 0 for e in held[0]["in"]) else "off"
    ratio32 = min(_attention_pair(p, CONSTANTS.attention_efficiency, *shape[1:])[0]
                  / _attention_pair(p, CONSTANTS.attention_efficiency, *shape[1:])[1]
                  for shape in ATTENTION_SHAPES if shape[2] == 32768)
    steps = Table(
        "kernel_step_times",
        "The step-time model with SimuMax's measured B200 kernel times for every GEMM and attention, on the measured "
        "iterations: each kind of run held out whole (absolute error, % of measured)",
        ("kind held out", "iterations", "kernel times, kind out: mean", "worst", "kernel times, in sample: mean",
         "worst", "kernel times x fitted slowdowns, kind out: mean", "worst", "fitted efficiencies, kind out: mean",
         "worst"), tuple(body),
        (f"With the kernel profile (symmem/data/kernels/B200.json: {len(p.gemm['TN'][1]) * 3} GEMM shapes and "
         f"passes, {sum(len(v[1]) for v in p.grouped.values())} grouped-GEMM shapes and "
         f"{len(p.attention[1])} attention shapes measured by SimuMax's authors on B200, SimuMax commit "
         f"{p.source['commit'][:7]}; each GEMM and attention timed at the efficiency measured for its shape, the "
         "nearest measured shapes between) three constants remain, fitted as the model's: link efficiency "
         f"{k.link_efficiency:.4f}, {k.latency_s * 1e6:.2f} us per call and {k.fixed_s * 1000:.2f} ms per "
         "iteration on all runs. Over the six kinds held out: mean of the means "
         f"{sum(means) / len(means):.2f} %, worst iteration {worst:.2f} %; the fitted efficiencies' "
         f"(measured_step_times_by_kind) are better on {better} of the six kinds.",
         "Kernel times x fitted slowdowns: the same kernel times, each GEMM's and each attention's multiplied by a "
         "factor of at least 1 fitted with the other three (symmem.steptime.fit on these features: its GEMM and "
         "attention efficiencies are the inverse factors). On all runs the GEMMs' factor is "
         f"{1 / s.gemm_efficiency:.3f} and the attention's {1 / s.attention_efficiency:.3f} (link efficiency "
         f"{s.link_efficiency:.4f}, {s.latency_s * 1e6:.2f} us per call, {s.fixed_s * 1000:.2f} ms per iteration): "
         "the GEMMs run in the iterations as SimuMax measured them alone, within a few percent, the attention "
         f"{100 * (1 / s.attention_efficiency - 1):.0f} % slower. In sample mean {s_in[0]:.2f} %, worst "
         f"{s_in[1]:.2f} %; kind out, mean of the means {sum(s_means) / len(s_means):.2f} %, worst {s_worst:.2f} % "
         f"(the {s_worst_kind} held out: {s_worst_runs} of the 22 iterations, the rest do not fix the link's "
         "efficiency).",
         "What this shows: SimuMax's GEMM times hold in the iterations; its attention times do not: at s = 32,768 "
         f"the fitted attention efficiency gives {ratio32:.2f} times SimuMax's measured attention kernels' time or "
         "more (table attention_kernel_times), and with the kernels' times as measured the CP runs come out "
         f"{min(cp_in):.1f} to {max(cp_in):.1f} % {cp_side} even in sample: something the model does not hold costs "
         "time around the attention in those iterations (candidates, none measured here: the all-to-all CP's "
         "layout copies before and after the attention, non-contiguous q, k and v at the kernel, clocks under "
         "sustained load). The iterations at 32 micro-batches come out under and those at 4 over, as with the "
         "fitted model (a cost that grows with M faster than the model's). With the slowdowns fitted the kernel "
         f"times beat the fitted efficiencies in sample and on {slowed_better} of the six kinds, and lose on the "
         "others, with a worse worst iteration. The link's constants are what holds it back: timed instead by "
         "NCCL's measured collectives, the same kernel times meet the targets held out by kind "
         "(measured_step_times_kernels), and that is the model `symmem memory --gpu B200` uses where it applies."),
        align="lrrrrrrrrr")
    att_body = []
    ratios: dict = {}
    for label, b, s, h, kv, qk, v in ATTENTION_SHAPES:
        fitted, measured = _attention_pair(p, CONSTANTS.attention_efficiency, b, s, h, kv, qk, v)
        ratios.setdefault(s, []).append(fitted / measured)
        att_body.append((label, f"{fitted * 1000:.2f}", f"{measured * 1000:.2f}", f"{fitted / measured:.2f}"))
    eff = CONSTANTS.attention_efficiency
    att = Table(
        "attention_kernel_times",
        "One attention layer, one micro-batch, forward and backward on one B200: the fitted attention efficiency "
        "against SimuMax's measured kernel (ms)",
        ("kernel (heads and KV heads on one GPU)", "fitted efficiency", "measured kernel", "ratio"),
        tuple(att_body),
        (f"Fitted: Megatron's causal FLOPs (3 b s^2 heads (qk + v), forward and backward) at {eff:.4f} of the dense "
         "BF16 peak (2.25 PFLOPS), the model's one attention efficiency. Measured: TransformerEngine's fused causal "
         "attention timed by SimuMax's authors (symmem/data/kernels/B200.json), forward 2 base and backward 5 base "
         "at the measured efficiency of its shape (base = b s^2 max(heads, kv heads)(qk + v)); every shape "
         "listed was measured (the 405B rows with the 16 KV heads of the measured runs' configuration). One "
         f"efficiency for every shape gives the attention {min(ratios[4096]):.2f} to {max(ratios[4096]):.2f} times "
         f"the kernel's time at 4,096 tokens, {min(ratios[131072]):.2f} at 131,072: a model fitted where the "
         "attention is a small share of the step over-estimates the steps where it dominates.",),
        align="lrrr")
    return [steps, att]


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
