"""Megatron-Core 0.16.1 on the CPU against the megatron-local rules, per rank (`symmem measure --framework
megatron-core`). Runs are marked `megatron` and skip without the extra; the rules' own checks need no torch."""

from __future__ import annotations

import json

import pytest

from symmem.cli.main import _Parser
from symmem.cli.measure import COMMAND
from symmem.errors import SymmemError
from symmem.rules import megatron_local as ml
from symmem.rules import megatron_local_peak as mp

LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64,
         "tie_word_embeddings": False}
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 128, "n_positions": 64}
# Never used to write a rule: a wider vocabulary than heads x s, so the backward's first GEMM outweighs Adam's step.
WIDE_VOCAB = {"model_type": "llama", "hidden_size": 96, "intermediate_size": 192, "num_attention_heads": 6,
              "num_key_value_heads": 6, "num_hidden_layers": 2, "vocab_size": 512, "max_position_embeddings": 128,
              "tie_word_embeddings": False}
# Never used to write a rule: a narrower vocabulary than h, so the final norm's backward outweighs the head's.
NARROW_VOCAB = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 8,
                "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 64, "max_position_embeddings": 128,
                "tie_word_embeddings": False}
# issue 44: Qwen3 (q/k layernorm per head, GQA groups of 2: the query a copy, the key a view) and Mixtral (MoE in
# every layer, no shared expert)
QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 128,
         "max_position_embeddings": 64, "tie_word_embeddings": False}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 32, "num_local_experts": 4,
           "num_experts_per_tok": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
           "vocab_size": 128, "max_position_embeddings": 64, "tie_word_embeddings": False}
MOE = {"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32,
       "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2, "num_attention_heads": 4,
       "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64,
       "tie_word_embeddings": False}


def _run(argv: list[str]) -> int:
    help_text, add_args, run = COMMAND
    p = _Parser(prog="symmem measure", description=help_text)
    add_args(p)
    return run(p.parse_args(argv))


def test_llama_states_by_hand():
    """The tiny Llama's parameters counted by hand from its config, then Megatron's buffer rules applied."""
    h, f, v, heads, groups, d = 64, 96, 128, 4, 2, 16
    layer = h + h * heads * d + (heads + 2 * groups) * d * h + h + 2 * f * h + h * f  # norms, proj, qkv, fc1, fc2
    total = v * h + 2 * layer + h + v * h
    assert total == 78144
    padded = -(-total // 128) * 128  # every size is a multiple of 64: only the bucket end pads, to lcm(1, 128)
    n_params = 1 + 2 * 6 + 1 + 1  # embedding, six per layer, final norm, output layer
    expected = {"params": 4 * padded, "grad_buffers": 4 * padded, "optimizer": 8 * total + 4 * n_params}
    expected["total"] = sum(expected.values())
    assert ml.states(ml.Dims.from_hf(LLAMA), 1, 1, 1, 0, 0, bf16=False) == expected


def test_bf16_norms_stay_fp32():
    """torch norms are built without a dtype (transformer/torch_norm.py:51): their own FP32 buffer, no main copy."""
    d = ml.Dims.from_hf(LLAMA)
    bufs = ml.ddp_buffers(ml.weights(d, 1, 1, 0), 1, True, bf16=True)
    fp32 = [b for b in bufs if b.fp32_params]
    assert len(bufs) == 2 and sum(w.numel for w, _, _ in fp32[0].ranges) == 5 * 64  # 2 per layer + final
    assert fp32[0].numel == 384  # 320 elements, each start at a multiple of 64, the end at 128


def test_dp_shards_split_the_buffer():
    d = ml.Dims.from_hf(LLAMA)
    ranks = [ml.states(d, 1, 1, 2, 0, r, bf16=False) for r in range(2)]
    whole = ml.states(d, 1, 1, 1, 0, 0, bf16=False)
    moments = [r["optimizer"] for r in ranks]
    # the two shards' moments add up to the whole; a parameter cut by the boundary has a step in both
    assert sum(moments) - whole["optimizer"] in (0, 4)
    assert all(r["params"] == whole["params"] and r["grad_buffers"] == whole["grad_buffers"] for r in ranks)


def test_layer_saved_terms():
    d = ml.Dims.from_hf(LLAMA)
    terms = dict(ml.layer_saved(d, 1, 1, 32, bf16=False))
    assert terms["FP32 softmax output"] == 1 * 4 * 32 * 32 * 4 and terms["causal mask [s, s] (bool)"] == 32 * 32
    assert ml.layer_saved(d, 1, 1, 32, bf16=False, recompute="full") == []
    with pytest.raises(SymmemError, match="MoE"):
        ml.layer_saved(ml.Dims.from_hf(MOE), 1, 1, 32, bf16=True)
    moe = dict(ml.layer_saved(ml.Dims.from_hf(MOE), 1, 1, 32, bf16=False))
    assert moe["permuted tokens"] == 32 * 2 * 64 * 4  # tokens x top-k rows of h, however they are routed


LLAMA4 = {**LLAMA, "num_hidden_layers": 4}


def test_interleaved_chunks_by_hand():
    """PP 2 x 2 chunks of 4 layers: stage 0 builds layers 1 and 3, stage 1 layers 2 and 4 (Megatron's numbering,
    transformer/transformer_layer.py:169-176); the embedding is in stage 0's first chunk, the output layer in stage
    1's last; each chunk's DDP buffer is padded on its own."""
    d = ml.Dims.from_hf(LLAMA4)
    assert [list(ml.chunk_layers(d, 2, r, 2, c)) for r in (0, 1) for c in (0, 1)] == [[0], [2], [1], [3]]
    assert list(ml.saved_per_layer(d, 1, 2, 1, 1, 32, False, vpp=2)) == ["layer 2", "layer 4"]
    names = [[w.name for w in ml.weights(d, 1, 2, r, vpp=2, chunk=c)] for r in (0, 1) for c in (0, 1)]
    assert names[0][0].startswith("embedding") and not any(n.startswith("embedding") for n in sum(names[1:], []))
    assert names[3][-1] == "output_layer.weight" and not any(n == "output_layer.weight" for n in sum(names[:3], []))
    assert len(ml.rank_buffers(d, 1, 2, 1, 0, True, False, vpp=2)) == 2


@pytest.fixture
def path(tmp_path):
    def write(raw):
        p = tmp_path / f"{raw['model_type']}.json"
        p.write_text(json.dumps(raw))
        return str(p)

    return write


@pytest.mark.parametrize("argv, message", [
    (["--ep", "2"], "expert parallelism > 1 is not predicted"),
    (["--tp", "3"], "must divide by --tp = 3"),
    (["--pp", "4"], "must divide by --pp = 4"),
    (["--dtype", "fp16"], "invalid choice"),
    (["--chunks", "2"], "virtual pipeline stages need --pp > 1"),
    (["--pp", "2", "--chunks", "2"], "must divide by --pp x --chunks = 4"),
])
def test_refused(path, argv, message):
    with pytest.raises(SymmemError, match=message):
        _run(["--framework", "megatron-core", "--config", path(LLAMA), "-b", "1", "-s", "32", *argv])


def test_interleaved_microbatches_refused(path):
    with pytest.raises(SymmemError, match="must be a multiple of --pp = 2"):
        _run(["--framework", "megatron-core", "--config", path(LLAMA4), "--pp", "2", "--chunks", "2",
              "--microbatches", "3"])


def test_megatron_flags_need_the_framework(path):
    with pytest.raises(SymmemError, match="--tp: only with --framework megatron-core"):
        _run(["--config", path(LLAMA), "--tp", "2"])


def test_missing_extra(monkeypatch, path):
    import builtins

    real = builtins.__import__

    def no_megatron(name, *args, **kwargs):
        if name.startswith("megatron"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_megatron)
    with pytest.raises(SymmemError, match="megatron-core not installed"):
        _run(["--framework", "megatron-core", "--config", path(LLAMA), "-b", "1", "-s", "32"])


# ------------------------------------------------------------------------------------------------ real runs
MATRIX = {
    "dense-tp1": (LLAMA, []),
    "dense-tp2": (LLAMA, ["--tp", "2"]),
    "dense-pp2-m4": (LLAMA, ["--pp", "2", "--microbatches", "4"]),
    "dense-dp2-distopt": (LLAMA, ["--dp", "2"]),
    "dense-selective": (LLAMA, ["--recompute", "selective"]),
    "dense-full": (LLAMA, ["--recompute", "full"]),
    "dense-bf16": (LLAMA, ["--dtype", "bf16"]),
    "gpt-tp1": (GPT2, []),
    "moe-ep1": (MOE, []),
    "moe-b2-s16": (MOE, ["-b", "2", "-s", "16"]),
    "moe-dp2-bf16": (MOE, ["--dp", "2", "--dtype", "bf16"]),
    "qwen3-tp1": (QWEN3, []),
    "qwen3-tp2": (QWEN3, ["--tp", "2"]),  # one key/value group per rank: the query stays a view
    "qwen3-bf16": (QWEN3, ["--dtype", "bf16"]),
    "mixtral-ep1": (MIXTRAL, []),
    "mixtral-b2-s16": (MIXTRAL, ["-b", "2", "-s", "16"]),
    "head-tp1-b4-m2": (WIDE_VOCAB, ["-b", "4", "--microbatches", "2"]),
    "head-tp2-selective-b4": (WIDE_VOCAB, ["--tp", "2", "--recompute", "selective", "-b", "4"]),
    "loss-tp2-bf16-b4": (WIDE_VOCAB, ["--tp", "2", "--dtype", "bf16", "-b", "4"]),
    "attn-dp2-b2-s96": (LLAMA, ["--dp", "2", "-b", "2", "-s", "96"]),
    "norm-narrow-vocab-b4": (NARROW_VOCAB, ["-b", "4"]),
}
# where these peak (the others: the optimizer step)
EVENTS = {"head-tp1-b4-m2": ("mm.default", "backward, the output layer's weight gradient"),
          "head-tp2-selective-b4": ("mm.default", "backward, the output layer's weight gradient"),
          "loss-tp2-bf16-b4": ("clone.default", "forward, the cross-entropy's copy of the target logits"),
          "attn-dp2-b2-s96": ("masked_fill.Scalar", "backward, the last layer's attention-mask gradient"),
          "norm-narrow-vocab-b4": ("mul.Tensor", "backward, the final norm's gradient")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    cache: dict = {}

    def get(case, fresh: bool = False):
        if fresh or case not in cache:
            raw, argv = MATRIX[case]
            p = tmp_path_factory.mktemp(case) / "config.json"
            p.write_text(json.dumps(raw))
            import contextlib
            import io

            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = _run(["--framework", "megatron-core", "--config", str(p), "-b", "1", "-s", "32", "--json",
                             *argv])  # a later -b / -s in argv wins
            cache[case] = (code, json.loads(out.getvalue()))
        return cache[case]

    return get


@pytest.mark.megatron
@pytest.mark.parametrize("case", list(MATRIX))
def test_states_equal_per_rank(runs, case):
    _code, out = runs(case)
    world = 1
    for flag in ("tp", "pp", "dp"):
        world *= out[flag]
    assert [r["rank"] for r in out["ranks"]] == list(range(world))
    for r in out["ranks"]:
        m, p = r["measured"], r["predicted"]
        assert isinstance(m["states"], int) and m["states"] > 0
        assert m["states_by_kind"] == p["states_by_kind"], r["rank"]


@pytest.mark.megatron
@pytest.mark.parametrize("case", [c for c in MATRIX if c != "moe-dp2-bf16"])  # MoE saved: FP32 only
def test_saved_per_layer_equal_per_rank(runs, case):
    _code, out = runs(case)
    for r in out["ranks"]:
        m, p = r["measured"], r["predicted"]
        assert m["saved_per_layer"] == p["saved_per_layer"], r["rank"]
        expect_zero = out["recompute"] == "full"
        assert all((v == 0) == expect_zero for v in m["saved_per_layer"].values())


@pytest.mark.megatron
@pytest.mark.parametrize("case", [c for c in MATRIX if c != "moe-dp2-bf16"])
def test_peak_equal_and_exit_0(runs, case):
    """The peak too, on every rank, and the command exits 0 (EQUAL), at the event predicted: the optimizer step
    (MoE at EP 1: the experts are stepped by the dense optimizer, and the dispatchers' routing tensors outlive the
    iteration), or for the wide-vocabulary runs the output layer's weight-gradient GEMM in backward (FP32) or the
    cross-entropy's forward (BF16), at s = 96 the last layer's attention-mask gradient in backward, and with a
    vocabulary narrower than h the final norm's backward."""
    code, out = runs(case)
    for _fresh in range(2):
        if all(r["measured"]["peak"] == r["predicted"]["peak"] for r in out["ranks"]):
            break
        # Beside a busy process the measured peak has come out above the prediction now and then (the BF16 loss run
        # 20,864 bytes at the cross-entropy, dense-dp2-distopt 4 bytes in its optimizer step; dense-pp2-m4 4 bytes
        # on rank 1 in a run and in its fresh run, in CI), never below, with Python's collector off: a transient
        # that gloo's threads hold or not at that boundary. Above is allowed, twice at most, then a fresh run must
        # be equal.
        assert all(r["measured"]["peak"] >= r["predicted"]["peak"] for r in out["ranks"]), out["ranks"]
        code, out = runs(case, fresh=True)
    for r in out["ranks"]:
        m, p = r["measured"], r["predicted"]
        assert isinstance(m["peak"], int) and m["peak"] == p["peak"], (case, r["rank"])  # the bytes first
        if case in EVENTS:
            op, at = EVENTS[case]
            # the BF16 loss run reaches the same maximum at the FP32 cast of the logits (cross_entropy.py:28,
            # _to_copy), at the target logits' copy (clone) or at the max over the vocabulary that follows the cast
            # (max.dim): which boundary is reached first varied in full runs beside a busy process (at _to_copy, and
            # once at max.dim while another test suite ran; that run stopped at this check, so its bytes are unknown:
            # they are asserted above now)
            ops = {op, "_to_copy.default", "max.dim"} if case == "loss-tp2-bf16-b4" else {op}
            assert m["peak_phase"] == "forward-backward" and m["peak_op"] in ops and p["peak_at"] == at
        else:
            assert m["peak_phase"] == "optimizer step" and p["peak_at"].startswith("optimizer step")
    assert code == 0 and out["match"]


@pytest.mark.megatron
def test_moe_bf16_peak_equal_saved_not_modelled(runs):
    """MoE in BF16 (the router cast to BF16, router.py:72; DP 2 shards the experts with the dense optimizer): the
    peak and states equal on both ranks; its saved bytes have no prediction, so the command says DIFFERENT."""
    code, out = runs("moe-dp2-bf16")
    assert code == 1 and not out["match"]
    for r in out["ranks"]:
        assert r["match"]["peak"] and r["match"]["states"] and not r["match"]["saved"]
        assert r["predicted"]["saved_per_layer"] is None
        assert any("saved tensors of Megatron's MoE layer" in n for n in r["predicted"]["not_modelled"])


def test_moe_peak_not_modelled_at_tp2():
    """With MoE at TP > 1 the dispatcher keeps split sizes that are not measured: no prediction, not a guess."""
    d = ml.Dims.from_hf(MOE)
    assert mp.peak(d, 2, 1, 1, 0, 0, 1, 32, False, 1)[0] is None
    assert mp.step_peak(d, 1, 1, 1, 0, 0, 1, 32, False, 1) is not None


@pytest.mark.megatron
def test_interleaved_states_saved_equal_first_stage_peak_not_modelled(tmp_path):
    """Megatron's interleaved schedule, PP 2 x 2 chunks, M = 4 (not in MATRIX: the command says DIFFERENT). States
    and saved bytes per layer equal on both ranks, and the peak of stage 1, the optimizer step; stage 0 peaks in
    the forward-backward with the warm-up's micro-batches of both chunks in flight, not modelled (the prediction
    is its optimizer step's, lower)."""
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    import contextlib
    import io

    p = tmp_path / "config.json"
    p.write_text(json.dumps(LLAMA4))
    for _fresh in range(3):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = _run(["--framework", "megatron-core", "--config", str(p), "--pp", "2", "--chunks", "2",
                         "--microbatches", "4", "-b", "1", "-s", "32", "--json"])
        out = json.loads(buf.getvalue())
        last = out["ranks"][1]["measured"]
        if last["peak"] == out["ranks"][1]["predicted"]["peak"]:
            break
        # as in test_peak_equal_and_exit_0: under load the last stage's optimizer-step peak has come out 4 bytes
        # above (seen in CI and reproduced beside a busy process): the grad norm's pow scalar
        # ("optimizer step: pow.Tensor_Scalar", 4 bytes at the peak) still held by gloo's all-reduce when Adam's
        # division runs, never below; a fresh run must be equal
        assert last["peak"] >= out["ranks"][1]["predicted"]["peak"], out["ranks"][1]
    assert code == 1 and out["chunks"] == 2
    for r in out["ranks"]:
        m, pr = r["measured"], r["predicted"]
        assert m["states_by_kind"] == pr["states_by_kind"] and m["saved_per_layer"] == pr["saved_per_layer"]
    first, last = out["ranks"]
    assert sorted(first["measured"]["saved_per_layer"]) == ["layer 1", "layer 3"]
    assert last["measured"]["peak_phase"] == "optimizer step" and last["measured"]["peak"] == last["predicted"]["peak"]
    assert first["measured"]["peak_phase"] == "forward-backward"
    assert first["measured"]["peak"] > first["predicted"]["peak"]


@pytest.mark.megatron
def test_pipeline_ranks_hold_their_layers(runs):
    _code, out = runs("dense-pp2-m4")
    assert [sorted(r["measured"]["saved_per_layer"]) for r in out["ranks"]] == [["layer 1"], ["layer 2"]]


# ------------------------------------------------------------------------------------------------ the engine profile
def _engine(raw: dict, tp: int, b: int, s: int, act: str, tmp_path) -> tuple[int, int]:
    """`--profile megatron-local`: one layer's saved bytes (the engine's accounting) and the model states of the
    one stage (`symmem memory --json`: weights, gradients, optimizer, the DDP padding and Adam's step counters)."""
    import contextlib
    import io

    from symmem.accounting.analysis import stage_terms, to_int, values
    from symmem.cli.main import main
    from symmem.config import from_dict
    from symmem.parallel.layout import Stage
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import ACT_DTYPES, Scenario

    scn = Scenario(name="megatron-local", model=from_dict(raw, "config"), parallel=Parallel(tp=tp), mtp=False, b=b,
                   s=s, rules_name="megatron-local", profile_name="megatron-local", act_bytes=ACT_DTYPES[act])
    vals = values(scn)
    layer = sum(to_int(t.total, vals) for t in stage_terms(scn, Stage(0, (0,), False, False, 0)))
    p = tmp_path / "config.json"
    p.write_text(json.dumps(raw))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["memory", "--model", str(p), "--tp", str(tp), "-b", str(b), "-s", str(s), "--profile",
                     "megatron-local", "--activation-dtype", act, "--json"]) == 0
    st = json.loads(out.getvalue())["stages"][0]
    extra = sum(n for k, n in st["framework_buffers"].items() if k.startswith(("DDP buffer padding", "Adam step")))
    return layer, st["weights"] + st["gradients"] + st["optimizer"] + extra


@pytest.mark.parametrize("raw, tp", [(LLAMA, 1), (LLAMA, 2), (WIDE_VOCAB, 1), (WIDE_VOCAB, 2)])
def test_profile_equals_the_rules(raw, tp, tmp_path):
    """The engine under `--profile megatron-local` (rule set symmem/rules/megatron_local_ops.py) derives each
    layer's saved bytes (FP32 and BF16 activations; GQA and not) and the FP32 model states the rule module gives."""
    d = ml.Dims.from_hf(raw)
    for act in ("fp32", "bf16"):
        layer, states = _engine(raw, tp, 2, 32, act, tmp_path)
        assert layer == sum(n for _, n in ml.layer_saved(d, tp, 2, 32, bf16=act == "bf16"))
    assert states == ml.states(d, tp, 1, 1, 0, 0, bf16=False)["total"]


@pytest.mark.megatron
@pytest.mark.parametrize("case", ["dense-tp1", "dense-tp2", "head-tp1-b4-m2"])
def test_profile_equals_the_measurement(runs, case, tmp_path):
    """And what Megatron-Core measured: each layer's saved bytes and the states, on every rank."""
    _code, out = runs(case)
    layer, states = _engine(MATRIX[case][0], out["tp"], out["b"], out["s"], "fp32", tmp_path)
    for r in out["ranks"]:
        assert set(r["measured"]["saved_per_layer"].values()) == {layer}
        assert r["measured"]["states"] == states


@pytest.mark.megatron
def test_bridge_hands_split_sizes_over_as_views():
    """EP > 1 needs the dispatcher's split sizes as NumPy (moe_utils.py:1093-1096 converts CUDA tensors only): the
    bridge returns a CPU tensor's own memory, allocating nothing, and restores Megatron's function after."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    import numpy as np
    from megatron.core.transformer.moe import token_dispatcher

    from symmem.validate.megatron_core.bridge import cpu_megatron

    original = token_dispatcher.maybe_move_tensor_to_cpu
    t = torch.tensor([39, 25])
    with cpu_megatron():
        out = token_dispatcher.maybe_move_tensor_to_cpu(t, as_numpy=True)
        kept = token_dispatcher.maybe_move_tensor_to_cpu(t)
    assert isinstance(out, np.ndarray) and np.shares_memory(out, t.numpy()) and kept is t
    assert token_dispatcher.maybe_move_tensor_to_cpu is original
