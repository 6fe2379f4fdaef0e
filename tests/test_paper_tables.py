"""Golden files: `paper_tables/` is exactly what `symmem paper` writes, and rewriting it changes nothing."""

import re
from pathlib import Path

from symmem.cli.main import main
from symmem.render.paper import generate

GOLDEN = Path(__file__).resolve().parent.parent / "paper_tables"


def test_every_golden_file_matches_regeneration():
    files = generate()
    on_disk = {str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*") if p.is_file()}
    assert set(files) == on_disk, set(files) ^ on_disk
    import matplotlib

    same_matplotlib = f"Drawn with matplotlib {matplotlib.__version__};" in (GOLDEN / "README.md").read_text()
    for rel, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        if rel.startswith("figures/") and not same_matplotlib:
            continue  # another matplotlib draws other bytes; test_render checks the figures' content
        if rel == "README.md" and not same_matplotlib:
            data = re.sub(rb"matplotlib [0-9][^;]*;", b"", data)
            assert re.sub(rb"matplotlib [0-9][^;]*;", b"", (GOLDEN / rel).read_bytes()) == data
            continue
        if rel.endswith(".pdf"):
            # a figure's drawing, compared to 1e-6 pt: the same code and libraries place a tick label 1e-10 pt
            # apart on another CPU (seen: measured_step_times.pdf, 94.7543902596 against ...597 on a fresh machine)
            assert _pdf_drawing((GOLDEN / rel).read_bytes()) == _pdf_drawing(data), f"{rel} draws otherwise"
            continue
        assert (GOLDEN / rel).read_bytes() == data, f"{rel} differs from what symmem paper writes"


def _pdf_drawing(pdf: bytes) -> list[bytes]:
    """A PDF's streams, decompressed, each real number rounded to 6 decimals (a millionth of a point)."""
    import zlib

    out = []
    for m in re.finditer(rb"stream\n(.*?)\nendstream", pdf, re.S):
        try:
            body = zlib.decompress(m.group(1))
        except zlib.error:
            body = m.group(1)
        out.append(re.sub(rb"-?\d+\.\d+", lambda x: b"%.6f" % round(float(x.group()), 6), body))
    assert out, "a PDF without streams"
    return out


def test_regenerating_twice_is_byte_identical(tmp_path, monkeypatch):
    # once with the figures drawn in a forked child (the measured runs' comparison sent to it through a pipe),
    # once in one process: the same bytes, whatever the machine's cores
    import symmem.render.paper as paper

    monkeypatch.setattr(paper, "_cores", lambda: 2)
    assert main(["paper", "--out", str(tmp_path / "a")]) == 0
    monkeypatch.setattr(paper, "_cores", lambda: 1)
    assert main(["paper", "--out", str(tmp_path / "b")]) == 0
    a = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    b = {p.relative_to(tmp_path / "b"): p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert a == b and a


def test_paper_numbers_in_golden_tables():
    # every value below is the paper's (arXiv 2502.07846): Table 6 (per-GPU parameters and bytes of stages 1-14),
    # Table 8 (ZeRO), Table 10 (activations per micro-batch, without and with full recomputation), Section 5
    t6 = (GOLDEN / "table6_gpu_static.csv").read_text()
    assert "6250364928,12500729856,11.64" in t6
    assert "5820645376" in t6 and "429719552" in t6
    t8 = (GOLDEN / "table8_zero.csv").read_text()
    assert "1.38,2.76,5.52,9.66" in t8
    assert "11.64,23.28,46.57" in t8
    t10 = (GOLDEN / "table10_activations.csv").read_text()
    assert "none,1,23177723904,1493434368,24671158272,22.98,24.67" in t10
    assert "full,1,234881024,262144,235143168" in t10
    s5 = (GOLDEN / "section5_formulas.csv").read_text()
    assert s5.count("EQUAL") == 3


def test_index_lists_every_table():
    index = (GOLDEN / "README.md").read_text()
    for p in GOLDEN.glob("*.md"):
        if p.name != "README.md":
            assert f"`{p.stem}`" in index


def test_peak_stage_shows_the_sum_and_the_timeline_peak_and_judges_by_the_peak():
    # issue 29 item 1: the paper's sum and symmem's timeline peak are both shown, each named for what it is; the
    # peak column is `symmem memory`'s peak_allocated for the same configuration, and the verdict is drawn from the
    # reserved estimate of the timeline peak, as `symmem memory` draws it, not from the sum
    import csv

    import symmem
    from symmem.accounting.analysis import verdict
    from symmem.accounting.states import ZeroStage

    with (GOLDEN / "peak_stage.csv").open() as f:
        rows = list(csv.DictReader(f))
    head = rows[0].keys()
    sum_col = "the paper's sum (states + activations x in flight), bytes"
    peak_col = "symmem's timeline peak, bytes"
    verdict_col = next(c for c in head if c.startswith("verdict at 80 GB"))
    assert {sum_col, peak_col, "timeline peak at (phase, part, op)", verdict_col} <= set(head)
    assert "Busiest stage of the paper's case: the paper's sum and symmem's timeline peak" in (
        GOLDEN / "peak_stage.md").read_text()
    zeros = {z.label: z for z in ZeroStage}
    base = symmem.load_scenario("paper")
    disagree = []
    for row in rows:
        scn = base.replace(recompute_name=row["recomputation"], zero=zeros[row["ZeRO"]], b=int(row["b"]))
        mems = symmem.memory(scn)
        top = max(mems, key=lambda m: (m.peak_allocated, -m.stage.index))
        by_sum = max(mems, key=lambda m: (m.allocated, -m.stage.index))
        ev = top.peak.event
        assert int(row[peak_col]) == top.peak_allocated and int(row["timeline-peak stage"]) == top.stage.index
        assert int(row[sum_col]) == by_sum.allocated
        assert row["timeline peak at (phase, part, op)"] == f"{ev.phase}, {ev.part}, {ev.op}"
        assert row[verdict_col] == verdict(*top.reserved, scn.gpu_memory)
        if verdict(by_sum.low, by_sum.high, scn.gpu_memory) != row[verdict_col]:
            disagree.append((row["recomputation"], row["ZeRO"], row["b"]))
    # the paper's sum (54.31 GiB) would fit selective recomputation, ZeRO-3, b = 1 in 80 GB; its timeline peak does not
    assert ("selective", "os+g+params", "1") in disagree
    sel = next(r for r in rows if (r["recomputation"], r["ZeRO"], r["b"]) == ("selective", "os+g+params", "1"))
    assert sel[verdict_col] == "does not fit"
    assert sel["the paper's sum (states + activations x in flight), GiB"] == "54.31"


def test_a_failing_child_is_reported_not_swallowed(monkeypatch):
    # the child fails before it reads the comparison the parent sends it: the parent says why, never exits 0
    import pytest

    import derivations
    import symmem.render.paper as paper

    def fail(*_args):
        raise ValueError("no figures today")

    monkeypatch.setattr(paper, "_cores", lambda: 2)
    monkeypatch.setattr(paper, "_child_work", fail)
    monkeypatch.setattr(derivations, "MODULES", ("table1_hyperparameters",))
    with pytest.raises(RuntimeError, match="drawing the figures failed: ValueError: no figures today"):
        paper.generate()


def test_measured_runs_figure_from_rows_sent_is_the_figure_derived():
    import pickle

    from derivations import measured_runs

    sent = pickle.loads(pickle.dumps(measured_runs.comparison()))
    assert measured_runs.figure(("pdf",), rows=sent) == measured_runs.figure(("pdf",))


def test_a_child_whose_parent_sends_nothing_ends_and_says_so():
    # the parent gone before it sent the comparison: the child's wait ends (EOFError, reported), never hangs
    import multiprocessing

    import symmem.render.paper as paper

    ctx = multiprocessing.get_context("fork")
    results_out, results_in = ctx.Pipe(duplex=False)
    rows_in, rows_out = ctx.Pipe(duplex=False)
    child = ctx.Process(target=paper._in_child, args=(results_in, (), rows_in, rows_out), daemon=True)
    child.start()
    results_in.close()
    rows_in.close()
    rows_out.close()  # as a parent that died before sending: no writer is left but the child's own copy, closed
    assert results_out.poll(120), "the child still waits for the rows"
    status, message = results_out.recv()
    child.join(10)
    assert status == "error" and message.startswith("EOFError")
