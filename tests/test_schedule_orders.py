"""ZB-H1 and DualPipe run in their real order (issue 22): the per-rank sequences, worked by hand from their sources,
and the micro-batches each rank holds, against what the papers state.

Sources: ZB-H1, Qi et al., arXiv 2401.10241, §2.1 and Figure 3 (top), as the DeepSpeed port runs it
(deepspeed_zbh1_schedule.py, saforem2/Megatron-DeepSpeed at 40e942a, enable_zbh1_exact_semantics: warm-up
PP - i - 1 forwards, i rounds of F B, then F B W, then B W, then the last i W); DualPipe, deepseek-ai/DualPipe at
3da1bbe, dualpipe/dualpipe.py `DualPipe.step` (its eight steps), and the DeepSeek-V3 report's Table 2 (also the
repository's README): activation per device PP + 1 for DualPipe, PP for 1F1B and ZB1P. No number here is symmem's
output.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from symmem.errors import SymmemError
from symmem.parallel.schedule import Schedule


def _parse(text: str, chunked: bool = False) -> list[tuple[str, int, int]]:
    """'F0 B0 W0' (one chunk) or 'F0.1' (micro-batch 0 of chunk 1) -> order tuples."""
    out = []
    for tok in text.split():
        mb, _, c = tok[1:].partition(".")
        out.append((tok[0], int(mb), int(c) if chunked else 0))
    return out


def _peaks(order) -> tuple[int, int]:
    """(most micro-batches between their F and their B, most between their F and their last backward event)."""
    deferred = {(mb, c) for ph, mb, c in order if ph == "W"}
    full, waiting, best_full, best_all = set(), set(), 0, 0
    for ph, mb, c in order:
        if ph == "F":
            full.add((mb, c))
        elif ph == "B":
            full.remove((mb, c))
            if (mb, c) in deferred:
                waiting.add((mb, c))
        else:
            waiting.remove((mb, c))
        best_full, best_all = max(best_full, len(full)), max(best_all, len(full) + len(waiting))
    return best_full, best_all


# ---- ZB-H1, PP = 4, M = 8 (stage i delays its W by i; stage 0 runs whole backwards: 1F1B)
ZB_H1_4_8 = {
    0: "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
    # warm-up 2; one F B; F B W while forwards remain (5 rounds); B W for the last 2; the last W
    1: "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7",
    # no warm-up; three F B; five F B W; no B left; the last three W
    3: "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7",
}


@pytest.mark.parametrize("stage", sorted(ZB_H1_4_8))
def test_zb_h1_order_by_hand(stage):
    assert Schedule("zb1p").order(stage, 4, 8) == _parse(ZB_H1_4_8[stage])


def test_zb_h1_holds_what_the_paper_says():
    # §2.1: the first worker holds as many as under 1F1B (PP); every worker has PP micro-batches in flight (F to W),
    # of which PP - i unfinished by B: the engine's count of whole micro-batches in flight agrees
    peaks = [_peaks(Schedule("zb1p").order(i, 4, 8)) for i in range(4)]
    assert [full for full, _ in peaks] == [4, 3, 2, 1]
    assert [both for _, both in peaks] == [4, 4, 4, 4]
    assert [Schedule("zb1p").in_flight(i, 4, 8) for i in range(4)] == [4, 3, 2, 1]


@pytest.mark.parametrize("pp, m", [(2, 1), (4, 2), (4, 3), (4, 4), (8, 7), (8, 32), (3, 5)])
def test_zb_h1_every_pass_once_and_in_dependency_order(pp, m):
    for i in range(pp):
        order = Schedule("zb1p").order(i, pp, m)
        for ph in "FB":
            assert [mb for p, mb, _ in order if p == ph] == list(range(m))
        assert [mb for p, mb, _ in order if p == "W"] == (list(range(m)) if i else [])
        pos = {(p, mb): k for k, (p, mb, _) in enumerate(order)}
        assert all(pos[("F", j)] < pos[("B", j)] for j in range(m))
        assert all(pos[("B", j)] < pos[("W", j)] for j in range(m) if i)
        assert _peaks(order)[0] == Schedule("zb1p").in_flight(i, pp, m) == min(m, pp - i)


# ---- DualPipe, PP = 4 ranks, M = 8 (4 each way). Rank r holds chunk 0 (stage r, micro-batches fed at rank 0)
# and chunk 1 (stage 3 - r, fed at rank 3); h = min(r, 3 - r). Steps of DualPipe.step, with PP/2 = 2, M/2 = 4:
# rank 0 (h = 0): 1: 2 F0 | 2: 1 x (F0 F1) | 3: 1 x (B1 W F1), B1 deferred | 4: 4 - 4 + 0 + 1 = 1 x (F0 B1 F1 B0)
#   | 5: 1 x (B1 F1 B0) | 6: 1 x (B1 B0), B0 deferred (h even: from B0 of round 0) | 7: 1 x (W B0), B0 deferred
#   | 8: 1 W
# rank 1 (h = 1): 1: none | 2: 2 x (F0 F1) | 3: none | 4: 2 x (F0 B1 F1 B0) | 5: none
#   | 6: 2 x (B1 B0), both of round 1 deferred (h odd: from B1 of round 1) | 7: none | 8: 2 W
# ranks 2 and 3 (second half) run ranks 1 and 0's steps with the phases swapped.
DUALPIPE_4_8 = {
    0: "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 F3.0 B1.1 F2.1 B0.0 B2.1 F3.1 B1.0 B3.1 B2.0 W2.0 B3.0 W3.0",
    1: "F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 F2.1 B0.0 F3.0 B1.1 F3.1 B1.0 B2.1 B2.0 B3.1 B3.0 W3.1 W3.0",
}


@pytest.mark.parametrize("rank", [0, 1])
def test_dualpipe_order_by_hand(rank):
    order = Schedule("dualpipe").order(rank, 4, 8)
    assert order == _parse(DUALPIPE_4_8[rank], chunked=True)
    mirrored = [(p, mb, 1 - c) for p, mb, c in order]
    assert Schedule("dualpipe").order(3 - rank, 4, 8) == mirrored


@pytest.mark.parametrize("pp, m", [(4, 8), (4, 10), (8, 16), (8, 20), (16, 32), (16, 64)])
def test_dualpipe_holds_pp_plus_one_on_every_rank(pp, m):
    # DeepSeek-V3 Table 2 / DualPipe README: activation per device PP + 1 (of one stage's micro-batch); 8 ranks and
    # 20 micro-batches is the README's figure. The engine's count (in_flight) agrees wherever the schedule runs.
    for r in range(pp):
        order = Schedule("dualpipe").order(r, pp, m)
        assert _peaks(order) == (pp + 1, pp + 1), r
        assert Schedule("dualpipe").in_flight(r, pp, m) == pp + 1
        for c in (0, 1):
            for ph in "FB":
                assert [mb for p, mb, k in order if p == ph and k == c] == list(range(m // 2))
        pos = {(p, mb, c): k for k, (p, mb, c) in enumerate(order)}
        assert all(pos[("B", mb, c)] < pos[("W", mb, c)] for p, mb, c in order if p == "W")
        assert all(pos[("F", mb, c)] < pos[("B", mb, c)] for p, mb, c in order if p == "B")


def test_dualpipe_order_needs_twice_pp_microbatches():
    # dualpipe.py:333 asserts num_chunks >= num_ranks * 2: the order and the in-flight count refuse fewer alike
    with pytest.raises(SymmemError, match="M >= 2·PP = 8"):
        Schedule("dualpipe").order(0, 4, 6)
    with pytest.raises(SymmemError, match="M >= 2·PP = 8"):
        Schedule("dualpipe").in_flight(0, 4, 6)
    assert Schedule("dualpipe").in_flight(0, 4, 8) == Fraction(5)
    assert Schedule("dualpipe").default_microbatches(4) == 8


def test_timeline_refuses_a_dualpipe_order_that_does_not_exist(capsys, tmp_path):
    from symmem.cli.main import main

    code = main(["timeline", "--scenario", "llama3_70b_l12_tp1_pp2_dp4_mbc4_cef", "--schedule", "dualpipe",
                 "--microbatches", "2", "--out", str(tmp_path / "t.png")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "2·PP = 4" in err, err


# ---- the walk of the whole step against the engine's candidate peak
def _walk(scn, stage) -> int:
    """The largest event of the step walked in the schedule's real order (dynamic bytes), by the engine's own peak
    picker over the walk's events."""
    from symmem.accounting.analysis import stage_step_series, values
    from symmem.accounting.timeline import stage_peak

    return stage_peak(stage_step_series(scn, stage), {}, values(scn), Fraction(1)).peak_allocated


def test_zb_h1_walk_finds_the_deferred_weight_gradients_the_candidate_omits():
    """Stage 0 runs 1F1B: its walk is the candidate peak. The last stage (PP = 2) keeps micro-batch j's weight-
    gradient operands from its B to its W, one step later: the walk is above the candidate count (which counts
    only whole micro-batches in flight), by no more than two micro-batches' operands (the one waiting and the one
    being back-propagated). symmem memory's peak under zb1p is the walk."""
    from fractions import Fraction

    from symmem.accounting.analysis import memory, stage_timeline_events, values
    from symmem.accounting.deferred import weight_grad_stash
    from symmem.accounting.evaluate import evaluate
    from symmem.accounting.timeline import stage_peak
    from symmem.model import stage_parts
    from symmem.scenario import load_scenario

    scn = load_scenario("llama3_70b_l12_tp1_pp2_dp4_mbc4_cef").replace(schedule=Schedule("zb1p"))
    first, last = memory(scn)

    def counted_peak(m):  # the in-flight count's candidates, as every schedule but ZB-H1 and DualPipe is derived
        return stage_peak(stage_timeline_events(scn, m.stage), m.peak.static, values(scn), Fraction(1))

    # stage 0 runs 1F1B: its walk is the candidate count's peak (two derivations, one number)
    assert _walk(scn, first.stage) + sum(first.peak.static.values()) == counted_peak(first).peak_allocated
    walked = _walk(scn, last.stage) + sum(last.peak.static.values())
    assert walked == last.peak_allocated  # wiring: symmem memory's zb1p peak is the walk
    counted = counted_peak(last)
    key = scn.activation_key
    stash = sum(p.count * evaluate(weight_grad_stash(p.flow, scn.parallel.axis_sizes(), key[-1], 0), values(scn))
                for p in stage_parts(scn.model, last.stage, scn.convention, scn.flow_impl))
    assert counted.peak_allocated < walked <= counted.peak_allocated + 2 * stash


def test_dualpipe_walk_holds_both_chunks(capsys, tmp_path):
    import json

    from symmem.cli.main import main

    code = main(["timeline", "--scenario", "llama3_70b_l12_tp1_pp2_dp4_mbc4_cef", "--schedule", "dualpipe",
                 "--stage", "0", "--out", str(tmp_path / "t.png"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    events = [e["event"] for e in json.loads(out)["events"]]
    # M = 4: two micro-batches each way; chunk 1 of stage 0 is the last stage, with the head
    assert any("head (micro-batch 1, chunk 1)" in e for e in events)
    # PP/2 - h - 1 = 0 (no step 3 or 7): step 6's one round defers its B0 (h = 0 is even), step 8 pops it
    assert sum(e.startswith("weight gradients") for e in events) == 1
