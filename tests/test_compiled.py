"""`--compile` (symmem/accounting/compiled.py): the minimum cut itself, the saved sets it gives, and the flag's
refusals. Held against torch.compile on the CPU in tests/validate/test_fsdp2_compile.py."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import random

import pytest

from symmem.accounting.compiled import INF, _source_side
from symmem.cli.main import main


def _cut_value(cap: dict, side: set) -> float:
    return sum(c for a, out in cap.items() for b, c in out.items() if a in side and b not in side)


@pytest.mark.parametrize("seed", range(40))
def test_source_side_is_a_minimum_cut(seed):
    """Edmonds-Karp's source side against every cut of a random graph (6 inner vertices, some infinite edges)."""
    rng = random.Random(seed)
    inner = [f"v{i}" for i in range(6)]
    names = ["source", *inner, "sink"]
    cap: dict[str, dict[str, float]] = {n: {} for n in names}
    for a, b in itertools.permutations(names, 2):
        if a != "sink" and b != "source" and rng.random() < 0.35:
            cap[a][b] = INF if rng.random() < 0.15 else float(rng.randint(1, 20))
    original = {a: dict(out) for a, out in cap.items()}
    best = min(_cut_value(original, {"source", *chosen}) for k in range(len(inner) + 1)
               for chosen in itertools.combinations(inner, k))
    if best == INF:
        with pytest.raises(Exception, match="neither be kept nor recomputed"):
            _source_side(cap)
        return
    side = _source_side(cap)
    assert "source" in side and "sink" not in side
    assert _cut_value(original, side) == best


def _memory(*flags: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["memory", "--model", "llama-3-8b", "-b", "2", "-s", "8192", "--dp", "8", *flags])
    return code, out.getvalue() if code == 0 else err.getvalue()


def _by_part(*flags: str) -> dict[str, int]:
    """Saved bytes a micro-batch, per part (a layer's for the layers), under profile torchtitan."""
    from symmem.accounting.analysis import stage_terms, values
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    argv = ["memory", "--model", "llama-3-8b", "-b", "2", "-s", "8192", "--dp", "8", "--profile", "torchtitan", *flags]
    scn = scenario_from_args(build_parser().parse_args(argv))
    vals, out = values(scn), {}
    for t in stage_terms(scn, scn.stages[0]):
        out[t.part] = out.get(t.part, 0) + ceil_int(evaluate(t.nbytes, vals))
    return out


BS = 2 * 8192  # tokens a micro-batch
# Llama-3-8B: h 4,096, KV width 1,024, FFN 14,336, 32 heads, vocabulary 128,256; BF16


def test_compiled_layer_keeps_what_the_partitioner_leaves():
    """By hand, without AC, a compiled layer keeps x, two norm outputs, q, SDPA's output and wo's output
    (6 x bs h x 2), k and v (2 x bs 1,024 x 2), w1's, w3's outputs and w2's input (3 x bs 14,336 x 2), two FP32 rstd
    (2 x bs x 4) and SDPA's FP32 logsumexp (32 x bs x 4); eager keeps more (the FP32 normalized inputs and silu's
    output). The compiled loss keeps the BF16 logits, the labels and two FP32 values a row (max and logsumexp)
    where eager keeps the FP32 log-probabilities."""
    layer = 6 * BS * 4096 * 2 + 2 * BS * 1024 * 2 + 3 * BS * 14336 * 2 + 2 * BS * 4 + 32 * BS * 4
    eager, compiled = _by_part("--recompute", "none"), _by_part("--recompute", "none", "--compile")
    assert compiled["dense layers"] == layer < eager["dense layers"]
    # the head: the eager final norm (FP32 input copy, rstd, FP32 normalized input) and lm_head's input, unchanged;
    # the loss: eager's FP32 log-probabilities, int64 targets and total_weight become the logits, labels, max, lse
    assert eager["head"] - compiled["head"] == (BS * 128256 * 4 + BS * 8 + 4) - (BS * 128256 * 2 + BS * 8 + 2 * BS * 4)


def test_compiled_per_op_ac_drops_what_the_backward_does_not_read():
    """Per-op AC: eager caches the outputs of wqkv, w1 and w2 (the 1st, 3rd, 5th products) and SDPA's (on a GPU);
    compiled, w2's output is dead in the backward and not kept; SDPA is saved, not run again, so no generator state
    is kept. Under full AC the flash SDPA runs again: the layer's input and CUDA's generator state (16 B)."""
    eager, compiled = _by_part("--recompute", "selective-op"), _by_part("--recompute", "selective-op", "--compile")
    assert eager["dense layers"] - compiled["dense layers"] == BS * 4096 * 2
    full = _by_part("--recompute", "full", "--compile")
    assert full["dense layers"] == BS * 4096 * 2 + 16


def test_compiled_layer_under_tp_by_hand():
    """TP 2 with sequence parallelism, no AC: the column-parallel products read their inputs all-gathered (a
    collective, off the allowlist), so each norm's output is kept whole rather than its rows' shard; the rest at
    one GPU's share: x, the rstds and wo's reduce-scattered output on s/2 rows, q, k, v, SDPA's output and
    logsumexp at half the heads, w1's, w3's outputs and w2's input at half the FFN (held against torch.compile on
    the CPU at the tiny sizes: tests/validate/test_fsdp2_compile.py)."""
    layer = _by_part("--tp", "2", "--dp", "4", "--recompute", "none", "--compile")["dense layers"]
    per_token = (4096 * 2 // 2 + 2 * 4 // 2 + 2 * 4096 * 2 + 2048 * 2 + 2 * 512 * 2 + 2048 * 2 + 16 * 4
                 + 4096 * 2 // 2 + 3 * 7168 * 2)
    assert layer == BS * per_token


@pytest.mark.parametrize("flags, words", [
    (["--profile", "megatron-te", "--compile"], "--compile: torchtitan's torch.compile is modelled"),
    (["--profile", "torchtitan", "--tp", "2", "--recompute", "full", "--compile"],
     "--recompute full with --compile --tp 2: torch 2.13's checkpoint fails under torch.compile with DTensor's TP"),
    (["--profile", "torchtitan", "--tp", "2", "--recompute", "none", "--precision", "torchao-float8-tensorwise",
      "--compile"], "--tp 2 with --compile: modelled in BF16 (measured); Float8 under TP and compile is not"),
    (["--profile", "torchtitan", "--precision", "torchao-float8-rowwise", "--compile"],
     "--precision torchao-float8-rowwise with --compile"),
    (["--profile", "torchtitan", "--precision", "torchao-float8-tensorwise", "--enable-fsdp-float8-all-gather",
      "--compile", "--recompute", "none"],
     "--enable-fsdp-float8-all-gather with --compile --recompute none: FSDP2's float8 all-gather under "
     "torch.compile is modelled where every layer is checkpointed"),
])
def test_compile_refusals(flags, words):
    code, err = _memory(*flags)
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_the_page_refuses_compile(tmp_path):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main(["html", "--model", "llama-3-8b", "--profile", "torchtitan", "--compile", "-o",
                     str(tmp_path / "p.html")]) == 2
    assert "--compile: torch.compile is not modelled by the page" in err.getvalue()
    assert not (tmp_path / "p.html").exists()


def _json(argv) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0, argv
    return json.loads(out.getvalue())


@pytest.mark.parametrize("profile, flags", [
    ("torchtitan", []),
    ("torchtitan-2506", ["--precision", "torchao-float8-tensorwise", "--enable-fsdp-float8-all-gather"]),
])
def test_the_sweep_under_compile_builds_each_configuration_as_memory_does(profile, flags):
    """`symmem sweep --compile` under a torchtitan profile: each configuration that fits is `symmem memory
    --compile`'s (peak, replayed reserved, time); the default policies are torchtitan's modes (none, per-op,
    full), and the float8 all-gather's configurations without checkpointing are rejected with the reason, not the
    sweep."""
    common = ["--model", "llama-3-8b", "-s", "4096", "--profile", profile, "--compile", "--gpu", "H100", *flags]
    d = _json(["sweep", *common, "--gpus", "8", "--tp", "1", "--pp", "1", "-b", "1,2", "--top", "0", "--json",
               "--rejected"])
    rows = d["ranked"]
    assert {r["recompute"] for r in rows} == ({"selective-op", "full"} if flags else {"none", "selective-op", "full"})
    if flags:
        assert any(x["reason"].startswith("--enable-fsdp-float8-all-gather with --compile --recompute none:")
                   for x in d["rejected"]), d["rejected"]
    for r in rows:
        m = _json(["memory", *common, "--dp", str(r["dp"]), "-b", str(r["b"]), "--recompute", r["recompute"],
                   "--json"])
        st = m["stages"][0]
        assert (st["peak_allocated"], st["reserved"]) == (r["peak_allocated"], r["reserved"]), r
        assert m["step"]["time_s"] == pytest.approx(r["time_s"], rel=1e-12)


def test_compiled_float8_layer_recomputes_the_products_inputs():
    """torchao's tensorwise Float8 linears, compiled: the backward recasts each input from high precision through
    pointwise ops and a reduction, so no input of a product is materialized in the backward: the norms' outputs and
    w2's input are recomputed, not kept (bs h x 2 x 2 + bs 14,336 x 2 less than BF16), and each Float8 module keeps
    its weight's amax (BF16) and the reciprocal of its scale (FP32): 5 modules (wqkv, wo, w1, w3, w2) x 6 bytes
    more; q, k and v are one module here too (torchtitan's wqkv)."""
    bf16 = _by_part("--recompute", "none", "--compile")["dense layers"]
    f8 = _by_part("--recompute", "none", "--compile", "--precision", "torchao-float8-tensorwise")["dense layers"]
    assert bf16 - f8 == 2 * BS * 4096 * 2 + BS * 14336 * 2 - 5 * 6


def test_the_replay_takes_compiled_float8_without_the_all_gather_only():
    from symmem.accounting.fsdp2_reserved import refusal
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    def scn(*flags):
        argv = ["memory", "--model", "llama-3-8b", "-b", "2", "-s", "8192", "--dp", "8", "--profile",
                "torchtitan-2412", "--precision", "torchao-float8-tensorwise", *flags]
        return scenario_from_args(build_parser().parse_args(argv))

    assert refusal(scn("--compile")) is None
    assert "Float8's copies and scales" in refusal(scn())  # eager: the casts' transients matter in the blocks


def test_the_replay_gathers_float8_weights_at_one_byte():
    """FSDP2's float8 all-gather under compile (per-op AC; torchtitan e7c0cae, Trainy's runs): a Llama 3 8B block's
    all-gather output over 32 ranks holds its seven Float8 weights at 1 byte an element (wq and wo 4096 x 4096, wk and
    wv 1024 x 4096, w1, w2 and w3 14336 x 4096) and its two norms' weights in BF16 (4096 x 2 bytes each); the root
    (embedding, final norm, output: none of them a Float8 linear in these runs) stays BF16. torchtitan 0.3.0's fused
    wqkv is one Float8 weight of 6144 x 4096, and its output (no FQN filtered) one too."""
    from symmem.accounting import fsdp2_reserved as F
    from symmem.accounting.analysis import values
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.model import stage_parts

    def scn(profile, *flags):
        argv = ["memory", "--model", "llama-3-8b", "-b", "2", "-s", "8192", "--dp", "32", "--profile", profile,
                "--precision", "torchao-float8-tensorwise", "--enable-fsdp-float8-all-gather", "--compile",
                "--recompute", "selective-op", *flags]
        return scenario_from_args(build_parser().parse_args(argv))

    s = scn("torchtitan-2506")
    assert F.refusal(s) is None
    parts = stage_parts(s.model, s.stages[0], s.convention, s.flow_impl)
    root, blocks, _ = F._groups(s, parts, values(s), 32)
    float8 = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096
    assert all(b.padded_bytes(32, 2) == float8 + 2 * 4096 * 2 for b in blocks)
    assert root.padded_bytes(32, 2) == 2 * root.padded(32)
    # each parameter's unsharded copy-out: wq at 1 byte an element, a norm's weight at 2
    unsharded = {name.rsplit(".", 1)[-1]: blocks[0].gathered_bytes(name, shard * 32, 2)
                 for name, shard, *_ in blocks[0].params}
    assert unsharded["q_proj"] == 4096 * 4096 and unsharded["input_layernorm"] == 4096 * 2
    assert sum(unsharded.values()) == blocks[0].padded_bytes(32, 2)  # the copy-out fills the all-gather's buffer
    s = scn("torchtitan")
    assert F.refusal(s) is None
    parts = stage_parts(s.model, s.stages[0], s.convention, s.flow_impl)
    root, blocks, _ = F._groups(s, parts, values(s), 32)
    assert all(b.padded_bytes(32, 2) == float8 + 2 * 4096 * 2 for b in blocks)  # wqkv: (4096 + 2 x 1024) x 4096
    assert root.padded_bytes(32, 2) == 2 * root.padded(32) - 128256 * 4096  # lm_head at 1 byte, not 2


def test_float8_all_gather_under_compile_takes_any_policy_that_checkpoints_every_layer():
    """selective-layer:1 checkpoints every block, as full does: the same figures; selective-layer:2 leaves half the
    blocks without AC, and is refused in one line."""
    flags = ["--model", "llama-3-8b", "-b", "2", "-s", "8192", "--dp", "32", "--profile", "torchtitan-2506",
             "--compile", "--precision", "torchao-float8-tensorwise", "--enable-fsdp-float8-all-gather", "--json"]
    every, full = (_json(["memory", *flags, "--recompute", r])["stages"][0] for r in ("selective-layer:1", "full"))
    assert (every["peak_allocated"], every["reserved"]) == (full["peak_allocated"], full["reserved"])
    code, err = _memory("--profile", "torchtitan-2506", "--compile", "--precision", "torchao-float8-tensorwise",
                        "--enable-fsdp-float8-all-gather", "--recompute", "selective-layer:2")
    assert code == 2 and "--recompute selective-layer:2: FSDP2's float8 all-gather" in err and err.count("\n") == 1
