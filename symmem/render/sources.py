"""Where the LaTeX report's numbers come from: its bibliography, and per table and figure the sentence its caption
adds (which profile, which assumptions) with the works it cites.

Only the LaTeX renderings use these (`paper_tables/*.tex`, `report.tex`); the Markdown and CSV tables keep their
titles and notes. Each caption sentence is plain text (escaped for LaTeX), followed by `\\cite{...}` of its keys.
"""

from __future__ import annotations

# key -> the bibliography entry, LaTeX already
BIBLIOGRAPHY: dict[str, str] = {
    "torchtitan": r"Wanchao Liang et al. \emph{TorchTitan: One-stop PyTorch native solution for production ready "
                  r"LLM pre-training}. arXiv:2410.06511, 2024; pytorch/torchtitan 0.3.0.",
    "torchtitanbench": r"The torchtitan team. \emph{Llama 3.1 performance benchmarks on H100}, "
                       r"pytorch/torchtitan \texttt{benchmarks/llama3\_h100\_202412\_torchtitan.md} (torchtitan "
                       r"9dec370, 2024-12-26); Trainy, "
                       r"\texttt{benchmarks/llama3-8b\_h200\_202506\_trainy-whitefiber.md}.",
    "fsdp2": r"PyTorch 2.13, \texttt{torch.distributed.fsdp.fully\_shard} (FSDP2), "
             r"torch/distributed/fsdp/\_fully\_shard/.",
    "zhang2025memory": r"Ping Zhang and Lei Su. \emph{Memory Analysis on the Training Course of DeepSeek Models}. "
                       r"arXiv:2502.07846, 2025.",
    "korthikanti2022": r"Vijay Korthikanti, Jared Casper, Sangkug Lym, Lawrence McAfee, Michael Andersch, "
                       r"Mohammad Shoeybi and Bryan Catanzaro. \emph{Reducing Activation Recomputation in Large "
                       r"Transformer Models}. arXiv:2205.05198, 2022.",
    "deepseekv3": r"DeepSeek-AI. \emph{DeepSeek-V3 Technical Report}. arXiv:2412.19437, 2024.",
    "deepseekv2": r"DeepSeek-AI. \emph{DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language "
                  r"Model}. arXiv:2405.04434, 2024.",
    "megatronlm": r"NVIDIA. \emph{Megatron-LM and Megatron-Core}. \texttt{github.com/NVIDIA/Megatron-LM}, "
                  r"commit 23e00ed0.",
    "transformerengine": r"NVIDIA. \emph{Transformer Engine}, version 2.11. "
                         r"\texttt{github.com/NVIDIA/TransformerEngine}.",
    "simumax": r"Moore Threads. \emph{SimuMax}: measured B200 runs, "
               r"\texttt{github.com/MooreThreads/SimuMax}, \texttt{docs/b200/b200\_release\_v1.2\_summary.md}.",
}

_LAYOUT = ("the paper's convention (profile paper, rule set paper, TP convention paper: W_QR replicated), "
           "scenario paper: DP 32, TP 2 with SP, PP 16, EP 8, ETP 1")
_PAPER = (_LAYOUT + "; b = 1, s = 4096, no recomputation, "
          "precision paper (BF16 weights, FP32 gradients, 8 B of optimizer state per parameter)")
_PAPER_ACTS = _PAPER + ", the MoE block not sequence-sharded"
_MEASURED = ("profile megatron-te (Megatron-Core with TransformerEngine) against SimuMax's measured runs "
             "on 8 B200: Megatron-LM 23e00ed0, TransformerEngine 2.11, BF16, b = 1, s = 4096 "
             "(the CP runs 32,768), 1F1B, no recomputation, no FP8")

# table id or figure name -> (caption sentence, cited keys)
CAPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "table1_hyperparameters": ("Model hyperparameters as published (Hugging Face config.json), no profile applied",
                               ("zhang2025memory", "deepseekv3", "deepseekv2")),
    "table2_weight_shapes": ("Shapes symbolic; per GPU under " + _LAYOUT, ("zhang2025memory", "deepseekv3")),
    "layer_params": ("Parameters only; per GPU under " + _LAYOUT, ("zhang2025memory", "deepseekv3")),
    "table4_stage_params": ("Parameters only; " + _LAYOUT, ("zhang2025memory", "deepseekv3")),
    "table6_gpu_static": ("Static memory of one GPU; " + _PAPER, ("zhang2025memory",)),
    "convention_difference": ("The paper's TP convention against Megatron-Core's (profile megatron's split of "
                              "linear_q_up_proj); parameters only, TP 2", ("zhang2025memory", "megatronlm")),
    "table8_zero": ("Model states under ZeRO stages 0 to 3; " + _PAPER, ("zhang2025memory",)),
    "model_totals": ("Whole-model parameters, no parallelism, against the published sizes",
                     ("deepseekv3", "deepseekv2")),
    "section5_formulas": ("Activation formulas of one micro-batch; " + _PAPER_ACTS,
                          ("zhang2025memory", "korthikanti2022")),
    "table10_activations": ("Activations of one micro-batch; " + _PAPER_ACTS, ("zhang2025memory", "korthikanti2022")),
    "activations_per_stage": ("Activations in flight under 1F1B, M = 16; " + _PAPER_ACTS,
                              ("zhang2025memory", "korthikanti2022")),
    "stage0_activations": ("Activations of one micro-batch, stage 0 (not analysed in the paper) beside stage 1; "
                           + _PAPER_ACTS, ("zhang2025memory", "megatronlm")),
    "peak_stage": ("The paper's sum (model states plus activations in flight) and symmem's timeline peak under "
                   "1F1B, M = 16, 80 GB GPUs; " + _PAPER_ACTS,
                   ("zhang2025memory",)),
    "hypotheses": ("The paper's MoE accounting against real EP dispatch and a sequence-sharded MoE block "
                   "(scenario paper-megatron); otherwise " + _PAPER, ("zhang2025memory", "megatronlm")),
    "rules_comparison": ("Rule sets paper and torch-eager (PyTorch eager autograd, Hugging Face's DeepSeek-V3 "
                         "code) on the same stage; " + _PAPER_ACTS, ("zhang2025memory", "deepseekv3")),
    "rules_comparison_formulas": ("The same stage as formulas, rule sets paper and torch-eager; " + _PAPER_ACTS,
                                  ("zhang2025memory",)),
    "korthikanti_table2": ("GPT-3 175B, one layer, one micro-batch, rule set paper, scenario korthikanti "
                           "(TP 8 with SP); recompute none, selective and full as the rows say; BF16 activations",
                           ("korthikanti2022",)),
    "deepseek_generations": ("Beyond the paper: rule set paper, BF16 weights, FP32 gradients and master weights, "
                             "ZeRO 1, and the muon recipe; b = 1, no recomputation", ("deepseekv3",)),
    "deepseek_generations_activations": ("Beyond the paper: rule set paper, b = 1, no recomputation, 1F1B with "
                                         "M = PP, no context parallelism, BF16", ("zhang2025memory", "deepseekv3")),
    "kv_cache": ("Beyond the paper: inference KV cache from the paper dataflows' persistent tensors, at 1M tokens, "
                 "BF16 unless said otherwise", ("deepseekv3", "deepseekv2")),
    "precision_gpu_static": ("Beyond the paper: model states under each precision recipe (DeepSeek-V3 FP8 among "
                             "them); otherwise " + _PAPER, ("zhang2025memory", "deepseekv3", "transformerengine")),
    "precision_activations": ("Beyond the paper: activations of one micro-batch under each precision recipe; "
                              + _PAPER_ACTS, ("zhang2025memory", "deepseekv3", "transformerengine")),
    "measured_runs": ("Peak memory: " + _MEASURED + "; distributed optimizer",
                      ("simumax", "megatronlm", "transformerengine", "deepseekv2")),
    "measured_step_times": ("Iteration time: symmem's step-time model (symmem/steptime/) on " + _MEASURED
                            + "; distributed optimizer, no communication overlap",
                            ("simumax", "megatronlm", "transformerengine", "deepseekv2")),
    "kernel_step_times": ("Iteration time: the step-time model with SimuMax's measured B200 kernel times "
                          "(symmem/data/kernels/B200.json) for every GEMM and attention, on " + _MEASURED,
                          ("simumax", "megatronlm", "transformerengine")),
    "attention_kernel_times": ("One attention layer on B200: the fitted attention efficiency against "
                               "TransformerEngine's fused attention as SimuMax measured it", ("simumax",
                                                                                              "transformerengine")),
    "torchtitan_published_throughput": ("Profile torchtitan-2412's step time (eager BF16, FSDP2's traffic "
                                        "overlapped) beside torchtitan's published tokens per second per GPU",
                                        ("torchtitanbench", "torchtitan", "fsdp2")),
    # figures of report.tex
    "fig:stage_memory": ("Scenario paper: " + _PAPER_ACTS + "; 1F1B, M = 16", ("zhang2025memory",)),
    "fig:memory_vs_microbatch": ("Scenario paper, s = 4096, recompute none, selective, deepseek and full; "
                                 "otherwise " + _PAPER, ("zhang2025memory", "korthikanti2022")),
    "fig:memory_vs_seqlen": ("Scenario paper, b = 1, recompute none, selective, deepseek and full; otherwise "
                             + _PAPER, ("zhang2025memory", "korthikanti2022")),
    "fig:params_by_block": ("Whole model, parameters only, no parallelism", ("deepseekv3", "zhang2025memory")),
    "fig:deepseek_generations_activations": ("Rule set paper, b = 1, no recomputation, 1F1B with M = PP, BF16",
                                             ("zhang2025memory", "deepseekv3")),
    "torchtitan_configs": ("Profile torchtitan: FSDP2 with torchtitan 0.3.0's Llama 3, BF16 compute, FP32 states "
                           "and reduce; the engine's timeline peak (two layers gathered) and the step replayed "
                           "through the caching allocator with expandable segments",
                           ("torchtitan", "fsdp2")),
    "torchtitan_published": ("Profiles torchtitan-2412 and torchtitan-2506 (torchtitan 9dec370 and e7c0cae, the "
                             "runs' code: FSDP2, eager or compiled, BF16 or Float8) replayed through the caching "
                             "allocator with expandable segments, beside torchtitan's and Trainy's published "
                             "reserved memory",
                             ("torchtitanbench", "torchtitan", "fsdp2")),
    "fig:measured_runs": (_MEASURED[0].upper() + _MEASURED[1:], ("simumax", "megatronlm", "transformerengine")),
    "fig:measured_step_times": ("symmem's step-time model (symmem/steptime/); " + _MEASURED,
                                ("simumax", "megatronlm", "transformerengine")),
}


def caption_tex(key: str) -> str:
    """The sentence a caption adds for `key` (a table id, or `fig:` and a figure name), LaTeX: text then \\cite."""
    from symmem.render.tables import tex_escape

    if key not in CAPTIONS:
        return ""
    text, cites = CAPTIONS[key]
    for c in cites:
        if c not in BIBLIOGRAPHY:
            raise KeyError(f"caption {key} cites {c}, which the bibliography lacks")
    cite = rf"~\cite{{{','.join(cites)}}}" if cites else ""
    return f"{tex_escape(text)}{cite}."


def bibliography_tex() -> str:
    items = "\n".join(rf"\bibitem{{{k}}} {v}" for k, v in BIBLIOGRAPHY.items())
    return "\\begin{thebibliography}{9}\n" + items + "\n\\end{thebibliography}"
