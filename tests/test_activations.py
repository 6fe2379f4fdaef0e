"""Activations derived from the dataflow: the paper's Section 5 and Table 10, and the invariants around them."""

from fractions import Fraction

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from symmem import SymmemError, parse_formula, stage_activation_expr
from symmem.accounting.analysis import memory, stage_terms, to_int, values
from symmem.blocks.symbols import N, N_s
from symmem.check.compare import DIFFERENT, EQUAL, EQUAL_AT_SCENARIO, compare
from symmem.parallel.routing import Routing
from symmem.parallel.schedule import Schedule
from symmem.parallel.sizes import Parallel
from symmem.symbols import b, s, sym

# The paper's Section 5 formulas as typed in the paper (per four-layer stage, per micro-batch, bytes).
PAPER_MLA = r"10bsh + 8bs(d_{cq}+d_c) + 16bsd_hn_h + 8bsd_{hr}n_h + 10bn_hs^2"
PAPER_MOE = r"20bsh + 16bsN + 8bsN_r + 4bs(N_r/N)(96h+256h_E) + 32bsh_E"
PAPER_FULL = r"8bsh + 8bsN_r"


def test_mla_formula_is_derived_exactly(paper):
    derived = stage_activation_expr(paper, paper.stages[1], "mla")
    assert sympy.expand(derived - parse_formula(PAPER_MLA)) == 0


def test_moe_formula_holds_at_n256_one_shared_expert(paper):
    derived = stage_activation_expr(paper, paper.stages[1], "moe")
    diff = sympy.expand(derived - parse_formula(PAPER_MOE))
    assert diff != 0  # not in general: the paper hard-codes N/EP = 32 and N_s = 1
    assert sympy.simplify(diff.subs({N: 256, N_s: 1})) == 0
    cmp = compare(derived, parse_formula(PAPER_MOE), values(paper))
    assert cmp.verdict == EQUAL_AT_SCENARIO
    assert dict(cmp.condition) == {"N": 256, "N_s": 1}


def test_full_recomputation_formula(paper):
    full = paper.replace(recompute_name="full")
    derived = stage_activation_expr(full, full.stages[1])
    assert sympy.expand(derived - parse_formula(PAPER_FULL)) == 0


def test_table10_totals_at_b1(paper):
    # The paper's Table 10 (b = 1, s = 4096), and by hand from its Section 5 formulas above at V3's sizes
    # (h 7168, d_cq 1536, d_c 512, d_h = d_hr·2 = 128, n_h 128, N 256, N_r 8, h_E 2048):
    # MLA 293,601,280 + 67,108,864 + 1,073,741,824 + 268,435,456 + 21,474,836,480 = 23,177,723,904;
    # MoE 587,202,560 + 16,777,216 + 262,144 + 620,756,992 + 268,435,456 = 1,493,434,368; sum 24,671,158,272.
    # Full recomputation 8bsh + 8bsN_r = 234,881,024 + 262,144 = 235,143,168.
    vals = values(paper)
    assert to_int(stage_activation_expr(paper, paper.stages[1]), vals) == 24_671_158_272
    full = paper.replace(recompute_name="full")
    assert to_int(stage_activation_expr(full, full.stages[1]), vals) == 235_143_168


def test_changed_coefficient_is_reported(paper):
    derived = stage_activation_expr(paper, paper.stages[1], "mla")
    wrong = parse_formula(PAPER_MLA.replace("16bsd_hn_h", "12bsd_hn_h"))
    cmp = compare(derived, wrong, values(paper))
    assert cmp.verdict == DIFFERENT
    (row,) = cmp.differing
    assert row.monomial == b * s * sym("d_h") * sym("n_h")
    assert (row.derived, row.claimed) == (16, 12)
    assert row.worth == 4 * 4096 * 128 * 128


# ---- invariants
POLICIES = ("none", "selective", "deepseek", "full")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("routing", ["paper", "dispatch"])
def test_linear_in_b(paper, policy, routing):
    scn = paper.replace(recompute_name=policy, routing=Routing(routing))
    for stage in (scn.stages[0], scn.stages[1], scn.stages[15]):
        e = stage_activation_expr(scn, stage)
        assert sympy.expand(e.subs(b, 2 * b) - 2 * e) == 0


@settings(max_examples=30, deadline=None)
@given(bv=st.integers(1, 8), sv=st.sampled_from([1, 7, 128, 1024, 4096, 8192]), stage=st.integers(0, 15),
       moe_sp=st.booleans(), routing=st.sampled_from(["paper", "dispatch"]))
def test_full_le_selective_le_none(paper, bv, sv, stage, moe_sp, routing):
    par = Parallel(2, 16, 8, 1, 32, None, True, moe_sp, 1024)
    got = []
    for policy in ("full", "selective", "none"):
        scn = paper.replace(recompute_name=policy, parallel=par, routing=Routing(routing))
        got.append(to_int(stage_activation_expr(scn, scn.stages[stage]), values(scn, bv, sv)))
    assert got[0] <= got[1] <= got[2]


def test_deepseek_recompute_between_full_and_none(paper):
    vals = values(paper)
    got = {p: to_int(stage_activation_expr(paper.replace(recompute_name=p), paper.stages[1]), vals) for p in POLICIES}
    assert got["full"] < got["deepseek"] < got["none"]


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 64), name=st.sampled_from(["gpipe", "1f1b", "zb1p"]))
def test_more_in_flight_never_less_memory(paper, m, name):
    scn = paper.replace(microbatches=m, schedule=Schedule(name))
    more = paper.replace(microbatches=m + 1, schedule=Schedule(name))
    for a, c in zip(memory(scn), memory(more), strict=True):
        assert c.activations >= a.activations
    mems = memory(scn)
    assert all(x.activations >= y.activations for x, y in zip(mems[1:14], mems[2:15], strict=True))


def test_sequence_sharding_divides_the_moe_block_by_t(paper):
    # Stated by hand, not read from the dataflow annotations the engine uses. One MoE layer of the paper's
    # accounting (BF16, 1-byte masks; E_tok = T·N_r/N tokens per routed expert, N/EP of them on the GPU) keeps,
    # for T tokens on the GPU, 5hT + 4NT + 2N_rT + 8N_s·h_E·T + N_r·h_E·T + (3/8)N_r·h·T bytes
    # (REGRESSION form: the engine's, as README "What it does" prints it; its terms are the paper's MoE terms,
    # arXiv 2502.07846, checked in paper_tables). Every one of them is a per-token tensor, so it is linear in T.
    # Without a sequence-sharded MoE block T = b·s; with it (Megatron-Core, SP over t) T = b·s/t. MLA is not
    # touched by the MoE flag: it keeps the same bytes either way.
    from symmem.symbols import sym

    b_, s_, h_, h_e, n, n_r, n_s, t_ = (sym(x) for x in ("b", "s", "h", "h_E", "N", "N_r", "N_s", "t"))

    def moe_layer(tokens):
        return (5 * h_ * tokens + 4 * n * tokens + 2 * n_r * tokens + 8 * n_s * h_e * tokens + n_r * h_e * tokens
                + sympy.Rational(3, 8) * n_r * h_ * tokens)

    layers = len(paper.stages[1].layers)
    assert layers == 4  # stage 1 of the paper's layout: ceil(61/16) = 4 MoE layers
    sharded = paper.replace(parallel=Parallel(2, 16, 8, 1, 32, None, True, True, 1024))
    got = {scn.parallel.moe_sp: {blk: stage_activation_expr(scn, scn.stages[1], blk) for blk in ("mla", "moe")}
           for scn in (paper, sharded)}
    assert sympy.expand(got[False]["moe"] - layers * moe_layer(b_ * s_)) == 0
    assert sympy.expand(got[True]["moe"] - (layers * moe_layer(b_ * s_ / t_)).subs(t_, 2)) == 0
    assert sympy.expand(got[True]["mla"] - got[False]["mla"]) == 0
    # in bytes at the paper's sizes (b = 1, s = 4096): the unsharded MoE block, halved at t = 2
    # 1,493,434,368 is also the paper's Section 5 MoE formula at b = 1, s = 4096 (worked by hand in
    # test_table10_totals_at_b1), which equals the engine's form here (N = 256, N_s = 1)
    REGRESSION_MOE_STAGE1 = 1_493_434_368  # also README, "The two hypotheses" (paper-megatron is 2,919,366,656)
    assert to_int(got[False]["moe"], values(paper)) == REGRESSION_MOE_STAGE1
    assert to_int(got[True]["moe"], values(sharded)) == REGRESSION_MOE_STAGE1 // 2


# ---- routing
def test_dispatch_is_ep_times_paper_routed_term(paper):
    def routed(scn):
        return sum(t.total for t in stage_terms(scn, scn.stages[1])
                   if t.tensor == "moe.expert_in" or t.tensor.startswith("experts."))

    r_paper = routed(paper)
    r_dispatch = routed(paper.replace(routing=Routing("dispatch")))
    assert sympy.simplify(r_dispatch / r_paper) == 8  # EP without sequence sharding
    megatron = paper.replace(routing=Routing("dispatch"), parallel=Parallel(2, 16, 8, 1, 32, None, True, True))
    assert sympy.simplify(routed(megatron) / r_paper) == 4  # EP / t
    cap = paper.replace(routing=Routing("capacity", capacity_factor="1.25"))
    assert sympy.simplify(routed(cap) / r_dispatch) == sympy.Rational(5, 4)


def test_histogram_busiest_rank(paper):
    loads = [1] * 256
    loads[:32] = [3] * 32  # rank 0's experts get 3x: its share is 96 / (96 + 224) = 3/10
    r = Routing("histogram", histogram=tuple(loads))
    assert r.busiest_rank_share(8) == sympy.Rational(3, 10)
    scn = paper.replace(routing=r)
    balanced = paper.replace(routing=Routing("dispatch"))
    e1 = to_int(stage_activation_expr(scn, scn.stages[1], "moe"), values(scn))
    e0 = to_int(stage_activation_expr(balanced, balanced.stages[1], "moe"), values(balanced))
    assert e1 > e0
    uniform = paper.replace(routing=Routing("histogram", histogram=(5,) * 256))
    assert stage_activation_expr(uniform, uniform.stages[1]) == stage_activation_expr(balanced, balanced.stages[1])


# ---- schedules, against hand-worked cases
def test_schedule_multipliers():
    assert [Schedule("1f1b").in_flight(i, 4, 8) for i in range(4)] == [4, 3, 2, 1]
    assert [Schedule("1f1b").in_flight(i, 4, 2) for i in range(4)] == [2, 2, 2, 1]
    assert [Schedule("gpipe").in_flight(i, 4, 8) for i in range(4)] == [8] * 4
    assert [Schedule("zb1p").in_flight(i, 4, 8) for i in range(4)] == [4, 3, 2, 1]
    # interleaved, PP 4, v 2: warm-up (4 - i - 1)·2 + (2 - 1)·4 chunk forwards + 1, each half a stage
    assert [Schedule("interleaved", 2).in_flight(i, 4, 8) for i in range(4)] == [
        Fraction(11, 2), Fraction(9, 2), Fraction(7, 2), Fraction(5, 2)]
    assert [Schedule("dualpipe").in_flight(i, 4, 8) for i in range(4)] == [5] * 4
    # DualPipe: GPU i holds stage i and stage PP - 1 - i (deepseek-ai/DualPipe's example builds both)
    assert [Schedule("dualpipe").held_stages(i, 4) for i in range(4)] == [(0, 3), (1, 2), (2, 1), (3, 0)]
    assert Schedule("1f1b").held_stages(1, 4) == (1,)


def test_interleaved_with_m_equal_pp_runs_every_forward_first():
    # Megatron: num_microbatches == pipeline size -> all M·v chunks warm up, on every stage
    assert [Schedule("interleaved", 2).in_flight(i, 4, 4) for i in range(4)] == [4, 4, 4, 4]


def test_interleaved_needs_stages_divisible_into_chunks(paper):
    with pytest.raises(SymmemError, match="stage 15 has 1 layers"):
        paper.replace(schedule=Schedule("interleaved", 2))
    Schedule("interleaved", 2).check_layout((4, 4, 2))  # divisible: no error
    with pytest.raises(SymmemError, match="stage 1 has 3 layers"):
        Schedule("interleaved", 2).check_layout((4, 3))


def test_dualpipe_copies_every_state(paper):
    from symmem.accounting.analysis import stage_params, stage_states

    one = stage_states(paper, stage_params(paper, paper.stages[1]))
    dual = paper.replace(schedule=Schedule("dualpipe"))
    two = stage_states(dual, stage_params(dual, dual.stages[1]))
    assert (two.weights, two.gradients, two.optimizer) == (2 * one.weights, 2 * one.gradients, 2 * one.optimizer)


def test_paper_stage0_holds_all_microbatches(paper):
    mems = memory(paper)
    assert [m.in_flight for m in mems] == [16 - i for i in range(16)]


# ---- bad input
@pytest.mark.parametrize("make, words", [
    (lambda p: p.replace(rules_name="nope"), "unknown rule set"),
    (lambda p: p.replace(recompute_name="sometimes"), "unknown policy"),
    (lambda p: p.replace(schedule=Schedule("round-robin")), "unknown schedule"),
    (lambda p: p.replace(schedule=Schedule("interleaved", 2), microbatches=8), "multiple of PP"),
    (lambda p: p.replace(schedule=Schedule("dualpipe"), microbatches=6), "DualPipe"),
    (lambda p: p.replace(microbatches=0), "positive"),
    (lambda p: p.replace(routing=Routing("histogram", histogram=(1, 2, 3))), "one per routed expert"),
    (lambda p: p.replace(routing=Routing("histogram", histogram=(1,) * 255 + (-1,))), "non-negative"),
    (lambda p: p.replace(routing=Routing("capacity", capacity_factor=0)), "> 0"),
    (lambda p: p.replace(routing=Routing("capacity", capacity_factor=-1.5)), "> 0"),
    (lambda p: p.replace(routing=Routing("magic")), "unknown routing"),
])
def test_bad_activation_settings(paper, make, words):
    with pytest.raises(SymmemError, match=words):
        make(paper)


def test_compare_equal(paper):
    e = stage_activation_expr(paper, paper.stages[1], "mla")
    assert compare(e, e, values(paper)).verdict == EQUAL


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v3.2", "deepseek-v4-flash"])
def test_bytes_added_term_by_term_equal_the_expanded_formula(model):
    # Two paths to one number: sympy's expanded sum of the kept tensors (what formulas print) and the evaluator's
    # sum of dictionary polynomials with floor/Min kept whole (what memory figures use). They must agree exactly,
    # for every policy and block, and for sequence lengths on both sides of V3.2's and V4's steps (k_I, s_w, m_C).
    from symmem.accounting.analysis import stage_activation_bytes
    from symmem.config import load_model
    from symmem.scenario import load_scenario, with_parallel

    base = with_parallel(load_scenario("paper"), pp=1).replace(model=load_model(model))
    base = with_parallel(base, tp=2, pp=8, ep=8, dp=32)
    for policy in POLICIES:
        for n in (64, 100, 1000, 2047, 4096, 12289):
            scn = base.replace(recompute_name=policy, s=n, b=3)
            for stage in (scn.stages[0], scn.stages[1], scn.stages[-1]):
                for block in (None, "mla", "attn", "moe", "mhc", "embedding", "head"):
                    expected = to_int(stage_activation_expr(scn, stage, block), values(scn))
                    assert stage_activation_bytes(scn, stage, block) == expected, (policy, n, stage.index, block)


@pytest.mark.parametrize("rules", ["paper", "torch-eager"])
def test_expanded_sum_is_sympys_expansion(rules):
    # The formula a stage prints is built from the dictionary polynomial when no term holds a step atom; it must
    # be the very expression sympy.expand gives (structurally equal, so that every printer prints the same).
    from symmem.accounting.analysis import _activation_key, _terms
    from symmem.accounting.evaluate import expanded_sum
    from symmem.model import stage_parts
    from symmem.scenario import load_scenario, with_parallel

    checked = 0
    for policy in POLICIES:
        scn = load_scenario("paper").replace(recompute_name=policy, rules_name=rules)
        for tp in (1, 2):
            scn = with_parallel(scn, tp=tp)
            for symbolic in (False, True):
                for stage in (scn.stages[0], scn.stages[1], scn.stages[-1]):
                    parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
                    terms = _terms(_activation_key(scn), parts, symbolic)
                    for block in (None, "mla", "moe", "mlp", "embedding", "head"):
                        chosen = [t for t in terms if block is None or t.block == block]
                        fast = expanded_sum(tuple((t.count, t.nbytes) for t in chosen))
                        assert fast is not None
                        assert fast == sympy.expand(sympy.Add(*[t.total for t in chosen])), (policy, block)
                        checked += 1
    assert checked == len(POLICIES) * 2 * 2 * 3 * 6
