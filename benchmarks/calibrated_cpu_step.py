"""The calibrated measured-kernels model against a real training step on this machine's CPU (issue 46: time from
the hardware, checked where a step can run).

A tiny Llama (h 1,024, 4 layers, 16 heads of 64 with 4 KV heads, FFN 2,816, vocabulary 32,000), or with `--moe` a
tiny Qwen3-MoE of the same attention (8 experts of width 704, top 2, every layer MoE; the experts through
transformers' grouped_mm implementation, torch._grouped_mm), through Hugging Face transformers in BF16 with SDPA
attention, b 1, s 512, forward + backward and a foreach AdamW step, each the median of 5 after 2 warm-ups; the
operators' own CPU time by kind (torch.profiler over forward and backward: the matrix products, grouped ones
included, SDPA forward and backward, every other operator); and `symmem memory --profile torch-eager --dataflow hf
--attn-impl sdpa --gpu FILE` on a profile `symmem calibrate --model` measured just before at the model's own
kernels (its GEMMs, grouped GEMMs and attention). Run it on a quiet machine: every figure is a wall-clock time of
this process.

    python benchmarks/calibrated_cpu_step.py [--moe]
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

CONFIG = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 4,
          "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 32000,
          "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
          "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16"}
MOE = {**CONFIG, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 704,
       "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "output_router_logits": False}
S = 512
MATRIX_PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_grouped_mm")


def real_step(config: dict) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(**config)
    cfg._attn_implementation = "sdpa"
    if "num_experts" in config:
        cfg._experts_implementation = "grouped_mm"
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, cfg.vocab_size, (1, S))
    fb, st = [], []

    def step(times: bool) -> None:
        t0 = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if times:
            fb.append(t1 - t0)
            st.append(time.perf_counter() - t1)

    for i in range(7):
        step(i >= 2)
    kinds = {"matrix products": 0.0, "SDPA": 0.0, "other operators": 0.0}
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # forward and backward only
        for _ in range(3):
            model(input_ids=ids, labels=ids).loss.backward()
    opt.zero_grad(set_to_none=True)
    for e in prof.key_averages():
        t = e.self_cpu_time_total / 3 / 1e6
        if e.key in MATRIX_PRODUCTS:
            kinds["matrix products"] += t
        elif "scaled_dot_product" in e.key:
            kinds["SDPA"] += t
        else:
            kinds["other operators"] += t
    return {"forward_backward_s": statistics.median(fb), "optimizer_s": statistics.median(st), **kinds}


def predicted(folder: Path, config: dict) -> dict:
    from symmem.cli.main import main

    profile, path = folder / "here.json", folder / "config.json"
    path.write_text(json.dumps(config))
    flags = ["--model", str(path), "--profile", "torch-eager", "--dataflow", "hf", "--attn-impl", "sdpa", "-s",
             str(S)] + (["--experts-impl", "grouped_mm"] if "num_experts" in config else [])
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["calibrate", "-o", str(profile), *flags, "--seq", "256,512", "--repeat", "7"]) == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["memory", *flags, "--precision", "paper", "--zero", "0", "--gpu", str(profile), "--json"]) == 0
    return json.loads(out.getvalue())["step"]


def main() -> None:
    config = MOE if "--moe" in sys.argv[1:] else CONFIG
    with tempfile.TemporaryDirectory() as d:
        step = predicted(Path(d), config)
    real = real_step(config)
    p = step["seconds_by_part"]
    fwd_bwd = p["gemm"] + p["attention"] + p["memory_bound"] + p["launches"]
    rows = [("GEMMs (matrix products)", p["gemm"], real["matrix products"]),
            ("attention (SDPA forward and backward)", p["attention"], real["SDPA"]),
            ("memory-bound ops and launches / other operators", p["memory_bound"] + p["launches"],
             real["other operators"]),
            ("forward + backward (wall clock)", fwd_bwd, real["forward_backward_s"]),
            ("optimizer step (wall clock)", p["optimizer"], real["optimizer_s"]),
            ("iteration", step["time_s"], real["forward_backward_s"] + real["optimizer_s"])]
    print(f"model: {step['model']}; the operators' rows: the forward and backward's own CPU time (torch.profiler)")
    print(f"{'':52s} {'symmem s':>10s} {'measured s':>10s} {'error':>8s}")
    for name, mine, theirs in rows:
        print(f"{name:52s} {mine:10.4f} {theirs:10.4f} {100 * (mine / theirs - 1):+7.1f}%")


if __name__ == "__main__":
    main()
