"""Extract the per-kernel efficiency tables SimuMax publishes for a GPU into symmem's kernel-profile format
(symmem/data/kernels/NAME.json, read by `symmem.steptime.kernels`).

    python tools/simumax_kernels.py SIMUMAX_SYSTEM_JSON --gpu B200 --commit SHA -o symmem/data/kernels/B200.json

SimuMax (github.com/MooreThreads/SimuMax, Apache-2.0) measures each kernel on the GPU and stores, per shape, the
measured rate as a fraction of the GPU's dense BF16 peak (`tflops`): cuBLAS GEMMs keyed by (b, m, k, n, layout,
accumulate, out dtype) as its simulator keys them (simumax/core/base_struct.py: forward TN with m the tokens, k the
input and n the output features; data gradient NN with k and n swapped; weight gradient NT, m the output features,
k the tokens, FP32 accumulation), TE's grouped GEMMs keyed by (local experts, tokens per expert, N, K, stage), and
TE's fused causal attention keyed by (batch, sequence, heads, KV heads, head dims) with its FLOP convention
(simu_tools/efficency_test/test_fa_efficiency.py: forward 2·base, backward 5·base, base =
b·s²·max(heads, kv heads)·(qk dim + v dim), the dense count although the kernel is causal). The tool keeps the
entries SimuMax's simulator reads (BF16; grouped GEMMs with FP32 main gradients; attention with q, k and v
contiguous, dense_module.py) and copies every number unchanged; the figures are facts measured by SimuMax's
authors, not by symmem."""

from __future__ import annotations

import argparse
import json


def _fields(key: str) -> dict:
    return dict(part.split("=", 1) for part in key.split(", "))


def extract(system: dict, gpu: str, commit: str, path: str) -> dict:
    op = system["accelerator"]["op"]
    peak = op["matmul"]["tflops"]
    gemm = []
    for key, eff in op["matmul"].get("accurate_efficient_factor", {}).items():
        f = _fields(key)
        want_acc = f["layout"] == "NT"
        if f["accumulate"] != str(want_acc) or f["out_dtype"] != ("fp32" if want_acc else "bf16"):
            continue
        gemm.append([f["layout"], int(f["b"]) * int(f["m"]), int(f["k"]), int(f["n"]), eff])
    grouped = []
    for key, eff in op["group_matmul"].get("accurate_efficient_factor", {}).items():
        f = _fields(key)
        if f.get("dtype") != "bf16" or f.get("main_grad_dtype") != "fp32":
            continue
        wanted = {"fwd": "False", "bwd_grad_act": "True", "bwd_grad_w": "True"}[f["stage"]]
        if f["use_split_accumulator"] != wanted:
            continue
        grouped.append([f["stage"], int(f["ng"]), int(f["M"]), int(f["N"]), int(f["K"]), eff])
    fwd = op["sdp_fwd"].get("accurate_efficient_factor", {})
    bwd = op["sdp_bwd"].get("accurate_efficient_factor", {})
    attention = []
    for key, eff in fwd.items():
        f = _fields(key)
        if f["qkv_contiguous"] != "True" or key not in bwd:
            continue
        attention.append([int(f["batch"]), int(f["seq_len"]), int(f["head_num"]), int(f["kv_head_num"]),
                          int(f["qk_head_dim"]), int(f["v_head_dim"]), eff, bwd[key]])
    bandwidth = system["accelerator"]["bandwidth"]
    links = system["networks"]["high_intra_node"]
    return {
        "gpu": gpu,
        "source": {
            "repository": "github.com/MooreThreads/SimuMax", "commit": commit, "path": path,
            "measured_by": "SimuMax's authors, with simu_tools/efficency_test/ (cuBLAS GEMMs, TransformerEngine's "
                           "grouped GEMM and fused attention, NCCL collectives) on the GPU named",
            "extracted_by": "tools/simumax_kernels.py (numbers copied unchanged)"},
        "peak_tflops": peak,
        "gemm": {"columns": ["layout", "m", "k", "n", "efficiency"],
                 "note": "BF16 cuBLAS GEMM (m x k) . (k x n); forward TN (m tokens, k in, n out), data gradient NN, "
                         "weight gradient NT with FP32 accumulation; efficiency = 2mkn / time / peak",
                 "rows": sorted(gemm)},
        "grouped_gemm": {"columns": ["stage", "experts", "tokens_per_expert", "n", "k", "efficiency"],
                         "note": "TransformerEngine grouped GEMM over the local experts, BF16, FP32 main gradients",
                         "rows": sorted(grouped)},
        "attention": {"columns": ["batch", "seq", "heads", "kv_heads", "qk_dim", "v_dim", "fwd_efficiency",
                                  "bwd_efficiency"],
                      "note": "TransformerEngine fused causal attention; FLOPs as SimuMax counts them: forward "
                              "2 base, backward 5 base, base = batch seq^2 max(heads, kv_heads) (qk_dim + v_dim)",
                      "rows": sorted(attention)},
        "memory_bound": {"note": "fraction of the HBM bandwidth (SimuMax's accelerator.bandwidth)",
                         **{name: v["efficient_factor"] for name, v in bandwidth.items()}},
        "collectives": {"note": "NCCL within a node (SimuMax's networks.high_intra_node): time = bytes / "
                                "(efficient_factor x link_gib_per_s GiB/s) + latency_us per ring step + "
                                "fixed_latency_us (all-to-all's by group size: fixed_latency_us_by_comm_num), "
                                "simumax/core/config.py compute_net_op_time",
                        **{name: {k: v for k, v in spec.items() if k in
                                  ("efficient_factor", "latency_us", "fixed_latency_us",
                                   "fixed_latency_us_by_comm_num")}
                           for name, spec in links["op"].items()},
                        "link_gib_per_s": links["bandwidth"]["gbps"]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("system")
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--path", default="configs/system/b200_bf16_ceperm.json")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    with open(args.system) as fh:
        system = json.load(fh)
    out = extract(system, args.gpu, args.commit, args.path)
    with open(args.output, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
