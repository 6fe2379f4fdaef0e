"""LaTeX that compiles, formulas that render, figures that show the numbers."""

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from symmem.render.latex import latex
from symmem.render.report import Formula, scenario_formulas

GOLDEN = Path(__file__).resolve().parent.parent / "paper_tables"


def test_every_formula_renders_in_mathtext(paper):
    from matplotlib import mathtext

    count = 0
    for _, items in scenario_formulas(paper):
        for f in items:
            buf = io.BytesIO()
            mathtext.math_to_image(f"${f.latex}$", buf, dpi=30, format="png")
            assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
            count += 1
    assert count > 40


def test_paper_notation():
    from symmem import parse_formula

    e = parse_formula(r"10bsh + 8bs(d_{cq}+d_c) + 16bsd_hn_h + 8bsd_{hr}n_h + 10bn_hs^2")
    assert latex(e) == r"10bsh + 8bs(d_{cq}+d_c) + 16bsd_hn_h + 8bsd_{hr}n_h + 10bn_hs^{2}"
    # and it parses back
    assert parse_formula(latex(e)) == e


def test_repr_latex(paper):
    from symmem import parse_formula
    from symmem.render.paper import collect

    f = Formula("x", parse_formula("8bsh + 8bsN_r"))
    assert f._repr_latex_() == "$8bs(h+N_r)$"
    t = collect()[0]
    assert t._repr_latex_().startswith("% table1_hyperparameters")


def _pdflatex():
    exe = shutil.which("pdflatex")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("pdflatex is missing: .ci/run must install Debian's TeX Live packages")
        pytest.skip("pdflatex not installed")
    return exe


@pytest.mark.latex
def test_report_compiles(tmp_path):
    exe = _pdflatex()
    shutil.copytree(GOLDEN, tmp_path / "t")
    r = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", "report.tex"], cwd=tmp_path / "t",
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
    pdf = (tmp_path / "t" / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and len(pdf) > 50_000


@pytest.mark.latex
def test_scenario_latex_export_compiles(tmp_path):
    from symmem.cli.main import main

    exe = _pdflatex()
    assert main(["latex", "--scenario", "paper-megatron", "--recompute", "full", "--out", str(tmp_path)]) == 0
    r = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", "report.tex"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]


# ---- figures
def _pixels(png: bytes):
    import matplotlib.image as mpimg

    return mpimg.imread(io.BytesIO(png), format="png")


@pytest.mark.parametrize("name", ["stage_memory", "memory_vs_microbatch", "memory_vs_seqlen", "params_by_block"])
def test_paper_figure_is_not_blank(name, paper):
    # `symmem paper` writes the PDF only (golden); the same figure drawn as PNG shows what is on the page
    from symmem.render.plots import paper_figures

    files, _data = paper_figures(paper, (name,), ("png",))[name]
    img = _pixels(files["png"])
    h, w = img.shape[:2]
    assert w >= 500 and h >= 300
    assert img[..., :3].std() > 0.05  # not a blank page
    assert (img[..., :3] < 0.9).mean() > 0.02  # ink on at least 2 % of the pixels
    pdf = (GOLDEN / "figures" / f"{name}.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and b"CreationDate" not in pdf


def test_stage_figure_draws_the_memory_numbers(paper):
    from symmem.accounting.analysis import memory
    from symmem.render.plots import figure_stage_memory

    fig, data = figure_stage_memory([("paper", paper)])
    rows = data["paper"]
    mems = memory(paper)
    assert [r["activations"] for r in rows] == [m.activations for m in mems]
    assert [r["weights"] + r["gradients"] + r["optimizer"] for r in rows] == [m.states.total for m in mems]
    ax = fig.axes[0]
    # what is drawn: per component, one bar per stage, stacked in COMPONENTS order (bottom = the ones below)
    drawn = {c.get_label(): [(p.vertices[:, 1].min(), p.vertices[:, 1].max()) for p in c.get_paths()]
             for c in ax.collections}
    acts = drawn["activations"]
    assert [round(top - bottom, 6) for bottom, top in acts] == [round(m.activations / 2**30, 6) for m in mems]
    below = [r["weights"] + r["gradients"] + r["optimizer"] for r in rows]
    assert [round(bottom, 6) for bottom, _ in acts] == [round(v / 2**30, 6) for v in below]
    assert "GiB" in ax.get_ylabel() and ax.get_xlabel() == "pipeline stage"


def test_params_figure_sums_to_total(paper):
    from symmem.accounting.analysis import model_totals
    from symmem.render.plots import figure_params_by_block

    _, data = figure_params_by_block(paper.model)
    assert sum(data.values()) == model_totals(paper.model).total


def test_sweep_figure_is_monotone_in_b(paper):
    from symmem.render.plots import figure_memory_sweep

    _, data = figure_memory_sweep(paper, "b", [1, 2, 4])
    for policy, ys in data.items():
        assert ys == sorted(ys), policy
    assert data["full"][0] < data["selective"][0] < data["none"][0]


def test_figures_are_deterministic(paper):
    from symmem.render.plots import figure_params_by_block, save

    a = save(figure_params_by_block(paper.model)[0])
    b = save(figure_params_by_block(paper.model)[0])
    assert a == b


def test_plot_command(tmp_path):
    from symmem.cli.main import main

    assert main(["plot", "--out", str(tmp_path), "--figures", "params_by_block"]) == 0
    assert (tmp_path / "params_by_block.png").stat().st_size > 10_000


def test_comparison_repr_latex(paper):
    from symmem import compare, parse_formula, stage_activation_expr
    from symmem.accounting.analysis import values

    e = stage_activation_expr(paper, paper.stages[1], "mla")
    assert compare(e, e, values(paper))._repr_latex_() == r"$\text{EQUAL}$"
    wrong = compare(e, parse_formula("10bsh"), values(paper))._repr_latex_()
    assert wrong.startswith(r"$\text{DIFFERENT}") and "8bs(d_{cq}+d_c)" in wrong


def test_pdf_figures_leave_the_font_subsetter_unloaded():
    # matplotlib's PDF backend imports fontTools.subset but only uses it for Type 42 fonts; symmem defers it
    # (plots.defer_font_subsetter). In a fresh process: a Type 3 figure (the default) never executes it, the
    # PDF is the same with and without the deferral, and a Type 42 figure loads it on first use and embeds a font.
    import subprocess
    import sys

    code = """
import sys, symmem, matplotlib
from symmem.render import plots
fig, _ = plots.figure_params_by_block(symmem.load_model("deepseek-v3"))
a = plots.save(fig, ("pdf",))["pdf"]
print(type(sys.modules["fontTools.subset"]).__name__)
matplotlib.rcParams["pdf.fonttype"] = 42
b = plots.save(fig, ("pdf",))["pdf"]
print(type(sys.modules["fontTools.subset"]).__name__, b"/FontFile2" in b)
import hashlib; print(hashlib.sha256(a).hexdigest())
"""
    lazy, loaded, digest = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                          check=True).stdout.split("\n")[:3]
    assert lazy == "_LazyModule"
    assert loaded == "module True"
    eager = code.replace("from symmem.render import plots",
                         "import matplotlib.backends.backend_pdf\nfrom symmem.render import plots")
    out = subprocess.run([sys.executable, "-c", eager], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[0] == "module" and out.split("\n")[2] == digest


_SIGNATURES = """
import sys, inspect
from symmem import _gc
if sys.argv[1] == "program":
    _gc.enable()
from symmem.render.plots import load_matplotlib
load_matplotlib()
import matplotlib.artist, matplotlib.lines
written = "__signature__" in matplotlib.lines.Line2D.set.__dict__
restored = matplotlib.artist.Artist.__dict__["_update_set_signature_and_docstring"].__func__.__name__
print(written, restored)
"""


@pytest.mark.parametrize(("mode", "written"), [("program", False), ("library", True)])
def test_only_the_program_skips_the_artists_set_signatures(mode, written):
    # symmem.render.plots._without_set_signatures: the one-shot program leaves Line2D.set's signature unwritten (a
    # third of matplotlib's import) and puts matplotlib's method back; a library user's matplotlib keeps them
    out = subprocess.run([os.sys.executable, "-c", _SIGNATURES, mode], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(written), "_update_set_signature_and_docstring"]
