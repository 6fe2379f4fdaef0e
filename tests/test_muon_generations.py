"""The `muon` recipe's split and bytes; the DeepSeek generations derivation's KV-cache numbers."""

from __future__ import annotations

from symmem.accounting.muon import ADAMW, MUON_MATRIX, is_muon, stage_states
from symmem.config import load_model
from symmem.scenario import load_scenario, with_parallel


def test_bytes_per_group():
    assert MUON_MATRIX.per_parameter == 14 and ADAMW.per_parameter == 18


def test_split_on_v4():
    scn = with_parallel(load_scenario("paper"), tp=1, pp=1, ep=1, dp=1).replace(model=load_model("deepseek-v4-flash"))
    r = stage_states(scn, scn.stages[0])
    # AdamW: embedding + head (lm_head, norm, hc_head) + norms, biases, mHC base/scale, sinks
    # 284,332,230,231: transformers' meta-device count of V4-Flash (test_deepseek_v4, checked live in validate/);
    # 529,530,880 = V 129,280 x h 4096, by hand from the config: the embedding and the untied lm_head
    assert r.muon_params + r.adamw_params == 284_332_230_231
    assert 2 * 529_530_880 < r.adamw_params < 2 * 529_530_880 + 10_000_000
    assert r.states.total == 14 * r.muon_params + 18 * r.adamw_params


def test_classification():
    from symmem.graph import D, Weight
    from symmem.symbols import sym

    h = D(sym("h"))
    assert is_muon("csa_moe", "linear", Weight("attn_hc.fn", (h, h)))
    assert not is_muon("csa_moe", "add", Weight("self_attn.compressor.position_bias", (h, h)))
    assert not is_muon("embedding", "embedding", Weight("embed_tokens.weight", (h, h)))
    assert not is_muon("head", "linear", Weight("lm_head.weight", (h, h)))
    assert not is_muon("csa_moe", "rmsnorm", Weight("input_layernorm.weight", (h,)))


def test_kv_cache_per_token():
    from derivations.deepseek_generations import MILLION, kv_bytes

    # by hand, BF16 per token: V3 61 layers x (d_c 512 + d_hr 64) x 2 = 70,272; V3.2 adds the indexer key
    # (d_I 128): 61 x 704 x 2 = 85,888; V4-Pro 30 CSA layers x (512/4 entry + 128/4 indexer key) + 31 HCA layers x
    # 512/128, x 2 bytes = 9,848 (compression 4 and 128 tokens per entry), plus the 128-token BF16 window.
    # 0.103: symmem's ratio under the deployed precisions the derivation states; DeepSeek's claim is "10 %"
    assert kv_bytes("deepseek-v3", MILLION, None) == 70_272 * MILLION
    assert kv_bytes("deepseek-v3.2", MILLION, None) == 85_888 * MILLION
    window = 61 * 128 * 512 * 2
    assert kv_bytes("deepseek-v4-pro", MILLION, None) == 9_848 * MILLION + window
    ratio = kv_bytes("deepseek-v4-pro", MILLION, "deployed") / kv_bytes("deepseek-v3.2", MILLION, "deployed")
    assert round(ratio, 3) == 0.103
