"""DeepSeek-V3.2 and V4 families: totals, activated counts, MTP, layer types, data-dependent sizes, bad configs.

The exact totals are transformers 5.24's own meta-device counts of the same configs (checked live by
tests/validate/test_v4_params_meta.py); the published figures are DeepSeek's: V3.2 671B / 37B (V3's), V4-Flash
284B / 13B, V4-Pro 1.6T / 49B.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import pytest

from symmem import load_model, model_totals
from symmem.config import from_dict
from symmem.errors import SymmemError

TOTALS = {  # transformers 5.24, meta device, parameters only, no MTP
    "deepseek-v3.2": 671_877_929_216,
    "deepseek-v4-flash": 284_332_230_231,
    "deepseek-v4-pro": 1_572_997_179_491,
}
# MTP (not in the meta count above): regression values, symmem's own count at c51ecda, not an independent fact;
# V3.2's is V3's (itself a regression value, test_params) + one indexer of 13,959,424 (11,610,067,968 + 13,959,424)
MTP = {"deepseek-v3.2": 11_624_027_392, "deepseek-v4-flash": 6_610_048_635, "deepseek-v4-pro": 25_840_145_595}
ROUNDED = {"deepseek-v3.2": ("671.9B", "37B"), "deepseek-v4-flash": ("284B", "13B"),
           "deepseek-v4-pro": ("1.6T", "49B")}


def raw(name: str) -> dict:
    return json.loads(resources.files("symmem.presets").joinpath(f"{name}.json").read_text())


@pytest.mark.parametrize("name", list(TOTALS))
def test_totals_equal_transformers_meta_counts(name):
    t = model_totals(load_model(name))
    assert t.total == TOTALS[name]
    assert t.mtp == MTP[name]


def test_published_rounding():
    flash, pro, v32 = (model_totals(load_model(n)) for n in ("deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v3.2"))
    assert round(flash.total / 1e9) == 284 and round(flash.activated / 1e9) == 13
    assert round(pro.total / 1e12, 1) == 1.6 and round(pro.activated / 1e9) == 49
    assert round(v32.activated / 1e9) == 37
    # V3.2 = V3 + 61 indexers of 13,959,424, by hand from the config: wq_b 1536 x 64 x 128 = 12,582,912, wk 7168 x 128 =
    # 917,504, k_norm weight and bias 2 x 128, weights_proj 7168 x 64 = 458,752
    assert v32.total - model_totals(load_model("deepseek-v3")).total == 61 * 13_959_424


def test_cli_params_json():
    out = subprocess.run([sys.executable, "-m", "symmem", "params", "--model", "deepseek-v4-flash", "--json"],
                         capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    assert d["total"] == TOTALS["deepseek-v4-flash"] and round(d["activated"] / 1e9) == 13


def test_layer_kinds_from_presets():
    flash, pro = load_model("deepseek-v4-flash"), load_model("deepseek-v4-pro")
    kf, kp = flash.layer_kinds(), pro.layer_kinds()
    assert kf[:4] == ("sliding_hash", "sliding_hash", "csa_hash", "hca_moe")
    assert sum(k.startswith("csa") for k in kf) == 21 and sum(k.startswith("hca") for k in kf) == 20
    assert kp[:4] == ("hca_hash", "hca_hash", "csa_hash", "hca_moe")
    assert sum(k.startswith("csa") for k in kp) == 30 and sum(k.startswith("hca") for k in kp) == 31


def test_legacy_compress_ratios_truncated_like_transformers():
    c = raw("deepseek-v4-flash")
    del c["layer_types"], c["mlp_layer_types"]
    c["compress_ratios"] = [0, 0] + [4 if i % 2 == 0 else 128 for i in range(41)] + [0]  # 44: MTP entry last
    c["num_hash_layers"] = 3
    assert from_dict(c).layer_kinds() == load_model("deepseek-v4-flash").layer_kinds()
    del c["compress_ratios"]  # transformers' default pattern: HCA, HCA, HCA, CSA, ...
    assert from_dict(c).layer_kinds()[:4] == ("hca_hash", "hca_hash", "hca_hash", "csa_moe")


@pytest.mark.parametrize("change, message", [
    ({"layer_types": ["sliding_attention"] * 42 + ["full_attention"]}, "layer_types[42] = 'full_attention'"),
    ({"layer_types": ["sliding_attention"] * 5}, "layer_types = 5 entries"),
    ({"mlp_layer_types": ["moe"] * 44}, "mlp_layer_types = 44 entries"),
    ({"hc_mult": 0}, "hc_mult = 0"),
    ({"index_topk": -1}, "index_topk = -1"),
    ({"num_key_value_heads": 2}, "num_key_value_heads = 2"),
    ({"o_groups": 3}, "o_groups = 3"),
])
def test_bad_v4_configs_are_one_line_errors(change, message):
    c = {**raw("deepseek-v4-flash"), **change}
    with pytest.raises(SymmemError) as e:
        from_dict(c)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_config_cli_exit_2(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({**raw("deepseek-v4-flash"), "hc_mult": 0}))
    r = subprocess.run([sys.executable, "-m", "symmem", "params", "--model", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "hc_mult = 0" in r.stderr


@pytest.mark.parametrize("change, message", [
    ({"index_topk": -5}, "index_topk = -5"),
    ({"mlp_layer_types": ["dense"] * 60 + ["mixed"]}, "mlp_layer_types[60] = 'mixed'"),
    ({"layer_types": ["indexed_attention"] * 3}, "layer_types = 3 entries"),
    ({"q_lora_rank": None}, "q_lora_rank = None"),
])
def test_bad_v32_configs(change, message):
    with pytest.raises(SymmemError, match=None) as e:
        from_dict({**raw("deepseek-v3.2"), **change})
    assert message in str(e.value)


def test_topk_larger_than_sequence_is_valid():
    """index_topk > the sequence: every key (V3.2) or compressed entry (V4 CSA) is selected, as transformers'
    min(index_topk, T) does; the attention core's key count follows Min."""
    from symmem.blocks.indexer import v4_keys, v32_keys
    from symmem.symbols import s, sym

    k = sym("k_I")
    assert v32_keys().size.subs({k: 2048, s: 1000}) == 1000
    assert v32_keys().size.subs({k: 2048, s: 4096}) == 2048
    assert v4_keys().size.subs({k: 512, s: 1000, sym("m_C"): 4}) == 250
    assert v4_keys().size.subs({k: 512, s: 4096, sym("m_C"): 4}) == 512
    m = from_dict({**raw("deepseek-v4-flash"), "index_topk": 10**6})
    assert model_totals(m).total == TOTALS["deepseek-v4-flash"]


def test_compressed_lengths_round_down():
    from symmem.blocks.indexer import csa_entries
    from symmem.blocks.v4_attention import hca_entries
    from symmem.symbols import s, sym

    vals = {sym("m_C"): 4, sym("m_H"): 128}
    assert [csa_entries().subs({**vals, s: n}) for n in (3, 4, 7, 8)] == [0, 1, 1, 2]
    assert [hca_entries().subs({**vals, s: n}) for n in (127, 128, 255, 256)] == [0, 1, 1, 2]


def test_v4_paper_activations_evaluate_across_floor_and_min():
    from symmem.accounting.analysis import stage_activation_expr, to_int, values
    from symmem.scenario import load_scenario, with_parallel

    base = with_parallel(load_scenario("paper"), tp=1, pp=1, ep=1, dp=1).replace(model=load_model("deepseek-v4-flash"))
    out = []
    for seq in (127, 128, 4096):
        scn = base.replace(s=seq)
        out.append(to_int(stage_activation_expr(scn, scn.stages[0]), values(scn)))
    assert out[0] < out[1] < out[2]


@pytest.mark.parametrize("model", ["deepseek-v3.2", "deepseek-v4-flash"])
def test_latex_export_prints_the_non_polynomial_terms(model, tmp_path):
    # V3.2's Min(k_I, s) and V4's floor(s/m_C) are not polynomials: the paper-notation printer hands them to
    # sympy's (this used to be an internal error, exit 3)
    from symmem.cli.main import main

    out = tmp_path / "tex"
    assert main(["latex", "--model", model, "--pp", "1", "--out", str(out)]) == 0
    formulas = (out / "formulas.tex").read_text()
    assert r"\min" in formulas
    if model == "deepseek-v4-flash":
        assert r"\left\lfloor{\frac{s}{m_C}}\right\rfloor" in formulas
