"""FSDP2 (`fully_shard`) over torchtitan 0.3.0's Llama 3 on the CPU, world 2: each rank's model states against the
closed form. Marked `fsdp2`; skips without torch.distributed.fsdp or torchtitan (the torchtitan extra).

Derivation (torch 2.13.0's FSDP2, `_fsdp_param.py`): every parameter is sharded on dim 0 with dim 0 padded to a
multiple of the shard degree W. The rank's `_sharded_param_data` is the padded chunk, ceil(d0 / W) x rest FP32
numbers, and the DTensor's local tensor is a view of its first `local` rows, where
local_r = clamp(d0 - r * ceil(d0 / W), 0, ceil(d0 / W)). So, per parameter and rank r:
  * parameter storage      4 * ceil(d0 / W) * rest   (padded, every rank)
  * gradient               4 * ceil(d0 / W) * rest   (a view of the padded FP32 reduce-scatter output)
  * exp_avg, exp_avg_sq    4 * local_r * rest each   (AdamW's zeros_like of the local view: NOT padded)
  * step                   4                         (a float32 scalar per parameter)
Summed over the ranks: 2 * 4 * padded_numel + 2 * 4 * numel + 4 * W * n_params; the "padded FP32 params x 4" form
holds only when no dim 0 needs padding (vocab 255 here pads tok_embeddings and lm_head to 256 rows; measured,
rank 1's moments are 512 bytes smaller each than rank 0's).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

pytest.importorskip("torch.distributed.fsdp", reason="torch.distributed.fsdp missing: pip install -e '.[torchtitan]'")
pytest.importorskip("torchtitan.models.llama3", reason="torchtitan missing: pip install -e '.[torchtitan]'")

from symmem.validate.fsdp2.runner import Settings, run  # noqa: E402

pytestmark = pytest.mark.fsdp2

W = 2
SETTINGS = Settings(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=255, world=W, b=1, s=32,
                    reshard_after_forward=True, ac="none")


def _shapes() -> dict[str, tuple]:
    """The global shapes of torchtitan's Llama 3 with fused wqkv, from the settings alone."""
    d, hd, v = SETTINGS.dim, SETTINGS.dim // SETTINGS.n_heads, SETTINGS.vocab
    ffn = 256  # compute_ffn_hidden_dim(64, multiple_of=256) = 256 * ceil(int(8 * 64 / 3) / 256)
    shapes = {"tok_embeddings.weight": (v, d), "norm.weight": (d,), "lm_head.weight": (v, d)}
    for i in range(SETTINGS.n_layers):
        shapes |= {f"layers.{i}.attention.qkv_linear.wqkv.weight": (d + 2 * SETTINGS.n_kv_heads * hd, d),
                   f"layers.{i}.attention.wo.weight": (d, d), f"layers.{i}.feed_forward.w1.weight": (ffn, d),
                   f"layers.{i}.feed_forward.w2.weight": (d, ffn), f"layers.{i}.feed_forward.w3.weight": (ffn, d),
                   f"layers.{i}.attention_norm.weight": (d,), f"layers.{i}.ffn_norm.weight": (d,)}
    return shapes


def _closed_form(rank: int) -> dict[str, int]:
    out = {"params": 0, "grads": 0, "exp_avg": 0, "exp_avg_sq": 0, "step": 0}
    for shape in _shapes().values():
        rows = math.ceil(shape[0] / W)
        rest = math.prod(shape[1:])
        local = min(max(shape[0] - rank * rows, 0), rows)
        out["params"] += 4 * rows * rest
        out["grads"] += 4 * rows * rest
        out["exp_avg"] += 4 * local * rest
        out["exp_avg_sq"] += 4 * local * rest
        out["step"] += 4
    return out


def test_fsdp_params_are_torchtitans_parameters_in_its_order():
    # accounting.fsdp.fsdp_params read a linear's first dimension as all but the weight's first symmem dim (o_proj,
    # (n_h, d_h, h), came out 1024 x 4 rather than 64 x 64) and fused q, k and v across layers (layer 0's wqkv
    # 160 rows, layer 1's 96): the totals held, the padding per dim 0 (and so per rank) did not
    from symmem.accounting.analysis import values
    from symmem.accounting.fsdp import fsdp_params
    from symmem.model import stage_parts
    from symmem.validate.fsdp2.peak import torchtitan_order
    from symmem.validate.fsdp2.predict import scenario

    scn = scenario(dataclasses.replace(SETTINGS, ffn_hidden=256))
    (stage,) = scn.stages
    params = fsdp_params(stage_parts(scn.model, stage, scn.convention, scn.flow_impl), values(scn))
    shapes = [(p.d0, p.rest) for p in torchtitan_order(params)]
    assert shapes == [(s[0], math.prod(s[1:])) for s in _shapes_in_model_order()]


def _shapes_in_model_order() -> list[tuple]:
    """torchtitan's `model.parameters()` order: the embedding, each block (wqkv, wo, w1, w2, w3, the two norms),
    the final norm, the output layer."""
    s = _shapes()
    names = ["tok_embeddings.weight"]
    for i in range(SETTINGS.n_layers):
        names += [f"layers.{i}.attention.qkv_linear.wqkv.weight", f"layers.{i}.attention.wo.weight",
                  *(f"layers.{i}.feed_forward.{w}.weight" for w in ("w1", "w2", "w3")),
                  f"layers.{i}.attention_norm.weight", f"layers.{i}.ffn_norm.weight"]
    return [s[n] for n in [*names, "norm.weight", "lm_head.weight"]]


@pytest.fixture(scope="module")
def ranks():
    return run(SETTINGS)


def test_states_per_rank_match_closed_form(ranks):
    for r in ranks:
        expected = _closed_form(r["rank"])
        measured = {k: r["states_by_kind"][k] for k in expected}
        assert measured == expected
        assert r["states"] == sum(expected.values())
        assert {k: tuple(v["global"]) for k, v in r["params"].items()} == _shapes()
        assert [tuple(v["global"]) for v in r["params"].values()] == _shapes_in_model_order()  # the order too


def test_states_sum_over_ranks(ranks):
    shapes = _shapes().values()
    padded = sum(math.ceil(s[0] / W) * W * math.prod(s[1:]) for s in shapes)
    numel = sum(math.prod(s) for s in shapes)
    assert padded > numel  # vocab 255 pads
    assert sum(r["states"] for r in ranks) == 2 * 4 * padded + 2 * 4 * numel + 4 * W * len(_shapes())


def test_saved_and_peak_recorded(ranks):
    for r in ranks:
        assert set(r["saved"]) >= {"layer 0", "layer 1"}
        assert r["saved"]["layer 0"] == r["saved"]["layer 1"] > 0
        assert r["peak"] >= r["states"]


# The torchtitan-cpu profile against the real code, per rank, to the byte (issue 28): model states and what each
# block and the rest of the model save for backward. One spawn of the ranks per run (about 15 s each on 2 cores).
MATRIX = {
    "fsdp2-reshard": {},
    "fsdp2-no-reshard": {"reshard_after_forward": False},
    "fsdp2-full-ac": {"ac": "full"},
    "hsdp-2x2": {"world": 4, "replicate": 2},
    "fsdp4-uneven-b2": {"world": 4, "dim": 48, "n_heads": 3, "n_kv_heads": 1, "vocab": 250, "b": 2, "s": 12},
    # torchtitan's per-op AC: the block input and every odd matrix product's output (wqkv, w1, w2) from the
    # checkpoint's cache, counted by the runner beside what the saved-tensor hooks see (runner.SacCaches)
    "fsdp2-selective-op-ac": {"ac": "selective-op"},
    "fsdp2-selective-op-ac-3-layers-b2": {"ac": "selective-op", "n_layers": 3, "b": 2, "s": 24,
                                          "reshard_after_forward": False},
    # the peak's closed forms (symmem/validate/fsdp2/peak.py) in FP32 compute and with three checkpointed blocks
    "fsdp2-fp32-params": {"param_dtype": "fp32"},
    "fsdp2-full-ac-3-layers": {"ac": "full", "n_layers": 3},
    "fsdp2-no-reshard-full-ac-3-layers-s64": {"ac": "full", "n_layers": 3, "s": 64, "reshard_after_forward": False},
    # torchtitan 9dec370's per-layer AC: of 3 blocks only block 1 ((1 + 1) % 2 == 0) is checkpointed; of 4 blocks
    # with N = 3 block 2 alone
    "fsdp2-selective-layer-2-3-layers": {"ac": "selective-layer:2", "n_layers": 3},
    "fsdp2-selective-layer-3-4-layers-no-reshard": {"ac": "selective-layer:3", "n_layers": 4,
                                                    "reshard_after_forward": False},
    # torchtitan 0.3.0's TP with sequence parallelism (models/llama3/sharding.py): the all-gathered inputs of the
    # column-parallel linears kept whole, the vocabulary mask, loss-parallel's log-probabilities
    # (symmem/rules/torchtitan.py `under_tp`); FSDP then shards each TP shard on dim 0. The step's start and optimizer
    # step are FSDP's forms over TP's local shards; its forward and backward peaks: not predicted
    "fsdp1-tp2": {"tp": 2, "vocab": 256},
    "fsdp1-tp2-full-ac": {"tp": 2, "vocab": 256, "ac": "full"},
    "fsdp2-tp2-no-reshard-b2": {"world": 4, "tp": 2, "vocab": 256, "b": 2, "reshard_after_forward": False},
    "hsdp-2x1-tp2": {"world": 4, "replicate": 2, "tp": 2, "vocab": 256},
    # what a block leaves alive beyond its saved tensors: at b = 1 each all-gather's output and the custom op's copy
    # (two more [b, s, h] per gather, `_linear_tp_b1`), at b = 2 nothing (the gather's chunks concatenated)
    "fsdp2-tp2-3-layers": {"world": 4, "tp": 2, "vocab": 256, "n_layers": 3},
    "fsdp1-tp2-3-layers-b2": {"tp": 2, "vocab": 256, "n_layers": 3, "b": 2},
    # the forward's most under TP (peak._tp_forward): the loss-parallel forward at FSDP 1 x TP 2, b 2; the last
    # block's w2 reduce-scatter with the last block's flat all-gather output at FSDP 2 x TP 2, b 2
    "fsdp2-tp2-b2": {"world": 4, "tp": 2, "vocab": 256, "b": 2},
    # without resharding (every block's and the root's parameters kept) the loss-parallel forward is the most
    "fsdp1-tp2-no-reshard": {"tp": 2, "vocab": 256, "reshard_after_forward": False},
    # per-op AC under TP: beside the odd products' outputs, the reduce-scatter outputs of wo and w2 (on the save list)
    # and w2's full-sequence partial sum (its mm counted odd), `_sac_cached_tp`
    "fsdp1-tp2-selective-op-ac": {"tp": 2, "vocab": 256, "ac": "selective-op"},
    "fsdp2-tp2-selective-op-ac-3-layers-b2": {"world": 4, "tp": 2, "vocab": 256, "ac": "selective-op", "n_layers": 3,
                                              "b": 2},
}


@pytest.mark.parametrize("case", list(MATRIX))
def test_profile_equals_the_run_on_every_rank(case):
    from symmem.validate.fsdp2.growth import interior_block_checked
    from symmem.validate.fsdp2.peak import DTYPE_BYTES
    from symmem.validate.fsdp2.predict import predicted

    st = dataclasses.replace(SETTINGS, ffn_hidden=256, **MATRIX[case])
    measured, pred = run(st), predicted(st)
    assert len(measured) == st.world
    retried = False

    assert len(pred) == st.world
    for i, p in enumerate(pred):
        m = measured[i]  # after a fresh run (below), the later ranks are the fresh run's
        assert m["states_by_kind"] | {"other": 0} == p["states_by_kind"] | {"other": 0, "total": m["states"]}, case
        assert m["states"] == p["states"] and m["saved"] == p["saved"], (case, m["rank"])
        if m["head_growth"] > p["head_growth"] and not retried:
            # seen once (fsdp2-tp2-selective-op-ac-3-layers-b2, rank 1: +12,288 B, lm_head's gather's input and
            # output [2, 16, 64] + [4, 16, 64] BF16 still held by gloo's work; equal in the other ranks and in a
            # fresh run): a growth above the prediction gets one fresh run of the case, which must be equal
            retried = True
            measured = run(st)
            m = measured[m["rank"]]
        if interior_block_checked(st):
            # what an interior block leaves alive for the backward, saved or only held by the autograd graph
            # (under TP at b = 1 each all-gather's two more copies, rules/torchtitan.py `_linear_tp_b1`): the live
            # bytes grow by it from one block's end to the next's, once the first block's parameters are resharded.
            # (At a block's end the caller still holds the block's input: with every block under one policy the
            # input dropped and the output made are the same size; under per-layer AC, where a checkpointed block
            # saves its input and the next does not, they are not, so those cases are left out.)
            held = m["held_after_block"]
            assert held["layer 2"] - held["layer 1"] == p["held_per_block"]["layer 2"], (case, m["rank"], held)
        # the same of the final norm and lm_head (under TP at b = 1 the gather of lm_head's input holds two more).
        # Under TP gloo's thread may still hold that gather's input (and, at b >= 2, its output, which b = 1 holds
        # anyway) a moment after the wait, even in a fresh run (seen in CI: +2,048 at b 1): those and nothing else
        pd = DTYPE_BYTES[st.param_dtype]
        g_in, g_out = st.b * (st.s // st.tp) * st.dim * pd, (st.b * st.s * st.dim * pd if st.b > 1 else 0)
        by_gloo = {0} if st.tp == 1 else {0, g_in, g_in + g_out}
        assert m["head_growth"] - p["head_growth"] in by_gloo, (case, m["rank"], m["head_growth"], p["head_growth"])
        # the live bytes when the step begins, and each phase's most where the closed forms hold (peak.covered)
        pk, by_phase = p["peaks"], m["peak_by_phase"]
        assert m["start"] == p["start"], (case, m["rank"])
        if st.tp > 1 and not pk.why_not:  # the start and the optimizer step hold no TP collective; the forward is
            # written for FSDP x TP without AC (peak._tp_forward), the backward not
            assert by_phase["optimizer step"][0] == pk.optimizer_step, (case, m["rank"])
            assert pk.backward is None and pk.why_not_backward.startswith("TP 2"), case
            if pk.forward is None:
                assert st.ac != "none" and pk.why_not_forward.startswith("TP 2")
            else:
                assert by_phase["forward"][0] == pk.forward, (case, m["rank"], by_phase["forward"],
                                                              pk.forward_moments)
            continue
        assert not pk.why_not, (case, pk.why_not)  # every case of the matrix is inside the closed forms' reach
        if by_phase["forward"][0] > pk.forward and not retried:
            # seen once in CI beside load (fsdp2-no-reshard, +65,288 B at nll_loss_forward; equal alone): a
            # measured forward above the prediction gets one fresh run of the case, which must be equal
            retried = True
            measured = run(st)
            m, by_phase = measured[m["rank"]], measured[m["rank"]]["peak_by_phase"]
        assert by_phase["forward"][0] == pk.forward, (case, m["rank"], by_phase["forward"])
        assert by_phase["optimizer step"][0] == pk.optimizer_step, (case, m["rank"])
        assert m["peak"] == max(by_phase[k][0] for k in ("forward", "backward", "optimizer step"))
        if pk.backward is None:
            # any AC: the backward recomputes, and those transients are not among the moments
            assert MATRIX[case].get("ac", "none") != "none" and pk.why_not_backward, case
            continue
        # the backward reaches its moments; FSDP2's order of prefetch and reduce-scatter (and gloo's copy's life)
        # varies from run to run, and some runs hold a buffer more at one of them (seen: +123,008 base, +82,176 FP32
        # params, +28,544 full AC), so the moments are a floor the run reaches, equal in most runs, not its figure
        assert by_phase["backward"][0] >= min(pk.backward.values()), (case, m["rank"], by_phase["backward"],
                                                                      pk.backward)


def test_measure_cli_exits_0_and_refuses_what_it_does_not_predict(tmp_path, capsys):
    import json

    from symmem.cli.main import main
    from symmem.validate.fsdp2.predict import hf_config

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(hf_config(Settings(ffn_hidden=256, vocab=256))))
    assert main(["measure", "--framework", "fsdp2", "--config", str(cfg), "--dp", "2", "-b", "1", "-s", "16",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] and all(r["states_match"] and r["saved_match"] for r in out["ranks"])
    for r in out["ranks"]:  # the step's phases predicted and equal (reshard_after_forward, FSDP, no AC)
        assert r["start_match"] and r["peak_match"] and set(r["phases"]) == {"forward", "backward", "optimizer step"}
        assert r["measured"]["peak_by_phase"]["forward"] == r["predicted"]["peak_by_phase"]["forward"]
    main(["measure", "--framework", "fsdp2", "--config", str(cfg), "--dp", "2", "-b", "1", "-s", "16"])
    text = capsys.readouterr().out
    assert text.count("forward: ") == 2 and "(DIFFERENT)" not in text, text
    for extra, words in ((["--ac", "selective-layer:x"], "--ac = 'selective-layer:x'"),
                         (["--tp", "3"], "--tp = 3: must divide num_attention_heads"),
                         (["--dp", "3", "--hsdp-replicate", "2"], "--hsdp-replicate = 2")):
        assert main(["measure", "--framework", "fsdp2", "--config", str(cfg), *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_measure_cli_under_tp_says_which_phases_it_predicts(tmp_path, capsys):
    """FSDP 1 x TP 2, 3 blocks, b 1: the start, the forward and the optimizer step predicted and equal; the backward
    measured and said not predicted, with no verdict beside it (an unpredicted phase is neither EQUAL nor
    DIFFERENT); the live bytes' growth over block 2 and over the final norm and lm_head (each all-gather's two more
    copies at b = 1) equal."""
    import json

    from symmem.cli.main import main
    from symmem.validate.fsdp2.predict import hf_config

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(hf_config(Settings(ffn_hidden=256, vocab=256, n_layers=3))))
    argv = ["measure", "--framework", "fsdp2", "--config", str(cfg), "--dp", "1", "--tp", "2", "-b", "1", "-s", "32"]
    code = main(argv)
    text = capsys.readouterr().out
    assert code == 0, text
    lines = [ln.strip() for ln in text.splitlines()]
    for phase in ("optimizer step: ", "forward: "):
        assert sum(ln.startswith(phase) and ln.endswith("(EQUAL)") for ln in lines) == 2, text
    said = [ln for ln in lines if ln.startswith("backward: ")]
    assert len(said) == 2 and all("not predicted (TP 2:" in ln and "EQUAL" not in ln for ln in said), text
    assert text.count("live at the start") == 2 and "(DIFFERENT)" not in text and "start" in text
    # by hand (h 64, s 32, b 1, BF16, TP 2): block 2 saves 63,872 (the matrix's fsdp1-tp2 case) and its two gathers
    # hold 2 x 2 x [1, 32, 64] = 16,384 more: 80,256; from the final norm to lm_head, the norm's FP32 input copy and
    # normalized input [1, 16, 64] and rstd (4,096 + 4,096 + 64), lm_head's gathered input and its two copies
    # (3 x 4,096), the logits [1, 32, 128] (8,192), less the last block's output [1, 16, 64] (2,048): 26,688
    assert sum(ln == "live bytes' growth over block 2: 80,256 measured, 80,256 predicted (EQUAL)" for ln in lines) == 2
    # the head's: shown, not counted in the exit code (gloo's thread may hold lm_head's all-gather input, 2,048, and
    # output a moment longer: seen 28,736 on one rank in CI); any other figure is a defect
    head = [ln for ln in lines if ln.startswith("live bytes' growth over the final norm and lm_head: ")]
    assert len(head) == 2 and all(ln.endswith(", 26,688 predicted (EQUAL)") and ln.split(": ")[1].startswith("26,688 ")
                                  or ln.split(": ")[1].startswith("28,736 ") for ln in head), text


def test_deepseek_v3_runs_under_fsdp2_and_its_states_are_fsdps_closed_form():
    # torchtitan 0.3.0's DeepSeek-V3 (MLA without query compression, 1 dense block and MoE blocks with grouped
    # experts and a shared expert) trains a step on the CPU under FSDP2. Its parameters, written here from its model
    # code (models/deepseek_v3/model.py `Attention`; models/common/moe.py `GroupedExperts`: w1_EFD, w2_EDF, w3_EFD,
    # each [experts, ...], so FSDP2 shards the experts' dim 0, the experts), and their states per rank from FSDP2's
    # dim-0 sharding with padding (symmem.accounting.fsdp.rank_states): odd sizes (3 experts, KV rank 31) so that
    # rows are padded. Its saved tensors are measured, not predicted: the profile models Llama 3 (docs/torchtitan.md)
    from symmem.accounting.fsdp import FsdpParam, rank_states
    from symmem.validate.fsdp2.runner import MoESettings

    moe = MoESettings(num_experts=3, kv_lora_rank=31)
    st = Settings(family="deepseek_v3", moe=moe, dim=64, n_layers=3, n_heads=4, vocab=256, world=2, b=1, s=32)
    h, nh, dq, dv, kv, rope = st.dim, st.n_heads, moe.qk_nope_head_dim + moe.qk_rope_head_dim, moe.v_head_dim, \
        moe.kv_lora_rank, moe.qk_rope_head_dim
    e, f, fs = moe.num_experts, moe.moe_hidden, moe.moe_hidden * moe.num_shared_experts
    attention = {"attention.wq.weight": (nh * dq, h), "attention.wkv_a.weight": (kv + rope, h),
                 "attention.kv_norm.weight": (kv,), "attention.wkv_b.weight": (nh * (moe.qk_nope_head_dim + dv), kv),
                 "attention.wo.weight": (h, nh * dv), "attention_norm.weight": (h,), "ffn_norm.weight": (h,)}
    dense = {f"feed_forward.{w}.weight": s for w, s in
             (("w1", (moe.dense_hidden, h)), ("w2", (h, moe.dense_hidden)), ("w3", (moe.dense_hidden, h)))}
    experts = "moe.routed_experts.inner_experts"
    sparse = {f"{experts}.w1_EFD": (e, f, h), f"{experts}.w2_EDF": (e, h, f),
              f"{experts}.w3_EFD": (e, f, h), "moe.router.gate.weight": (e, h),
              "moe.shared_experts.w1.weight": (fs, h), "moe.shared_experts.w2.weight": (h, fs),
              "moe.shared_experts.w3.weight": (fs, h)}
    shapes = {"tok_embeddings.weight": (st.vocab, h), "norm.weight": (h,), "lm_head.weight": (st.vocab, h)}
    for i in range(st.n_layers):
        for name, shape in {**attention, **(dense if i < moe.n_dense_layers else sparse)}.items():
            shapes[f"layers.{i}.{name}"] = shape
    params = [FsdpParam(n, s[0], math.prod(s[1:])) for n, s in shapes.items()]

    measured = run(st)
    for m in measured:
        assert {n: tuple(p["global"]) for n, p in m["params"].items()} == shapes
        r = rank_states(params, st.world, m["rank"], step_on_device=True)
        assert m["states_by_kind"] | {"other": 0} == {"params": r.params, "grads": r.grads, "exp_avg": r.exp_avg,
                                                      "exp_avg_sq": r.exp_avg_sq, "step": r.step, "other": 0,
                                                      "total": r.total}, m["rank"]
        # every MoE block saves the same bytes (the grouped experts' inputs are [tokens x top-k, dim] whatever the
        # routing), the dense block its own; both ranks alike
        assert m["saved"]["layer 1"] == m["saved"]["layer 2"] and m["saved"] == measured[0]["saved"]


def _dsv3_block_by_hand(h=64, s=32, nh=4, dq=24, dv=16, kv=32, ffn=128, e=4, k=2, f=32, shared=32) -> tuple:
    """What torchtitan's DeepSeek-V3 blocks keep on the CPU at b = 1, BF16, summed by hand from its code (the
    runner's default MoESettings: softmax router, no route norm, one wq, SDPA's math path as dq != dv): the
    torchtitan-cpu profile derives the same from symmem.blocks.torchtitan."""
    t, n = s, s * k  # tokens, routed slots
    norm = lambda d: 4 * t * d + 4 * t + 4 * t * d  # noqa: E731 (composite rms_norm: FP32 input, rstd, normed)
    attention = (norm(h) + 2 * t * h  # attention_norm; wq's and wkv_a's input
                 + norm(kv) + 2 * t * kv  # kv_norm; wkv_b's input
                 + 4 * (2 * nh * t * dq + nh * t * t + nh * t * dv)  # math SDPA: scaled q, kT, probs, v, FP32
                 + 2 * t * nh * dv)  # wo's input (the transposed output's copy)
    swiglu = lambda rows, w: 2 * rows * h + 4 * 2 * rows * w  # noqa: E731 (input; w1 out, silu out, w3 out, product)
    dense = attention + norm(h) + swiglu(t, ffn)
    moe = (attention + norm(h) + 2 * t * h  # ffn_norm; its output, read by the gate and the shared expert
           + 2 * t * e + 8 * t * k  # the softmax's BF16 output (CPU), gather's int64 ids
           + 8 * n + 8 * n + 4 * e  # the argsort's order, the token of each slot, the int32 offsets
           + 2 * n * h + 4 * 2 * n * f  # the routed input; h1, silu(h1), h3, their product
           + 4 * n * h + 2 * n  # combine: the FP32 expert output and the sorted BF16 scores
           + 4 * 2 * t * shared)  # the shared expert's w1 out, silu out, w3 out, product
    return dense, moe


DSV3 = {
    "dsv3": {},
    # the 671B's router (sigmoid, top-k scores divided by their sum, group-limited: here 2 groups, 1 kept) and query
    # latent (wq_a, q_norm, wq_b), b 2
    "dsv3-sigmoid-norm-groups-q-latent-b2": {"moe": {"score_func": "sigmoid", "route_norm": True, "q_lora_rank": 24,
                                                     "n_group": 2, "topk_group": 1}, "b": 2},
    # q/k head size equal to v's: the CPU's flash kernel, its output wo's input itself
    "dsv3-flash-b2": {"moe": {"qk_nope_head_dim": 8}, "b": 2},
    # torch.utils.checkpoint keeps a block's input only: the MoE block routes again in its recompute
    "dsv3-full-ac": {"ac": "full"},
    "dsv3-selective-layer-2-4-layers": {"ac": "selective-layer:2", "n_layers": 4},
    "dsv3-no-reshard-b2-s16": {"reshard_after_forward": False, "b": 2, "s": 16},
    # per-op AC: the block input, the odd products' outputs (wq, wkv_b, then w1 and w2 of the dense or the shared
    # expert: the router's gate is forced to recompute, activation_checkpoint.py:196-198), topk's FP32 values and
    # int64 ids, and on the math path the two bmm outputs (FP32); the grouped experts are recomputed
    "dsv3-selective-op": {"ac": "selective-op"},
    # group-limited routing's two aten.topk (each group's top 2, the groups kept) are on the save list too
    "dsv3-groups-selective-op": {"ac": "selective-op", "moe": {"n_group": 2, "topk_group": 1}},
    # the CPU's flash kernel is not on the save list: recomputed
    "dsv3-flash-selective-op-b2-no-reshard": {"ac": "selective-op", "moe": {"qk_nope_head_dim": 8}, "b": 2,
                                              "reshard_after_forward": False},
    # TP 2 with sequence parallelism (models/deepseek_v3/sharding.py, models/common/moe_sharding.py, EP off): each
    # module's input gathered at its entry and kept whole (at b 1 with the gather's two more copies), the attention
    # on the whole sequence split by heads, the MoE block on every token with the experts' hidden dim split, its
    # routed and shared outputs reduce-scattered (per-op AC caches both)
    "dsv3-tp2": {"tp": 2},
    "dsv3-fsdp2-tp2-b2": {"world": 4, "tp": 2, "b": 2},
    "dsv3-tp2-full-ac": {"tp": 2, "ac": "full"},
    "dsv3-tp2-selective-op": {"tp": 2, "ac": "selective-op"},
    "dsv3-hsdp-2x1-tp2-sigmoid-norm-q-latent-no-reshard-b2": {
        "world": 4, "replicate": 2, "tp": 2, "b": 2, "reshard_after_forward": False,
        "moe": {"score_func": "sigmoid", "route_norm": True, "q_lora_rank": 24}},
    # padded shards: 3 experts and KV rank 31 over a shard group of 2; two dense blocks
    "dsv3-hsdp-2x2-padded": {"world": 4, "replicate": 2, "n_layers": 4,
                             "moe": {"num_experts": 3, "kv_lora_rank": 31, "n_dense_layers": 2}},
}


@pytest.mark.parametrize("case", list(DSV3))
def test_deepseek_v3_profile_equals_the_run_on_every_rank(case):
    """torchtitan 0.3.0's DeepSeek-V3 under FSDP2: the torchtitan-cpu profile over torchtitan's own DeepSeek-V3
    dataflow (symmem/blocks/torchtitan) predicts each rank's states, what each dense and MoE block and the rest
    save, the live bytes at the step's start and the growth over block 2 and the head, and the optimizer step's
    most, to the byte; without AC the forward's most too (inside the last MoE block's combine, with the Python
    scope's locals: `peak._last_forward_busiest`; under TP, or the loss-parallel forward without resharding:
    `peak._tp_forward`). The backward (and the forward under AC) is measured and said not predicted."""
    from symmem.validate.fsdp2.growth import interior_block_checked
    from symmem.validate.fsdp2.predict import predicted
    from symmem.validate.fsdp2.runner import MoESettings

    spec = dict(DSV3[case])
    moe = MoESettings(**spec.pop("moe", {}))
    st = Settings(family="deepseek_v3", moe=moe, dim=64, n_layers=3, n_heads=4, vocab=256, world=2, b=1, s=32)
    st = dataclasses.replace(st, **spec)
    measured, pred = run(st), predicted(st)
    assert len(measured) == len(pred) == st.world
    for m, p in zip(measured, pred, strict=True):
        assert m["states_by_kind"] | {"other": 0} == p["states_by_kind"] | {"other": 0, "total": m["states"]}, case
        assert m["saved"] == p["saved"], (case, m["rank"], m["saved"], p["saved"])
        assert m["start"] == p["start"], (case, m["rank"])
        assert m["head_growth"] == p["head_growth"], (case, m["rank"])
        if interior_block_checked(st):
            held = m["held_after_block"]
            assert held["layer 2"] - held["layer 1"] == p["held_per_block"]["layer 2"], (case, m["rank"], held)
        pk, by_phase = p["peaks"], m["peak_by_phase"]
        assert not pk.why_not and by_phase["optimizer step"][0] == pk.optimizer_step, (case, m["rank"])
        assert pk.backward is None and "DeepSeek-V3" in pk.why_not_backward, case
        if st.ac == "none":
            assert by_phase["forward"][0] == pk.forward, (case, m["rank"], by_phase["forward"], pk.forward_moments)
        else:
            assert pk.forward is None and "DeepSeek-V3" in pk.why_not_forward, case
    if case == "dsv3":  # the figures by hand, beside the profile's
        dense, moe_block = _dsv3_block_by_hand()
        assert (dense, moe_block) == (137_600, 155_920)
        assert pred[0]["saved"] == {"layer 0": dense, "layer 1": moe_block, "layer 2": moe_block,
                                    "outside layers": 53_892}


def test_deepseek_v3_measure_cli_compares_and_refuses_what_it_does_not_predict(tmp_path, capsys):
    import json

    from symmem.cli.main import main
    from symmem.validate.fsdp2.predict import deepseek_v3_config
    from symmem.validate.fsdp2.runner import MoESettings

    raw = deepseek_v3_config(Settings(family="deepseek_v3", moe=MoESettings(), dim=64, n_layers=3, n_heads=4,
                                      vocab=256))
    cfg = tmp_path / "dsv3.json"
    cfg.write_text(json.dumps(raw))
    argv = ["measure", "--framework", "fsdp2", "--config", str(cfg), "--dp", "2", "-b", "1", "-s", "32"]
    code = main(argv)
    text = capsys.readouterr().out
    assert code == 0, text
    assert "torchtitan 0.3.0 DeepSeek-V3" in text and text.count("saved per block and outside EQUAL") == 2, text
    assert "(DIFFERENT)" not in text and text.count("(EQUAL)") >= 2 * 5, text  # states, start, 2 growths, 2 phases
    assert "not predicted (DeepSeek-V3: the backward" in text, text
    for extra, words in ((["--tp", "3", "--dp", "1"], "--tp = 3: must divide num_attention_heads = 4"),
                         (["--ac", "selective-layer:0"], "--ac = 'selective-layer:0'")):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
    cfg.write_text(json.dumps(raw | {"num_nextn_predict_layers": 1}))
    assert main(argv) == 2
    assert "num_nextn_predict_layers = 1" in capsys.readouterr().err


@pytest.mark.parametrize("ac", ["none", "full"])
def test_float8_all_gather_measured_to_the_byte(tmp_path, capsys, ac):
    """torchao's Float8 (tensorwise, emulated) under FSDP2 with the float8 all-gather, 3 blocks (h 64, FFN 256,
    4 heads of 16, 2 KV heads, vocabulary 256), world 2: the states, the saved tensors per block, each FSDP unit's
    gathered parameters and the live bytes' growth over block 2 equal on every rank.

    By hand, a block gathers its five Float8 linears' weights at 1 byte per element, wqkv 128 x 64 + wo 64 x 64 +
    w1, w3 256 x 64 + w2 64 x 256 = 61,440, and one FP32 scale each (5 x 4), and its two norms in BF16 (2 x 64 x 2):
    61,716, where BF16 gathers (61,440 + 128) x 2 = 123,136. The root gathers the embedding and norm in BF16
    ((256 x 64 + 64) x 2) and lm_head (256 x 64, a Float8Linear in torchtitan 0.3.0) in float8 with its scale:
    49,284. The five scales stay alive from a block's forward to its backward under full AC too (FSDP2's unsharded
    parameter keeps them after the reshard): block 2's growth is what it saves plus 20 bytes."""
    import json

    pytest.importorskip("torchao.float8", reason="torchao missing: pip install -e '.[torchtitan]'")
    from symmem.cli.main import main
    from symmem.validate.fsdp2.predict import hf_config

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(hf_config(Settings(ffn_hidden=256, vocab=256, n_layers=3))))
    argv = ["measure", "--framework", "fsdp2", "--config", str(cfg), "-b", "1", "-s", "32", "--ac", ac,
            "--recipe", "tensorwise", "--enable-fsdp-float8-all-gather", "--json"]
    code = main(argv)
    out = json.loads(capsys.readouterr().out)
    if code and _only_timing(out):  # measured again, once: see `_only_timing`
        first = _mismatches(out)
        code = main(argv)
        out = json.loads(capsys.readouterr().out)
        assert code == 0, (first, _mismatches(out))
    assert code == 0 and out["match"] and out["fsdp_float8_all_gather"], _mismatches(out)
    for r in out["ranks"]:
        assert r["states_match"] and r["saved_match"] and r["unsharded_match"] and r["growth_match"], r
        assert r["unsharded"]["measured"] == {"root": 49_284, "layer 0": 61_716, "layer 1": 61_716,
                                              "layer 2": 61_716}
        growth = r["forward_growth"]["block 2"]["measured"]
        assert growth == r["measured"]["saved"]["layer 2"] + 5 * 4, r
        assert r["peak_not_predicted"].startswith("Float8")  # the casts' transients: shown, not predicted


_DETAIL = {"peak_match": "phases", "growth_match": "forward_growth"}  # where a comparison's figures are


def _mismatches(out: dict) -> list:
    """What differed, per rank: each failed comparison's measured and predicted figures (a failure message that
    names the difference, where the whole report is cut short)."""
    found = []
    for r in out.get("ranks", []):
        for key in r:
            if key.endswith("_match") and r[key] is False:
                found.append((r.get("rank"), key, r.get(_DETAIL.get(key, key.removesuffix("_match")))))
    return found or [out]


def _only_timing(out: dict) -> bool:
    """Whether only the live-byte comparisons differed (the peaks and the blocks' growth), not the states, the
    saved bytes or the gathered parameters. The live bytes are read while gloo's worker thread runs: it may still
    hold a collective's input and output a moment after the wait returns (measure_fsdp2.py leaves the head's
    growth out for that reason). The float8 all-gather run at full AC failed in two CI runs of 2026-12-07, once with
    the peaks on both ranks and the block growth on one differing (the other failure's report was cut short), never
    in 14 runs here under load: one more measurement is taken before the test fails."""
    bad = {k for r in out.get("ranks", []) for k, v in r.items() if k.endswith("_match") and v is False}
    return bool(bad) and bad <= set(_DETAIL)

