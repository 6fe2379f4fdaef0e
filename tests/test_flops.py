"""FLOPs from the dataflows (symmem/flops): Korthikanti et al. 2022's two formulas through `symmem check`, and an
independent hand count of Llama-3-8B's matrix products."""

import json

import pytest
import sympy

from symmem.cli.main import main
from symmem.config import load_model
from symmem.flops import model_flops
from symmem.scenario import model_scenario


def _check(capsys, *argv):
    code = main(["check", *argv])
    return code, capsys.readouterr()


def test_korthikanti_model_flops_equal(capsys):
    # Korthikanti et al. 2022 (arXiv 2205.05198), Section 6: model FLOPs 72bsLh^2(1 + s/6h + V/12hL); with full
    # recomputation the hardware FLOPs 96bsLh^2(1 + s/6h + V/16hL) (the logits are not recomputed)
    code, out = _check(capsys, "--scenario", "korthikanti", "--flops-convention", "paper", "--quantity",
                       "model.flops", "72*b*s*L*h^2*(1 + s/(6*h) + V/(12*h*L))")
    assert code == 0 and "verdict: EQUAL" in out.out, out
    code, out = _check(capsys, "--scenario", "korthikanti", "--flops-convention", "paper", "--recompute", "full",
                       "--quantity", "model.flops_hardware", "96*b*s*L*h^2*(1 + s/(6*h) + V/(16*h*L))")
    assert code == 0 and "verdict: EQUAL" in out.out, out
    # without recomputation the hardware FLOPs are the model FLOPs: the 96 formula is then different
    code, out = _check(capsys, "--scenario", "korthikanti", "--recompute", "none", "--quantity",
                       "model.flops_hardware", "96*b*s*L*h^2*(1 + s/(6*h) + V/(16*h*L))", "--json")
    assert code == 1 and json.loads(out.out)["verdict"] == "DIFFERENT"


def test_llama_3_8b_matrix_products_by_hand():
    # Llama-3-8B's published config: h 4096, 32 heads of 128, 8 key/value heads, FFN 14336, 32 layers, V 128256.
    # One layer's forward products per token: q 2h^2, k and v 2·2·h·(8·128), o 2h^2, gate, up and down 3·2·h·14336;
    # attention 2·s·h for the scores and 2·s·h for the values; the head 2·h·V; all times 3 (forward + backward).
    h, kv, f, n, v, s = 4096, 8 * 128, 14336, 32, 128256, 4096
    per_token = n * (2 * h * h + 2 * 2 * h * kv + 2 * h * h + 3 * 2 * h * f + 4 * s * h) + 2 * h * v
    scn = model_scenario(load_model("llama-3-8b"))
    expr, _ = model_flops(scn)
    from symmem import symbols

    at = {**scn.model.substitutions(), symbols.b: 1, symbols.s: s}
    assert int(expr.subs(at)) == 3 * s * per_token


def test_unknown_convention_is_one_line(capsys):
    code, out = _check(capsys, "--scenario", "korthikanti", "--flops-convention", "bogus", "--quantity",
                       "model.flops", "1")
    assert code == 2 and "unknown" in out.err and out.err.count("\n") == 1


def test_korthikanti_layer_flops_equal(capsys):
    # one layer of Korthikanti's 72bsLh^2(1 + s/6h) (the V term is the head's): 72bsh^2 + 12bs^2h
    code, out = _check(capsys, "--scenario", "korthikanti", "--flops-convention", "paper", "--quantity",
                       "layer.flops", "72*b*s*h^2 + 12*b*s^2*h")
    assert code == 0 and "verdict: EQUAL" in out.out, out


def test_llama_3_8b_exact_by_hand():
    # The `exact` convention's counts per element (forward + backward, symmem/flops/exact.py's table, each
    # derived there from its formula): RMSNorm 4 + 7, rope 3 + 3, softmax 5 + 4, SiLU 4 + 5, the SwiGLU product
    # 1 + 2, a residual add 1 + 0, cross-entropy 5 + 2 per logit; products as the paper convention (the test
    # above). Llama-3-8B per token, with s = 4096 keys per query (the whole score matrix):
    h, d, nh, nkv, f, n, v, s = 4096, 128, 32, 8, 14336, 32, 128256, 4096
    layer = 2 * 11 * h + 6 * nh * d + 6 * nkv * d + 9 * nh * s + 9 * f + 3 * f + 2 * h
    per_token = n * layer + 11 * h + 7 * v
    scn = model_scenario(load_model("llama-3-8b"))
    from symmem import symbols

    at = {**scn.model.substitutions(), symbols.b: 1, symbols.s: s}
    paper = int(model_flops(scn)[0].subs(at))
    exact = int(model_flops(scn, convention="exact")[0].subs(at))
    assert exact - paper == s * per_token


@pytest.mark.parametrize("name", ["deepseek-v3", "gpt2", "deepseek-v4-flash", "deepseek-v3.2"])
def test_exact_counts_every_op_kind(name):
    # every op kind of every family has an `exact` count (an unknown kind raises), and `exact` counts more than
    # the products alone
    scn = model_scenario(load_model(name))
    from symmem import symbols

    at = {**scn.model.substitutions(), symbols.b: 1, symbols.s: scn.s}
    assert int(model_flops(scn, convention="exact")[0].subs(at)) > int(model_flops(scn)[0].subs(at))


@pytest.mark.parametrize("name", ["deepseek-v3", "gpt2", "deepseek-v4-flash"])
def test_every_family_counts(name):
    scn = model_scenario(load_model(name))
    expr, sources = model_flops(scn)
    assert expr.free_symbols and sources  # a polynomial in the model's sizes, b and s, each term with its ops


def megatron_num_floating_point_operations(args: dict, batch_size: int) -> float:
    """An independent transcription of Megatron-LM's `num_floating_point_operations` (megatron/training/training.py
    at 23e00ed0, `transformer_flops()`: the non-hybrid path), line by line, from its `args`."""
    query_projection_size = args["kv_channels"] * args["num_attention_heads"]
    query_projection_to_hidden_size_ratio = query_projection_size / args["hidden_size"]
    num_query_groups = args["num_query_groups"] if args["group_query_attention"] else args["num_attention_heads"]
    if args["num_experts"] is None:
        num_dense_layers, num_moe_layers, num_experts_routed_to, last_layer_is_moe = args["num_layers"], 0, 0, 0
    else:
        pattern = args["moe_layer_freq"]
        num_moe_layers = sum(pattern)
        num_dense_layers = args["num_layers"] - num_moe_layers
        num_experts_routed_to = args["moe_router_topk"]
        last_layer_is_moe = pattern[-1]
    if args["mtp_num_layers"] is not None:
        mtp_num_layers = args["mtp_num_layers"]
        num_moe_layers += last_layer_is_moe * mtp_num_layers
        num_dense_layers += (1 - last_layer_is_moe) * mtp_num_layers
        num_layers = args["num_layers"] + mtp_num_layers
    else:
        mtp_num_layers = 0
        num_layers = args["num_layers"]
    moe_ffn_hidden_size = args["moe_ffn_hidden_size"] or args["ffn_hidden_size"]
    shared = args["moe_shared_expert_intermediate_size"] or 0
    gated_linear_multiplier = 3 / 2 if args["swiglu"] else 1
    expansion_factor = 3 * 2 * 2
    h, s = args["hidden_size"], args["seq_length"]
    if args["multi_latent_attention"]:
        n = args["num_attention_heads"]
        q_term = args["q_lora_rank"] * (h + n * (args["qk_head_dim"] + args["qk_pos_emb_head_dim"]) + 1)
        self_attn_term = 3 * 2 * num_layers * (
            q_term + args["kv_lora_rank"] * (h + n * (args["qk_head_dim"] + args["v_head_dim"]) + 1)
            + h * args["qk_pos_emb_head_dim"] + (n * args["v_head_dim"]) * h
            + s * (n * (args["qk_head_dim"] + args["qk_pos_emb_head_dim"])) / 2 + s * n * args["v_head_dim"] / 2)
    else:
        self_attn_term = expansion_factor * num_layers * h * h * (
            (1 + (num_query_groups / args["num_attention_heads"]) + (s / h / 2))
            * query_projection_to_hidden_size_ratio)
    return batch_size * s * (
        expansion_factor * num_layers * h * (
            (args["ffn_hidden_size"] * gated_linear_multiplier) * (num_dense_layers / num_layers)
            + (moe_ffn_hidden_size * num_experts_routed_to * gated_linear_multiplier) * (num_moe_layers / num_layers)
            + (shared * gated_linear_multiplier) * (num_moe_layers / num_layers))
        + self_attn_term
        + 3 * 2 * mtp_num_layers * (3 * h + 2 * h * h)
        + 3 * 2 * h * args["padded_vocab_size"] * (mtp_num_layers + 1))


def _megatron_scenario(name: str, tp: int):
    from symmem.accounting.states import recipe
    from symmem.parallel.sizes import Parallel

    m = load_model(name)
    return model_scenario(m).replace(profile_name="megatron-te", precision=recipe("megatron"),
                                     flops_convention="megatron", mtp=True,
                                     parallel=Parallel(tp=tp, sequence_parallel=True, moe_sequence_parallel=True))


@pytest.mark.parametrize("name, tp, args", [
    # Llama-3-70B's published config as Megatron's arguments; the vocabulary padded as Megatron pads it at TP 8
    # (128,256 + 1 end-of-document token, to a multiple of 128·8: 129,024)
    ("llama-3-70b", 8, dict(num_layers=80, hidden_size=8192, num_attention_heads=64, kv_channels=128,
                            group_query_attention=True, num_query_groups=8, ffn_hidden_size=28672, swiglu=True,
                            num_experts=None, mtp_num_layers=None, multi_latent_attention=False,
                            moe_ffn_hidden_size=None, moe_shared_expert_intermediate_size=None, seq_length=4096,
                            padded_vocab_size=129024)),
    # DeepSeek-V3's published config: 3 dense layers then 58 MoE, MLA, one MTP module; vocabulary 129,280 + 1,
    # padded to a multiple of 128·2 at TP 2: 129,536
    ("deepseek-v3", 2, dict(num_layers=61, hidden_size=7168, num_attention_heads=128, kv_channels=128,
                            group_query_attention=False, num_query_groups=None, ffn_hidden_size=18432, swiglu=True,
                            num_experts=256, moe_layer_freq=[0] * 3 + [1] * 58, moe_router_topk=8,
                            moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048, mtp_num_layers=1,
                            multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                            qk_pos_emb_head_dim=64, v_head_dim=128, seq_length=4096, padded_vocab_size=129536)),
])
def test_megatron_convention_equals_megatrons_function(name, tp, args):
    from symmem import symbols

    scn = _megatron_scenario(name, tp)
    expr, _ = model_flops(scn, convention="megatron")
    derived = expr.subs({**scn.model.substitutions(), symbols.b: 1, symbols.s: args["seq_length"]})
    assert derived == sympy.Integer(int(round(megatron_num_floating_point_operations(args, 1)))), (
        int(derived), megatron_num_floating_point_operations(args, 1))
