"""The precision tables of `paper_tables/` (derivations/precision_recipes.py): regenerated, they equal the golden
files; their BF16 rows are the paper's own figures, and the recipes' model states follow from the bytes per
parameter their sources give."""

from pathlib import Path

from derivations import precision_recipes
from symmem.render.tables import render_all

GOLDEN = Path(__file__).resolve().parent.parent / "paper_tables"
PARAMS = 6_250_364_928  # parameters on one GPU of stages 1-14: the paper's Table 6 (arXiv 2502.07846)


def test_regenerated_tables_equal_the_golden_files():
    from symmem.render.sources import caption_tex  # the sources and assumptions `symmem paper` captions with

    for table in precision_recipes.tables():
        files = render_all(table, caption_tex(table.id))
        assert len(files) == 3  # Markdown, CSV, LaTeX
        for rel, content in files.items():
            assert (GOLDEN / rel).read_text() == content, f"{rel} differs from derivations/precision_recipes.py"


def test_bf16_rows_are_the_papers():
    static = {r[0]: r[1:] for r in precision_recipes.static_rows()}
    # Table 6: 12,500,729,856 bytes of BF16 weights; the paper's recipe adds FP32 gradients and two FP32 moments
    assert static["paper"] == (12_500_729_856, 0, 0, 4 * PARAMS, 8 * PARAMS, 14 * PARAMS)
    acts = {r[0]: r[3] + r[4] for r in precision_recipes.activation_rows()}
    assert acts["paper"] == 24_671_158_272  # Table 10, b = 1, no recomputation


def test_deepseek_fp8_model_states_by_hand():
    weights, copies, scales, grads, optimizer, total = {r[0]: r[1:] for r in precision_recipes.static_rows()}[
        "deepseek-v3-fp8"]
    # Report sec. 3.3.4: FP32 master weights (4 B) and gradients (4 B), BF16 AdamW moments (2 + 2 B)
    assert (grads, optimizer) == (4 * PARAMS, 8 * PARAMS)
    # What keeps a BF16 working copy (the rest is FP8): the 4 routers (256 experts x h = 7168) and the RMSNorm
    # weights (per layer: two of h, one of d_c = 512, one of d_cq = 1536)
    bf16 = 4 * 256 * 7168 + 4 * (2 * 7168 + 512 + 1536)
    assert weights == 2 * bf16
    # one FP8 byte per remaining parameter, beside its 128x128 FP32 scales (per GEMM, worked by hand in
    # tests/test_precision_recipes.py)
    assert copies - scales == PARAMS - bf16 and scales > 0
    assert total == weights + copies + grads + optimizer
