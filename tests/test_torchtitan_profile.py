"""The torchtitan profile without torchtitan installed (issue 28): its states, buffers and rules worked by hand,
its refusals, and the sweep agreeing with `symmem memory` under it. The real code's measurements are in
tests/validate/test_fsdp2.py."""

import json

import pytest

from symmem.cli.main import main


def _scenario(model: str, profile: str, dp: int, b: int, s: int, ac: str):
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario

    return model_scenario(load_model(model)).replace(
        profile_name=profile, precision=recipe("fp32"), zero=zero_stage(3), parallel=Parallel(dp=dp), b=b, s=s,
        recompute_name=ac, gpu_memory=80 * 10**9, gpu_name="H100")


def _memory(capsys, *flags) -> dict:
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_states_are_fsdp2s_padded_shards(capsys):
    # Llama-3-8B (h 4096, 32 layers, 32 heads of 128, 8 KV heads, FFN 14336, vocab 128256) over 8 GPUs: every
    # first dimension divides by 8 (wqkv 6144, wo 4096, w1/w3 14336, w2 4096, norms 4096, the vocabulary), so
    # rank 0 holds exactly 1/8 of the 8,030,261,248 parameters: FP32 parameters and gradients and two FP32 moments,
    # plus a device step scalar per parameter tensor (fused AdamW), each the allocator's 512-byte block:
    # 32 x 7 + 3 = 227 tensors (a layer's two norms, wqkv, wo, w1, w2, w3: q, k, v fused)
    d = _memory(capsys, "--dp", "8")
    st = d["stages"][0]
    shard = 8_030_261_248 // 8
    assert st["weights"] == 4 * shard and st["gradients"] == 4 * shard
    assert st["optimizer"] == 8 * shard + 512 * (32 * 7 + 3)


def test_rope_cache_and_padding_by_hand():
    from symmem.accounting.fsdp import FsdpParam, rank_states
    from symmem.config import load_model
    from symmem.profiles import _rope_cache
    from symmem.scenario import model_scenario

    scn = model_scenario(load_model("llama-3-8b"))
    (buf,) = _rope_cache(scn, scn.stages[0], (), {})
    assert buf.nbytes == 32 * 8192 * 64 * 8  # 32 layers x max_position_embeddings x head_dim/2 x complex64
    # a 5-row parameter over 4 ranks: chunks of 2 rows, rank 3 holds none; padded parameters, unpadded moments
    p = [FsdpParam("x", 5, 3)]
    assert [rank_states(p, 4, r, False).params for r in range(4)] == [24] * 4
    assert [rank_states(p, 4, r, False).exp_avg for r in range(4)] == [24, 24, 12, 0]


def test_rules_differ_only_in_rmsnorm():
    from symmem.rules import rule_set

    gpu, cpu, eager = rule_set("torchtitan"), rule_set("torchtitan-cpu"), rule_set("torch-eager")
    assert {k for k in gpu.rules if gpu.rules[k] is not cpu.rules[k]} == {"rmsnorm"}
    # and from torch-eager's in the RMSNorm, the RoPE table (a buffer), the loss, and three op kinds torch-eager's
    # dataflows do not have (torchtitan's DeepSeek-V3: its scatter-add, the router's autocast weight copy and the
    # reduce-scatter of the routed experts' output)
    new = {"scatter_add", "autocast_weight", "reduce_scatter"}
    assert {k for k in gpu.rules if gpu.rules[k] is not eager.rules.get(k)} == {
        "rmsnorm", "rotary_emb", "cross_entropy", *new}
    assert not (new & set(eager.rules))


@pytest.mark.parametrize("profile, flag, words", [
    # (the flags as typed: issue 45, item 4; were "cp = 2" and "PP 2 ... set PP to 1")
    ("torchtitan", "--cp", "--cp 2: the 'torchtitan' rule set has no context-parallel rule"),
    ("torchtitan-2412", "--pp", "--pp 2: only FSDP (and HSDP) data parallelism and CP are modelled for torchtitan "
                                "9dec370 so far; set --pp 1"),
])
def test_what_is_not_modelled_is_refused(capsys, profile, flag, words):
    # (torchtitan 0.3.0's PP is modelled: tests/test_torchtitan_pipeline.py)
    assert main(["memory", "--model", "llama-3-8b", "--profile", profile, "--dp", "4", flag, "2"]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_sweep_rows_equal_memory(capsys):
    assert main(["sweep", "--model", "llama-3-8b", "--gpus", "8", "--profile", "torchtitan", "--tp", "1", "--pp",
                 "1", "-b", "1,2", "-s", "4096", "--recompute", "none,full", "--rank-by", "headroom", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ranked"]
    assert rows
    for r in rows:
        d = _memory(capsys, "--dp", "8", "-b", str(r["b"]), "-s", "4096", "--recompute", r["recompute"])
        assert d["stages"][0]["peak_allocated"] == r["peak_allocated"]


def test_hsdp_shards_over_dp_over_replicas(capsys):
    # HSDP 2 x 4 on 8 GPUs: the states shard over 4, twice FSDP 8's; other profiles refuse it in one line
    assert _memory(capsys, "--dp", "8", "--hsdp-replicate", "2")["stages"][0]["weights"] == 4 * 8_030_261_248 // 4
    assert main(["memory", "--model", "llama-3-8b", "--dp", "8", "--hsdp-replicate", "2"]) == 2
    err = capsys.readouterr().err
    assert "HSDP is FSDP2's" in err and err.count("\n") == 1
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "8", "--hsdp-replicate",
                 "3"]) == 2
    assert "must divide DP = 8" in capsys.readouterr().err


def test_per_op_selective_checkpointing_keeps_odd_matrix_products(capsys):
    """torchtitan's SelectiveAC on Llama 3: the block's input, then the 1st, 3rd and 5th matrix products of the block
    (wqkv counted once: q, k and v are one product in torchtitan; then w1 and w2), and on a GPU the attention's
    output and logsumexp; wo and w3 (the 2nd and 4th) are recomputed, as is the CPU's flash attention."""
    from symmem.accounting.activations import kept_tensors
    from symmem.accounting.recompute import policy
    from symmem.config import load_model
    from symmem.model import stage_parts
    from symmem.rules.torchtitan import RULES, RULES_CPU
    from symmem.scenario import model_scenario

    scn = model_scenario(load_model("llama-3-8b")).replace(profile_name="torchtitan")
    layer = next(p for p in stage_parts(scn.model, scn.stages[0], scn.convention, scn.flow_impl) if p.is_layers)
    sac = policy("selective-op")
    cpu = [k.tensor.name for k in kept_tensors(layer.flow, RULES_CPU, sac)]
    assert cpu == ["layer.x", "attn.q", "attn.k", "attn.v", "mlp.gate", "mlp.out"]
    gpu = [k.tensor.name for k in kept_tensors(layer.flow, RULES, sac)]
    assert gpu == ["layer.x", "attn.q", "attn.k", "attn.v", "attn.ctx", "attn.logsumexp", "mlp.gate", "mlp.out"]
    # on the whole stage: the per-layer difference from full checkpointing is the cached outputs, 32 layers of them
    act = {}
    for rc in ("selective-op", "full"):
        code = main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "8", "-b", "2", "-s",
                     "8192", "--recompute", rc, "--json"])
        assert code == 0
        act[rc] = json.loads(capsys.readouterr().out)["stages"][0]["activations_per_microbatch"]
    b, s, h, kv, ffn, heads = 2, 8192, 4096, 1024, 14336, 32
    per_layer = 2 * b * s * (h + 2 * kv) + 2 * b * s * ffn + 2 * b * s * h  # wqkv, w1, w2 outputs (BF16)
    per_layer += 2 * b * s * h + 4 * b * heads * s  # the attention's output (BF16) and logsumexp (FP32)
    assert act["selective-op"] - act["full"] == 32 * per_layer
    # (the byte-exact check against the real torchtitan is tests/validate/test_fsdp2.py, case fsdp2-selective-op-ac)


def test_gathered_layers_are_counted_in_fsdp2s_param_dtype(capsys):
    # FSDP2 all-gathers in its MixedPrecisionPolicy's param_dtype (torchtitan: BF16) while the shards are FP32: two
    # layers gathered (the one computed and the all-gather output FSDP2 keeps until the next one's wait) are
    # 2 x 2 bytes x a Llama-3-70B layer's parameters, by hand: attention 2 x 8192^2 (q, o) + 2 x 8192 x 1024 (k, v),
    # the MLP 3 x 8192 x 28672, two norms of 8192 (counted in the FP32 of the shards before: twice this). The
    # unreduced gradients, the reduce-scatter's input in FP32, are one layer's in 4 bytes: the same figure
    layer = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    from symmem.accounting.analysis import memory, values
    from symmem.accounting.timeline import _component_sums

    scn = _scenario("llama-3-70b", "torchtitan", 64, 1, 8192, "full")
    (m,) = memory(scn)
    # the busiest event of the decoder layers (the step's own peak is the loss's backward: its FP32 transients)
    ev = max((e for e, _ in m.peak.events if e.part == "dense layers" and e.phase == "backward"),
             key=lambda e: dict(m.peak.events)[e])
    parts = _component_sums(ev.amounts, values(scn))
    assert parts["gathered parameters (ZeRO-3)"] == 2 * 2 * layer
    assert parts["unreduced gradients (ZeRO-2/3)"] == 4 * layer


def test_per_layer_checkpointing_counts_each_layer_by_its_policy():
    # torchtitan 9dec370's selective-layer:N: 0-based layer i fully recomputed when (i + 1) % N == 0, the rest keep
    # everything: of Llama 3 8B's 32 layers, N = 2 checkpoints 16, N = 3 checkpoints 10 (2, 5, ..., 29)
    from symmem.accounting.analysis import memory

    def act(rc):
        (m,) = memory(_scenario("llama-3-8b", "torchtitan-2412", 8, 2, 8192, rc))
        return m.activation_per_microbatch

    none, full = act("none"), act("full")
    per_layer = (none - full) // 32
    assert (none - full) % 32 == 0
    assert act("selective-layer:2") == full + 16 * per_layer
    assert act("selective-layer:3") == full + 22 * per_layer
    assert act("selective-layer:1") == full and act("selective-layer:33") == none


def test_per_layer_checkpointing_peak_and_replay_lie_between_full_and_none():
    from symmem.accounting.analysis import memory
    from symmem.accounting.fsdp2_reserved import replay

    figures = {}
    for rc in ("full", "selective-layer:2", "none"):
        scn = _scenario("llama-3-8b", "torchtitan-2412", 8, 2, 8192, rc)
        (m,) = memory(scn)
        figures[rc] = (m.peak_allocated, replay(scn).peak_reserved)
    for i in range(2):
        assert figures["full"][i] < figures["selective-layer:2"][i] < figures["none"][i]


@pytest.mark.parametrize(("flags", "words"), [
    (["--recompute", "selective-layer"], "give the period"),
    (["--recompute", "selective-layer:0"], "from 1 to 1,000,000"),
    (["--recompute", "selective-layer:2", "--pp", "2", "--profile", "torch-eager"], "set --pp 1"),
])
def test_per_layer_checkpointing_refusals(flags, words, capsys):
    code = main(["memory", "--model", "llama-3-8b", "--dp", "8", "-b", "1", "-s", "1024", *flags])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_float8_with_per_op_checkpointing_is_refused_in_one_line(capsys):
    code = main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan-2412", "--dp", "8", "-b", "1", "-s",
                 "1024", "--recompute", "selective-op", "--precision", "torchao-float8-tensorwise"])
    err = capsys.readouterr().err
    assert code == 2 and "aten._scaled_mm" in err and err.count("\n") == 1, err


def test_tp_with_sequence_parallel_by_hand():
    # Llama-3-8B (h 4096, 32 layers, 32 heads of 128, 8 KV heads, FFN 14336, vocab 128256) at TP 2 x FSDP 4, b 1,
    # s 8192, BF16 activations, no AC, under torchtitan 0.3.0's TP (symmem/rules/torchtitan.py `under_tp`; measured
    # on the CPU in tests/validate/test_fsdp2.py). Per block: the two norms' inputs (s/t rows, BF16) and FP32 rstd,
    # the two all-gathered norm outputs kept whole (s rows), SDPA's q, k, v, output (heads/t) and FP32 logsumexp,
    # and SwiGLU's w1, w3, silu outputs and product (FFN/t). Outside: the ids (int64) and the vocabulary mask, the
    # final norm's input and rstd, its gathered output, the FP32 log-probabilities of V/t and the int64 labels. At
    # b = 1 each all-gather (wqkv's input and w1/w3's per block, lm_head's) holds two more copies of its full-sequence
    # output until the backward (the gather's output and the custom op's copy, rules/torchtitan.py `_linear_tp_b1`;
    # measured on the CPU, tests/validate/test_fsdp2.py fsdp2-tp2-3-layers): 65 gathers, 130 copies of [b, s, h]
    from symmem.accounting.analysis import memory
    from symmem.parallel.sizes import Parallel

    scn = _scenario("llama-3-8b", "torchtitan", 4, 1, 8192, "none").replace(
        parallel=Parallel(dp=4, tp=2, sequence_parallel=True))
    (m,) = memory(scn)
    b, s, h, t, nh, nkv, dh, hf, v = 1, 8192, 4096, 2, 32, 8, 128, 14336, 128256
    block = (2 * (2 * b * s // t * h + 4 * b * s // t) + 2 * 2 * b * s * h
             + 2 * b * (nh // t) * s * dh * 2 + 2 * 2 * b * (nkv // t) * s * dh + 4 * b * (nh // t) * s
             + 4 * 2 * b * s * hf // t)
    outside = (8 * b * s + 2 * b * s + 2 * b * s // t * h + 4 * b * s // t + 2 * b * s * h + 4 * b * s * v // t
               + 8 * b * s)
    held = 2 * 2 * b * s * h
    assert m.activation_per_microbatch == 32 * (block + 2 * held) + outside + held
    assert 65 * held == 8_724_152_320
    # at b = 2 the gather's chunks are concatenated into a tensor of their own and the two are freed
    (m2,) = memory(scn.replace(b=2))
    assert m2.activation_per_microbatch == 2 * (32 * block + outside)
    # states: each TP shard of a matrix (wqkv, w1, w3 and the embedding and lm_head by rows, wo and w2 by columns)
    # sharded again over FSDP 4; the 65 norm weights whole under TP, sharded over FSDP alone
    norms = 65 * 4096
    assert m.states.weights == 4 * ((8_030_261_248 - norms) // 8 + norms // 4)


def test_tp_with_per_op_checkpointing_by_hand():
    # the same Llama-3-8B at TP 2 x FSDP 4 under torchtitan's per-op AC on a GPU: per block, the block's input (s/t
    # rows), the odd matrix products' outputs (wqkv: q, k, v of heads/t; w1: FFN/t; w2: its local mm's full-sequence
    # partial sum, h wide), the reduce-scatter outputs of wo and w2 (s/t rows, on the save list whatever the count),
    # and the flash SDPA's output and FP32 logsumexp (heads/t); outside the blocks as without AC. Measured on the CPU
    # (tests/validate/test_fsdp2.py, fsdp1-tp2-selective-op-ac: the CPU's SDPA is recomputed). The blocks' forward
    # under AC holds no graph, so no gather's extra copies in them; lm_head's two (b = 1) are held as without AC
    from symmem.accounting.analysis import memory
    from symmem.parallel.sizes import Parallel

    scn = _scenario("llama-3-8b", "torchtitan", 4, 1, 8192, "selective-op").replace(
        parallel=Parallel(dp=4, tp=2, sequence_parallel=True))
    (m,) = memory(scn)
    b, s, h, t, nh, nkv, dh, hf, v = 1, 8192, 4096, 2, 32, 8, 128, 14336, 128256
    block = (2 * b * s // t * h + 2 * b * s * (nh + 2 * nkv) // t * dh + 2 * b * s // t * h + 2 * b * s * hf // t
             + 2 * b * s * h + 2 * b * s // t * h + 2 * b * s * (nh // t) * dh + 4 * b * (nh // t) * s)
    outside = (8 * b * s + 2 * b * s + 2 * b * s // t * h + 4 * b * s // t + 2 * b * s * h + 4 * b * s * v // t
               + 8 * b * s)
    assert m.activation_per_microbatch == 32 * block + outside + 2 * 2 * b * s * h


@pytest.mark.parametrize("flags, words", [
    (["--tp", "2", "--no-sequence-parallel"], "without sequence parallelism is not modelled"),
    (["--tp", "3"], "--tp 3: must divide num_attention_heads = 32"),  # the flag as typed (was "tp = 3")
])
def test_tp_refusals(flags, words, capsys):
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "4", *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_tp_9dec370_refused_and_replay_says_why(capsys):
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan-2412", "--dp", "4", "--tp", "2"]) == 2
    assert "9dec370's TP" in capsys.readouterr().err
    d = _memory(capsys, "--dp", "4", "--tp", "2")
    assert "TP 2: the replay writes FSDP's step alone" in json.dumps(d)


def test_sweep_under_tp_equals_memory_and_says_what_it_leaves_out(capsys):
    """torchtitan 0.3.0's sweep takes TP beside FSDP: each listed layout's peak is `symmem memory`'s at its TP and
    DP; a TP row's reserved is "-", said why."""
    argv = ["sweep", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "H100", "--profile", "torchtitan", "-b", "1",
            "-s", "4096", "--recompute", "full,selective-op", "--pp", "1", "--global-batch-size", "8",
            "--rank-by", "headroom", "--replay", "8"]
    assert main([*argv, "--json", "--rejected"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["ranked"]
    assert {r["tp"] for r in rows} == {1, 2, 4, 8}
    assert {(r["tp"], r["recompute"]) for r in rows} >= {(2, "full"), (2, "selective-op"), (8, "full")}
    for r in rows:
        d = _memory(capsys, "--dp", str(r["dp"]), "--tp", str(r["tp"]), "-b", "1", "-s", "4096", "--recompute",
                    r["recompute"], "--microbatches", str(r["microbatches"]))
        assert d["stages"][0]["peak_allocated"] == r["peak_allocated"], r
        if r["tp"] > 1:
            # refused by the replay: TP's collectives, or (DP below 8) gradient accumulation, whichever it names first
            assert r["reserved"] is None and r["microbatches"] == 8 // r["dp"], r
            assert r["reserved_why"].startswith(f"TP {r['tp']}: the replay" if r["dp"] == 8 else
                                                "the replay writes torchtitan's step without pipelining"), r
    assert main(argv) == 0
    text = capsys.readouterr().out
    said = [ln for ln in text.splitlines() if ln.startswith("reserved '-' (rank")]
    assert said and all("the replay writes torchtitan's step without pipelining" in ln for ln in said), text
    # 9dec370's profile keeps TP at 1, and refuses a TP given
    assert main(["sweep", "--model", "llama-3-8b", "--gpus", "8", "--profile", "torchtitan-2412", "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert "--tp = '2': profile torchtitan-2412 models FSDP (and HSDP) and CP; TP, PP and EP stay 1" in err
    assert err.count("\n") == 1


def test_deepseek_v3_router_on_a_gpu_keeps_fp32_copies_the_cpu_cannot_make():
    """torchtitan's router runs its gate under autocast(dtype=float32) (models/common/moe.py:297-299): CUDA honours
    it, the CPU refuses it (torch/amp/autocast_mode.py:282-304), so the GPU profile's MoE block keeps the FP32 copies
    of the gate's input [b·s, h] and weight [N, h], FP32 scores, and FP32 sorted scores for the combine, where the
    CPU's (measured: tests/validate/test_fsdp2.py) keeps them in BF16 and reads the BF16 input the shared expert
    keeps anyway. By hand at h 64, 4 experts, top 2, b 1, s 32."""
    from symmem.accounting.analysis import stage_terms, values
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.validate.fsdp2.predict import deepseek_v3_config, scenario
    from symmem.validate.fsdp2.runner import Settings

    st = Settings(family="deepseek_v3", dim=64, n_layers=3, n_heads=4, vocab=256, world=2, b=1, s=32)
    scn = scenario(st, deepseek_v3_config(st))
    routing = {}
    for prof in ("torchtitan-cpu", "torchtitan"):
        sc = scn.replace(profile_name=prof)
        vals = values(sc)
        routing[prof] = {t.tensor: ceil_int(evaluate(t.nbytes, vals)) for t in stage_terms(sc, sc.stages[0])
                         if t.part == "moe layers" and t.op.startswith(("moe.router", "dispatch", "combine"))}
    t, h, e, k = 32, 64, 4, 2
    common = {"moe.topk_ids": 8 * t * k, "dispatch.sorted_slots": 8 * t * k, "dispatch.token_idx": 8 * t * k,
              "combine.out_fp32": 4 * t * k * h}
    assert routing["torchtitan-cpu"] == common | {"moe.x_norm": 2 * t * h, "moe.router_scores": 2 * t * e,
                                                  "dispatch.scores_sorted": 2 * t * k}
    assert routing["torchtitan"] == common | {"moe.router_in": 4 * t * h, "moe.router_weight_fp32": 4 * e * h,
                                              "moe.router_scores": 4 * t * e, "dispatch.scores_sorted": 4 * t * k}


@pytest.mark.parametrize("extra, words", [
    (["--tp", "2", "--no-moe-sequence-parallel"], "TP 2 with the MoE block not sequence-sharded"),
    (["--ep", "8"], "--ep 8: only"),
    (["--mtp"], "--mtp with num_nextn_predict_layers = 1"),
    # the local dispatcher keeps every slot: a routing model would change nothing it derives, so it is refused
    (["--routing", "capacity", "--capacity-factor", "1.25"],
     "--routing capacity --capacity-factor 1.25 (routing 'capacity'): torchtitan's local token"),
])
def test_deepseek_v3_under_torchtitan_refuses_what_is_not_modelled(capsys, extra, words):
    argv = ["memory", "--model", "deepseek-v3", "--profile", "torchtitan", "--dp", "64", *extra]
    if "--mtp" not in extra:
        argv.append("--no-mtp")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_deepseek_v3_sweep_under_torchtitan_equals_memory(capsys):
    """torchtitan's DeepSeek-V3 swept on 256 H100s (EP 1: FSDP and TP only, full AC, b 1, s 4,096): the layout that
    fits is TP 8 x FSDP 32, its peak `symmem memory`'s at the same settings, its reserved '-' with the reason."""
    argv = ["sweep", "--model", "deepseek-v3", "--gpus", "256", "--gpu", "H100", "--profile", "torchtitan", "-b", "1",
            "-s", "4096", "--recompute", "full", "--pp", "1", "--global-batch-size", "256", "--no-mtp",
            "--rank-by", "headroom", "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["ranked"]
    assert [(r["tp"], r["dp"]) for r in rows] == [(8, 32)]
    (r,) = rows
    d = _memory(capsys, "--model", "deepseek-v3", "--no-mtp", "--dp", "32", "--tp", "8", "-b", "1", "-s", "4096",
                "--recompute", "full", "--microbatches", str(r["microbatches"]))
    assert d["stages"][0]["peak_allocated"] == r["peak_allocated"]
    assert r["reserved"] is None and r["reserved_why"]


def test_deepseek_v3_under_torchtitan_says_its_slots_are_every_slot(capsys):
    # the header names what the routed slots are (b s N_r per rank, the local dispatcher's), not the routing model's
    # E_tok, which its dataflow does not read
    argv = ["memory", "--model", "deepseek-v3", "--profile", "torchtitan", "--dp", "256", "--no-mtp", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["routing"] == "every slot kept (b s N_r per rank: torchtitan's local token dispatcher)"


def _float8_all_gather(model: str, profile: str, ac: str):
    from symmem.accounting.states import recipe
    from symmem.profiles import with_fsdp_float8_all_gather

    scn = _scenario(model, profile, 64, 1, 8192, ac).replace(precision=recipe("torchao-float8-tensorwise"))
    return with_fsdp_float8_all_gather(scn)


def test_float8_all_gather_gathers_the_float8_weights_at_one_byte_by_hand():
    # torchao's float8 all-gather (fsdp_utils.py:228-285): each Float8Linear's weight is gathered as float8 data, 1
    # byte per element, with one FP32 scale made on the rank; the norms stay BF16. Llama-3-70B's layer by hand: its
    # linears 2 x 8192^2 (q, o) + 2 x 8192 x 1024 (k, v) + 3 x 8192 x 28672, five Float8Linear modules in torchtitan
    # 0.3.0 (wqkv, wo, w1, w2, w3), two norms of 8192; two layers gathered as before. The unreduced gradients stay
    # FP32 (the reduce-scatter's input): 4 bytes x the layer, as without it
    linears = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    norms = 2 * 8192
    from symmem.accounting.analysis import memory, values
    from symmem.accounting.timeline import _component_sums

    for profile, modules in (("torchtitan", 5), ("torchtitan-2412", 7)):  # 9dec370: wq, wk, wv apart
        scn = _float8_all_gather("llama-3-70b", profile, "full")
        (m,) = memory(scn)
        ev = max((e for e, _ in m.peak.events if e.part == "dense layers" and e.phase == "backward"),
                 key=lambda e: dict(m.peak.events)[e])
        parts = _component_sums(ev.amounts, values(scn))
        assert parts["gathered parameters (ZeRO-3)"] == 2 * (linears + 4 * modules + 2 * norms), profile
        assert parts["unreduced gradients (ZeRO-2/3)"] == 4 * (linears + norms)


def test_float8_all_gather_keeps_each_weights_scale_until_the_backward():
    # FSDP2's unsharded parameter, a Float8TrainingTensor, keeps its 4-byte FP32 scale after the reshard frees its
    # data, until the backward's all-gather replaces it (torchao fsdp_utils.py:267 `out._scale = scale`): one per
    # Float8Linear of each layer, under full AC too (measured: the live bytes grow by 5 x 4 bytes over a block
    # either way, tests/validate/test_fsdp2.py), held, not saved through autograd's hooks; lm_head is a
    # Float8Linear in 0.3.0 (no FQN filtered by default), not in 9dec370 ("output" filtered)
    from symmem.accounting.analysis import stage_terms
    from symmem.rules.torchtitan import HELD_NOT_SAVED

    for profile, modules, head in (("torchtitan", 5, 1), ("torchtitan-2412", 7, 0)):
        for ac in ("none", "full"):
            scn = _float8_all_gather("llama-3-8b", profile, ac)
            scales = [t for t in stage_terms(scn, scn.stages[0]) if t.tensor.endswith(".float8_weight_scale")]
            assert sum(t.part == "dense layers" for t in scales) == modules, (profile, ac)
            assert sum(t.part == "head" for t in scales) == head, (profile, ac)
            assert all(t.tensor.endswith(HELD_NOT_SAVED) and t.nbytes == 4 for t in scales)


@pytest.mark.parametrize("flags, words", [
    # (torchao's recipe under megatron-te is refused on its own now: tests/test_framework_flags.py)
    (["--profile", "megatron-te", "--precision", "te-delayed"],
     "--enable-fsdp-float8-all-gather: profile megatron-te does not run FSDP2"),
    (["--profile", "torchtitan"], "--enable-fsdp-float8-all-gather with --precision fp32: torchao gathers float8 "
                                  "weights under its tensorwise recipe only"),
    (["--profile", "torchtitan", "--precision", "torchao-float8-rowwise"], "use --precision "
                                                                            "torchao-float8-tensorwise"),
    (["--profile", "torchtitan", "--precision", "torchao-float8-tensorwise", "--zero", "1"], "use --zero 3"),
    (["--profile", "torchtitan", "--precision", "torchao-float8-tensorwise", "--tp", "2"],
     "TP 2 with --enable-fsdp-float8-all-gather: Float8 linears under TP (torchao's float8 TP styles) are not "
     "modelled; use TP 1"),
])
def test_float8_all_gather_refusals(flags, words, capsys):
    code = main(["memory", "--model", "llama-3-8b", "--dp", "8", "-b", "1", "-s", "1024",
                 "--enable-fsdp-float8-all-gather", *flags])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_float8_all_gather_refuses_a_linear_torchtitan_leaves_in_bf16(tmp_path, capsys):
    # torchtitan converts a linear only when both its dims are multiples of 16 (quantization/utils.py:16-30):
    # vocabulary 255 leaves lm_head in BF16, which the model does not write under the float8 all-gather
    from symmem.validate.fsdp2.predict import hf_config
    from symmem.validate.fsdp2.runner import Settings

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(hf_config(Settings(ffn_hidden=256, vocab=255))))
    code = main(["memory", "--model", str(cfg), "--profile", "torchtitan-cpu", "--dp", "2", "-b", "1", "-s", "32",
                 "--precision", "torchao-float8-tensorwise", "--enable-fsdp-float8-all-gather"])
    err = capsys.readouterr().err
    assert code == 2 and "lm_head is 255 x 64" in err and err.count("\n") == 1, err


def test_float8_all_gather_sweep_rows_equal_memory(capsys):
    # the sweep evaluates each configuration through memory's engine: the flag's gathered bytes and scales too
    # (PP's chunks stay gathered in float8 through the step, as BF16's do)
    flags = ["--precision", "torchao-float8-tensorwise", "--enable-fsdp-float8-all-gather"]
    assert main(["sweep", "--model", "llama-3-8b", "--gpus", "8", "--profile", "torchtitan", "--tp", "1", "--pp",
                 "1,2", "-b", "1", "-s", "4096", "--recompute", "none,full", "--rank-by", "headroom", "--json",
                 *flags]) == 0
    rows = json.loads(capsys.readouterr().out)["ranked"]
    assert {r["pp"] for r in rows} == {1, 2}
    for r in rows:
        d = _memory(capsys, "--dp", str(r["dp"]), "--pp", str(r["pp"]), "-b", "1", "-s", "4096", "--recompute",
                    r["recompute"], *flags)
        assert max(st["peak_allocated"] for st in d["stages"]) == r["peak_allocated"], r
        plain = _memory(capsys, "--dp", str(r["dp"]), "--pp", str(r["pp"]), "-b", "1", "-s", "4096", "--recompute",
                        r["recompute"], "--precision", "torchao-float8-tensorwise")
        if r["pp"] == 2:  # under PP every block stays gathered through the step: in float8, about half BF16's
            assert max(st["peak_allocated"] for st in plain["stages"]) > r["peak_allocated"] + 2**30
