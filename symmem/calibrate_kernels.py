"""The kernel table `symmem calibrate` measures with torch on the machine it runs on: each GEMM shape in its three
passes and each fused attention shape forward and backward, timed, and (`kernel_profile`) the table as a kernel
profile (`symmem.steptime.kernels.KernelProfile`) that the measured-kernels step-time model reads for `--gpu FILE`,
in the form and under the FLOP conventions of the B200 profile (symmem/data/kernels/B200.json):

* a GEMM of m rows (tokens), k inputs and n outputs runs as three kernels, keyed as SimuMax keys them
  (`steptime.kernels.gemm_seconds`): forward `x @ w.T` ("TN", key (m, k, n)), data gradient `dy @ w` ("NN", key
  (m, n, k)), weight gradient `dy.T @ x` ("NT", key (n, m, k)); each efficiency is 2·m·k·n over the seconds, over
  the profile's peak;
* the fused attention (torch's scaled_dot_product_attention, causal) of b sequences of s tokens, `heads` query and
  `kv_heads` key-value heads of qk and v dims, forward and backward: 2·base and 5·base FLOPs, base =
  b·s²·max(heads, kv heads)·(qk + v) (the dense count, although the kernel is causal, as the B200 profile's);
* routed experts' grouped GEMM (torch._grouped_mm, the kernel torchtitan's MoE and Hugging Face's grouped_mm experts
  run) of `experts` local experts with `tokens` rows each, k inputs and n outputs, in the same three passes (the
  forward, and the data and weight gradients torch's own backward computes, each alone), keyed as
  `steptime.kernels.gemm_seconds` reads a grouped launch: (stage, experts, tokens per expert, n, k); each
  efficiency is 2·experts·tokens·k·n over the seconds, over the peak;
* the peak is the best rate any measured GEMM pass reached (a measurement, not a datasheet's figure);
* memory-bound ops (and the optimizer step) at the measured elementwise op's bytes a second (x * y + z in the
  step's dtype), where a GPU's is about its copy's and a CPU's BF16 arithmetic can be far below it.

Nothing is fitted: the model's two slowdowns are 1, the launch cost the measured small kernel's, no fixed seconds."""

from __future__ import annotations

LAYOUTS = ("TN", "NN", "NT")
STAGES = ("fwd", "bwd_grad_act", "bwd_grad_w")  # a grouped GEMM's passes, as SimuMax names them


def gemm_rate(row) -> float:
    """FLOP/s of a table's GEMM row [layout, m, k, n, seconds]."""
    _layout, m, k, n, seconds = row
    return 2 * m * k * n / seconds


def grouped_rate(row) -> float:
    """FLOP/s of a table's grouped GEMM row [stage, experts, tokens per expert, n, k, seconds]."""
    _stage, experts, tokens, n, k, seconds = row
    return 2 * experts * tokens * n * k / seconds


def attention_rates(row) -> tuple[float, float]:
    """Forward and backward FLOP/s of a table's attention row [b, s, heads, kv heads, qk, v, forward seconds,
    backward seconds], under the profiles' convention (`steptime.kernels.attention_flops`)."""
    from symmem.steptime.kernels import attention_flops

    *shape, t_f, t_b = row
    fwd, bwd = attention_flops(*shape)
    return fwd / t_f, bwd / t_b


def time_gemms(torch, seconds, dtype, device: str, shapes, repeat: int) -> list[list]:
    """[layout, key m, key k, key n, seconds] for each (m, k, n) of `shapes` in its three passes."""
    rows = []
    for m, k, n in shapes:
        x = torch.randn(m, k, device=device).to(dtype)
        w = torch.randn(n, k, device=device).to(dtype)
        dy = torch.randn(m, n, device=device).to(dtype)
        passes = (("TN", (m, k, n), lambda x=x, w=w: x @ w.t()),
                  ("NN", (m, n, k), lambda dy=dy, w=w: dy @ w),
                  ("NT", (n, m, k), lambda dy=dy, x=x: dy.t() @ x))
        for layout, key, fn in passes:
            rows.append([layout, *key, seconds(fn, repeat)])
    return rows


def time_grouped_gemms(torch, seconds, dtype, device: str, shapes, repeat: int) -> list[list]:
    """[stage, experts, tokens per expert, n, k, seconds] for each (experts, tokens, n, k) of `shapes` in its three
    passes: torch._grouped_mm over the experts' weights stored [experts, n, k] as nn.Linear's are (the forward
    multiplies by their transpose), and each gradient alone by torch's own backward of that product
    (torch.autograd.grad on a kept graph: the kernels torch runs, in the layouts it runs them). torch._grouped_mm
    needs 16-byte-aligned rows, so an n or k that is not a multiple of 16 bytes (odd test widths; real models' are)
    is timed padded up to one, the row keyed by the model's own shape: what its launch costs run that way."""
    rows = []
    align = max(1, 16 // torch.empty((), dtype=dtype).element_size())
    for experts, tokens, n, k in shapes:
        pn, pk = (-(-x // align) * align for x in (n, k))
        x = torch.randn(experts * tokens, pk, device=device).to(dtype).requires_grad_(True)
        w = torch.randn(experts, pn, pk, device=device).to(dtype).requires_grad_(True)
        offs = torch.arange(tokens, experts * tokens + 1, tokens, dtype=torch.int32, device=device)

        def forward(x=x, w=w, offs=offs):
            return torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)

        with torch.no_grad():
            fwd = seconds(forward, repeat)
        out = forward()
        grad = torch.randn_like(out)
        act = seconds(lambda out=out, x=x, grad=grad: torch.autograd.grad(out, x, grad, retain_graph=True), repeat)
        wgt = seconds(lambda out=out, w=w, grad=grad: torch.autograd.grad(out, w, grad, retain_graph=True), repeat)
        rows += [[stage, experts, tokens, n, k, t] for stage, t in zip(STAGES, (fwd, act, wgt), strict=True)]
    return rows


def time_attentions(torch, seconds, dtype, device: str, shapes, repeat: int) -> list[list]:
    """[b, s, heads, kv heads, qk dim, v dim, forward seconds, backward seconds] for each shape (b, s, heads,
    kv_heads, qk, v) of `shapes`: torch's causal scaled_dot_product_attention (grouped-query when kv_heads <
    heads), the backward timed alone on a kept graph."""
    import torch.nn.functional as F

    rows = []
    for b, s, heads, kv, qk, v in shapes:
        q = torch.randn(b, heads, s, qk, device=device).to(dtype).requires_grad_(True)
        k = torch.randn(b, kv, s, qk, device=device).to(dtype).requires_grad_(True)
        val = torch.randn(b, kv, s, v, device=device).to(dtype).requires_grad_(True)
        gqa = {"enable_gqa": True} if kv != heads else {}

        def forward(q=q, k=k, val=val, gqa=gqa):
            return F.scaled_dot_product_attention(q, k, val, is_causal=True, **gqa)

        with torch.no_grad():
            fwd = seconds(forward, repeat)
        out = forward()
        grad = torch.randn_like(out)

        def backward(out=out, grad=grad, q=q, k=k, val=val):
            q.grad = k.grad = val.grad = None
            out.backward(grad, retain_graph=True)

        rows.append([b, s, heads, kv, qk, v, fwd, seconds(backward, repeat)])
    return rows


def kernel_profile(name: str, kernels: dict, copy_bytes_per_s: float, links: dict | None,
                   elementwise_bytes_per_s: float | None = None):
    """The KernelProfile of a calibrated device from its profile's `kernels` table (checked by
    `hardware_profile.load`), its copy bandwidth (the GPU's HBM figure) and its elementwise op's (the memory-bound
    kernels' and the optimizer step's rate, as a fraction of the copy's; the copy's where a profile has none) and
    its links (the collectives as the measured-kernels model times them: bytes over the
    measured bandwidth plus the measured latency per ring step, each kind's own fit where measured, nothing fixed;
    none when not measured)."""
    import math

    from symmem.steptime.kernels import KernelProfile

    peak = max(gemm_rate(r) for r in kernels["gemm"])
    gemm = {}
    for layout in LAYOUTS:
        rows = [r for r in kernels["gemm"] if r[0] == layout]
        gemm[layout] = (tuple((math.log(r[1]), math.log(r[2]), math.log(r[3])) for r in rows),
                        tuple(gemm_rate(r) / peak for r in rows))
    grouped = {}
    for stage in STAGES if kernels.get("grouped_gemm") else ():
        rows = [r for r in kernels["grouped_gemm"] if r[0] == stage]
        grouped[stage] = (tuple(tuple(math.log(x) for x in r[1:5]) for r in rows),
                          tuple(grouped_rate(r) / peak for r in rows))
    points, fwd, bwd = [], [], []
    for row in kernels["attention"]:
        _b, s, heads, kv, qk, v = row[:6]
        points.append(tuple(math.log(x) for x in (s, heads, max(kv, 1), qk, v)))
        rate_f, rate_b = attention_rates(row)
        fwd.append(rate_f / peak)
        bwd.append(rate_b / peak)
    collectives: dict = {}
    link_gib = math.inf
    if links is not None:
        # each kind at its own fit where the profile has one (calibrate_collectives.by_kind), as an efficiency of
        # the ring collectives' one link, else at that link
        link = links["intra_bytes_per_s"]
        own = links.get("by_kind") or {}
        for kind, key in (("all_gather", "all_gather"), ("reduce_scatter", "reduce_scatter"),
                          ("all_reduce", "all_reduce"), ("all_to_all", "all2all"), ("p2p", "p2p")):
            fit = own.get(kind, {"bytes_per_s": link, "step_latency_s": links["step_latency_s"]})
            collectives[key] = {"efficient_factor": fit["bytes_per_s"] / link,
                                 "latency_us": fit["step_latency_s"] * 1e6, "fixed_latency_us": 0.0}
        link_gib = link / 2**30
    source = {"measured": f"symmem calibrate on {name}: each kernel timed, nothing fitted",
              **({"shapes_from": kernels["shapes_from"]} if kernels.get("shapes_from") else {})}
    fraction = (elementwise_bytes_per_s or copy_bytes_per_s) / copy_bytes_per_s
    return KernelProfile(name, peak, source, gemm, grouped, (tuple(points), tuple(fwd), tuple(bwd)), fraction,
                         collectives, link_gib)
