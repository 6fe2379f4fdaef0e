"""torchtitan 0.3.0's Llama 3 under PP 2 x FSDP2 (and x TP 2) on the CPU (torch.distributed.pipelining over gloo,
2 and 4 processes): what pipelining adds, measured against the `torchtitan-cpu` profile's prediction to the byte,
and the whole step's most against its timeline. Marked `fsdp2`; skips without torch.distributed.fsdp or
torchtitan.

To the byte, per rank: during every micro-batch's backward but the last, the stage's unsharded BF16 parameters
(every block kept gathered) and its FP32 gradients accumulated unsharded, with no sharded gradient made yet, and
the stage outputs kept for the micro-batches still to run backward; the receive buffers of every micro-batch; the
model states after the step. The whole peak: within 5 % of the prediction (the activations' timeline is the
engine's, not the CPU step's order; docs/torchtitan.md)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch.distributed.fsdp", reason="torch.distributed.fsdp missing: pip install -e '.[torchtitan]'")
pytest.importorskip("torchtitan.distributed.pipeline_parallel",
                    reason="torchtitan missing: pip install -e '.[torchtitan]'")

from symmem.cli.main import main  # noqa: E402
from symmem.validate.fsdp2.pipeline import compare, expected, run  # noqa: E402
from symmem.validate.fsdp2.runner import Settings  # noqa: E402

pytestmark = pytest.mark.fsdp2

M = 4
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 256,
          "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 256,
          "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
          "tie_word_embeddings": False, "hidden_act": "silu"}


def _flags(dp: int, tp: int, schedule: str) -> list[str]:
    return ["--profile", "torchtitan-cpu", "--pp", "2", "--dp", str(dp), "--tp", str(tp), "-b", "1", "-s", "32",
            "--microbatches", str(M), "--schedule", schedule.lower()]


def _config(tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return str(path)


def _predicted(tmp_path, capsys, dp: int, tp: int, schedule: str) -> list[dict]:
    assert main(["memory", "--model", _config(tmp_path), *_flags(dp, tp, schedule), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["stages"]


@pytest.mark.parametrize("dp, tp, schedule", [(1, 1, "1F1B"), (2, 1, "1F1B"), (2, 1, "GPipe"), (1, 2, "1F1B")])
def test_pipelined_fsdp2_against_the_profile(tmp_path, capsys, dp, tp, schedule):
    st = Settings(dim=64, n_layers=4, n_heads=4, n_kv_heads=2, vocab=256, ffn_hidden=256, max_seq_len=64,
                  world=2 * dp * tp, tp=tp, b=1, s=32)
    measured = run(st, 2, M, schedule)
    predicted = _predicted(tmp_path, capsys, dp, tp, schedule)
    _compared(measured, ["memory", "--model", _config(tmp_path), *_flags(dp, tp, schedule)])
    for r in measured:
        p = predicted[r["stage"]]
        br = p["peak_breakdown"]
        # torchtitan's split: 2 + 2 blocks, the embedding on stage 0, the norm and output on stage 1
        params = r["stage_params"]
        assert params == (256 * 64 + 2 * 61_568, 2 * 61_568 + 64 + 256 * 64)[r["stage"]]
        # every non-last backward of both steps (M - 1 each): the whole stage gathered (TP's local shards), every
        # gradient accumulated in FP32, no sharded gradient
        assert len(r["during_backward"]) == 2 * (M - 1)
        gathered = br["gathered parameters (ZeRO-3)"]
        assert gathered == 2 * params if tp == 1 else gathered < 2 * params
        for seen in r["during_backward"]:
            assert seen["unsharded_params"] == gathered
            assert seen["accumulated_grads"] == 2 * gathered
            assert not seen["sharded_grads_exist"]
        assert _whole(tmp_path, dp, tp, schedule, r["stage"]) == {2 * gathered}
        _buffers_states_peak(r, p, tp)
        # the stage outputs kept in fwd_cache: stage 0's hidden states [1, 32 / TP, 64], stage 1's logits
        # [1, 32, 256 / TP] (loss parallelism), in BF16, one per micro-batch still to run backward
        _cached_outputs(r, schedule.lower(), 2 * (32 * 64 if r["stage"] == 0 else 32 * 256) // tp, p)


def _buffers_states_peak(r: dict, p: dict, tp: int) -> None:
    """A rank's receive buffers (a [b, s / TP, h] BF16 buffer per micro-batch: under TP the local shard of the
    DTensor sent) and states to the byte, its peak within 5 %."""
    kind = "gradients" if r["stage"] == 0 else "activations"
    one = 32 // tp * 64 * 2
    assert r["recv_buffers"] == {kind: M * one, ("activations" if kind == "gradients" else "gradients"): 0}
    assert p["framework_buffers"][f"pipeline receive buffers, {kind} ({M} micro-batches)"] == M * one
    # after the step (zero_grad: no gradient): the sharded parameters and AdamW's moments and steps
    assert r["states"] == p["weights"] + p["optimizer"]
    assert abs(p["peak_allocated"] - r["peak"]) <= 0.05 * r["peak"], (r["stage"], r["peak"], p["peak_allocated"])


def test_deepseek_v3_pipelined_against_the_profile(tmp_path, capsys):
    """torchtitan's DeepSeek-V3 (1 dense and 2 MoE blocks of 4 experts, MLA) under PP 2, 1F1B: torchtitan's split
    puts the dense block and the first MoE block on stage 0, the second MoE block and the output on stage 1."""
    from symmem.validate.fsdp2.predict import deepseek_v3_config
    from symmem.validate.fsdp2.runner import MoESettings

    st = Settings(dim=64, n_layers=3, n_heads=4, vocab=256, family="deepseek_v3", moe=MoESettings(), world=2, b=1,
                  s=32)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(deepseek_v3_config(st)))
    assert main(["memory", "--model", str(path), "--profile", "torchtitan-cpu", "--no-mtp", "--pp", "2", "-b", "1",
                 "-s", "32", "--microbatches", str(M), "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["stages"]
    measured = run(st, 2, M, "1F1B")
    _compared(measured, ["memory", "--model", str(path), "--profile", "torchtitan-cpu", "--no-mtp", "--pp", "2", "-b",
                         "1", "-s", "32", "--microbatches", str(M)])
    for r in measured:
        p = predicted[r["stage"]]
        gathered = p["peak_breakdown"]["gathered parameters (ZeRO-3)"]
        assert gathered == 2 * r["stage_params"]
        for seen in r["during_backward"]:
            assert (seen["unsharded_params"], seen["accumulated_grads"]) == (gathered, 2 * gathered)
            assert not seen["sharded_grads_exist"]
        _buffers_states_peak(r, p, 1)
        _cached_outputs(r, "1f1b", 2 * 32 * (64 if r["stage"] == 0 else 256), p)


def _compared(measured: list[dict], argv: list[str]) -> None:
    """`symmem measure --framework fsdp2 --pp`'s comparison (`pipeline.expected`, `compare`): every quantity equal."""
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    scn = scenario_from_args(build_parser().parse_args(argv))
    for r in measured:
        assert all(compare(r, expected(scn, r["stage"])).values()), compare(r, expected(scn, r["stage"]))


def _cached_outputs(r: dict, schedule: str, one: int, p: dict) -> None:
    """After every non-last backward, the stage outputs in fwd_cache, to the byte: `one` for each micro-batch of the
    rank's stages whose forward is done and backward not begun, in symmem's order of the schedule; and the
    prediction's peak holds whole micro-batches' outputs."""
    from symmem.parallel.schedule import Schedule

    name, _, v = schedule.partition(":")
    sched = Schedule(name, int(v) if v else 1)
    expected = []
    for _step in (1, 2):
        started, done = {}, {}
        for phase, _mb, c in sched.order(r["stage"], 2, M, "torch"):
            (started if phase == "F" else done)[c] = (started if phase == "F" else done).get(c, 0) + 1
            if phase == "B" and done[c] < M:
                expected.append(one * sum(started.get(k, 0) - done.get(k, 0) for k in started))
    assert [seen["cached_outputs"] for seen in r["during_backward"]] == expected
    held = p["peak_breakdown"].get("pipeline stage outputs kept for backward", 0)
    assert held > 0 and held % one == 0, (held, one)


def _whole(tmp_path, dp: int, tp: int, schedule: str, stage: int) -> set[int]:
    """The bytes of the stage's every-gradient-accumulated amounts over its events (`symmem memory`'s scenario)."""
    from symmem.accounting.analysis import stage_timeline_events, values
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    scn = scenario_from_args(build_parser().parse_args(["memory", "--model", _config(tmp_path),
                                                        *_flags(dp, tp, schedule)]))
    vals = values(scn)
    return {ceil_int(evaluate(a.nbytes, vals)) for ev in stage_timeline_events(scn, scn.stages[stage])
            for a in ev.amounts if a.what.startswith("the stage's gradients, accumulated unsharded")}


def test_interleaved_1f1b_against_the_profile(tmp_path, capsys):
    """torchtitan's Interleaved1F1B: PP 2 x FSDP 2, two stages per rank (torchtitan's default), a six-layer Llama
    split into stages of 1 (and the embedding), 2, 2 and 1 (and the norm and output) layers, rank r running stages
    r and r + 2. After every backward but a chunk's last, chunk by chunk, to the byte: its BF16 parameters
    gathered until its last backward, its FP32 gradients accumulated unsharded from its first, its sharded
    gradients from its last on, in the order symmem derives for torch (`Schedule.order`, runtime "torch"); the
    receive buffers of every stage and micro-batch; the states; the whole peak within 5 %."""
    from symmem.parallel.schedule import Schedule

    st = Settings(dim=64, n_layers=6, n_heads=4, n_kv_heads=2, vocab=256, ffn_hidden=256, max_seq_len=64, world=4,
                  b=1, s=32)
    measured = run(st, 2, M, "Interleaved1F1B")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, "num_hidden_layers": 6}))
    assert main(["memory", "--model", str(path), "--profile", "torchtitan-cpu", "--pp", "2", "--dp", "2", "-b", "1",
                 "-s", "32", "--microbatches", str(M), "--schedule", "interleaved:2", "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["stages"]
    _compared(measured, ["memory", "--model", str(path), "--profile", "torchtitan-cpu", "--pp", "2", "--dp", "2", "-b",
                         "1", "-s", "32", "--microbatches", str(M), "--schedule", "interleaved:2"])
    layer, embedding, head = 61_568, 256 * 64, 64 + 256 * 64
    for r in measured:
        p = predicted[r["stage"]]
        chunks = r["chunk_params"]
        assert chunks == [[embedding + layer, 2 * layer], [2 * layer, layer + head]][r["stage"]]
        assert p["peak_breakdown"]["gathered parameters (ZeRO-3)"] == 2 * sum(chunks)  # both chunks, at the peak
        expected = []
        for _step in (1, 2):
            done = [0, 0]  # each chunk's backwards so far this step
            for phase, _mb, c in Schedule("interleaved", 2).order(r["stage"], 2, M, "torch"):
                if phase == "F":
                    continue
                done[c] += 1
                if done[c] == M:
                    continue
                expected.append([{"unsharded_params": 0 if done[k] == M else 2 * n,
                                  "accumulated_grads": 4 * n if 0 < done[k] < M else 0,
                                  "sharded_grads_exist": done[k] == M, "param_dtype_grads": 0}
                                 for k, n in enumerate(chunks)])
        assert [seen["per_chunk"] for seen in r["during_backward"]] == expected
        # the stage outputs kept in fwd_cache: hidden states [1, 32, 64] but on the model's last stage (rank 1's
        # chunk 1), whose logits are [1, 32, 256]; the expected count per chunk
        _cached_outputs_chunks(r, chunks_out=[2 * 32 * 64, 2 * 32 * (64 if r["stage"] == 0 else 256)])
        kinds = {"activations": 2 - (r["stage"] == 0), "gradients": 2 - (r["stage"] == 1)}
        assert r["recv_buffers"] == {kind: n * M * 32 * 64 * 2 for kind, n in kinds.items()}
        assert sum(v for k, v in p["framework_buffers"].items() if k.startswith("pipeline receive")) == \
            sum(r["recv_buffers"].values())
        assert r["states"] == p["weights"] + p["optimizer"]
        assert abs(p["peak_allocated"] - r["peak"]) <= 0.05 * r["peak"], (r["stage"], r["peak"], p["peak_allocated"])


def _cached_outputs_chunks(r: dict, chunks_out: list[int]) -> None:
    """`_cached_outputs` for a rank running two chunks of different outputs (interleaved 1F1B)."""
    from symmem.parallel.schedule import Schedule

    expected = []
    for _step in (1, 2):
        started, done = [0, 0], [0, 0]
        for phase, _mb, c in Schedule("interleaved", 2).order(r["stage"], 2, M, "torch"):
            (started if phase == "F" else done)[c] += 1
            if phase == "B" and done[c] < M:
                expected.append(sum((started[k] - done[k]) * chunks_out[k] for k in (0, 1)))
    assert [seen["cached_outputs"] for seen in r["during_backward"]] == expected


def test_measure_command_under_pp(tmp_path, capsys):
    """`symmem measure --framework fsdp2 --pp 2`: the pipeline runner against `pipeline.expected`, every byte-exact
    quantity EQUAL on both ranks (exit 0), the peak beside."""
    path = _config(tmp_path)
    assert main(["measure", "--framework", "fsdp2", "--config", path, "--pp", "2", "--dp", "1", "-b", "1", "-s", "32",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] and [r["stage"] for r in out["ranks"]] == [0, 1]
    for r in out["ranks"]:
        assert all(r["equal"].values()) and r["measured"]["backwards"] == 2 * (M - 1)
        assert abs(r["predicted"]["peak"] - r["measured"]["peak"]) <= 0.05 * r["measured"]["peak"]


@pytest.mark.parametrize("schedule, spelled, interior", [
    ("InterleavedZeroBubble", "interleaved-zb:2", {0: 2, 1: 1}),  # rank r runs stages r and r + 2
    ("ZBVZeroBubble", "zbv", {1: 2}),  # rank r runs stages r and 3 - r: rank 0 the first and the last
    ("DualPipeV", "dualpipev", {1: 2}),  # the same split; whole backwards ("full") beside input and weight ones
])
def test_zero_bubble_leaves_each_weight_backwards_gradients_in_bf16_until_the_next_input_backward(
        tmp_path, capsys, schedule, spelled, interior):
    """torch's zero bubbles over FSDP2 (torchtitan's InterleavedZeroBubble, ZBVZeroBubble and DualPipeV), PP 2 x
    FSDP 2, M 4, the six-layer split of the interleaved test, held as facts derived from the source:

    * FSDP2's post-backward hook fires when the gradient reaches a unit's inputs
      (_fully_shard/_fsdp_state.py `_register_post_backward_hook`), which under zero bubble is the input backward
      (I, pipelining/_backward.py:177-279 `stage_backward_input`), before any weight gradient exists;
    * the weight backward (W, :281-340) then leaves each gradient on the unsharded parameter in BF16 (2 bytes per
      parameter of the chunk), and nothing moves it until the chunk's next I, whose post-backward upcasts it into
      the FP32 accumulation (_fsdp_param.py:802-821, 4 bytes per parameter) and frees it;
    * so after a W that follows an upcast it holds both, 6 bytes per parameter, where 1F1B's full backward holds
      4; after a W with no upcast before, the BF16 gradients alone (torch may run two I of a chunk before its first
      W). (The model's first stage runs its whole backward at W.)

    DualPipeV's whole backwards ("full") accumulate in FP32 what they make and what a W left.

    symmem models it (`symmem.accounting.pipelined.zero_bubble_series`, `--schedule interleaved-zb:V`, `zbv` or
    `dualpipev`): what an I keeps on an interior stage equals `pipelined.weight_path_gradients`, and the whole
    step's peak is within 5 % on every rank."""
    st = Settings(dim=64, n_layers=6, n_heads=4, n_kv_heads=2, vocab=256, ffn_hidden=256, max_seq_len=64, world=4,
                  b=1, s=32)
    measured = run(st, 2, M, schedule)
    # what an input backward keeps until its weight backward, on the interior stages 1 and 2 (two layers each):
    # the gradient at each weight path's entry (_backward.py:218-244, `param_group["grads"]`), per layer the output
    # gradients of its five linears in BF16, [1, 32, 128 + 64 + 256 + 256 + 64] x 2 bytes, and of its two norms'
    # weight multiplies, in FP32 on the CPU (the composite RMSNorm multiplies the FP32 normalized input by the
    # weight), 2 x [1, 32, 64] x 4 bytes: 65,536 a layer; the micro-batch's saved tensors stay (retain_graph)
    stash = 2 * (32 * (128 + 64 + 256 + 256 + 64) * 2 + 2 * 32 * 64 * 4)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, "num_hidden_layers": 6}))
    argv = ["memory", "--model", str(path), "--profile", "torchtitan-cpu", "--pp", "2", "--dp", "2", "-b", "1", "-s",
            "32", "--microbatches", str(M), "--schedule", spelled]
    assert main([*argv, "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["stages"]
    from symmem.accounting.analysis import stage_chunks
    from symmem.accounting.pipelined import weight_path_gradients
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.model import stage_parts

    scn = scenario_from_args(build_parser().parse_args(argv))
    middle = stage_chunks(scn, scn.stages[1])[0]  # rank 1's first chunk: stage 1, two layers
    (layers,) = [p for p in stage_parts(scn.model, middle, scn.convention, scn.flow_impl) if p.is_layers]
    from symmem.accounting.analysis import values
    from symmem.accounting.evaluate import evaluate

    kept = layers.count * weight_path_gradients(layers, scn.rules, scn.parallel.axis_sizes(), 2)
    assert evaluate(kept, values(scn)) == stash
    for r in measured:  # the whole step's peak within 5 %, as the other schedules'
        p = predicted[r["stage"]]
        assert abs(p["peak_allocated"] - r["peak"]) <= 0.05 * r["peak"], (r["stage"], r["peak"], p["peak_allocated"])
    for r in measured:
        if r["stage"] not in interior:
            continue
        acts = r["actions"][:len(r["actions"]) // 2]  # the first step
        firsts = [i for i, a in enumerate(acts) if a[0] == "I" and a[1] == interior[r["stage"]]]
        assert acts[firsts[0]][3] - acts[firsts[0] - 1][3] == stash, acts
    for r in measured:
        chunks = r["chunk_params"]
        seen = {0: [], 1: []}  # per chunk: (type, its state) after each of its backwards but the step's last
        for entry in r["during_backward"]:
            c = entry["chunk"]
            seen[c].append((entry["type"], entry["per_chunk"][c]))
        for c, n in enumerate(chunks):
            if r["stage"] == 0 and c == 0:
                # the model's first stage has no input gradient to take first: its W runs the whole backward
                # (pipelining/stage.py:1090-1104, backward type "full"), as 1F1B's, gradients in FP32 at once
                assert {kind for kind, _ in seen[c]} == {"full"}
                assert all(s["param_dtype_grads"] == 0 and s["accumulated_grads"] == 4 * n for _, s in seen[c])
                continue
            per_step = len(seen[c]) // 2  # the two steps alike (each's last backward of the chunk not recorded)
            assert [k for k, _ in seen[c][:per_step]] == [k for k, _ in seen[c][per_step:]]
            for step in (seen[c][:per_step], seen[c][per_step:]):
                assert sum(kind in ("input", "full") for kind, _ in step) >= M - 1
                bf16 = fp32 = False  # the rule above, walked over the chunk's backwards in torch's order
                for kind, state in step:
                    if kind == "input":  # the post-backward upcasts what a W left, into the FP32 accumulation
                        fp32, bf16 = fp32 or bf16, False
                    elif kind == "full":  # DualPipeV's whole backward: its post-backward accumulates everything
                        fp32, bf16 = True, False
                    else:
                        bf16 = True
                    want = (2 * n if bf16 else 0, 4 * n if fp32 else 0)
                    assert (state["param_dtype_grads"], state["accumulated_grads"]) == want, (r["rank"], c, step)
                if schedule != "DualPipeV":  # (its weight backwards come last, after its whole ones)
                    assert any(s["param_dtype_grads"] and s["accumulated_grads"] for _, s in step)  # 6 B/param
