"""The torch-eager measurement harness against real PyTorch + transformers (skipped without the validate extra)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from symmem.errors import SymmemError  # noqa: E402
from symmem.validate import measure_layer, measure_model_params, tiny_config  # noqa: E402


@pytest.fixture(scope="module")
def v3():
    return tiny_config("deepseek-v3")


def test_tiny_config_families():
    v3, v2, lite = (tiny_config(f) for f in ("deepseek-v3", "deepseek-v2", "deepseek-v2-lite"))
    assert v3["model_type"] == "deepseek_v3" and v2["model_type"] == lite["model_type"] == "deepseek_v2"
    assert lite["q_lora_rank"] is None and v2["q_lora_rank"] is not None
    for cfg in (v3, v2, lite):
        assert cfg["num_key_value_heads"] == cfg["num_attention_heads"]
        assert cfg["n_routed_experts"] % cfg["n_group"] == 0
        assert cfg["attention_dropout"] == 0.0
    assert tiny_config("deepseek-v3", hidden_size=128)["hidden_size"] == 128
    llama = tiny_config("llama")
    assert llama["model_type"] == "llama" and llama["num_attention_heads"] % llama["num_key_value_heads"] == 0
    assert "q_lora_rank" not in llama and "head_dim" not in llama  # head_dim: hidden_size / heads, as HF's default
    with pytest.raises(SymmemError):
        tiny_config("gpt")


def test_deterministic(v3):
    a = measure_layer(v3, 1, 2, 5, dtype="bf16", attn="sdpa", experts="eager", seed=3)
    b = measure_layer(v3, 1, 2, 5, dtype="bf16", attn="sdpa", experts="eager", seed=3)
    assert a == b
    assert a.saved_bytes > 0 and a.layer_kind == "moe"


def test_dense_layer_bytes_linear_in_b(v3):
    sizes = [measure_layer(v3, 0, b, 6).saved_bytes for b in (2, 3, 4)]
    assert sizes[2] - 2 * sizes[1] + sizes[0] == 0
    assert sizes[1] > sizes[0]


def test_dense_layer_bytes_quadratic_in_s(v3):
    # the attention probabilities (b, n_h, s, s) make the bytes quadratic in s: third differences vanish
    sizes = [measure_layer(v3, 0, 2, s, attn="eager").saved_bytes for s in (4, 5, 6, 7)]
    d2 = [sizes[i + 2] - 2 * sizes[i + 1] + sizes[i] for i in range(2)]
    assert d2[0] == d2[1] != 0
    # the s^2 term: fp32 softmax output b*n_h*s^2*4 bytes -> second difference 2*b*n_h*4
    assert d2[0] == 2 * 2 * v3["num_attention_heads"] * 4


def _v3_dense_fp32_eager(cfg: dict, b: int, s: int) -> int:
    """The catalogue's formula (docs/torch_eager_saved_tensors.md) for a V3 dense layer, fp32, eager attention."""
    t, h, n_h = b * s, cfg["hidden_size"], cfg["num_attention_heads"]
    d_h, d_v, d_hr = cfg["qk_nope_head_dim"], cfg["v_head_dim"], cfg["qk_rope_head_dim"]
    d_cq, d_c, h_F = cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["intermediate_size"]
    d_qk = d_h + d_hr
    el = [
        3 * t * h + t,  # input_layernorm: input, x*rsqrt, output; rsqrt
        3 * t * d_cq + t,  # q_a_layernorm: input, x*rsqrt, output; rsqrt
        t * (d_c + d_hr) + 2 * t * d_c + t,  # kv_a_layernorm: whole kv_a output (a view), x*rsqrt, output; rsqrt
        2 * s * d_hr,  # cos, sin (1, s, d_hr)
        2 * b * n_h * s * d_qk + b * n_h * s * s + b * n_h * s * d_v,  # q, k, probs, v copy
        t * n_h * d_v,  # o_proj input
        3 * t * h + t,  # post_attention_layernorm
        4 * t * h_F,  # MLP: gate, silu, up, product
    ]
    return 4 * sum(el)


@pytest.mark.parametrize("b,s", [(2, 5), (3, 4)])
def test_v3_dense_matches_catalogue_formula(v3, b, s):
    assert measure_layer(v3, 0, b, s).saved_bytes == _v3_dense_fp32_eager(v3, b, s)


def test_bf16_vs_fp32_dense(v3):
    f = measure_layer(v3, 0, 2, 5, dtype="fp32", attn="eager")
    h = measure_layer(v3, 0, 2, 5, dtype="bf16", attn="eager")
    t, hid, n_h = 10, v3["hidden_size"], v3["num_attention_heads"]
    # every bf16 saved tensor is 2 bytes a element, except the fp32 ones the code makes on purpose
    assert {x.dtype for x in h.saved} == {"float32", "bfloat16"}
    assert {x.dtype for x in f.saved} == {"float32"}
    # RMSNorm saves its fp32 upcast of the input and an fp32 rsqrt of shape (b, s, 1) even in bf16
    rsqrt = [x for x in h.saved if x.shape == (2, 5, 1)]
    assert len(rsqrt) == 4 and all(x.dtype == "float32" for x in rsqrt)
    assert any(x.dtype == "float32" and x.shape == (2, 5, hid) and "PowBackward0" in x.savers for x in h.saved)
    # eager attention: softmax is computed in fp32 and saved as such, plus its bf16 cast for the PV matmul
    assert any(x.dtype == "float32" and x.shape == (2, n_h, 5, 5) and x.grad_fn == "SoftmaxBackward0" for x in h.saved)
    assert any(x.dtype == "bfloat16" and x.shape == (2 * n_h, 5, 5) for x in h.saved)
    # and the bf16 layer saves strictly less, but more than half
    assert f.saved_bytes / 2 < h.saved_bytes < f.saved_bytes
    # bf16 MLP tensors are exactly half their fp32 counterparts
    mlp_f = sum(x.nbytes for x in f.saved if x.shape[-1] == v3["intermediate_size"])
    mlp_h = sum(x.nbytes for x in h.saved if x.shape[-1] == v3["intermediate_size"])
    assert mlp_h * 2 == mlp_f == 4 * 4 * t * v3["intermediate_size"]


def test_moe_router_fp32_and_int64_indices(v3):
    m = measure_layer(v3, 1, 2, 5, dtype="bf16", attn="eager", experts="grouped_mm")
    t, n, k = 10, v3["n_routed_experts"], v3["num_experts_per_tok"]
    assert any(x.dtype == "float32" and x.shape == (t, n) and x.grad_fn == "SigmoidBackward0" for x in m.saved)
    assert any(x.dtype == "int64" and x.shape == (t, k) for x in m.saved)
    # V3's group-limited routing saves tensors (group topk indices, mask) on branches freed at once
    assert m.freed_saved > 0
    assert any(dt == "bool" and shape == (t, n) for shape, dt, _ in m.freed)


def test_expert_bytes_independent_of_routing(v3):
    # eager experts save per-expert slices, but every term is linear in the tokens of an expert
    sizes = {measure_layer(v3, 1, 2, 5, experts="eager", seed=sd).saved_bytes for sd in (0, 1, 2)}
    assert len(sizes) == 1


def test_param_counts_by_hand(v3):
    m = measure_layer(v3, 1, 1, 3)
    pc = m.param_counts
    h, qr, kr = v3["hidden_size"], v3["q_lora_rank"], v3["kv_lora_rank"]
    n_h, d_qk = v3["num_attention_heads"], v3["qk_nope_head_dim"] + v3["qk_rope_head_dim"]
    d_hr, d_h, d_v = v3["qk_rope_head_dim"], v3["qk_nope_head_dim"], v3["v_head_dim"]
    N, hE, Ns = v3["n_routed_experts"], v3["moe_intermediate_size"], v3["n_shared_experts"]
    assert pc["self_attn.q_a_proj"] == h * qr
    assert pc["self_attn.q_a_layernorm"] == qr
    assert pc["self_attn.q_b_proj"] == qr * n_h * d_qk
    assert pc["self_attn.kv_a_proj_with_mqa"] == h * (kr + d_hr)
    assert pc["self_attn.kv_a_layernorm"] == kr
    assert pc["self_attn.kv_b_proj"] == kr * n_h * (d_h + d_v)
    assert pc["self_attn.o_proj"] == n_h * d_v * h
    assert pc["mlp.gate"] == N * h
    assert pc["mlp.experts"] == N * 3 * h * hE
    assert pc["mlp.shared_experts.gate_proj"] == h * Ns * hE
    assert pc["input_layernorm"] == pc["post_attention_layernorm"] == h
    assert pc["total"] == sum(v for k, v in pc.items() if k != "total")
    dense = measure_layer(v3, 0, 1, 3).param_counts
    assert dense["mlp.gate_proj"] == dense["mlp.up_proj"] == dense["mlp.down_proj"] == h * v3["intermediate_size"]


def test_lite_has_q_proj_and_model_params():
    lite = tiny_config("deepseek-v2-lite")
    pc = measure_layer(lite, 1, 1, 3).param_counts
    n_h, d_qk = lite["num_attention_heads"], lite["qk_nope_head_dim"] + lite["qk_rope_head_dim"]
    assert pc["self_attn.q_proj"] == lite["hidden_size"] * n_h * d_qk
    assert "self_attn.q_a_proj" not in pc
    mp = measure_model_params(lite)
    h, V = lite["hidden_size"], lite["vocab_size"]
    assert mp["embed"] == mp["lm_head"] == V * h and mp["norm"] == h
    assert mp["layers"] == sum(mp[f"layers.{i}"] for i in range(lite["num_hidden_layers"]))
    assert mp["total"] == mp["embed"] + mp["layers"] + mp["norm"] + mp["lm_head"]


def test_bad_arguments(v3):
    with pytest.raises(SymmemError):
        measure_layer(v3, 7, 1, 2)
    with pytest.raises(SymmemError):
        measure_layer(v3, 0, 1, 2, dtype="fp8")


def test_missing_torch_raises_symmem_error(monkeypatch):
    import sys

    from symmem.validate import harness

    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` raise ImportError
    with pytest.raises(SymmemError, match=r"pip install -e '\.\[validate\]'"):
        harness.measure_layer(tiny_config("deepseek-v3"), 0, 1, 2)
