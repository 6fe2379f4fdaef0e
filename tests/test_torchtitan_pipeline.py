"""torchtitan 0.3.0 under pipeline parallelism (issue 28): its split of the layers, FSDP2 as
torch.distributed.pipelining runs it (every block kept gathered, the gradients accumulated unsharded in FP32) and the
receive buffers of every micro-batch (under TP the sequence shards), worked by hand; the refusals; the sweep taking
PP.

The hand figures are those the real code shows on the CPU (tests/validate/test_fsdp2_pipeline.py: torchtitan
0.3.0's Llama 3, torch 2.13.0, Schedule1F1B and ScheduleGPipe over gloo, PP 2 x FSDP 1 and 2, four micro-batches):
the gathered BF16 blocks (279,040 bytes on stage 0), the FP32 accumulated gradients (558,080) and the receive
buffers (16,384)."""

import json

import pytest

from symmem.cli.main import main
from symmem.errors import SymmemError
from symmem.parallel.layout import torchtitan_layers

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 256,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 256,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "hidden_act": "silu"}


@pytest.mark.parametrize("n_layers, pp, counts", [
    (4, 2, (2, 2)),  # 6 effective layers, 3 a stage: the embedding and the output take one each
    (32, 4, (8, 9, 8, 7)),  # 34 = 4 x 8 + 2: the first two stages 9; the first gives 1 to the embedding, the last 1
    (126, 16, (7,) + (8,) * 14 + (7,)),  # Llama 3.1 405B at PP 16: 128 = 16 x 8
    (5, 1, (5,)),
])
def test_torchtitan_split_by_hand(n_layers, pp, counts):
    assert torchtitan_layers(n_layers, pp) == counts


def test_torchtitan_split_is_torchtitans():
    """The same counts and the same refusals as torchtitan's own `_generate_llm_fqn_per_model_part`, where it is
    installed."""
    pipeline = pytest.importorskip("torchtitan.distributed.pipeline_parallel", reason="torchtitan not installed")
    for n_layers in range(1, 70):
        for pp in range(2, 24):
            try:
                ref = tuple(sum(n.startswith("layers.") for n in names)
                            for names in pipeline._generate_llm_fqn_per_model_part(pp, n_layers))
            except ValueError:
                ref = None
            try:
                ours = torchtitan_layers(n_layers, pp)
            except SymmemError:
                ours = None
            assert ours == ref, (n_layers, pp)


def _tiny(tmp_path, capsys, *flags) -> dict:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    assert main(["memory", "--model", str(config), "--profile", "torchtitan-cpu", "--pp", "2", "-b", "1", "-s", "32",
                 "--microbatches", "4", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("dp", [1, 2])
def test_pipelined_fsdp_by_hand(tmp_path, capsys, dp):
    # per block: wqkv 64 x (4 + 2 + 2) x 16, wo 64 x 64, w1 and w3 256 x 64, w2 64 x 256, two norms of 64
    block = 64 * 128 + 64 * 64 + 3 * 256 * 64 + 2 * 64
    assert block == 61_568
    stage0 = 256 * 64 + 2 * block  # the embedding and blocks 0-1 (torchtitan's split of 4 layers over 2: 2, 2)
    stage1 = 2 * block + 64 + 256 * 64  # blocks 2-3, the final norm and the output projection
    d = _tiny(tmp_path, capsys, "--dp", str(dp))
    for st, params in zip(d["stages"], (stage0, stage1), strict=True):
        br = st["peak_breakdown"]
        # FSDP2 keeps every block gathered in BF16 through the step (reshard-after-forward off under PP, and
        # set_reshard_after_backward(False) until the last micro-batch), whatever the shard degree
        assert br["gathered parameters (ZeRO-3)"] == 2 * params
        # the gradients accumulate unsharded in FP32 (1F1B, M 4 > PP - i: the busiest backward follows an
        # earlier one), beside the backward's layer's own BF16 gradients; the sharded ones (the model states'
        # "gradients", FP32 padded shards: 4 x params / DP here, every first dimension dividing by 2) are made only
        # by the last micro-batch's reduce-scatter, so the peak does not hold them
        assert st["gradients"] == 4 * params // dp
        assert br["unreduced gradients (ZeRO-2/3)"] == 4 * params + 2 * block
        assert "gradients" not in br
        # a receive buffer per micro-batch: stage 1 the activations it gets, stage 0 the gradients it gets back,
        # [b, s, h] = [1, 32, 64] in BF16 each
        kind = "gradients" if st["stage"] == 0 else "activations"
        assert st["framework_buffers"][f"pipeline receive buffers, {kind} (4 micro-batches)"] == 4 * 32 * 64 * 2
        assert len([k for k in st["framework_buffers"] if k.startswith("pipeline")]) == 1
    assert [st["in_flight"] for st in d["stages"]] == [2, 1]  # Schedule1F1B: min(M, PP - i) warm-up forwards


def test_without_pipelining_nothing_changes(tmp_path, capsys):
    """At PP 1 the profile has no receive buffers and the generic FSDP2 amounts (two blocks gathered)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    assert main(["memory", "--model", str(config), "--profile", "torchtitan-cpu", "--dp", "2", "-b", "1", "-s", "32",
                 "--json"]) == 0
    st = json.loads(capsys.readouterr().out)["stages"][0]
    assert not [k for k in st["framework_buffers"] if k.startswith("pipeline")]
    assert st["peak_breakdown"].get("gathered parameters (ZeRO-3)", 0) < 2 * 4 * 61_568


def test_gpipe_first_backward_has_nothing_accumulated_yet(tmp_path):
    """GPipe runs every forward first: its first backward holds M micro-batches and only the gradients of the parts
    after the event's; the next, M - 1 and every gradient. The optimizer step holds the sharded gradients."""
    from symmem.accounting.analysis import stage_timeline_events, values
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    args = build_parser().parse_args(["memory", "--model", str(config), "--profile", "torchtitan-cpu", "--pp", "2",
                                      "--dp", "2", "-b", "1", "-s", "32", "--microbatches", "4", "--schedule",
                                      "gpipe"])
    scn = scenario_from_args(args)
    vals = values(scn)
    events = stage_timeline_events(scn, scn.stages[1])  # blocks 2-3, then the norm and output

    def amount(ev, start):
        return sum(ceil_int(evaluate(a.nbytes, vals)) for a in ev.amounts if a.what.startswith(start))

    backward = [ev for ev in events if ev.phase == "backward"]
    first = [ev for ev in backward if any(a.what.startswith("the gradients of the parts after") for a in ev.amounts)]
    later = [ev for ev in backward if any(a.what.startswith("the stage's gradients") for a in ev.amounts)]
    assert first and later and len(first) + len(later) == len(backward)
    head = 64 + 256 * 64  # the final norm and the output projection
    by_part = {p: {amount(ev, "the gradients of the parts after") for ev in first if ev.part == p}
               for p in {ev.part for ev in first}}
    # the stage's parts in order: the RoPE tables (no weights), the two blocks, the norm and output; each part's
    # first backward has the FP32 gradients of the parts after it accumulated, the last part's none
    assert by_part == {"head": {0}, "dense layers": {4 * head}, "rope tables": {4 * (2 * 61_568 + head)}}
    assert {amount(ev, "the stage's gradients") for ev in later} == {4 * (2 * 61_568 + head)}
    assert all(amount(ev, "3 x saved") > 0 for ev in first)  # M - 1 = 3 others in flight
    assert all(amount(ev, "2 x saved") > 0 for ev in later)
    (step,) = [ev for ev in events if ev.phase == "optimizer step"]
    assert amount(step, "the sharded gradients") == 4 * (2 * 61_568 + head) // 2


@pytest.mark.parametrize("flags, words", [
    (["--schedule", "zb1p"], "torchtitan's 1F1B, GPipe, Interleaved1F1B and InterleavedZeroBubble are modelled"),
    (["--schedule", "dualpipe"], "schedule 'DualPipe' with PP 2: torchtitan's 1F1B, GPipe, Interleaved1F1B"),
    (["--schedule", "interleaved-zb:2", "--recompute", "full"], "schedule interleaved zero bubble (v=2) with "
                                                                "recompute full: "
                                                                "torch's zero bubble is modelled for Llama under FSDP "
                                                                "without TP or checkpointing"),
    (["--schedule", "interleaved-zb:2", "--tp", "2"], "schedule interleaved zero bubble (v=2) with TP 2"),
    (["--schedule", "dualpipev", "--tp", "2", "--microbatches", "4"], "schedule DualPipeV with TP 2"),
    (["--schedule", "dualpipev"], "microbatches = 2: DualPipeV needs at least as many micro-batches as stages"),
    (["--schedule", "zbv", "--chunks", "3"], "--chunks = 3: zbv runs two stages per GPU"),
    (["--tp", "2", "--no-sequence-parallel"], "TP 2 without sequence parallelism is not modelled"),
    (["--layers-per-stage", "20,12"], "torchtitan splits the layers its own way"),
    (["--schedule", "interleaved:64"], "pp = 2 x 64 stages per rank (interleaved:64) = 128 stages: torchtitan's "
                                       "split refuses more stages than the 34 effective layers"),
])
def test_pipeline_refusals(capsys, flags, words):
    assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--pp", "2", "--dp", "4",
                 *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved:2"])
def test_sweep_takes_pp_and_equals_memory(capsys, schedule):
    """The sweep under torchtitan 0.3.0 takes PP beside FSDP and TP, and interleaved 1F1B in torch's order (the
    profile's sweep evaluates each configuration through `symmem memory`'s engine); a pipelined row's peak is
    `symmem memory`'s."""
    argv = ["sweep", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "H100", "--profile", "torchtitan", "-b", "1",
            "-s", "4096", "--recompute", "full", "--global-batch-size", "16", "--rank-by", "headroom", "--json",
            "--schedule", schedule]
    assert main(argv) == 0
    piped = [r for r in json.loads(capsys.readouterr().out)["ranked"] if r["pp"] > 1]
    assert {r["pp"] for r in piped} == {2, 4, 8} and {r["tp"] for r in piped} >= {1, 2}
    assert {r["schedule"] for r in piped} == {schedule}
    for r in piped:
        assert main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--pp", str(r["pp"]), "--tp",
                     str(r["tp"]), "--dp", str(r["dp"]), "-b", "1", "-s", "4096", "--recompute", "full",
                     "--microbatches", str(r["microbatches"]), "--schedule", schedule, "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert max(st["peak_allocated"] for st in d["stages"]) == r["peak_allocated"], r


def test_receive_buffers_under_tp_are_the_sequence_shards(tmp_path, capsys):
    """Under TP with sequence parallelism a stage sends its DTensor output's local shard: [b, s / TP, h]."""
    d = _tiny(tmp_path, capsys, "--tp", "2")
    assert d["stages"][0]["framework_buffers"]["pipeline receive buffers, gradients (4 micro-batches)"] == \
        4 * 16 * 64 * 2


# ------------------------------------------------------------------------------ interleaved 1F1B (torch's order)
def test_torch_zero_bubble_order_is_torchs():
    """symmem's order of torch's interleaved zero bubble equals ScheduleInterleavedZeroBubble's own per-rank actions
    (its bubbles, idle slots, left out) wherever torch is installed: "B" its input backward, "W" its weight one."""
    from symmem.parallel.schedule import Schedule

    schedules = pytest.importorskip("torch.distributed.pipelining.schedules", reason="torch not installed")
    kinds = {schedules._ComputationType.FORWARD: "F", schedules._ComputationType.BACKWARD_INPUT: "B",
             schedules._ComputationType.BACKWARD_WEIGHT: "W"}

    def torchs(rank, pp, v, m):
        s = schedules.ScheduleInterleavedZeroBubble.__new__(schedules.ScheduleInterleavedZeroBubble)
        s.pp_group_size, s.n_local_stages, s._n_microbatches = pp, v, m
        s.number_of_rounds = max(1, m // pp)
        s.microbatches_per_round = m // s.number_of_rounds
        return [(kinds[a.computation_type], a.microbatch_index, a.stage_index // pp)
                for a in s._calculate_single_rank_operations(rank) if a is not None]

    checked = 0
    for pp in range(2, 6):
        for v in range(2, 4):
            for m in range(1, 3 * pp + 2):
                if m % max(1, m // pp):
                    continue
                for rank in range(pp):
                    assert Schedule.named("interleaved-zb", v).order(rank, pp, m, "torch") == \
                        torchs(rank, pp, v, m), (rank, pp, v, m)
                    checked += 1
    assert checked == 278
    with pytest.raises(SymmemError, match="Megatron's zero bubble is zb1p"):
        Schedule.named("interleaved-zb", 2).order(0, 2, 4, "megatron")


def test_torch_zbv_order_is_torchs():
    """symmem's order of torch's zero bubble V equals ScheduleZBVZeroBubble's own per-rank actions wherever torch is
    installed (chunk 0 stage r, chunk 1 stage 2 PP - 1 - r), and the "v" split puts the model's first and last
    stages on GPU 0."""
    from symmem.parallel.layout import LayoutSpec, build_stages
    from symmem.parallel.schedule import Schedule

    schedules = pytest.importorskip("torch.distributed.pipelining.schedules", reason="torch not installed")
    kinds = {schedules._ComputationType.FORWARD: "F", schedules._ComputationType.BACKWARD_INPUT: "B",
             schedules._ComputationType.BACKWARD_WEIGHT: "W"}

    def torchs(rank, pp, m):
        s = schedules.ScheduleZBVZeroBubble.__new__(schedules.ScheduleZBVZeroBubble)
        s.pp_group_size, s.n_local_stages, s._n_microbatches, s.num_stages = pp, 2, m, 2 * pp
        return [(kinds[a.computation_type], a.microbatch_index, 0 if a.stage_index == rank else 1)
                for a in s._calculate_single_rank_operations(rank) if a is not None]

    checked = 0
    for pp in range(2, 7):
        for m in range(1, 4 * pp + 2):
            for rank in range(pp):
                assert Schedule.from_label("zbv").order(rank, pp, m, "torch") == torchs(rank, pp, m), (rank, pp, m)
                checked += 1
    assert checked == 380
    stages = build_stages(LayoutSpec("torchtitan"), 6, 2, 0, 2, "v")  # 8 = 6 layers + 2: stages of 1, 2, 2, 1
    assert [(st.layers, st.embedding, st.head, st.chunk_layers) for st in stages] == [
        ((0, 5), True, True, (1, 1)), ((1, 2, 3, 4), False, False, (2, 2))]


def test_torch_dualpipev_order_is_torchs():
    """symmem's order of torch's DualPipeV equals ScheduleDualPipeV's own per-rank actions, each overlapped forward
    and backward as its forward then its whole backward ("A"), wherever torch is installed; M below 2 PP refused."""
    from symmem.parallel.schedule import Schedule

    schedules = pytest.importorskip("torch.distributed.pipelining.schedules", reason="torch not installed")
    kinds = {schedules._ComputationType.FORWARD: "F", schedules._ComputationType.BACKWARD_INPUT: "B",
             schedules._ComputationType.BACKWARD_WEIGHT: "W", schedules._ComputationType.FULL_BACKWARD: "A"}

    def torchs(rank, pp, m):
        s = schedules.ScheduleDualPipeV.__new__(schedules.ScheduleDualPipeV)
        s.pp_group_size, s.n_local_stages, s._n_microbatches, s.num_stages = pp, 2, m, 2 * pp
        out = []
        for a in s._calculate_single_rank_operations(rank):
            if a is None:
                continue
            overlapped = a.computation_type == schedules._ComputationType.OVERLAP_F_B
            for b in a.sub_actions if overlapped else (a,):
                out.append((kinds[b.computation_type], b.microbatch_index, 0 if b.stage_index == rank else 1))
        return out

    checked = 0
    for pp in range(2, 7):
        for m in range(2 * pp, 5 * pp + 2):
            for rank in range(pp):
                assert Schedule.from_label("dualpipev").order(rank, pp, m, "torch") == torchs(rank, pp, m), (
                    rank, pp, m)
                checked += 1
    assert checked == 310
    with pytest.raises(SymmemError, match="DualPipeV needs at least as many micro-batches as stages, 2·PP = 4"):
        Schedule.from_label("dualpipev").order(0, 2, 3, "torch")


def test_torch_interleaved_order_is_torchs():
    """symmem's order of torch's interleaved 1F1B equals ScheduleInterleaved1F1B's own per-rank actions (idle slots
    left out) wherever torch is installed, and Megatron's order where PP divides M and M > PP."""
    from symmem.parallel.schedule import Schedule

    schedules = pytest.importorskip("torch.distributed.pipelining.schedules", reason="torch not installed")

    def torchs(rank, pp, v, m):
        s = schedules.ScheduleInterleaved1F1B.__new__(schedules.ScheduleInterleaved1F1B)
        s.pp_group_size, s.n_local_stages, s._n_microbatches = pp, v, m
        s.number_of_rounds = max(1, m // pp)
        s.microbatches_per_round = m // s.number_of_rounds
        return [("F" if a.computation_type == schedules._ComputationType.FORWARD else "B", a.microbatch_index,
                 a.stage_index // pp) for a in s._calculate_single_rank_operations(rank) if a is not None]

    checked = 0
    for pp in range(2, 6):
        for v in range(2, 4):
            for m in range(1, 3 * pp + 2):
                if m % max(1, m // pp):
                    with pytest.raises(SymmemError, match="multiple of its"):
                        Schedule("interleaved", v).order(0, pp, m, "torch")
                    continue
                for rank in range(pp):
                    ours = Schedule("interleaved", v).order(rank, pp, m, "torch")
                    assert ours == torchs(rank, pp, v, m), (rank, pp, v, m)
                    if m % pp == 0 and m > pp:
                        assert ours == Schedule("interleaved", v).order(rank, pp, m)
                    checked += 1
    assert checked > 150


def test_torchtitan_interleaved_stages_by_hand():
    """Llama 3 8B's 32 layers over PP 2 x v 2: torchtitan splits them over 4 stages, 8, 9, 8 and 7 (34 = 4 x 8 + 2,
    the first two one more; the embedding and the output take one each), rank 0 runs stages 0 and 2, rank 1 stages
    1 and 3."""
    from symmem.parallel.layout import LayoutSpec, build_stages

    first, last = build_stages(LayoutSpec("torchtitan"), 32, 2, 0, chunks=2)
    assert (first.chunk_layers, first.layers) == ((8, 8), tuple(range(0, 8)) + tuple(range(17, 25)))
    assert (last.chunk_layers, last.layers) == ((9, 7), tuple(range(8, 17)) + tuple(range(25, 32)))
    assert (first.embedding, first.head, last.embedding, last.head) == (True, False, False, True)


def test_interleaved_pipelined_fsdp_by_hand(tmp_path, capsys):
    """The six-layer tiny Llama (tests/validate/test_fsdp2_pipeline.py measures it) at PP 2 x v 2, M 4: stages of
    1 (and the embedding), 2, 2 and 1 (and the norm and output) layers. Both ranks peak in a backward of chunk 0
    with both chunks gathered in BF16 and both accumulated in FP32, beside the layer's own BF16 gradients; each
    stage but the model's first keeps a receive buffer of activations per micro-batch, each but its last one of
    gradients ([1, 32, 64] BF16: 4,096 bytes)."""
    tiny = {**TINY, "num_hidden_layers": 6}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny))
    assert main(["memory", "--model", str(config), "--profile", "torchtitan-cpu", "--pp", "2", "-b", "1", "-s", "32",
                 "--microbatches", "4", "--schedule", "interleaved:2", "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    layer, embedding, head = 61_568, 256 * 64, 64 + 256 * 64
    chunks = [(embedding + layer, 2 * layer), (2 * layer, layer + head)]
    for st, (a, b) in zip(stages, chunks, strict=True):
        br = st["peak_breakdown"]
        assert br["gathered parameters (ZeRO-3)"] == 2 * (a + b)
        assert br["unreduced gradients (ZeRO-2/3)"] == 4 * (a + b) + 2 * layer
        assert st["peak_event"]["phase"] == "backward" and "chunk 0" in st["peak_event"]["part"]
    assert stages[0]["framework_buffers"]["pipeline receive buffers, activations (1 stage x 4 micro-batches)"] == \
        4 * 4096
    assert stages[0]["framework_buffers"]["pipeline receive buffers, gradients (2 stages x 4 micro-batches)"] == \
        8 * 4096
    assert stages[1]["framework_buffers"]["pipeline receive buffers, activations (2 stages x 4 micro-batches)"] == \
        8 * 4096


def test_interleaved_chunks_finish_in_torchs_order(tmp_path):
    """Chunk by chunk, as the real code shows it (tests/validate/test_fsdp2_pipeline.py): the later chunk runs its
    backwards first; after its last, the events hold its sharded gradients and no longer its gathered parameters
    or accumulated gradients; the optimizer step holds every chunk's sharded gradients."""
    from symmem.accounting.analysis import stage_timeline_events, values
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY, "num_hidden_layers": 6}))
    scn = scenario_from_args(build_parser().parse_args([
        "memory", "--model", str(config), "--profile", "torchtitan-cpu", "--pp", "2", "-b", "1", "-s", "32",
        "--microbatches", "4", "--schedule", "interleaved:2"]))
    vals = values(scn)
    layer, embedding = 61_568, 256 * 64

    def amount(ev, what):
        return sum(ceil_int(evaluate(a.nbytes, vals)) for a in ev.amounts if a.what.startswith(what))

    events = stage_timeline_events(scn, scn.stages[0])
    gathered = [amount(ev, "the chunks' parameters") for ev in events[:-1]]
    done = [amount(ev, "the sharded gradients of the chunks done") for ev in events[:-1]]
    both = 2 * (embedding + 3 * layer)
    # chunk 0 alone until chunk 1's first forward, then both, then chunk 0 alone again
    assert set(gathered) == {2 * (embedding + layer), both}
    # once chunk 1 (2 layers) is done: only chunk 0 gathered, chunk 1's sharded FP32 gradients held
    assert {g for g, d in zip(gathered, done, strict=True) if d} == {2 * (embedding + layer)}
    assert {d for d in done if d} == {4 * 2 * layer}
    assert amount(events[-1], "the sharded gradients") == 4 * (embedding + 3 * layer)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "interleaved:2", "interleaved-zb:2", "zbv", "dualpipev"])
def test_timeline_walks_to_memorys_peak(schedule):
    """`symmem timeline` walks the whole step in torch's order with FSDP2's pipelined amounts, and finds the peak
    `symmem memory` reports: for 1F1B and GPipe from candidate events, for interleaved the same walk."""
    from symmem.accounting.analysis import memory
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.cli.timeline import series

    scn = scenario_from_args(build_parser().parse_args([
        "memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--pp", "2", "--dp", "4", "-b", "1", "-s",
        "4096", "--microbatches", "4", "--schedule", schedule, "--recompute",
        "full" if schedule in ("1f1b", "gpipe", "interleaved:2") else "none"]))
    for st in memory(scn):
        _labels, rows, peak = series(scn, st.stage.index)
        assert sum(rows[peak].values()) == st.peak_allocated, (schedule, st.stage.index)


def test_stage_outputs_kept_for_backward(tmp_path, capsys):
    """torch keeps each micro-batch's stage output from its forward to the end of its backward (fwd_cache): the
    tiny Llama's last stage its logits, [1, 32, 256] BF16 = 16,384 bytes, one at its 1F1B peak (a backward with one
    micro-batch in flight); stage 0 its hidden state, [1, 32, 64] BF16 = 4,096 bytes, two at its peak (two in
    flight). Llama 3 8B's last stage at s 8,192: 2 GiB of logits a micro-batch."""
    from symmem.accounting.analysis import memory
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.profiles import pipeline_stage_output

    stages = _tiny(tmp_path, capsys)["stages"]
    kept = [st["peak_breakdown"]["pipeline stage outputs kept for backward"] for st in stages]
    assert kept == [2 * 4096, 16_384]
    scn = scenario_from_args(build_parser().parse_args(["memory", "--model", "llama-3-8b", "--profile", "torchtitan",
                                                        "--pp", "2", "--dp", "4", "-s", "8192"]))
    assert pipeline_stage_output(scn, last=True) == 8192 * 128_256 * 2
    assert memory(scn)[1].peak.dynamic["pipeline stage outputs kept for backward"] % (8192 * 128_256 * 2) == 0


@pytest.mark.parametrize("schedule", ["interleaved", "interleaved-zb"])
def test_interleaved_walk_reaches_the_whole_steps_peak(tmp_path, schedule):
    """The peak walks V + 2 rounds of torch's interleaved 1F1B or zero bubble (analysis._torch_walk_microbatches):
    the same as the whole step's, for PP 2-3, V 2-3 and every M torch takes up to V + 5 rounds (among them M not a
    multiple of PP, whose rounds are longer than PP)."""
    from symmem.accounting.analysis import memory, stage_pipelined_series, values
    from symmem.accounting.timeline import stage_peak
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY, "num_hidden_layers": 10}))
    checked = 0
    for pp in (2, 3):
        for v in (2, 3):
            for m in range(1, (v + 5) * pp + 1):
                if m % max(1, m // pp):
                    continue
                scn = scenario_from_args(build_parser().parse_args([
                    "memory", "--model", str(config), "--profile", "torchtitan-cpu", "--pp", str(pp), "-b", "1",
                    "-s", "32", "--microbatches", str(m), "--schedule", f"{schedule}:{v}"]))
                for st in memory(scn):
                    whole = stage_peak(stage_pipelined_series(scn, st.stage), st.peak.static, values(scn), st.in_flight)
                    assert whole.peak_allocated == st.peak_allocated, (pp, v, m, st.stage.index)
                    checked += 1
    assert checked > 80


@pytest.mark.parametrize("flags, words", [
    (["--pp", "2", "--chunks", "3"], "--chunks = 3: torchtitan's Interleaved1F1B is run with 2 stages per rank"),
    (["--chunks", "2"], "--chunks: with --framework fsdp2, only with --pp 2 or more"),
    (["--pp", "2", "--dp", "4", "--tp", "2"], "--pp x --dp x --tp = 2 x 4 x 2: at most 8 processes"),
    (["--pp", "2", "--ac", "full"], "--pp: the pipeline runner runs FSDP (and TP) without --hsdp-replicate, --ac"),
    (["--pp", "4", "--chunks", "2"], "pp = 4 x 2 stages per rank (interleaved:2) = 8 stages"),
])
def test_measure_under_pp_refusals(tmp_path, capsys, flags, words):
    """`symmem measure --framework fsdp2 --pp`: what the pipeline runner cannot run is refused in one line, before
    any process starts."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    assert main(["measure", "--framework", "fsdp2", "--config", str(config), *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


@pytest.mark.parametrize("schedule", ["zbv", "dualpipev"])
def test_v_shaped_walk_reaches_the_whole_steps_peak(tmp_path, schedule):
    """Issue 45: ZBVZeroBubble and DualPipeV walk V_WALK_PP x PP + V_WALK_EXTRA micro-batches at most
    (Schedule.walk_microbatches, for the events and for the micro-batches in flight): the peak equals the whole
    step's for PP 2-4 and every M torch takes up to three times that, on every stage."""
    from symmem.accounting.analysis import memory, stage_pipelined_series, values
    from symmem.parallel.schedule import Schedule

    V_WALK_PP, V_WALK_EXTRA = Schedule.V_WALK_PP, Schedule.V_WALK_EXTRA
    from symmem.accounting.timeline import stage_peak
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser

    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY, "num_hidden_layers": 8}))
    checked = walked = 0
    for pp in (2, 3, 4):
        bound = V_WALK_PP * pp + V_WALK_EXTRA
        for m in range(2 * pp if schedule == "dualpipev" else 1, 3 * bound + 1):
            scn = scenario_from_args(build_parser().parse_args([
                "memory", "--model", str(config), "--profile", "torchtitan-cpu", "--pp", str(pp), "-b", "1",
                "-s", "32", "--microbatches", str(m), "--schedule", schedule]))
            for st in memory(scn):
                whole = stage_peak(stage_pipelined_series(scn, st.stage), st.peak.static, values(scn), st.in_flight)
                assert whole.peak_allocated == st.peak_allocated, (pp, m, st.stage.index)
                checked += 1
                walked += m > bound
    assert checked > 150 and walked > 80


@pytest.mark.parametrize("spelled", ["zbv", "dualpipev", "interleaved:2", "interleaved:3", "interleaved-zb:2"])
def test_in_flight_walk_equals_the_whole_orders(spelled):
    """Schedule.in_flight walks torch's order for `walk_microbatches` micro-batches: the most chunk forwards held
    equal the whole order's, for PP 2-4 and every M torch takes up to three times the walk's bound."""
    from fractions import Fraction

    from symmem.errors import SymmemError
    from symmem.parallel.schedule import Schedule

    name, _, v = spelled.partition(":")
    sched = Schedule.named(name, int(v) if v else None)
    frees = ("W", "A") if sched.zero_bubble else ("B",)
    checked = 0
    for pp in (2, 3, 4):
        for m in range(1, 3 * (Schedule.V_WALK_PP * pp + Schedule.V_WALK_EXTRA) + 1):
            for stage in range(pp):
                try:
                    got = sched.in_flight(stage, pp, m, "torch")
                except SymmemError:  # an M torch refuses for this schedule
                    continue
                held = most = 0
                for phase, _mb, _c in sched.order(stage, pp, m, "torch"):
                    held += 1 if phase == "F" else -1 if phase in frees else 0
                    most = max(most, held)
                assert got == Fraction(most, sched.chunks), (spelled, pp, m, stage)
                checked += 1
    assert checked > 100
