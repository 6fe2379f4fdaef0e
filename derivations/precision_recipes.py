"""Beyond the paper: the paper's per-GPU static table (Table 6, stage 1) and its activations of one stage (Table 10,
Section 5) for DeepSeek-V3 under BF16 and the FP8/FP4 recipes of `symmem.precision` side by side: BF16 as the paper
counts it (`paper`: 2 + 4 + 8 B per parameter) and as Megatron does (`megatron`: + a 4 B FP32 master), DeepSeek's
own FP8 recipe (`deepseek-v3-fp8`, report arXiv 2412.19437 sec. 3.3), TransformerEngine's blockwise FP8, MXFP8 and
NVFP4. Each recipe's rules, with their sources, are in symmem/precision/recipes.py; the per-GPU bytes come from the
engine (`stage_states`, `stage_activation_expr`) on the paper scenario, the recipe swapped in and nothing else.
"""

from __future__ import annotations

from symmem.accounting.analysis import (
    stage_activation_expr,
    stage_params,
    stage_quantized,
    stage_states,
    to_int,
    values,
)
from symmem.accounting.states import recipe
from symmem.render.latex import latex, plain
from symmem.render.tables import Math, Table
from symmem.units import fmt_gib

from ._common import main, scenario

RECIPES = ("paper", "megatron", "deepseek-v3-fp8", "te-blockwise", "te-mxfp8", "te-nvfp4")
LABELS = {"paper": "BF16 (the paper)", "megatron": "BF16 + FP32 master (Megatron)",
          "deepseek-v3-fp8": "DeepSeek-V3 FP8", "te-blockwise": "TE FP8 blockwise", "te-mxfp8": "TE MXFP8",
          "te-nvfp4": "TE NVFP4"}


def _scn(name: str):
    return scenario("paper").replace(precision=recipe(name))


def _pct(x: int, base: int) -> str:
    return f"{(x - base) / base:+.1%}"


def static_rows():
    """(recipe, weights, quantized copies, their scales and scaling state, gradients, optimizer, total) of one GPU
    of stage 1."""
    rows = []
    for name in RECIPES:
        scn = _scn(name)
        st = scn.stages[1]
        sb = stage_states(scn, stage_params(scn, st))
        q = stage_quantized(scn, st)
        rows.append((name, sb.weights, sb.quantized, q.scales + q.scaling_state, sb.gradients, sb.optimizer,
                     sb.total))
    return rows


def activation_rows():
    """(recipe, MLA expr, MoE expr, MLA bytes, MoE bytes) of one GPU of stage 1, one micro-batch (b = 1,
    s = 4096)."""
    rows = []
    for name in RECIPES:
        scn = _scn(name)
        st = scn.stages[1]
        mla, moe = stage_activation_expr(scn, st, "mla"), stage_activation_expr(scn, st, "moe")
        vals = values(scn)
        rows.append((name, mla, moe, to_int(mla, vals), to_int(moe, vals)))
    return rows


def tables() -> list[Table]:
    static = static_rows()
    base = static[0][6]
    t1 = Table("precision_gpu_static",
               "Beyond the paper: model states on one GPU of stages 1-14 (Table 6's GPU) under each precision recipe",
               ("recipe", "weights", "FP8/FP4 copies", "of which scales", "gradients", "optimizer + master",
                "total bytes", "GiB", "vs BF16 (paper)"),
               tuple((LABELS[n], w, q, sc, g, o, t, fmt_gib(t), _pct(t, base) if n != "paper" else "")
                     for n, w, q, sc, g, o, t in static),
               ("Paper scenario (TP 2 with SP, PP 16, EP 8, DP 32, ZeRO 0); the recipe is the only change. weights: "
                "the high-precision working copies (BF16), without those the recipe replaces by its FP8 copy "
                "(DeepSeek-V3 FP8: every GEMM weight but the router's). FP8/FP4 copies: the quantized weight copies "
                "a recipe keeps across micro-batches, data and scale tensors (symmem/precision/weights.py). "
                "optimizer + master: the FP32 master (4 B, not in the paper's recipe) and the moments (FP32 8 B; "
                "DeepSeek-V3 keeps them in BF16, 4 B, report sec. 3.3.4). Bytes are exact; GiB = 2^30 bytes.",),
               align="lrrrrrrrr")
    acts = activation_rows()
    base_total = acts[0][3] + acts[0][4]
    t2 = Table("precision_activations",
               "Beyond the paper: activations of one GPU of stages 1-14 per micro-batch (b = 1, s = 4096) under "
               "each precision recipe, with the derived formulas",
               ("recipe", "MLA bytes", "MoE bytes", "total bytes", "GiB", "vs BF16 (paper)", "MLA formula",
                "MoE formula"),
               tuple((LABELS[n], a, m, a + m, fmt_gib(a + m), _pct(a + m, base_total) if n != "paper" else "",
                      Math(latex(ea), plain(ea)), Math(latex(em), plain(em)))
                     for n, ea, em, a, m in acts),
               ("The paper's four-layer stage, no recomputation, rule set paper (Table 10's BF16 row: "
                "24,671,158,272 bytes). An FP8/FP4 recipe changes what a quantized GEMM keeps of its input: "
                "DeepSeek-V3 FP8 keeps it in FP8 with 1x128 FP32 tile scales (E5M6 for the linear after "
                "attention) and recomputes the MoE SwiGLU's output from its FP8-cached inputs (report sec. 3.3.4); "
                "TE keeps the column-wise (transposed) FP8/FP4 copy with its scales. The router and the output "
                "head keep BF16. ceiling(): scale-tensor dimensions rounded up to whole blocks and to TE's "
                "padding; the MoE terms use E_tok = b s N_r / N tokens per expert.",),
               align="lrrrrrll")
    return [t1, t2]


if __name__ == "__main__":
    main(tables)
