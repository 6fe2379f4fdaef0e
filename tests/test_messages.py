"""Issue 45, defect 7: messages name what the user typed and lead to something that runs."""

from __future__ import annotations

import pytest

from symmem.cli.main import main


@pytest.mark.parametrize("argv, words, absent", [
    # PP 2 with both end stages given: no middle stage, not "0 stages"
    (["--model", "llama-3-70b", "--first-stage-layers", "30", "--last-stage-layers", "30", "--pp", "2"],
     "with PP = 2 no stage lies between them, so they must add up to the model's 80 layers (they add up to 60)",
     "over 0 stages"),
    # torchtitan-2412 models no pipelining: not "use a torchtitan profile", not Megatron's zb1p
    (["--model", "llama-3-8b", "--profile", "torchtitan-2412", "--schedule", "zbv", "--pp", "2", "--dp", "2"],
     "profile torchtitan-2412 (torchtitan 9dec370, the code of published runs) models no pipelining",
     "zb1p"),
    # a zero-bubble schedule at PP 1 is refused, not answered as no pipeline
    (["--model", "llama-3-8b", "--profile", "torchtitan", "--schedule", "dualpipev", "--dp", "2"],
     "schedule DualPipeV: a pipeline schedule needs pipeline stages; give PP 2 or more (--pp)", "set --pp 1"),
    (["--model", "llama-3-8b", "--profile", "torchtitan", "--schedule", "zbv", "--dp", "2"],
     "a pipeline schedule needs pipeline stages; give PP 2 or more (--pp)", "set --pp 1"),
])
def test_message_names_what_was_typed(capsys, argv, words, absent):
    code = main(["memory", *argv])
    err = capsys.readouterr().err
    assert code == 2 and words in err and absent not in err and err.count("\n") == 1, err


def test_html_made_with_line_names_only_what_was_typed(capsys, tmp_path):
    # the page's "made with" command line: no --no-fsdp-float8-all-gather (a store_true switch left at its default),
    # and each flag as it is spelled
    import json
    import re

    out = tmp_path / "p.html"
    assert main(["html", "--model", "llama-3-8b", "--tp", "2", "-o", str(out)]) == 0, capsys.readouterr().err
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', out.read_text(),
                                re.S).group(1))
    assert data["command"] == "symmem html --model llama-3-8b --tp 2"


@pytest.mark.parametrize("argv, words, absent", [
    (["memory", "--model", "llama-3-8b", "--first-stage-layers", "40", "--pp", "2"],
     "--first-stage-layers = 40: more layers on the first stage than the model's 32 layers", "None"),
    (["memory", "--model", "llama-3-70b", "--first-stage-layers", "31", "--pp", "4"],
     "--first-stage-layers = 31: the remaining 49 layers do not spread evenly over the 3 stages between", "None"),
    (["memory", "--model", "llama-3-8b", "--profile", "torchtitan", "--schedule", "dualpipev", "--pp", "2", "--dp",
      "2"], "2·PP = 4 (--microbatches, or --global-batch-size; the default is PP)", "None"),
    (["html", "--scenario", "paper", "--gpu-choices", "H100"],
     "must include the page's starting gpu: H800, the paper scenario's (set it with --gpu)", "scenario's gpu ="),
])
def test_values_named_with_their_flags(capsys, tmp_path, argv, words, absent):
    code = main([*argv, *(["-o", str(tmp_path / "p.html")] if argv[0] == "html" else [])])
    err = capsys.readouterr().err
    assert code == 2 and words in err and absent not in err and err.count("\n") == 1, err


def test_html_refuses_a_torchtitan_scenario_before_rebuilding_its_choices(capsys, tmp_path):
    # it failed on an internal recipe name ('torchao-float8-tensorwise+fsdp-float8-all-gather') before saying why
    code = main(["html", "--model", "llama-3-8b", "--profile", "torchtitan", "--dp", "8", "--precision",
                 "torchao-float8-tensorwise", "--enable-fsdp-float8-all-gather", "-o", str(tmp_path / "p.html")])
    err = capsys.readouterr().err
    assert code == 2 and "lays out its own model states" in err and "+fsdp" not in err and err.count("\n") == 1


def test_a_refused_model_is_named_as_given(capsys):
    # the model as the user named it, its family beside (not "model family 'deepseek'")
    code = main(["memory", "--model", "mixtral-8x7b", "--profile", "torchtitan", "--dp", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "mixtral-8x7b (family mixtral)" in err and "'mixtral" not in err, err
    # DeepSeek-V3.2 under torchtitan: a one-line refusal (it was an internal AttributeError)
    code = main(["memory", "--model", "deepseek-v3.2", "--profile", "torchtitan", "--dp", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "deepseek-v3.2 (family deepseek_v32): torchtitan 0.3.0 ships DeepSeek-V3's layers" in err


@pytest.mark.parametrize("profile", ["paper", "torch-eager", "megatron-te"])
@pytest.mark.parametrize("extra", [["--attn-impl", "sdpa"], ["--experts-impl", "grouped_mm"], ["--dataflow", "hf"],
                                   ["--rules", "torch-eager"]])
def test_a_hint_leads_to_an_answer(capsys, profile, extra):
    # issue 45, defect 7: the flags a refusal suggests, added to the command, give an answer, not a second refusal
    # (was: "--attn-impl sdpa ... use --rules torch-eager" under a profile, whose rules --rules does not override)
    import re

    argv = ["memory", "--model", "deepseek-v2-lite", "-s", "512", "--profile", profile, *extra]
    if main(argv) == 0:
        capsys.readouterr()
        return
    err = capsys.readouterr().err
    hint = re.findall(r"\((--[a-z-]+(?: [a-z0-9-]+)?(?: --[a-z-]+(?: [a-z0-9-]+)?)*)\)", err)
    assert hint, err
    assert main(argv + hint[-1].split()) == 0, capsys.readouterr().err


def test_more_stages_than_layers_is_said_as_such(capsys):
    """The paper's layout at PP above the layer count said 'leaving -31 for the last' (a review's finding)."""
    from symmem.cli.main import main

    assert main(["memory", "--model", "llama-3-8b", "--pp", "64"]) == 2
    err = capsys.readouterr().err
    assert "--pp 64: more pipeline stages than the model's 32 layers; choose PP at most 32" in err, err
    assert err.count("\n") == 1
