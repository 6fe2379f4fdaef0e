"""All-to-all context parallelism under megatron-te (issue 27): TransformerEngine >= 2.8 saves the attention output
before the post-attention all-to-all (context_parallel.py:3485/3517 and 3569-3582 at TE v2.11), a storage apart
from the all-to-all's result that the output projection keeps: one BF16 tensor [b, s/CP, n_h/TP, d_v] more per
layer than the ring (p2p) variant keeps."""

import pytest

import symmem
from symmem.scenario import load_scenario, with_parallel

CASE = "llama3_70b_l12_tp2_cp4_pp1_dp1_seq32768_mbc4_cef"  # Llama-3-70B, 12 layers, TP 2, CP 4, s = 32,768


def _activations(scn) -> int:
    (st,) = symmem.memory(scn)
    return st.activation_per_microbatch


def test_a2a_keeps_one_output_per_layer_more_than_the_ring():
    a2a = load_scenario(CASE)
    ring = with_parallel(a2a, cp_comm_type="p2p")
    assert a2a.rules.name == "megatron-te+cp-a2a" and ring.rules.name == "megatron-te"
    # by hand: 12 layers x 2 bytes x b 1 x s 32,768 x (64 heads x 128) / (TP 2 x CP 4)
    per_layer = 2 * 1 * 32768 * 64 * 128 // (2 * 4)
    assert per_layer == 67_108_864
    assert _activations(a2a) - _activations(ring) == 12 * per_layer


@pytest.mark.parametrize("b", [1, 2])
def test_the_a2a_term_scales_with_b_and_not_without_cp(b):
    a2a = load_scenario(CASE).replace(b=b)
    ring = with_parallel(a2a, cp_comm_type="p2p")
    assert _activations(a2a) - _activations(ring) == 12 * 2 * b * 32768 * 64 * 128 // 8
    no_cp = with_parallel(a2a, cp=1, dp=4)
    assert no_cp.rules.name == "megatron-te"  # the comm type means nothing without CP


@pytest.mark.parametrize(("argv", "words"), [
    # 32 query heads over CP 3
    (["--model", "llama-3-8b", "--cp", "3", "-s", "48"], "num_attention_heads / TP = 32 / 1 = 32"),
    # Llama-3-70B at TP 8 keeps one KV head a rank: CP 2 cannot split it
    (["--model", "llama-3-70b", "--tp", "8", "--cp", "2", "-s", "8192"], "num_key_value_heads / TP = 8 / 8 = 1"),
    # DeepSeek-V4's one shared KV head, fixed by its architecture (no config key)
    (["--model", "deepseek-v4-flash", "--cp", "4", "-s", "8192", "--profile", "megatron-te"],
     "must divide the key-value heads, 1 in deepseek-v4-flash's architecture"),
])
def test_all_to_all_cp_must_divide_the_heads(capsys, argv, words):
    """TransformerEngine's all-to-all CP asserts num_heads % cp_size == 0 for Q and for K, V
    (AttnFuncWithCPAndQKVOA2A.forward): refused in one line, where the ring (p2p) answers."""
    from symmem.cli.main import main

    assert main(["memory", *argv, "--cp-comm-type", "a2a"]) == 2
    err = capsys.readouterr().err
    assert words in err and "(--cp-comm-type a2a)" in err and err.count("\n") == 1, err
    assert main(["memory", *argv, "--cp-comm-type", "p2p"]) == 0
