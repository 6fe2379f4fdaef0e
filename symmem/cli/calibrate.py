"""`symmem calibrate -o FILE`: measure this machine's device with torch and write a hardware profile
(symmem/hardware_profile.py) that `--gpu FILE` reads (issue 46, item 3).

What it measures, on CUDA when torch sees a GPU (timed with CUDA events) and on the CPU otherwise (timed with the
process's performance counter, after a warm-up run of each kernel):
* GEMMs: at a default set of shapes (m, k, n), or the shapes `--gemm` names, in the given dtype, each in its three
  passes (symmem.calibrate_kernels: forward, data gradient, weight gradient); the forward's FLOP/s = 2mkn / seconds
  is the summary row;
* attention: torch.nn.functional.scaled_dot_product_attention, causal, b = 1, 8 heads of 128, at the sequence
  lengths `--seq` names, forward and backward; the forward's FLOP/s = the causal products' 2·2·b·heads·s²·d / 2
  over seconds is the summary row;
* bandwidth: a copy of a large tensor, bytes read and written over seconds;
* launch cost: one small elementwise kernel;
* capacity: the GPU's total memory, or the machine's physical memory on the CPU;
* with `--devices N` (N > 1), the collectives among N processes of this machine under torch.distributed (NCCL on
  CUDA GPUs, gloo on the CPU): all-gather, reduce-scatter and all-reduce at four sizes, and the link's bandwidth and
  latency per ring step they imply (`symmem.calibrate_collectives`). Without it the profile says they were not
  measured, and it times no step that communicates.

The passes and the attention's forward and backward are the profile's kernel table (`kernels`), which `--gpu FILE`
times the step by (the measured-kernels model, symmem/steptime/measured.py, nothing fitted).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import sys
import time

from symmem.errors import SymmemError

DEFAULT_GEMMS = ((512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 1024, 4096), (8192, 1024, 1024))
QUICK_GEMMS = ((256, 256, 256), (512, 512, 512))
DEFAULT_SEQ = (512, 1024, 2048)
QUICK_SEQ = (128, 256)


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", required=True, help="the profile to write (a .json file; - for standard output)")
    p.add_argument("--name", help="the device's name in the profile (default: what torch calls it)")
    p.add_argument("--dtype", default="bf16", help="bf16 (default), fp16 or fp32: the GEMMs' and attention's")
    p.add_argument("--gemm", help="GEMM shapes to time, m x k x n separated by commas, e.g. 4096x4096x1024,"
                                  "1024x1024x1024 (default: five shapes from 512^3 to 8192x1024x1024)")
    p.add_argument("--seq", help="sequence lengths for the attention, e.g. 1024,4096 (default 512,1024,2048)")
    p.add_argument("--attention", help="attention shapes to time besides, s:heads:kv_heads:head_dim separated by "
                                       "commas, e.g. 4096:32:8:128 (a model's own; b = 1)")
    p.add_argument("--repeat", default="5", help="timed runs of each kernel, the median taken (default 5)")
    p.add_argument("--devices", default="1", help="processes to time the collectives among (NCCL on CUDA GPUs, one "
                                                  "a process; gloo on the CPU); 1 (default): none timed")
    p.add_argument("--quick", action="store_true", help="small default shapes, for a test (seconds on a CPU; with "
                                                        "--model its own shapes are still timed, at its -b and -s)")
    p.add_argument("--json", action="store_true", help="say what was written as JSON")
    _add_model_args(p)


# the scenario flags `--model` takes here: those that change a kernel's shape on one GPU, and DP and PP, which change
# none but make a layout valid (ZeRO, recomputation and the schedule change how often kernels run and what waits)
MODEL_FLAGS = ("scenario", "model", "profile", "rules", "dataflow", "attn_impl", "experts_impl", "tp", "cp",
               "cp_comm_type", "ep", "etp", "dp", "pp", "sequence_parallel", "moe_sequence_parallel", "b", "s",
               "routing", "capacity_factor", "rank_load", "histogram", "convention")
BUDGET_S = 900.0  # default --budget: the longest a calibration may be estimated to take
_FLAG = {"b": "-b", "s": "-s"}  # the flags whose dest is not their name


def _add_model_args(p: argparse.ArgumentParser) -> None:
    from symmem import _numbers as num
    from symmem.cli.args import _bool_flag, add_routing_and_dataflow_args, int_arg

    g = p.add_argument_group("a model whose own kernels to time (its step's GEMM, grouped-GEMM and attention shapes "
                             "on one GPU, in place of the default GEMMs; symmem.calibrate_shapes)")
    g.add_argument("--model", help="preset or config.json path, as symmem memory takes it")
    g.add_argument("--scenario", help="a built-in scenario or a TOML file (the flags below override its fields)")
    g.add_argument("--profile", help="implementation profile (as symmem memory): its dataflow and fused kernels")
    g.add_argument("--rules", help="saved-tensor rule set, as symmem memory (torch-eager for the hf dataflow)")
    for short, long in (("tp", "tensor-model-parallel-size"), ("cp", "context-parallel-size"),
                        ("ep", "expert-model-parallel-size"), ("etp", "expert-tensor-parallel-size"),
                        ("dp", "data-parallel-size"), ("pp", "pipeline-model-parallel-size")):
        g.add_argument(f"--{short}", f"--{long}", dest=short, type=int_arg(1, num.MAX_PP if short == "pp"
                                                                           else num.MAX_PARALLEL),
                       help="(changes no kernel's shape: a layout's validity; default the least EP needs)"
                       if short == "dp" else "(changes no kernel's shape: every stage's kernels are timed)"
                       if short == "pp" else None)
    g.add_argument("--cp-comm-type", dest="cp_comm_type", help="context parallelism: p2p (ring) or a2a")
    _bool_flag(g, "sequence-parallel", "sequence parallelism (as symmem memory)")
    _bool_flag(g, "moe-sequence-parallel", "the MoE block sequence-sharded too: the experts' tokens split over TP")
    g.add_argument("-b", "--micro-batch-size", dest="b", type=int_arg(1, num.MAX_B))
    g.add_argument("-s", "--seq-length", dest="s", type=int_arg(1, num.MAX_S))
    add_routing_and_dataflow_args(g)
    g.add_argument("--convention", help="TP split of W_QR: paper or megatron")
    g.add_argument("--budget", default=str(int(BUDGET_S)),
                   help=f"seconds the timing may take at most (default {int(BUDGET_S)}): refused before it starts "
                        "when the estimate (the GEMMs' FLOPs and bytes at probe rates, the attention at a probe of "
                        "its kernel) is above it, stopped when the timing (the collectives of --devices N too) "
                        "runs past it")


def _scenario(args):
    """The scenario `--model` / `--scenario` and the shape flags describe, or None when neither is given."""
    if args.model is None and args.scenario is None:
        given = [f for f in MODEL_FLAGS if getattr(args, f, None) is not None]
        if given:
            raise SymmemError(f"{_FLAG.get(given[0], '--' + given[0].replace('_', '-'))}: sets a model's shapes; "
                              "give --model (or --scenario) too")
        return None
    from symmem.cli.args import add_scenario_args, scenario_from_args

    base = argparse.ArgumentParser(add_help=False)
    add_scenario_args(base)
    ns = base.parse_args([])
    for flag in MODEL_FLAGS:
        setattr(ns, flag, getattr(args, flag))
    if args.dp is None and (args.ep is not None or args.etp is not None):
        # DP changes no kernel's shape, but the experts' layout needs EP x ETP to divide DP x TP x CP: the least DP
        # that does (Parallel's rule), so that EP can be given alone
        experts = (args.ep or 1) * (args.etp or 1)
        ns.dp = experts // math.gcd(experts, (args.tp or 1) * (args.cp or 1))
    return scenario_from_args(ns)


def _shapes(text: str | None, quick: bool) -> tuple[tuple[int, int, int], ...]:
    from symmem import _numbers as num

    if text is None:
        return QUICK_GEMMS if quick else DEFAULT_GEMMS
    out = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3:
            raise SymmemError(f"--gemm {text[:60]}: {item.strip()[:30]!r} is not m x k x n (e.g. 1024x1024x1024)")
        out.append(tuple(num.int_text(x, "--gemm size", 1, 65536) for x in parts))
    if len(out) > 64:
        raise SymmemError(f"--gemm: {len(out)} shapes, more than 64")
    return tuple(out)


def _seqs(text: str | None, quick: bool) -> tuple[int, ...]:
    from symmem import _numbers as num

    if text is None:
        return QUICK_SEQ if quick else DEFAULT_SEQ
    out = tuple(num.int_text(x, "--seq", 16, 131072) for x in text.split(","))
    if len(out) > 32:
        raise SymmemError(f"--seq: {len(out)} lengths, more than 32")
    return out


def _attention_shapes(text: str | None) -> tuple[tuple[int, ...], ...]:
    from symmem import _numbers as num

    if text is None:
        return ()
    out = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 4:
            raise SymmemError(f"--attention {text[:60]}: {item.strip()[:30]!r} is not s:heads:kv_heads:head_dim "
                              "(e.g. 4096:32:8:128)")
        s = num.int_text(parts[0], "--attention sequence", 16, 131072)
        heads, kv = (num.int_text(x, "--attention heads", 1, 1024) for x in parts[1:3])
        dim = num.int_text(parts[3], "--attention head_dim", 1, 1024)
        if heads % kv:
            raise SymmemError(f"--attention {item.strip()[:30]}: kv_heads = {kv} must divide heads = {heads}")
        out.append((1, s, heads, kv, dim, dim))
    if len(out) > 32:
        raise SymmemError(f"--attention: {len(out)} shapes, more than 32")
    return tuple(out)


def _timer(torch, device: str, budget: float = math.inf):
    """seconds(fn, repeat): the median of `repeat` timed calls after one warm-up call; past `budget` seconds from
    now, the calibration stops in one line before the next call (the estimate before it can miss a kernel far
    slower than its FLOPs and bytes imply: a CPU's grouped GEMM of a token an expert)."""
    import statistics

    deadline = time.monotonic() + budget

    def check() -> None:
        if time.monotonic() > deadline:
            raise SymmemError(f"calibrate: still timing after --budget {budget:g} s; nothing written (a smaller -b "
                              "or -s, fewer --repeat, or a larger --budget)")

    def seconds(fn, repeat: int, judged: bool = True) -> float:
        check()
        fn()
        times = []
        for _ in range(repeat):
            check()
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1000)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        if not judged:  # (a microsecond kernel's runs spread with the clock's own resolution)
            return statistics.median(times)
        if len(times) >= 3 and statistics.median(times) > NOISY * min(times):
            seconds.noisy += 1  # (`_noise_note`: said, not hidden; the median is kept)
        seconds.timed += 1
        return statistics.median(times)
    seconds.noisy = seconds.timed = 0
    return seconds


NOISY = 3.0  # a kernel whose median run took this many times its fastest: the machine was busy while it ran


def _noise_note(seconds) -> str | None:
    """A note when some kernels' runs spread widely (another process took the cores: the median keeps a stall)."""
    if not seconds.noisy:
        return None
    return (f"note: {seconds.noisy} of {seconds.timed} timings varied more than {NOISY:g}x between their runs (the "
            "machine was busy); their medians are kept: calibrate on a quiet machine, or with more --repeat")


def _memory_bytes(torch, device: str) -> int:
    if device == "cuda":
        return int(torch.cuda.get_device_properties(0).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def measure(args) -> dict:
    from symmem import _numbers as num

    try:
        import torch
    except ImportError:
        raise SymmemError("calibrate: needs torch (pip install -e '.[validate]')") from None
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if args.dtype not in dtypes:
        raise SymmemError(f"--dtype {args.dtype}: must be one of {', '.join(dtypes)}")
    dtype, repeat = dtypes[args.dtype], num.int_text(args.repeat, "--repeat", 1, 1000)
    budget = _budget(args.budget)
    seqs = _seqs(args.seq, args.quick)
    extra_attention = _attention_shapes(args.attention)
    scn = _scenario(args)
    if scn is not None:  # flags the scenario leaves nothing to act on, as symmem memory names them
        from symmem.cli._inapplicable import notes

        for line in notes(args, scn):
            print(line, file=sys.stderr)
    grouped: tuple = ()
    if scn is None:
        shapes = _shapes(args.gemm, args.quick)
    else:  # the model's own kernels (and any --gemm besides)
        from symmem.calibrate_shapes import model_kernels

        mk = model_kernels(scn)
        shapes = tuple(dict.fromkeys(mk.gemm + (_shapes(args.gemm, args.quick) if args.gemm else ())))
        grouped = mk.grouped
        extra_attention = tuple(dict.fromkeys(mk.attention + extra_attention))
        if not shapes:
            raise SymmemError(f"--model {scn.model.name}: its dataflow has no GEMM to time")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    devices = num.int_text(args.devices, "--devices", 1, 64)  # (checked before any timing)
    limit = torch.cuda.device_count() if device == "cuda" else min(8, os.cpu_count() or 1)
    if devices > max(limit, 1):
        why = "the GPUs torch sees" if device == "cuda" else "the CPU: up to 8 processes, one a core"
        raise SymmemError(f"--devices {devices}: this machine runs at most {limit} here ({why})")
    name = args.name or (torch.cuda.get_device_name(0) if device == "cuda" else f"CPU ({os.cpu_count()} threads)")
    name = name[:60]  # (a device's own name cut to what a profile holds; --name is checked whole, `check_name`)
    deadline = time.time() + budget  # (the whole timing's, the collectives' too)
    attentions = [(1, s, 8, 8, 128, 128) for s in seqs] + list(extra_attention)
    _within_bounds(torch, _timer(torch, device), dtype, device, shapes, grouped, attentions, repeat, budget)
    seconds = _timer(torch, device, budget)  # (the budget from here: the estimate's probes are not the timing)
    from symmem.calibrate_kernels import time_attentions, time_gemms, time_grouped_gemms

    # each shape's three passes and each attention's forward and backward (the kernel table the measured-kernels
    # model reads); the forward passes are also the summary rates (the fitted model's constants)
    kernel_gemms = time_gemms(torch, seconds, dtype, device, shapes, repeat)
    gemm = [{"m": m, "k": k, "n": n, "seconds": t, "flops_per_s": 2 * m * k * n / t}
            for layout, m, k, n, t in kernel_gemms if layout == "TN"]
    heads, d = 8, 128
    kernel_attentions = time_attentions(torch, seconds, dtype, device, [(1, s, heads, heads, d, d) for s in seqs],
                                        repeat)
    # forward FLOP/s: 2 products x 2 FLOPs x b h s^2 d / 2 (causal)
    attention = [{"b": 1, "heads": heads, "s": s, "head_dim": d, "causal": True, "seconds": t,
                  "flops_per_s": 2 * heads * s * s * d / t} for _b, s, *_shape, t, _t_bwd in kernel_attentions]
    kernel_attentions += time_attentions(torch, seconds, dtype, device, extra_attention, repeat)
    kernel_grouped = time_grouped_gemms(torch, seconds, dtype, device, grouped, repeat)
    big = torch.empty((8 if args.quick else 64) << 20, dtype=torch.uint8, device=device)
    out = torch.empty_like(big)
    t_copy = seconds(lambda: out.copy_(big), repeat)
    tiny = torch.ones(16, device=device)
    t_launch = seconds(lambda: tiny.add_(1), max(repeat, 50), judged=False)
    # an elementwise op in the step's dtype (x * y + z: three operands read, one written), the memory-bound ops'
    # rate: a GPU's is about its copy's; a CPU's BF16 arithmetic can be far below it
    n = (4 if args.quick else 32) << 20
    x, y, z = (torch.randn(n // 4, device=device).to(dtype) for _ in range(3))
    t_elementwise = seconds(lambda: torch.addcmul(z, x, y), repeat)
    elementwise = 4 * x.numel() * x.element_size() / t_elementwise
    noise = _noise_note(seconds)
    if noise:
        print(noise, file=sys.stderr)
    return {
        "format": "symmem-hardware-profile/1", "name": name, "device": device, "dtype": args.dtype,
        "torch": torch.__version__, "threads": torch.get_num_threads() if device == "cpu" else None,
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "source": (f"measured by symmem calibrate with torch {torch.__version__} on {name}: each kernel timed "
                   f"{repeat} times after a warm-up, the median "
                   f"({'CUDA events' if device == 'cuda' else 'the CPU clock'})"),
        "memory_bytes": _memory_bytes(torch, device), "gemm": gemm, "attention": attention,
        "kernels": {"gemm": kernel_gemms, "attention": kernel_attentions,
                    **({"grouped_gemm": kernel_grouped} if kernel_grouped else {}),
                    "note": "symmem.calibrate_kernels: [layout, m, k, n, seconds] as SimuMax keys the three passes; "
                            "[b, s, heads, kv heads, qk dim, v dim, forward seconds, backward seconds]; [stage, "
                            "experts, tokens per expert, n, k, seconds]",
                    **({"shapes_from": _shapes_from(scn)} if scn is not None else {})},
        "copy_bytes_per_s": 2 * big.numel() / t_copy, "launch_s": t_launch,
        "elementwise_bytes_per_s": elementwise,
        **({"timing_note": noise[len("note: "):]} if noise else {}),
        **_links(devices, args.quick, repeat, device, deadline, budget),
    }


def _budget(text: str) -> float:
    t = str(text)
    try:  # (a decimal number in ASCII, as every other number flag: no underscores or spaces)
        value = float(t) if re.fullmatch(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", t) else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= 86400:
        raise SymmemError(f"--budget {str(text)[:30]}: must be seconds above 0 and at most 86,400")
    return value


def _shapes_from(scn) -> str:
    par = scn.parallel
    return (f"{scn.model.name}'s own kernels on one GPU: TP {par.tp}, CP {par.cp}, EP {par.ep}, ETP {par.etp}, "
            f"micro-batch {scn.b}, sequence {scn.s} (symmem.calibrate_shapes)")


LARGEST = 1 << 20  # a shape's largest dimension a profile holds (hardware_profile's check)


def _within_bounds(torch, seconds, dtype, device: str, gemms, grouped, attentions, repeat: int,
                   budget: float) -> None:
    """Refuse in one line, before any timing, kernels a profile cannot hold (a dimension above 2^20), one whose
    tensors would take more than half the memory free on the device, or a set whose FLOPs at a probe GEMM's rate
    would take longer than `budget` seconds."""
    from symmem.steptime.kernels import attention_flops

    item = torch.empty((), dtype=dtype).element_size()
    kernels = []  # (what, its dimensions, elements alive at once, FLOPs of one run of every pass)
    for m, k, n in gemms:
        kernels.append((f"GEMM {m} x {k} x {n}", (m, k, n), m * k + n * k + m * n + max(m * k, n * k, m * n),
                        3 * 2 * m * k * n))
    for e, t, n, k in grouped:
        kernels.append((f"grouped GEMM of {e} experts, {t} token{'s' if t != 1 else ''} each, {k} x {n}", (e * t, k, n),
                        2 * (e * t * k + e * n * k + e * t * n) + max(e * t * k, e * n * k, e * t * n),
                        3 * 2 * e * t * n * k))
    scores = 0  # bytes of an attention's scores, where the CPU's SDPA materialises them
    for b, s, heads, kv, qk, v in attentions:
        qkv = b * s * (heads * qk + kv * qk + kv * v) + b * s * heads * v
        kernels.append((f"attention of {b} x {s} tokens, {heads} heads", (b * s, heads, qk, v), 3 * qkv,
                        sum(attention_flops(b, s, heads, kv, qk, v))))
        if device == "cpu" and qk != v:
            # no flash kernel for unequal qk and v dims on the CPU: SDPA's math path holds the scores, their softmax
            # and its gradient (+3.17 GiB measured for 16 heads at s 4,096 in BF16, about 12 bytes a score)
            scores = max(scores, 16 * b * heads * s * s)
    for what, dims, _e, _f in kernels:
        if max(dims) > LARGEST:
            raise SymmemError(f"calibrate: {what}: a dimension of {max(dims):,} is above {LARGEST:,}, more than a "
                              "profile holds (a smaller -b or -s)")
    if device == "cuda":
        free = torch.cuda.mem_get_info()[0]
    else:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    what, _dims, elements, _f = max(kernels, key=lambda x: x[2])
    need = elements * item + elements * 4  # (inputs drawn in FP32, then cast)
    if scores > need:
        what, need = "an attention with unequal qk and v head dims (the CPU's math path)", scores
    if need > free / 2:
        raise SymmemError(f"calibrate: {what} needs about {need / 2**30:,.1f} GiB, more than half the "
                          f"{free / 2**30:,.1f} GiB free on the {device} (a smaller -b or -s, or weights split "
                          "further: a larger --tp, --ep or --etp)")
    # the estimate: each kernel's FLOPs at a probe GEMM's rate plus its operands' bytes, three passes each, at a
    # probe copy's (a grouped GEMM of a token or two an expert is bound by reading its weights, not by FLOPs)
    a = torch.randn(1024, 1024, device=device).to(dtype)
    rate = 2 * 1024**3 / seconds(lambda: a @ a, 3)
    src = torch.empty(16 << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy = 2 * src.numel() / seconds(lambda: dst.copy_(src), 3)
    flops = sum(f for *_x, f in kernels)
    nbytes = sum(3 * e * item for _w, _d, e, _f in kernels)
    # the attentions at a probe of their own kernel (8 heads of their dims at 256 tokens, forward and backward):
    # the CPU's SDPA runs far below its GEMMs, and its math path (unequal dims) further still
    from symmem.calibrate_kernels import time_attentions

    att = 0.0
    for dims in sorted({(qk, v) for *_x, qk, v in attentions}):
        (*shape, t_f, t_b), = time_attentions(torch, seconds, dtype, device, [(1, 256, 8, 8, *dims)], 1)
        probe = sum(attention_flops(*shape)) / (t_f + t_b)
        att += sum(sum(attention_flops(*a)) for a in attentions if tuple(a[4:]) == dims) / probe
    dense = flops - sum(sum(attention_flops(*a)) for a in attentions)
    estimate = (dense / rate + nbytes / copy + att) * (repeat + 1)
    if estimate > budget:
        raise SymmemError(f"calibrate: the kernels asked for come to {flops:.3g} FLOPs and {nbytes:.3g} bytes a "
                          f"run, about {estimate:,.0f} s over {repeat + 1} runs at this {device}'s "
                          f"{rate / 1e9:,.1f} GFLOP/s (the attention at a probe of it) and {copy / 1e9:,.1f} GB/s: "
                          f"more than --budget {budget:g} s (a smaller -b or -s, fewer --repeat, or a larger "
                          "--budget)")


def _links(devices: int, quick: bool, repeat: int, device: str, deadline: float = math.inf,
           budget: float = math.inf) -> dict:
    """The profile's `links`: the collectives timed among `devices` processes and the link they imply, or None."""
    if devices == 1:
        return {"links": None,
                "links_note": "collectives not measured: one device (symmem calibrate --devices N times them)"}
    from symmem import calibrate_collectives as cc

    rows = cc.measure(devices, quick, repeat, device, deadline, budget)
    bandwidth, latency = cc.link(rows, devices)
    backend = "NCCL" if device == "cuda" else "gloo"
    return {"links": {"intra_bytes_per_s": bandwidth, "inter_bytes_per_s": None, "step_latency_s": latency,
                      "processes": devices, "backend": backend, "collectives": rows,
                      "by_kind": cc.by_kind(rows, devices)},
            "links_note": (f"{backend} among {devices} processes of this machine: seconds = ring steps x "
                           "step_latency_s + bytes sent / intra_bytes_per_s, least squares on the relative error "
                           "over the ring collectives; by_kind: each kind's own fit (all-to-all and a send too), "
                           "which the measured kernels time each kind by; between machines not measured")}


def check_name(name: str | None) -> None:
    """--name as a profile holds it (hardware_profile.load's rule): 1 to 60 printable characters."""
    if name is not None and (not 0 < len(name) <= 60 or not name.isprintable()):
        raise SymmemError(f"--name = {name[:60]!r}: must be 1 to 60 printable characters (what --gpu FILE reads)")


def _run(args) -> int:
    from symmem.output import check_file_target, write_file

    out = args.out
    if out != "-" and not out.lower().endswith(".json"):
        raise SymmemError(f"--out {out}: a profile is a .json file (or - for standard output)")
    if out == "-" and args.json:
        raise SymmemError("--json: says what was written to a file; with --out - the profile itself is the JSON on "
                          "standard output")
    check_name(args.name)
    # where it goes, before anything is timed (and never over a file it reads)
    check_file_target(out, "--out", tuple(getattr(args, f, None) for f in ("model", "scenario", "histogram")))
    profile = measure(args)
    write_file(out, (json.dumps(profile, indent=2) + "\n").encode())
    if out != "-" and args.json:
        print(json.dumps({"wrote": out, "name": profile["name"], "device": profile["device"],
                          "gemm_flops_per_s": max(g["flops_per_s"] for g in profile["gemm"]),
                          "copy_bytes_per_s": profile["copy_bytes_per_s"], "launch_s": profile["launch_s"]},
                         indent=2, sort_keys=True))
    elif out != "-":
        best = max(g["flops_per_s"] for g in profile["gemm"])
        print(f"wrote {out}: {profile['name']}, GEMM up to {best / 1e9:,.1f} GFLOP/s ({profile['dtype']}), copy "
              f"{profile['copy_bytes_per_s'] / 1e9:,.2f} GB/s, launch {profile['launch_s'] * 1e6:,.1f} us"
              + (f"; use it with --gpu {out}" if os.path.isfile(out) else " (written through: --gpu reads a regular "
                 "file)"))
    return 0


COMMAND = ("measure this machine's device with torch (GEMMs, attention, bandwidth, launch cost) into a hardware "
           "profile that --gpu FILE reads", _add_args, _run)
