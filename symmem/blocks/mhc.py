"""Manifold-constrained hyper-connections (mHC, DeepSeek-V4) as paper-style dataflows.

The residual stream is n_hc streams X [b, s, n_hc, h]. Before the attention and before the MoE block a
hyper-connection (`attn_hc`, `ffn_hc`: `DeepseekV4HyperConnection`, modeling_deepseek_v4.py:938-996) mixes them,
all in FP32 (strict-FP32 modules, :1241-1253):

1. flatten X to [b, s, n_hc h] in FP32, unweighted RMSNorm, `fn` [(2 + n_hc) n_hc, n_hc h] → mixes;
2. mixes · scale + base (learned `scale` [3], `base` [(2 + n_hc) n_hc]) → pre [n_hc] (sigmoid + eps), post [n_hc]
   (2 · sigmoid), comb [n_hc, n_hc] (softmax + eps);
3. Sinkhorn-Knopp on comb: one column normalization, then `hc_sinkhorn_iters` − 1 (row, column) pairs:
   2 · iters − 1 divisions `comb / (sum + eps)`, each keeping numerator and denominator;
4. collapsed = Σ_k pre_k X_k [b, s, h], the block's input.
After the block: X'_k = post_k · y + Σ_j comb[j, k] X_j (:1191-1193, 1197-1199).
The hyper head (`hc_head`, :999-1015) collapses the streams once more before the final norm: flatten, norm, `hc_fn`
[n_hc, n_hc h], sigmoid gate, Σ_k pre_k X_k; no post, no comb, no Sinkhorn.

Tensors computed in FP32 are declared FP32 (4 bytes under either rule set); the streams are activations.
"""

from __future__ import annotations

from symmem.blocks.symbols import h, n_hc
from symmem.graph import ACT, FP32, D, DataflowBuilder, Dim, Weight

N = D(n_hc)


def streams(rows: tuple[Dim, ...]) -> tuple[Dim, ...]:
    return rows + (N, D(h))


def hc_pre(fb: DataflowBuilder, name: str, x: str, rows: tuple[Dim, ...], sinkhorn_iters: int
           ) -> tuple[str, str, str]:
    """`name` (attn_hc, ffn_hc) before its block: returns (post, comb, collapsed)."""
    flat_dims = rows + (D(n_hc * h),)
    (flat,) = fb.op("cast", f"{name}.flatten", [x], [(f"{name}.flat", flat_dims, FP32)])
    (nrm,) = fb.op("rmsnorm", f"{name}.input_norm", [flat], [(f"{name}.flat_norm", flat_dims, FP32)])
    (mixes,) = fb.op("linear", f"{name}.fn", [nrm], [(f"{name}.mixes", rows + (D((2 + n_hc) * n_hc),), FP32)],
                     [Weight(f"{name}.fn", (D((2 + n_hc) * n_hc), D(n_hc * h)))])
    pre_l, post_l, comb_l = fb.op(
        "affine", f"{name}.scale_base", [mixes],
        [(f"{name}.pre_logits", rows + (N,), FP32), (f"{name}.post_logits", rows + (N,), FP32),
         (f"{name}.comb_logits", rows + (N, N), FP32)],
        [Weight(f"{name}.base", (D((2 + n_hc) * n_hc),)), Weight(f"{name}.scale", (D(3),))])
    (pre,) = fb.op("sigmoid", f"{name}.pre_sigmoid", [pre_l], [(f"{name}.pre", rows + (N,), FP32)])
    (pre_e,) = fb.op("add", f"{name}.pre_eps", [pre], [(f"{name}.pre_eps", rows + (N, D(1)), FP32)])
    (post,) = fb.op("sigmoid", f"{name}.post_sigmoid", [post_l], [(f"{name}.post", rows + (N,), FP32)])
    (comb,) = fb.op("softmax", f"{name}.comb_softmax", [comb_l], [(f"{name}.comb_softmax", rows + (N, N), FP32)])
    comb = sinkhorn(fb, name, comb, rows, sinkhorn_iters)
    (prod,) = fb.op("mul", f"{name}.collapse_mul", [pre_e, x], [(f"{name}.weighted", streams(rows), FP32)])
    (col,) = fb.op("sum", f"{name}.collapse", [prod], [(f"{name}.collapsed", rows + (D(h),), ACT)])
    return post, comb, col


def sinkhorn(fb: DataflowBuilder, name: str, comb: str, rows: tuple[Dim, ...], iters: int) -> str:
    """comb + eps, then 2·iters − 1 alternating column / row normalizations (modeling_deepseek_v4.py:988-991)."""
    (c,) = fb.op("add", f"{name}.comb_eps", [comb], [(f"{name}.comb_0", rows + (N, N), FP32)])
    for i in range(1, 2 * iters):
        along = (D(1), N) if i % 2 else (N, D(1))  # the first is a column normalization (sum over dim −2)
        (den,) = fb.op("sum", f"{name}.sinkhorn{i}.sum", [c], [(f"{name}.sinkhorn{i}.den", rows + along, FP32)])
        (c,) = fb.op("div", f"{name}.sinkhorn{i}", [c, den], [(f"{name}.comb_{i}", rows + (N, N), FP32)])
    return c


def hc_post(fb: DataflowBuilder, name: str, x: str, y: str, post: str, comb: str, rows: tuple[Dim, ...]) -> str:
    """X'_k = post_k · y + Σ_j comb[j, k] X_j: the new streams after a block with output `y` [b, s, h]."""
    (py,) = fb.op("mul", f"{name}.post_mul", [post, y], [(f"{name}.post_out", streams(rows))])
    (cx,) = fb.op("matmul", f"{name}.comb_mix", [comb, x], [(f"{name}.comb_out", streams(rows))])
    (out,) = fb.op("add", f"{name}.residual", [py, cx], [(f"{name}.streams", streams(rows))])
    return out


def hyper_head(fb: DataflowBuilder, x: str, rows: tuple[Dim, ...], *, prefix: str = "") -> str:
    """The hyper head before the final norm (`hc_head`): the n_hc streams collapsed to one [b, s, h]."""
    name = f"{prefix}hc_head"
    flat_dims = rows + (D(n_hc * h),)
    (flat,) = fb.op("cast", f"{name}.flatten", [x], [(f"{name}.flat", flat_dims, FP32)])
    (nrm,) = fb.op("rmsnorm", f"{name}.input_norm", [flat], [(f"{name}.flat_norm", flat_dims, FP32)])
    (mixes,) = fb.op("linear", f"{name}.hc_fn", [nrm], [(f"{name}.mixes", rows + (N,), FP32)],
                     [Weight(f"{name}.hc_fn", (N, D(n_hc * h)))])
    (pre_l,) = fb.op("affine", f"{name}.scale_base", [mixes], [(f"{name}.pre_logits", rows + (N,), FP32)],
                     [Weight(f"{name}.hc_base", (N,)), Weight(f"{name}.hc_scale", (D(1),))])
    (pre,) = fb.op("sigmoid", f"{name}.pre_sigmoid", [pre_l], [(f"{name}.pre", rows + (N,), FP32)])
    (pre_e,) = fb.op("add", f"{name}.pre_eps", [pre], [(f"{name}.pre_eps", rows + (N, D(1)), FP32)])
    (prod,) = fb.op("mul", f"{name}.collapse_mul", [pre_e, x], [(f"{name}.weighted", streams(rows), FP32)])
    (col,) = fb.op("sum", f"{name}.collapse", [prod], [(f"{name}.collapsed", rows + (D(h),), ACT)])
    return col
