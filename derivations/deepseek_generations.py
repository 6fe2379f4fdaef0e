"""Beyond the paper: DeepSeek V3 → V3.2 → V4-Flash → V4-Pro under the `paper` rule set.

Parameters (exact totals: transformers 5.24's own counts), model states per GPU under one stated layout per model,
activations per layer and per GPU for s = 4K … 1M (b = 1, no recomputation, 1F1B with M = PP), which block
dominates, and the inference KV cache derived from the dataflows' persistent tensors (ops tagged `kv_cache`).

Layouts (stated, not optimized): V3 and V3.2 as the paper (TP 2 with SP, PP 16, EP 8, DP 32: 1,024 GPUs);
V4-Flash TP 2, PP 8, EP 8, DP 32 (512 GPUs); V4-Pro TP 2, PP 16, EP 16, DP 64 (2,048 GPUs); ZeRO 1 everywhere.
Optimizers: AdamW for V3 and V3.2 (the `megatron` recipe, 18 B per parameter), `muon` for V4 (symmem.accounting.muon:
14 B per Muon matrix parameter, 18 B per AdamW parameter). Attention is counted as each model trains it: V3 dense
(s² per head), V3.2 over min(k_I, s) selected keys, V4 over its window, compressed entries and selected entries
(symmem.blocks.v4_attention); no context parallelism, so the s ≥ 64K rows show what one GPU would have to hold.
"""

from __future__ import annotations

from functools import cache

import sympy

from symmem.accounting.analysis import memory, model_totals, peak, stage_activation_bytes, to_int
from symmem.accounting.muon import stage_states as muon_states
from symmem.accounting.states import ZeroStage, recipe
from symmem.blocks.v4_attention import window_keys
from symmem.config import load_model
from symmem.graph import global_size
from symmem.model import layer_flow
from symmem.render.tables import Table
from symmem.scenario import load_scenario, with_parallel
from symmem.symbols import b, s, sym
from symmem.units import fmt_gib

from ._common import main

MODELS = ("deepseek-v3", "deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4-pro")
LABELS = {"deepseek-v3": "DeepSeek-V3", "deepseek-v3.2": "DeepSeek-V3.2", "deepseek-v4-flash": "DeepSeek-V4-Flash",
          "deepseek-v4-pro": "DeepSeek-V4-Pro"}
LAYOUTS = {"deepseek-v3": dict(tp=2, pp=16, ep=8, dp=32), "deepseek-v3.2": dict(tp=2, pp=16, ep=8, dp=32),
           "deepseek-v4-flash": dict(tp=2, pp=8, ep=8, dp=32), "deepseek-v4-pro": dict(tp=2, pp=16, ep=16, dp=64)}
SEQS = (4096, 16384, 65536, 262144, 1048576)
MILLION = 2**20


def scenario(name: str):
    base = load_scenario("paper")
    scn = with_parallel(base, pp=1).replace(model=load_model(name))
    scn = with_parallel(scn, **LAYOUTS[name])
    return scn.replace(zero=ZeroStage(1), b=1, precision=recipe("megatron"))


def seq_label(n: int) -> str:
    return f"{n // MILLION}M" if n >= MILLION else f"{n // 1024}K"


def states_per_gpu(scn) -> tuple[int, str]:
    """Model-state bytes of the GPU with the most, and the optimizer recipe."""
    if scn.model.family_name == "deepseek_v4":
        return max(muon_states(scn, st).total for st in scn.stages), "muon (14 B Muon / 18 B AdamW)"
    return max(m.states.total for m in memory(scn)), "AdamW (18 B)"


def activation_rows(name: str):
    scn0 = scenario(name)
    rows = []
    for n in SEQS:
        scn = scn0.replace(s=n)
        mems = memory(scn)
        top = peak(mems)
        mid = scn.stages[1]
        per_layer = stage_activation_bytes(scn, mid) // len(mid.layers)
        blocks = {}
        for blk in ("mla", "attn", "mhc", "moe", "mlp"):
            v = stage_activation_bytes(scn, mid, blk)
            if v:
                blocks[blk] = v
        dom = max(blocks, key=blocks.get)
        rows.append((n, per_layer, top.activations, top.stage.index, dom, blocks[dom] / sum(blocks.values())))
    return rows


def generations() -> list[Table]:
    summary, acts = [], []
    for name in MODELS:
        scn = scenario(name)
        t = model_totals(scn.model)
        st, rec = states_per_gpu(scn)
        summary.append((LABELS[name], t.total, t.activated, scn.parallel.describe(), rec, st, fmt_gib(st)))
        for n, per_layer, per_gpu, stage, dom, share in activation_rows(name):
            acts.append((LABELS[name], seq_label(n), per_layer, fmt_gib(per_layer), per_gpu, fmt_gib(per_gpu),
                         stage, f"{dom} ({share:.0%})"))
    return [
        Table("deepseek_generations", "DeepSeek V3 → V3.2 → V4-Flash → V4-Pro: parameters and model states per GPU",
              ("model", "total parameters", "activated", "layout", "optimizer", "model states per GPU (bytes)",
               "GiB"), tuple(summary),
              ("Totals equal transformers 5.24's meta-device counts; activated: input embedding out, head in, "
               "routed (and hash-routed) experts at N_r/N, MTP out.",
               "Model states: the GPU with the most; BF16 weights, FP32 gradients and master weights, ZeRO 1 "
               "(optimizer states and master weights sharded over DP, or EDP for MoE parameters).",
               "muon: Muon for the hidden weight matrices (one FP32 momentum), AdamW for the embedding, the head "
               "(lm_head, final norm, hc_head), biases and gains (symmem.accounting.muon)."), align="lrrllrr"),
        Table("deepseek_generations_activations",
              "DeepSeek V3 → V3.2 → V4-Flash → V4-Pro: activations per layer and per GPU against s (paper rules)",
              ("model", "s", "per layer (bytes)", "GiB",
               "per GPU, activations in flight, stage with the largest sum (bytes)", "GiB",
               "stage with the largest sum",
               "largest block (share of a stage)"), tuple(acts),
              ("b = 1, no recomputation, 1F1B with M = PP micro-batches; per layer: the mean over stage 1's "
               "layers, on one GPU of the layout; per GPU: saved activations per micro-batch x micro-batches in "
               "flight on the stage with the largest paper's sum (model states + activations in flight), not a "
               "timeline peak.",
               "V3 attends densely (10 b n_h s² / t); V3.2 to min(k_I, s) keys; V4 to min(s_w, s) window keys plus "
               "floor(s/m_H) (HCA) or min(k_I, floor(s/m_C)) (CSA) compressed entries: V4's activations grow "
               "linearly in s, dominated by the mHC streams (FP32 copies of n_hc h per token) and the MoE block.",
               "No context parallelism: at s >= 64K one GPU cannot hold a V3 micro-batch; the rows say by how much."),
              align="llrrrrrl"),
    ]


# ------------------------------------------------------------------------------------------------- KV cache
PRECISIONS = {
    # bytes per cached element by role: (latent/entry nope part, rope part, indexer key), and per-entry scales
    "BF16 everywhere (transformers)": None,
    "deployed: V3/V3.2 FlashMLA FP8 latent + BF16 rope (656 B), FP8 indexer keys; V4 FP8 nope + BF16 rope, "
    "FP4 indexer keys": "deployed",
}


@cache
def kv_elements(name: str) -> dict[str, sympy.Expr]:
    """Cached elements at s tokens (b = 1), by role, summed over the model's layers: the outputs of the ops tagged
    `kv_cache` (all s rows) and `kv_cache_window` (the last min(s_w, s) rows)."""
    model = load_model(name)
    kinds = model.layer_kinds()
    out: dict[str, list[sympy.Expr]] = {}
    for kind in dict.fromkeys(kinds):
        flow = layer_flow(model, kind)
        n = kinds.count(kind)
        for op in flow.ops:
            if "kv_cache" not in op.tags and "kv_cache_window" not in op.tags:
                continue
            for t in op.outputs:
                size = global_size(flow.tensors[t].dims).xreplace({b: 1})
                if "kv_cache" in op.tags:
                    role = _role(op.name)
                else:
                    role, size = "window", size / s * window_keys()
                out.setdefault(role, []).append(n * size)
    return {role: sympy.Add(*terms) for role, terms in out.items()}


def _role(op: str) -> str:
    if op.startswith("indexer"):
        return "indexer"
    if op == "k_rope":
        return "rope"
    if op == "kv_a_layernorm":
        return "latent"
    return "entry"


def kv_bytes(name: str, tokens: int, scheme: str | None) -> int:
    model = load_model(name)
    vals = {**model.substitutions(), s: tokens}
    el = {r: sympy.Integer(to_int(e, vals)) for r, e in kv_elements(name).items()}
    if scheme is None:
        return int(2 * sum(el.values()))
    v = model.substitutions()
    d_hr = v[sym("d_hr")]
    total = 0
    if "latent" in el:  # FlashMLA: 512 FP8 + 4 FP32 scales per token and layer; rope BF16
        total += el["latent"] + el["latent"] // v[sym("d_c")] * 16 + 2 * el["rope"]
        if "indexer" in el:  # FP8 keys + one FP32 scale
            total += el["indexer"] + el["indexer"] // v[sym("d_I")] * 4
    else:  # V4: each entry d_k - d_hr FP8 + d_hr BF16; indexer keys FP4; window BF16
        entries = el.get("entry", 0) // v[sym("d_k")]
        total += entries * ((v[sym("d_k")] - d_hr) + 2 * d_hr) + el.get("indexer", 0) // 2 + 2 * el.get("window", 0)
    return int(total)


def kv_cache() -> list[Table]:
    rows = []
    for label, scheme in PRECISIONS.items():
        ref = kv_bytes("deepseek-v3.2", MILLION, scheme)
        for name in MODELS:
            at_1m = kv_bytes(name, MILLION, scheme)
            per_token = sympy.Rational(at_1m, MILLION)
            rows.append((label, LABELS[name], f"{float(per_token):,.1f}", at_1m, fmt_gib(at_1m),
                         f"{at_1m / ref:.1%}"))
    return [Table(
        "kv_cache", "Inference KV cache at 1M tokens, derived from the dataflows' persistent tensors",
        ("precision assumption", "model", "bytes per token", "bytes at 1M tokens", "GiB", "of V3.2"),
        tuple(rows),
        ("Persistent tensors: the ops tagged kv_cache in the paper dataflows: MLA's normalized latent (d_c) and "
         "rope key (d_hr) per token and layer; V3.2's indexer key (d_I); V4's compressed entries (d_k per m_C or "
         "m_H tokens) and CSA indexer keys (d_I per m_C tokens), plus the sliding window (min(s_w, s) keys, "
         "tagged kv_cache_window). 1M = 2^20 tokens, b = 1; MTP layers not counted.",
         "DeepSeek's claim: V4-Pro needs 10 % of V3.2's KV cache at 1M tokens. In one precision (BF16, as "
         "transformers stores it) the ratio is 11.5 %; it comes out at about 10 % when both are counted at their "
         "deployed precisions: V3.2 as FlashMLA stores it (512 FP8 + 16 B of scales + 64 BF16 = 656 B per token "
         "and layer) with FP8 indexer keys (+ 4 B scale), V4 entries with 448 FP8 non-rope and 64 BF16 rope "
         "dimensions (576 B) and FP4 indexer keys: 10.3 %. Same-precision comparisons give 11.3-11.6 %.",
         "Bytes per token include the sliding windows' share at 1M tokens (61 x 128 keys for V4-Pro: < 0.1 %)."),
        align="llrrrr")]


def tables() -> list[Table]:
    return generations() + kv_cache()


def figure(formats: tuple[str, ...] = ("png", "pdf")) -> dict[str, bytes]:
    """Log-log plot of the per-GPU activations of one layer against s, per model: {format: bytes}."""
    from symmem.render.plots import _figure, _plain_log_ticks, save

    seqs = [2**k for k in range(12, 21)]
    fig = _figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for name in MODELS:
        scn0 = scenario(name)
        mid = scn0.stages[1]
        ys = [stage_activation_bytes(scn0.replace(s=n), mid) / len(mid.layers) / 2**30 for n in seqs]
        ax.loglog(seqs, ys, marker="o", label=LABELS[name])
    ax.set_xlabel("sequence length s (tokens)")
    ax.set_ylabel("activations per layer per GPU (GiB)")
    ax.set_title("Activations per layer vs s (paper rules, b = 1, layouts as stated)")
    # Cheap to draw: major ticks only, labelled as plain numbers, a legend at a fixed place and fixed margins
    # (minor tick labels, loc="best" and tight_layout, which draws the figure once more, cost most of the time).
    _plain_log_ticks(ax)
    ax.grid(True, which="major", linewidth=0.3)
    ax.legend(loc="upper left")
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.12, top=0.92)
    return save(fig, formats)


if __name__ == "__main__":
    main(tables)
