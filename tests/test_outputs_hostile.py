"""What a hostile review of the commands that read inputs and write files found (each fixed): a symbolic link
written through, not replaced; a link loop or an over-long name one line; a typo in [model_overrides] refused;
the memory-against-b figure at the M a global batch gives each b; `check` substituting E_tok as its header
defines it and refusing a symbol with no value (its worth was printed as 0 bytes); `check --layer` on its own
stage; `check --list` with nothing else."""

from __future__ import annotations

import json
import os

import pytest

from symmem.cli.main import main


def test_a_linked_output_is_written_through_and_the_link_kept(tmp_path, capsys):
    (tmp_path / "other").mkdir()
    target = tmp_path / "other" / "t.png"
    target.write_bytes(b"ORIGINAL")
    link = tmp_path / "link.png"
    link.symlink_to(target)
    assert main(["timeline", "--out", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("command", ["latex", "plot", "paper"])
def test_a_link_loop_or_a_long_name_is_one_line(tmp_path, capsys, command):
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    for out, words in ((tmp_path / "l1", "a symbolic-link loop"), (tmp_path / ("x" * 300), "File name too long")):
        assert main([command, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_a_misspelt_override_is_refused(tmp_path, capsys):
    base = "[training]\nmicro_batch_size = 1\nseq_length = 512\n[parallel]\ndp = 1\n"
    (tmp_path / "typo.toml").write_text(f'model = "llama-3-8b"\n{base}[model_overrides]\nhiden_size = 1024\n')
    assert main(["memory", "--scenario", str(tmp_path / "typo.toml")]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'hiden_size'" in err and err.count("\n") == 1, err
    (tmp_path / "ok.toml").write_text(f'model = "llama-3-8b"\n{base}[model_overrides]\nhidden_size = 1024\n')
    assert main(["memory", "--scenario", str(tmp_path / "ok.toml"), "--json"]) == 0


def test_the_figure_against_b_keeps_the_global_batch():
    """paper's scenario at a global batch of 512 (DP 32): M = 512 / (b x 32), 16 at b 1 and 1 at b 16, by hand."""
    from symmem.accounting.analysis import memory, peak
    from symmem.render.plots import figure_memory_sweep
    from symmem.scenario import load_scenario

    scn = load_scenario("paper").replace(microbatches=16)
    assert scn.parallel.dp == 32 and scn.b == 1
    _fig, data = figure_memory_sweep(scn, "b", [1, 16], 512)
    for b, m, got in ((1, 16, data["none"][0]), (16, 1, data["none"][1])):
        want = peak(memory(scn.replace(recompute_name="none", b=b, microbatches=m))).allocated
        assert got == want, (b, m)


D = ("16*N*b*s + 3*N_r*b*h*s/2 + 4*N_r*b*h_E*s + 8*E_tok*N + 32*N_s*b*h_E*s + 8*b*d_c*s + 8*b*d_cq*s "
     "+ 16*b*d_h*n_h*s + 8*b*d_hr*n_h*s + 30*b*h*s + 10*b*n_h*s^2")


def test_check_reads_e_tok_as_its_header_defines_it(capsys):
    # the derived stage.activations of the paper's stage 1 with 8 N_r b s written 8 E_tok N (E_tok = b s N_r / N)
    assert main(["check", D, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "EQUAL"
    for formula in ("k_I bsh", "a bsh"):  # symbols of other families: no value here, so no worth to print
        assert main(["check", formula]) == 2
        err = capsys.readouterr().err
        assert "has no value in this scenario (deepseek-v3)" in err and err.count("\n") == 1, err


def test_check_layer_is_on_its_own_stage_and_list_takes_nothing_else(capsys):
    assert main(["check", "bsh", "--quantity", "layer.activations", "--layer", "0", "--stage", "3"]) == 2
    assert "--layer = 0: not on stage 3 (it is on stage 0)" in capsys.readouterr().err
    assert main(["check", "bsh", "--quantity", "layer.activations", "--layer", "0", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["layer"], out["stage"]) == (0, 0)
    for extra in (["bsh"], ["--strict"], ["--stage", "1"]):
        assert main(["check", "--list", *extra]) == 2
        assert "--list: lists the quantities; it takes no" in capsys.readouterr().err
