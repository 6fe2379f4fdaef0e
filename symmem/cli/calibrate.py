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
import os
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
    p.add_argument("--quick", action="store_true", help="small shapes, for a test (seconds on a CPU)")
    p.add_argument("--json", action="store_true", help="say what was written as JSON")


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


def _timer(torch, device: str):
    """seconds(fn, repeat): the median of `repeat` timed calls after one warm-up call."""
    import statistics

    def seconds(fn, repeat: int) -> float:
        fn()
        times = []
        for _ in range(repeat):
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
        return statistics.median(times)
    return seconds


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
    shapes, seqs = _shapes(args.gemm, args.quick), _seqs(args.seq, args.quick)
    extra_attention = _attention_shapes(args.attention)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    devices = num.int_text(args.devices, "--devices", 1, 64)  # (checked before any timing)
    limit = torch.cuda.device_count() if device == "cuda" else min(8, os.cpu_count() or 1)
    if devices > max(limit, 1):
        why = "the GPUs torch sees" if device == "cuda" else "the CPU: up to 8 processes, one a core"
        raise SymmemError(f"--devices {devices}: this machine runs at most {limit} here ({why})")
    seconds = _timer(torch, device)
    name = args.name or (torch.cuda.get_device_name(0) if device == "cuda" else f"CPU ({os.cpu_count()} threads)")
    from symmem.calibrate_kernels import time_attentions, time_gemms

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
    big = torch.empty((8 if args.quick else 64) << 20, dtype=torch.uint8, device=device)
    out = torch.empty_like(big)
    t_copy = seconds(lambda: out.copy_(big), repeat)
    tiny = torch.ones(16, device=device)
    t_launch = seconds(lambda: tiny.add_(1), max(repeat, 50))
    # an elementwise op in the step's dtype (x * y + z: three operands read, one written), the memory-bound ops'
    # rate: a GPU's is about its copy's; a CPU's BF16 arithmetic can be far below it
    n = (4 if args.quick else 32) << 20
    x, y, z = (torch.randn(n // 4, device=device).to(dtype) for _ in range(3))
    t_elementwise = seconds(lambda: torch.addcmul(z, x, y), repeat)
    elementwise = 4 * x.numel() * x.element_size() / t_elementwise
    return {
        "format": "symmem-hardware-profile/1", "name": name[:60], "device": device, "dtype": args.dtype,
        "torch": torch.__version__, "threads": torch.get_num_threads() if device == "cpu" else None,
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "source": (f"measured by symmem calibrate with torch {torch.__version__} on {name}: each kernel timed "
                   f"{repeat} times after a warm-up, the median "
                   f"({'CUDA events' if device == 'cuda' else 'the CPU clock'})"),
        "memory_bytes": _memory_bytes(torch, device), "gemm": gemm, "attention": attention,
        "kernels": {"gemm": kernel_gemms, "attention": kernel_attentions,
                    "note": "symmem.calibrate_kernels: [layout, m, k, n, seconds] as SimuMax keys the three passes; "
                            "[b, s, heads, kv heads, qk dim, v dim, forward seconds, backward seconds]"},
        "copy_bytes_per_s": 2 * big.numel() / t_copy, "launch_s": t_launch,
        "elementwise_bytes_per_s": elementwise,
        **_links(devices, args.quick, repeat, device),
    }


def _links(devices: int, quick: bool, repeat: int, device: str) -> dict:
    """The profile's `links`: the collectives timed among `devices` processes and the link they imply, or None."""
    if devices == 1:
        return {"links": None,
                "links_note": "collectives not measured: one device (symmem calibrate --devices N times them)"}
    from symmem import calibrate_collectives as cc

    rows = cc.measure(devices, quick, repeat, device)
    bandwidth, latency = cc.link(rows, devices)
    backend = "NCCL" if device == "cuda" else "gloo"
    return {"links": {"intra_bytes_per_s": bandwidth, "inter_bytes_per_s": None, "step_latency_s": latency,
                      "processes": devices, "backend": backend, "collectives": rows},
            "links_note": (f"{backend} among {devices} processes of this machine: seconds = ring steps x "
                           "step_latency_s + bytes sent / intra_bytes_per_s, least squares on the relative error; "
                           "between machines not measured")}


def _run(args) -> int:
    from symmem.output import write_file

    out = args.out
    if out != "-" and not out.lower().endswith(".json"):
        raise SymmemError(f"--out {out}: a profile is a .json file (or - for standard output)")
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
              f"{profile['copy_bytes_per_s'] / 1e9:,.2f} GB/s, launch {profile['launch_s'] * 1e6:,.1f} us; use it "
              f"with --gpu {out}")
    return 0


COMMAND = ("measure this machine's device with torch (GEMMs, attention, bandwidth, launch cost) into a hardware "
           "profile that --gpu FILE reads", _add_args, _run)
