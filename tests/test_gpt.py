"""The GPT family and Korthikanti et al. 2022 (arXiv 2205.05198).

Facts and where they come from:
* the six formulas of Table 2 and the itemised per-layer terms of Section 4.1 are the paper's (typed in
  `derivations/_korthikanti.py` and below, not copied from symmem's output);
* 124,439,808 is the parameter count Hugging Face publishes for `gpt2` (h 768, 12 layers, 12 heads, V 50257,
  1024 positions, tied head); `recount` counts GPT2LMHeadModel's module shapes by hand, without symmem;
  where transformers is installed, GPT2LMHeadModel itself counts its parameters.
"""

from __future__ import annotations

import json
import random
from importlib import resources

import pytest

from derivations import _korthikanti
from symmem import load_model, model_totals
from symmem.cli.main import main
from symmem.config import from_dict
from symmem.errors import SymmemError


def recount(c: dict) -> int:
    """Parameters of HF's GPT2LMHeadModel from a config dict, module by module (no symmem involved)."""
    h, v, p = c["n_embd"], c["vocab_size"], c["n_positions"]
    f = c.get("n_inner") or 4 * h
    layer = (2 * h  # ln_1 weight, bias
             + h * 3 * h + 3 * h  # attn.c_attn (Conv1D h -> 3h) weight, bias
             + h * h + h  # attn.c_proj
             + 2 * h  # ln_2
             + h * f + f  # mlp.c_fc
             + f * h + h)  # mlp.c_proj
    head = 0 if c.get("tie_word_embeddings", True) else v * h
    return v * h + p * h + c["n_layer"] * layer + 2 * h + head  # wte, wpe, layers, ln_f, lm_head


def _preset(name: str) -> dict:
    return json.loads(resources.files("symmem.presets").joinpath(f"{name}.json").read_text())


# ---------------------------------------------------------------------------------------------- Table 2
@pytest.mark.parametrize("label, flags, formula, tex", _korthikanti.TABLE2, ids=[r[0] for r in _korthikanti.TABLE2])
def test_table2_row_checks_equal_through_the_cli(label, flags, formula, tex, capsys):
    code = main(["check", "--scenario", "korthikanti", "--quantity", "layer.activations", *flags, formula])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verdict: EQUAL\n" in out  # EQUAL, not "equal at this scenario"


@pytest.mark.parametrize("label, flags, formula, tex", _korthikanti.TABLE2, ids=[r[0] for r in _korthikanti.TABLE2])
def test_table2_latex_form_reads_as_the_typed_form(label, flags, formula, tex):
    import sympy

    from symmem.check import parse_formula

    assert sympy.expand(parse_formula(formula) - parse_formula(tex)) == 0


def test_table2_holds_in_t_not_only_at_t_8():
    """With the parallel sizes symbolic the derived formulas are the paper's in t (rows 2-6); row 1 is the t = 1
    case of row 2."""
    from derivations.korthikanti_table2 import comparisons

    verdicts = [(c[0], c[6].verdict, c[9].verdict, c[9].condition) for c in comparisons()]
    assert all(v == "EQUAL" for _, v, _, _ in verdicts)
    assert [v for _, _, v, _ in verdicts[1:]] == ["EQUAL"] * 5
    assert verdicts[0][3] == (("t", 1),)


def test_wrong_formula_is_different(capsys):
    code = main(["check", "--scenario", "korthikanti", "--quantity", "layer.activations", "--tp", "8",
                 "--no-sequence-parallel", "--recompute", "none", "sbh(34/t + 5as/(ht))"])
    out = capsys.readouterr().out
    assert code == 1 and "DIFFERENT" in out


@pytest.mark.parametrize("quantity, formula", [
    # Section 4.1, no parallelism: attention block 11sbh + 5as²b, MLP 19sbh, each LayerNorm 2sbh (the LayerNorm
    # before each block belongs to that block in symmem's dataflow)
    ("layer.activations.attn", "11sbh + 5as^2b + 2sbh"),
    ("layer.activations.mlp", "19sbh + 2sbh"),
])
def test_section_4_1_terms_per_block(quantity, formula, capsys):
    code = main(["check", "--scenario", "korthikanti", "--quantity", quantity, "--tp", "1", "--no-sequence-parallel",
                 "--recompute", "none", formula])
    assert code == 0 and "verdict: EQUAL\n" in capsys.readouterr().out


def test_heads_may_be_written_n_h(capsys):
    """Korthikanti's a is DeepSeek's n_h: the family aliases them in a checked formula."""
    code = main(["check", "--scenario", "korthikanti", "--quantity", "layer.activations", "--tp", "1",
                 "--no-sequence-parallel", "--recompute", "none", "34sbh + 5n_hs^2b"])
    assert code == 0 and "verdict: EQUAL\n" in capsys.readouterr().out


def test_stage_zero_and_any_layer_agree(capsys):
    flags = ["check", "--scenario", "korthikanti", "--quantity", "layer.activations", "--recompute", "selective"]
    assert main([*flags, "--stage", "0", "34sbh/t"]) == 0
    assert main([*flags, "--stage", "7", "--layer", "95", "34sbh/t"]) == 0
    capsys.readouterr()


def test_torch_eager_adds_layernorm_statistics(capsys):
    """PyTorch's LayerNorm keeps a per-row mean and rstd besides its input: 8bs more per layer (two LayerNorms)."""
    code = main(["check", "--scenario", "korthikanti", "--quantity", "layer.activations", "--rules", "torch-eager",
                 "--dataflow", "paper", "--tp", "1", "--no-sequence-parallel", "--recompute", "none",
                 "sbh(34 + 5as/h) + 8bs"])
    assert code == 0, capsys.readouterr().out


def test_golden_table_says_equal_six_times():
    import csv
    from pathlib import Path

    with open(Path(__file__).resolve().parent.parent / "paper_tables" / "korthikanti_table2.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["verdict (symmem check)"] for r in rows] == ["EQUAL"] * 6
    assert [r["verdict (t symbolic)"] for r in rows][1:] == ["EQUAL"] * 5


# ---------------------------------------------------------------------------------------------- parameters
def test_gpt2_published_total(capsys):
    # 124,439,808: Hugging Face's published parameter count of GPT-2 (small)
    assert model_totals(load_model("gpt2")).total == 124_439_808
    assert recount(_preset("gpt2")) == 124_439_808
    assert main(["params", "--model", "gpt2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 124_439_808


def test_gpt3_175b_matches_recount():
    assert model_totals(load_model("gpt3-175b")).total == recount(_preset("gpt3-175b"))


def _random_config(seed: int) -> dict:
    rng = random.Random(seed)
    a = rng.choice([1, 2, 4, 12])
    return {"model_type": "gpt2", "n_embd": a * rng.choice([2, 8, 16]), "n_head": a, "n_layer": rng.randint(1, 4),
            "vocab_size": rng.choice([7, 50, 128]), "n_positions": rng.choice([3, 16, 64]),
            "n_inner": rng.choice([None, 10, 24]), "tie_word_embeddings": rng.random() < 0.5}


@pytest.mark.parametrize("seed", range(20))
def test_symbolic_count_matches_recount(seed):
    c = _random_config(seed)
    assert model_totals(from_dict(c, f"grid{seed}")).total == recount(c)


@pytest.mark.parametrize("seed", range(4))
def test_count_matches_transformers(seed):
    transformers = pytest.importorskip("transformers")
    c = _random_config(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{k: v for k, v in c.items() if k != "model_type"}))
    assert sum(p.numel() for p in model.parameters()) == model_totals(from_dict(c, f"hf{seed}")).total


def test_n_inner_of_4h_is_written_4h():
    """GPT-3 sets no n_inner (4h); giving it as 4·n_embd is the same model and the same formulas."""
    raw = _preset("gpt3-175b")
    assert not load_model("gpt3-175b").has("h_F")
    raw["n_inner"] = 4 * raw["n_embd"]
    assert not from_dict(raw).has("h_F")


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("change, words", [
    ({"n_head": 7}, "must be a multiple of n_head"),
    ({"n_embd": None}, "missing key 'n_embd'"),
    ({"n_layer": 0}, "positive integer"),
    ({"activation_function": "relu"}, "GeLU"),
    ({"attn_pdrop": 1.5}, r"\[0, 1\)"),
    ({"tie_word_embeddings": "yes"}, "must be true or false"),
    ({"add_cross_attention": True}, "decoder-only"),
])
def test_bad_gpt_configs(change, words):
    raw = _preset("gpt2")
    raw.update(change)
    if raw.get("n_embd") is None:
        del raw["n_embd"]
    with pytest.raises(SymmemError, match=words):
        from_dict(raw)


def test_bad_config_is_one_line_on_the_cli(tmp_path, capsys):
    raw = _preset("gpt2")
    raw["n_head"] = 7
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert main(["params", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "n_embd = 768: must be a multiple of n_head = 7" in err


def test_tp_must_divide_heads(capsys):
    assert main(["check", "--scenario", "korthikanti", "--quantity", "layer.activations", "--tp", "5", "--dp", "1",
                 "2sbh"]) == 2
    assert "--tp 5: must divide n_head = 96" in capsys.readouterr().err  # the flag as typed (was "tp = 5")


def test_sweep_runs_on_a_model_without_routed_experts(capsys):
    """`symmem sweep` read the routed-expert count N of every model (a KeyError traceback for GPT and Llama)."""
    assert main(["sweep", "--model", "gpt3-175b", "--gpus", "64", "--tp", "8", "--pp", "8", "-b", "1"]) == 0
    assert "gpt3-175b on 64 GPUs" in capsys.readouterr().out
