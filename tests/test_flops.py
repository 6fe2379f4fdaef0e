"""FLOPs from the dataflows (symmem/flops): Korthikanti et al. 2022's two formulas through `symmem check`, and an
independent hand count of Llama-3-8B's matrix products."""

import json

import pytest

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


def test_unimplemented_convention_is_one_line(capsys):
    code, out = _check(capsys, "--scenario", "korthikanti", "--flops-convention", "megatron", "--quantity",
                       "model.flops", "1")
    assert code == 2 and "not implemented" in out.err and out.err.count("\n") == 1


@pytest.mark.parametrize("name", ["deepseek-v3", "gpt2", "deepseek-v4-flash"])
def test_every_family_counts(name):
    scn = model_scenario(load_model(name))
    expr, sources = model_flops(scn)
    assert expr.free_symbols and sources  # a polynomial in the model's sizes, b and s, each term with its ops
