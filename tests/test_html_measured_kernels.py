"""The page and the measured-kernels step-time model (symmem/steptime/measured.py): where `symmem memory --gpu B200`
times a step by the GPU's measured kernels, the page's script times it the same way (the kernel profile's tables,
the nearest measured shapes, SimuMax's collective formula, the four constants) and shows the same seconds; where
they do not apply (a group spanning nodes, the P2P CP ring, a GPU with no kernel profile), it times the step by the
fitted model, as `symmem memory` does. Read back from a real headless Chromium."""

from __future__ import annotations

import pytest

from tests.test_html_page import _assert_equal, _open, browser, browser_only, memory_json, run_cli  # noqa: F401

FLAGS = ("--model", "llama-3-8b", "--profile", "megatron-te", "-s", "4096", "--tp", "2", "--dp", "4", "--gpu",
         "B200")


def _page_model(page) -> str:
    return page.inner_text("[data-field=step_model]")


def _page_matches(browser, path, query: str, want: dict) -> None:  # noqa: F811 (the fixture's name)
    """The page at `query` shows `want`'s figures (`symmem memory --json`) and names the model that timed them."""
    page, errors = _open(browser, path, query)
    try:
        _assert_equal(page, want)
        assert not errors
        assert ("measured kernels" in _page_model(page)) == (want["step"]["model"] == "measured kernels"), query
        caveat = page.query_selector("[data-field=step_caveat]")
        assert (caveat.inner_text() if caveat else "") == want["step"].get("caveat", ""), query
    finally:
        page.close()


@browser_only
def test_the_page_times_a_measured_kernels_step_as_memory_does(browser, tmp_path):  # noqa: F811
    path = tmp_path / "page.html"
    code, _, err = run_cli("html", *FLAGS, "--pp-choices", "1,2", "--cp-choices", "1,2", "--zero-choices", "0,1,3",
                           "-o", str(path))
    assert code == 0, err
    # the measured kernels: the page's own arrangement, PP 2 (the pipeline's sends and bubble), b 2 and a longer s
    # (GEMM and attention shapes between the measured ones), ZeRO 0 (an all-reduce), CP 2 over all-to-all is a
    # scenario the page was not made with (the P2P ring is the default), so it is checked for the fitted model below
    base = FLAGS[:4]
    for query, flags in (("", ("-s", "4096", "--tp", "2", "--dp", "4")),
                         ("?pp=2&dp=2", ("-s", "4096", "--tp", "2", "--pp", "2", "--dp", "2")),
                         ("?b=2&s=6144", ("-s", "6144", "-b", "2", "--tp", "2", "--dp", "4")),
                         ("?zero=0&dp=2", ("-s", "4096", "--tp", "2", "--dp", "2", "--zero", "0")),
                         ("?pp=2&dp=2&recompute=full", ("-s", "4096", "--tp", "2", "--pp", "2", "--dp", "2",
                                                        "--recompute", "full"))):
        want = memory_json(*base, *flags, "--gpu", "B200")
        assert want["step"]["model"] == "measured kernels" and want["step"]["caveat"] == "", query
        _page_matches(browser, path, query, want)
    # longer than the fitted iterations: the same caveat as memory's
    want = memory_json(*base, "-s", "65536", "--tp", "2", "--dp", "4", "--gpu", "B200")
    assert want["step"]["caveat"]
    _page_matches(browser, path, "?s=65536", want)
    # where memory uses the fitted model the page shows its time: DP 8 x TP 2 (16 GPUs, the data-parallel groups
    # span two nodes), CP 2 over the P2P ring, ZeRO-3 chosen on the page, and the same step on an H100 (no kernel
    # profile)
    for query, flags in (("?dp=8", ("--tp", "2", "--dp", "8", "--gpu", "B200")),
                         ("?zero=3", ("--tp", "2", "--dp", "4", "--zero", "3", "--gpu", "B200")),
                         ("?cp=2&dp=2", ("--tp", "2", "--cp", "2", "--dp", "2", "--gpu", "B200")),
                         ("?gpu=H100", ("--tp", "2", "--dp", "4", "--gpu", "H100"))):
        want = memory_json(*FLAGS[:-6], *flags)
        assert want["step"]["model"] == "fitted", query
        _page_matches(browser, path, query, want)


@browser_only
def test_the_page_times_all_to_all_cp_and_experts_by_the_measured_kernels(browser, tmp_path):  # noqa: F811
    """An MoE model with all-to-all CP: the experts' grouped GEMMs, the all-to-all dispatch, the CP all-to-alls and
    the experts' own data-parallel group, on the page as in `symmem memory`."""
    flags = ("--scenario", "deepseekv2_tp1_ep8_pp1_dp8_l4_mbc4_cef", "--cp-comm-type", "a2a", "--global-batch-size",
             "32")
    path = tmp_path / "moe.html"
    code, _, err = run_cli("html", *flags, "--cp-choices", "1,2", "--ep-choices", "4,8", "-o", str(path))
    assert code == 0, err
    for query, par in (("", ()), ("?cp=2&dp=4", ("--cp", "2", "--dp", "4")),
                       ("?ep=4&zero=0", ("--ep", "4", "--zero", "0"))):
        want = memory_json(*flags, *par)
        assert want["step"]["model"] == "measured kernels", query
        _page_matches(browser, path, query, want)


@browser_only
def test_a_page_made_at_zero_3_times_zero_1_by_the_measured_kernels(browser, tmp_path):  # noqa: F811
    """ZeRO is the reader's: a page made at ZeRO 3 (the fitted model's) times the reader's ZeRO 1 and 0 by the
    measured kernels, as memory does (the template's GPUs are read without the ZeRO test, the script makes it)."""
    flags = FLAGS[:4] + ("-s", "4096", "--tp", "2", "--dp", "4", "--gpu", "B200")
    path = tmp_path / "zero3.html"
    code, _, err = run_cli("html", *flags, "--zero", "3", "--zero-choices", "0,1,3", "-o", str(path))
    assert code == 0, err
    for query, zero, model in (("", "3", "fitted"), ("?zero=1", "1", "measured kernels"),
                               ("?zero=0", "0", "measured kernels")):
        want = memory_json(*flags, "--zero", zero)
        assert want["step"]["model"] == model, query
        _page_matches(browser, path, query, want)


@browser_only
def test_the_pages_nearest_measured_shapes_are_pythons(browser, tmp_path):  # noqa: F811
    """The script's interpolation between measured shapes against `steptime.kernels._nearest`, over a grid of
    power-of-two shapes (many midway between measured ones, their neighbours tied) for every table: equal to 1e-12.
    And a Qwen3-30B-A3B page at shapes where a cut at the fourth-nearest shape once kept different ties in the two."""
    import itertools
    import math

    from symmem.steptime.kernels import NEAREST, TIE, _nearest, profile

    p = profile("B200")
    log = math.log
    queries = [("gemm", lay, [log(m), log(k), log(n)]) for lay in ("TN", "NN", "NT")
               for m, k, n in itertools.product((256, 1024, 4096, 8192, 16384, 3000, 14336), repeat=3)]
    queries += [("grouped", st, [log(e), log(t), log(n), log(k)]) for st in ("fwd", "bwd_grad_act", "bwd_grad_w")
                for e, t, n, k in itertools.product((2, 8, 32, 64), (256, 1024, 4096), (768, 2048, 4096),
                                                    (768, 2048, 7168))]
    queries += [("attention", i, [log(s), log(h), log(kv), log(qk), log(v)]) for i in (1, 2)
                for s, h, kv, qk, v in itertools.product((2048, 4096, 8192, 32768), (4, 16, 64), (1, 2, 16, 64),
                                                         (128, 192), (128,))]

    def table(kind, key):
        if kind == "attention":
            return (p.attention[0], p.attention[key])
        return (p.gemm if kind == "gemm" else p.grouped)[key]

    want = [_nearest(*table(kind, key), at) for kind, key, at in queries]
    path = tmp_path / "page.html"
    code, _, err = run_cli("html", *FLAGS, "-o", str(path))
    assert code == 0, err
    page, errors = _open(browser, path)
    try:
        tables = {f"{kind}/{key}": table(kind, key) for kind, key, _at in queries}
        got = page.evaluate("""([tables, qs, count, tie]) =>
            qs.map(([kind, key, at]) => nearest(tables[kind + "/" + key], at, count, tie))""",
                            [{k: [list(map(list, v[0])), list(v[1])] for k, v in tables.items()},
                             queries, NEAREST, TIE])
        assert not errors
    finally:
        page.close()
    assert len(got) == len(want)
    for q, a, b in zip(queries, want, got, strict=True):
        assert b == pytest.approx(a, rel=1e-12), q
    flags = ("--model", "qwen3-30b-a3b", "--profile", "megatron-te", "-s", "4096", "--tp", "1", "--ep", "4",
             "--dp", "4", "--gpu", "B200")
    path = tmp_path / "qwen.html"
    code, _, err = run_cli("html", *flags, "--ep-choices", "2,4", "--tp-choices", "1", "--pp-choices", "1,2",
                           "--cp-choices", "1", "-o", str(path))
    assert code == 0, err
    for query, extra in (("?b=2", ("-b", "2")), ("?s=8192", ("-s", "8192")),
                         ("?b=4&s=2048", ("-b", "4", "-s", "2048"))):
        want_step = memory_json(*flags, *extra)
        assert want_step["step"]["model"] == "measured kernels"
        _page_matches(browser, path, query, want_step)


@browser_only
def test_the_pages_attention_time_is_pythons_beyond_the_measured_sequences(browser, tmp_path):  # noqa: F811
    """The script's attention time against `steptime.kernels.attention_seconds` on B200's table, at sequences where
    the table's own reading falls below a shorter sequence's (131,072 tokens: the 32,768-token figure taken) and
    where it does not: equal to 1e-12."""
    import itertools

    from symmem.steptime.kernels import attention_seconds, measured_attention_efficiency, profile

    p = profile("B200")
    shapes = [(b, s, h, kv, qk, v, again) for b, s, (h, kv, qk, v), again in itertools.product(
        (1, 2), (4096, 32768, 65536, 131072, 262144), ((8, 1, 128, 128), (16, 2, 128, 128), (64, 64, 192, 128)),
        (False, True))]
    assert measured_attention_efficiency(p, 131072, 8, 1, 128, 128)[0] < \
        measured_attention_efficiency(p, 32768, 8, 1, 128, 128)[0]  # the floor is exercised
    want = [attention_seconds(p, *shape) for shape in shapes]
    path = tmp_path / "page.html"
    code, _, err = run_cli("html", *FLAGS, "-o", str(path))
    assert code == 0, err
    page, errors = _open(browser, path)
    try:
        got = page.evaluate("(qs) => qs.map(q => kernelAttention(D.speeds.kernels.B200, ...q))",
                            [list(x) for x in shapes])
        assert not errors
    finally:
        page.close()
    for q, a, b in zip(shapes, want, got, strict=True):
        assert b == pytest.approx(a, rel=1e-12), q


def test_the_page_reads_the_measured_kernels_costs_where_memory_uses_them():
    """Without a browser: the template carries the kernels' costs where the scenario-wide test passes (B200, BF16,
    a2a CP or none), not under the P2P ring, and its collectives' forms give `stage_collectives` at a point they
    were not read from."""
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.render.page_steptime import template
    from symmem.scenario import model_scenario
    from symmem.steptime.measured import stage_collectives

    def scenario(cp_comm_type):
        par = Parallel(tp=2, cp=2, pp=2, sequence_parallel=True, cp_comm_type=cp_comm_type)
        return model_scenario(load_model("llama-3-8b")).replace(
            profile_name="megatron-te", precision=recipe("megatron"), zero=zero_stage(1), parallel=par, b=1,
            s=4096, gpu_name="B200")

    scn = scenario("a2a")
    tpl = template(scn)
    assert tpl["measured"] == ["B200"] and len(tpl["kernels"]) == 2
    b, k = 3, 5  # b = 3, s = 5 S: outside the six points the forms were read at
    other = scn.replace(b=b, s=k * scn.s)
    for j, st in enumerate(other.stages):
        want = stage_collectives(other, st)
        got = {(axis, kind): (c[0] + c[1] * k + c[2] * b * k + c[3] * k * k + c[4] * b * k * k, calls)
               for axis, kind, c, calls, _n in tpl["kernels"][j]["colls"]}
        assert set(got) == set(want) and {key for key in want if key[0] == "cp"}, j
        for key, (nb, calls) in want.items():
            assert got[key][0] == pytest.approx(nb, rel=1e-9) and got[key][1] == calls, key
    assert "kernels" not in template(scenario("p2p"))
