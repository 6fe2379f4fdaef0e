"""Communication volume derived from the shardings (symmem/comm.py), against counts made by hand from the
collectives Megatron-Core and TransformerEngine issue (the module's docstring cites each)."""

import sympy

from symmem.cli.args import scenario_from_args
from symmem.cli.main import build_parser
from symmem.comm import dp_bytes, stage_collectives, stage_comm_bytes
from symmem.symbols import b, s


def _scn(*argv):
    return scenario_from_args(build_parser().parse_args(["memory", *argv]))


def _at(scn, expr):
    return int(sympy.sympify(expr).subs({**scn.size_values(), b: scn.b, s: scn.s}))


def test_sequence_parallel_tp_volume_by_hand():
    # Llama-3-70B, TP 8 with sequence parallelism, PP 8 (10 layers a stage): per layer and micro-batch, forward
    # all-gathers the attention's and the MLP's normed input and reduce-scatters o_proj's and down_proj's output (4
    # ring collectives of a [b, s, h] BF16 tensor); backward reduce-scatters the two inputs' gradients, all-gathers
    # the two inputs again for the weight gradients (TE keeps the local shard) and all-gathers the two outputs'
    # gradients (6). Each sends 7/8 of the tensor: 10 x 7/8 x 2·b·s·h bytes per layer.
    scn = _scn("--model", "llama-3-70b", "--profile", "megatron-te", "--tp", "8", "--pp", "8", "--dp", "1",
               "-s", "8192", "--microbatches", "8")
    st = scn.stages[1]
    assert not st.embedding and not st.head and len(st.layers) == 10
    h = 8192
    assert _at(scn, stage_comm_bytes(scn, st)["tp"]) == 10 * 10 * 7 * 2 * 1 * 8192 * h // 8


def test_without_sequence_parallelism_four_all_reduces():
    # the same stage without SP: o_proj's and down_proj's outputs all-reduced forward, q/k/v's and gate/up's input
    # gradients all-reduced backward (one per input tensor): 4 all-reduces, each 2 x 7/8 of 2·b·s·h bytes
    scn = _scn("--model", "llama-3-70b", "--tp", "8", "--pp", "8", "--dp", "1", "-s", "8192", "--microbatches", "8",
               "--no-sequence-parallel")
    st = scn.stages[1]
    kinds = sorted((c.kind, c.phase) for _p, c in stage_collectives(scn, st) if c.axis == "tp")
    assert set(kinds) == {("all-reduce", "backward"), ("all-reduce", "forward")}
    assert _at(scn, stage_comm_bytes(scn, st)["tp"]) == 10 * 4 * 2 * 7 * 2 * 8192 * 8192 // 8
    # a pipeline stage in the middle sends its output forward and its input's gradient backward: 2 x 2·b·s·h
    assert _at(scn, stage_comm_bytes(scn, st)["pp"]) == 2 * 2 * 8192 * 8192


def test_expert_all_to_all_by_hand():
    # a measured DeepSeek-V2 run, 4 layers (V2's published config: hidden 5120, 6 routed experts a token), EP 4,
    # TP 1: each MoE layer dispatches and combines the 6 routed copies of each of this GPU's b·s tokens, forward
    # and backward, 3/4 of them to other GPUs: 4 x 6 x b·s·h x 2 bytes x 3/4 per layer
    scn = _scn("--scenario", "deepseekv2_tp1_ep4_pp2_dp4_l4_mbc4_cef")
    st = scn.stages[0]
    moe_layers = sum(p.count for p in {p for p, c in stage_collectives(scn, st) if c.axis == "ep"})
    h, n_r = scn.model.value("h"), scn.model.value("N_r")
    assert (h, n_r) == (5120, 6)
    per_layer = 4 * n_r * scn.b * scn.s * h * 2 * 3 // 4
    assert _at(scn, stage_comm_bytes(scn, st)["ep"]) == moe_layers * per_layer


def test_context_parallel_ring_by_hand():
    # Llama-3-8B, TP 2, CP 2, s 8192: the ring moves this rank's key and value chunk, [b, s/2, 8/2 heads, 128]
    # BF16 each, once forward (CP - 1 = 1 step) and twice backward (the chunks and their gradients): 3 x 2 chunks
    # per layer, 32 layers
    scn = _scn("--model", "llama-3-8b", "--profile", "megatron-te", "--tp", "2", "--cp", "2", "--pp", "1",
               "--dp", "1", "-s", "8192")
    chunk = 1 * 4096 * 4 * 128 * 2
    assert _at(scn, stage_comm_bytes(scn, scn.stages[0])["cp"]) == 32 * 3 * 2 * chunk


def test_distributed_optimizer_dp_bytes():
    # ZeRO 1 (Megatron's distributed optimizer): each GPU reduce-scatters FP32 gradients and all-gathers BF16
    # parameters, (d-1)/d of the stage's parameters each; plain DDP (ZeRO 0) all-reduces the gradients instead
    base = ["--model", "llama-3-8b", "--profile", "megatron-te", "--tp", "1", "--pp", "1", "--dp", "4"]
    from symmem.accounting.analysis import stage_params

    scn = _scn(*base, "--zero", "1")
    n = stage_params(scn, scn.stages[0]).per_gpu["dense"]
    # Llama-3-8B's 8,030,261,248 parameters, plus Megatron's padded vocabulary (128,256 + 1 rounded up to
    # 128,384: 128 more rows of 4,096 in each of the untied embedding and output layer)
    assert n == 8_030_261_248 + 2 * 128 * 4096
    assert dp_bytes(scn, scn.stages[0]) == n * (4 + 2) * 3 / 4
    scn0 = _scn(*base, "--zero", "0")
    assert dp_bytes(scn0, scn0.stages[0]) == 2 * n * 4 * 3 / 4


def test_check_a_hand_formula_of_the_tp_volume(capsys):
    # the first test's hand count, typed as a formula: EQUAL through `symmem check`; 8 collectives (the count
    # that forgets TE's backward re-gathers) is DIFFERENT
    from symmem.cli.main import main

    argv = ["check", "--model", "llama-3-70b", "--profile", "megatron-te", "--tp", "8", "--pp", "8", "--dp", "1",
            "-s", "8192", "--stage", "1", "--quantity", "stage.comm.tp"]
    assert main([*argv, "10*10*(7/8)*2*b*s*h"]) == 0 and "verdict: EQUAL" in capsys.readouterr().out
    assert main([*argv, "8*10*(7/8)*2*b*s*h"]) == 1 and "DIFFERENT" in capsys.readouterr().out


def test_interleaved_pipeline_sends_per_chunk():
    # interleaved 1F1B: each of a GPU's v chunks sends an activation and a gradient per micro-batch, but for the
    # first chunk of the first stage (no gradient to send back) and the last chunk of the last (no activation on)
    base = ["--model", "llama-3-8b", "--pp", "4", "--dp", "1", "-s", "4096", "--microbatches", "8"]
    plain, inter = _scn(*base), _scn(*base, "--schedule", "interleaved", "--chunks", "2")
    unit = 2 * 4096 * 4096  # one [b, s, h] BF16 tensor, no sequence parallelism at TP 1
    assert _at(plain, stage_comm_bytes(plain, plain.stages[1])["pp"]) == 2 * unit
    assert [_at(inter, stage_comm_bytes(inter, st)["pp"]) for st in inter.stages] == [3 * unit, 4 * unit,
                                                                                       4 * unit, 3 * unit]
