"""`symmem calibrate -o FILE` on this CPU, and `--gpu FILE` timing the step with what it measured (issue 46, item
3): each GEMM pass and attention at the time measured for the nearest shapes of the profile's kernel table and
each collective over the measured link (the measured-kernels model, nothing fitted); a profile written before the
table, by its measured rates applied to the step's own FLOPs and bytes; a profile that measured no collectives
times no step that communicates; a bad profile is one line."""

from __future__ import annotations

import json

import pytest

from symmem.cli.main import main

pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("registry_restored")


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("calibrate") / "here.json"
    assert main(["calibrate", "-o", str(path), "--quick", "--repeat", "3"]) == 0
    return path


def test_calibrate_writes_a_profile(profile, capsys, tmp_path):
    raw = json.loads(profile.read_text())
    assert main(["calibrate", "-o", str(tmp_path / "again.json"), "--quick", "--repeat", "1", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["wrote"] == str(tmp_path / "again.json") and said["gemm_flops_per_s"] > 0
    assert raw["format"] == "symmem-hardware-profile/1" and raw["device"] in ("cpu", "cuda")
    assert [(g["m"], g["k"], g["n"]) for g in raw["gemm"]] == [(256, 256, 256), (512, 512, 512)]
    for g in raw["gemm"]:  # each rate is its own shape's FLOPs over its own time
        assert g["flops_per_s"] == pytest.approx(2 * g["m"] * g["k"] * g["n"] / g["seconds"])
    assert [a["s"] for a in raw["attention"]] == [128, 256]
    assert raw["copy_bytes_per_s"] > 0 and 0 < raw["launch_s"] < 1 and raw["memory_bytes"] > 2**30
    assert raw["links"] is None and "source" in raw
    # the kernel table: each shape's three passes, keyed as SimuMax keys them, the forward the summary row's time
    table = raw["kernels"]
    assert [r[:4] for r in table["gemm"]] == [[lay, *key] for m, k, n in ((256, 256, 256), (512, 512, 512))
                                             for lay, key in (("TN", (m, k, n)), ("NN", (m, n, k)),
                                                              ("NT", (n, m, k)))]
    assert [r[4] for r in table["gemm"] if r[0] == "TN"] == [g["seconds"] for g in raw["gemm"]]
    assert [r[:6] for r in table["attention"]] == [[1, s, 8, 8, 128, 128] for s in (128, 256)]
    assert all(r[6] > 0 and r[7] > 0 for r in table["attention"])
    assert [r[6] for r in table["attention"]] == [a["seconds"] for a in raw["attention"]]
    assert raw["elementwise_bytes_per_s"] > 0  # x * y + z in the step's dtype: the memory-bound ops' rate


def test_calibrate_times_a_models_own_attention_shapes(tmp_path, capsys):
    """--attention s:heads:kv_heads:head_dim adds those shapes to the kernel table (not to the summary rows), and
    the memory-bound ops run at the elementwise op's rate: the profile's fraction of the copy's."""
    from symmem.hardware_profile import register
    from symmem.steptime import kernels

    path = tmp_path / "own.json"
    assert main(["calibrate", "-o", str(path), "--quick", "--repeat", "1", "--attention", "64:4:2:32"]) == 0
    raw = json.loads(path.read_text())
    assert [r[:6] for r in raw["kernels"]["attention"]] == [[1, s, 8, 8, 128, 128] for s in (128, 256)] + [
        [1, 64, 4, 2, 32, 32]]
    assert len(raw["attention"]) == 2
    p = kernels.profile(register(str(path)))
    assert p.memory_bound == pytest.approx(raw["elementwise_bytes_per_s"] / raw["copy_bytes_per_s"], rel=1e-12)
    for bad, words in (("64:4:3:32", "kv_heads = 3 must divide heads = 4"), ("64:4:2", "is not s:heads"),
                       ("8:4:2:32", "--attention sequence")):
        assert main(["calibrate", "-o", str(tmp_path / "x.json"), "--quick", "--attention", bad]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1 and not (tmp_path / "x.json").exists(), err


def _without_kernels(profile, folder):
    """The profile as `symmem calibrate` wrote it before the kernel table (a file of an earlier version)."""
    raw = json.loads(profile.read_text())
    del raw["kernels"]
    path = folder / f"old-{profile.name}"
    path.write_text(json.dumps(raw))
    return path


def test_the_step_is_timed_by_the_calibrated_kernels(profile, capsys):
    """Each GEMM pass and attention at the table's times (the nearest measured shapes), the two slowdowns 1, the
    measured launch cost, nothing fixed, no caveat (nothing was fitted on iterations to be carried past)."""
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.hardware import gpu
    from symmem.steptime import costs, kernels

    raw = json.loads(profile.read_text())
    argv = ["memory", "--model", "llama-3-8b", "-s", "65536", "--gpu", str(profile)]
    assert main([*argv, "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["step"]
    assert step["model"] == "measured kernels" and step["model_note"] == "" and step["caveat"] == ""
    assert step["constants"] == {"gemm_slowdown": 1.0, "attention_slowdown": 1.0,
                                 "launch_s": pytest.approx(raw["launch_s"]), "fixed_s": 0.0}
    scn = scenario_from_args(build_parser().parse_args(argv))
    p, g = kernels.profile(scn.gpu_name), gpu(scn.gpu_name)
    c = costs.stage_costs(scn, scn.stages[0])
    parts = step["seconds_by_part"]
    assert parts["gemm"] == pytest.approx(sum(n * kernels.gemm_seconds(p, m, k, nn, e, again)
                                              for m, k, nn, e, n, again, _low in c.gemms), rel=1e-12)
    assert parts["attention"] == pytest.approx(sum(n * kernels.attention_seconds(p, *shape, again)
                                                   for *shape, n, again in c.attentions), rel=1e-12)
    assert parts["memory_bound"] == pytest.approx(c.memory_bytes / raw["elementwise_bytes_per_s"], rel=1e-12)
    assert parts["launches"] == pytest.approx(c.kernels * raw["launch_s"], rel=1e-12)
    # MFU's rate: the table's peak, every pass's best (the summary rows are the forward passes alone)
    assert parts["fixed"] == 0 and g.bf16 == p.peak >= max(gr["flops_per_s"] for gr in raw["gemm"])
    assert main(argv) == 0
    assert "symmem calibrate measured for it on the device (the nearest measured shapes), nothing fitted" in \
        capsys.readouterr().out


def test_a_calibrated_kernel_takes_the_time_measured_for_it():
    """At a measured shape the model's time is the measured seconds, whatever the peak (each efficiency is the
    shape's rate over the best one): the three passes' sum for a GEMM (the forward twice when recomputed), forward
    and backward for the attention; the experts without grouped GEMMs measured as that many GEMMs; collectives
    over the measured link, the latency per ring step."""
    from symmem.calibrate_kernels import kernel_profile
    from symmem.steptime import kernels, measured

    table = {"gemm": [["TN", 64, 32, 16, 1e-3], ["NN", 64, 16, 32, 2e-3], ["NT", 16, 64, 32, 4e-3],
                      ["TN", 128, 128, 128, 5e-3], ["NN", 128, 128, 128, 6e-3], ["NT", 128, 128, 128, 7e-3]],
             "attention": [[1, 256, 8, 2, 64, 64, 0.01, 0.03], [1, 512, 8, 2, 64, 64, 0.05, 0.12]]}
    links = {"intra_bytes_per_s": 2e9, "step_latency_s": 1e-5}
    p = kernel_profile("made up", table, 1e10, links)
    assert p.peak == 2 * 128**3 / 5e-3  # the best rate measured
    assert kernels.gemm_seconds(p, 64, 32, 16, 1, False) == pytest.approx(1e-3 + 2e-3 + 4e-3, rel=1e-12)
    assert kernels.gemm_seconds(p, 64, 32, 16, 1, True) == pytest.approx(2e-3 + 2e-3 + 4e-3, rel=1e-12)
    assert kernels.gemm_seconds(p, 64, 32, 16, 4, False) == pytest.approx(4 * 7e-3, rel=1e-12)
    assert kernels.attention_seconds(p, 1, 512, 8, 2, 64, 64, False) == pytest.approx(0.17, rel=1e-12)
    assert kernels.attention_seconds(p, 1, 256, 8, 2, 64, 64, True) == pytest.approx(0.05, rel=1e-12)
    assert measured.collective_seconds(p, "all-gather", 4e6, 2) == pytest.approx(4e6 / 2e9 + 1e-5, rel=1e-12)
    assert measured.collective_seconds(p, "all-reduce", 4e6, 4) == pytest.approx(4e6 / 2e9 + 6e-5, rel=1e-12)
    assert measured.p2p_seconds(p, 4e6) == pytest.approx(4e6 / 2e9 + 1e-5, rel=1e-12)


def test_a_profile_without_a_kernel_table_is_timed_with_its_measured_rates(profile, capsys, tmp_path):
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.hardware import gpu
    from symmem.steptime import features

    profile = _without_kernels(profile, tmp_path)
    raw = json.loads(profile.read_text())
    argv = ["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(profile)]
    assert main([*argv, "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["step"]
    gemm_rate = max(g["flops_per_s"] for g in raw["gemm"])
    attention_rate = max(raw["attention"], key=lambda a: a["s"])["flops_per_s"]
    k = step["constants"]
    assert step["model"] == "fitted" and "has no kernel profile" in step["model_note"]
    assert k == {"gemm_efficiency": 1.0, "attention_efficiency": pytest.approx(attention_rate / gemm_rate),
                 "link_efficiency": 1.0, "latency_s": pytest.approx(raw["launch_s"]), "fixed_s": 0.0}
    # the parts by hand from the step's features and the profile's numbers
    scn = scenario_from_args(build_parser().parse_args(argv))
    f = features(scn, gpu(scn.gpu_name))
    parts = step["seconds_by_part"]
    assert parts["gemm"] == pytest.approx(f.slots * (f.gemm_flops / gemm_rate + f.gemm_bytes / raw["copy_bytes_per_s"]))
    assert parts["attention"] == pytest.approx(f.slots * f.attention_flops / attention_rate)
    assert parts["memory_bound"] == pytest.approx(f.slots * f.memory_bytes / raw["copy_bytes_per_s"])
    assert parts["fixed"] == 0 and step["time_s"] == pytest.approx(sum(parts.values()))
    assert main(argv) == 0
    assert "rates measured on the device (--gpu profile), nothing fitted" in capsys.readouterr().out


def test_the_page_carries_a_measured_profile(profile, capsys, tmp_path):
    # its figures and its own constants go to the page's script (tests/test_html_measured_gpu.py reads the step
    # back from a browser); a link it did not measure goes as null, never as a non-JSON Infinity
    from symmem.render.page_steptime import gpus

    assert main(["html", "--model", "llama-3-8b", "-s", "512", "--gpu", str(profile), "-o",
                 str(tmp_path / "p.html")]) == 0
    speeds = gpus()
    key = next(k for k in speeds["gpu_constants"])
    raw = json.loads(profile.read_text())
    assert speeds["gpus"][key]["nvlink"] is None and speeds["gpus"][key]["network"] is None
    assert speeds["gpu_constants"][key]["latency_s"] == pytest.approx(raw["launch_s"])
    json.dumps(speeds, allow_nan=False)  # no Infinity for the script
    assert "Infinity" not in (tmp_path / "p.html").read_text()


def test_a_sweep_without_measured_links_times_nothing(profile, capsys):
    # one device measured: every configuration of 8 GPUs communicates, none can be timed: one line
    assert main(["sweep", "--model", "llama-3-8b", "--gpus", "8", "-s", "512", "--gpu", str(profile)]) == 2
    err = capsys.readouterr().err
    assert "none of the" in err and "measured no collectives" in err and err.count("\n") == 1


def test_the_sweep_ranks_by_the_measured_profile(linked, capsys):
    """Under a profile with its link measured the sweep ranks by `symmem memory`'s model: each listed time is the
    one `symmem memory` prints for that configuration."""
    argv = ["sweep", "--model", "llama-3-8b", "--gpus", "8", "-s", "512", "--gpu", str(linked), "--top", "3",
            "--replay", "0", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["ranked"]
    # (those with a group larger than the 2 processes measured are left untimed and counted)
    assert len(rows) == 3 and out["rank_by"] == "time" and out["counts"]["untimed"] > 0
    assert all(max(r["tp"], r["dp"], r["cp"], 2 if r["pp"] > 1 else 1) <= 2 for r in rows)
    assert [r["time_s"] for r in rows] == sorted(r["time_s"] for r in rows)
    for r in rows:
        flags = ["--tp", r["tp"], "--pp", r["pp"], "--dp", r["dp"], "--recompute", r["recompute"], "--zero",
                 r["zero"], "-b", r["b"], "--microbatches", r["microbatches"], "--schedule", r["schedule"]]
        assert main(["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(linked), "--json",
                     *map(str, flags)]) == 0
        assert json.loads(capsys.readouterr().out)["step"]["time_s"] == pytest.approx(r["time_s"], rel=1e-12)
    # 16 GPUs: a group spans two machines, which one machine's profile did not measure
    assert main(["sweep", "--model", "llama-3-8b", "--gpus", "16", "-s", "512", "--gpu", str(linked)]) == 2
    assert "measured the link within one machine only" in capsys.readouterr().err


def test_no_collectives_measured_no_communicating_step(profile, capsys):
    assert main(["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(profile), "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert "measured no collectives" in err and err.count("\n") == 1


@pytest.mark.parametrize("text, words", [
    ("not json", "not JSON"),
    ('{"format": "other"}', "format must be"),
    ('{"format": "symmem-hardware-profile/1", "name": "x", "gemm": []}', "gemm: must be a list of 1 to 1,000"),
    ('{"format": "symmem-hardware-profile/1", "name": "x", "gemm": [{"m": 1, "k": 1, "n": 1, "seconds": -1, '
     '"flops_per_s": 1}], "attention": [{"s": 1, "flops_per_s": 1}]}', "seconds = '-1'"),
    ('{"format": "symmem-hardware-profile/1", "name": "x", "gemm": [{"m": 1, "k": 1, "n": 1, "seconds": 1, '
     '"flops_per_s": 1e999}], "attention": [{"s": 1, "flops_per_s": 1}]}', "1e999 is out of range for a number"),
])
def test_a_bad_profile_is_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert main(["memory", "--model", "llama-3-8b", "--gpu", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


_BASE = {"format": "symmem-hardware-profile/1", "name": "x", "memory_bytes": 2**34, "copy_bytes_per_s": 1e10,
         "dtype": "bf16", "launch_s": 1e-5, "gemm": [{"m": 8, "k": 8, "n": 8, "seconds": 1e-4, "flops_per_s": 1.024e7}],
         "attention": [{"s": 16, "flops_per_s": 1e7}]}
_PASSES = [["TN", 8, 8, 8, 1e-4], ["NN", 8, 8, 8, 1e-4], ["NT", 8, 8, 8, 1e-4]]
_ATTENTION = [[1, 16, 8, 8, 64, 64, 1e-4, 2e-4]]


@pytest.mark.parametrize("kernels, words", [
    ([], "kernels: must be an object"),
    ({"gemm": [["XY", 8, 8, 8, 1e-4], *_PASSES], "attention": _ATTENTION}, "gemm[0][0] = 'XY': must be one of"),
    ({"gemm": _PASSES[:2], "attention": _ATTENTION}, "kernels.gemm: no NT pass measured"),
    ({"gemm": [["TN", 8.5, 8, 8, 1e-4], *_PASSES[1:]], "attention": _ATTENTION}, "gemm[0][1] = '8.5': must be a "
                                                                                  "whole number"),
    ({"gemm": _PASSES, "attention": [[1, 16, 8, 8, 64, 64, 0, 2e-4]]}, "attention[0][6] = '0': must be seconds"),
    ({"gemm": _PASSES, "attention": [[1, 16, 8, 8, 64, 2e-4]]}, "attention[0]: must be a list of 8 entries"),
    ({"gemm": _PASSES}, "kernels.attention: must be a list of 1 to 1,000"),
    # rates a hand edit makes impossible: a time that would vanish or overflow
    ({"gemm": [["TN", 1 << 20, 1 << 20, 1 << 20, 1e-300], *_PASSES[1:]], "attention": _ATTENTION},
     "kernels.gemm[0]: inf FLOP/s"),
    ({"gemm": _PASSES, "attention": [[1, 16, 8, 8, 64, 64, 1e-4, 3000]]}, "attention[0] backward: "),
])
def test_a_bad_kernel_table_is_one_line(tmp_path, capsys, kernels, words):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**_BASE, "kernels": kernels}))
    assert main(["memory", "--model", "llama-3-8b", "--gpu", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    path.write_text(json.dumps({**_BASE, "kernels": {"gemm": _PASSES, "attention": _ATTENTION}}))
    assert main(["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step"]["model"] == "measured kernels"


def test_a_rate_out_of_bounds_is_one_line(tmp_path, capsys):
    """A link or copy bandwidth that would make a step's time overflow (1e-300 bytes/s) is refused, not printed as
    Infinity."""
    links = {"intra_bytes_per_s": 1e-300, "step_latency_s": 1e-5, "processes": 2}
    for bad, words in (({"links": links}, "intra_bytes_per_s = '1e-300'"),
                       ({"copy_bytes_per_s": 1e-300}, "copy_bytes_per_s = '1e-300'")):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({**_BASE, **bad}))
        assert main(["memory", "--model", "llama-3-8b", "--gpu", str(path), "--json"]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_a_key_registered_again_is_replaced_whole(tmp_path):
    """Two files of one name register under one key; the later replaces the earlier, its kernel table too (a file
    without one leaves no table of the other behind)."""
    from symmem.hardware_profile import register
    from symmem.steptime import kernels, measured

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "dev.json").write_text(json.dumps({**_BASE, "kernels": {"gemm": _PASSES,
                                                                               "attention": _ATTENTION}}))
    (tmp_path / "b" / "dev.json").write_text(json.dumps(_BASE))
    key = register(str(tmp_path / "a" / "dev.json"))
    assert key in kernels.REGISTERED and key in measured.KERNEL_CONSTANTS
    assert register(str(tmp_path / "b" / "dev.json")) == key
    assert key not in kernels.REGISTERED and key not in measured.KERNEL_CONSTANTS


def test_the_link_fit_recovers_a_known_link():
    from symmem.calibrate_collectives import KINDS, link, steps_and_bytes

    bandwidth, latency, n = 3e9, 25e-6, 4
    rows = []
    for kind in KINDS:
        for size in (1 << 16, 1 << 20, 1 << 24):
            steps, sent = steps_and_bytes(kind, size, n)
            rows.append({"kind": kind, "bytes": size, "seconds": steps * latency + sent / bandwidth})
    bw, lat = link(rows, n)
    assert bw == pytest.approx(bandwidth, rel=1e-9) and lat == pytest.approx(latency, rel=1e-9)
    assert steps_and_bytes("all_reduce", 800, 4) == (6, 1200.0)  # twice an all-gather's: 2 (n - 1), 2 (n - 1)/n
    assert steps_and_bytes("p2p", 800, 4) == (1, 800.0)  # one send of the whole


def test_each_kind_is_fitted_on_its_own_rows():
    """Made-up links, one per kind: each kind's fit recovers its own; the ring collectives' one fit is over the
    three ring kinds alone; a kind whose times do not grow with their size takes that one fit and says so."""
    from symmem.calibrate_collectives import OWN_FIT, by_kind, link, steps_and_bytes

    n = 4
    made_up = {kind: (1e9 * (i + 1), 1e-5 * (i + 2)) for i, kind in enumerate(OWN_FIT)}
    rows = []
    for kind, (bw, lat) in made_up.items():
        for size in (1 << 16, 1 << 20, 1 << 24):
            steps, sent = steps_and_bytes(kind, size, n)
            rows.append({"kind": kind, "bytes": size, "seconds": steps * lat + sent / bw})
    fits = by_kind(rows, n)
    for kind, (bw, lat) in made_up.items():
        assert fits[kind]["bytes_per_s"] == pytest.approx(bw, rel=1e-9), kind
        assert fits[kind]["step_latency_s"] == pytest.approx(lat, rel=1e-9) and fits[kind]["fit"] == "its own rows"
    ring = link(rows, n)
    assert ring == link([r for r in rows if r["kind"] in ("all_gather", "reduce_scatter", "all_reduce")], n)
    flat = [r if r["kind"] != "p2p" else {**r, "seconds": 1e-3} for r in rows]  # a noisy moment: no growth
    assert by_kind(flat, n)["p2p"] == {"bytes_per_s": ring[0], "step_latency_s": ring[1],
                                       "fit": "the ring collectives' fit (its own rows did not grow with their size)"}


def test_the_measured_kernels_time_each_kind_by_its_own_fit():
    """A calibrated device's collectives (calibrate_kernels.kernel_profile): bytes over the kind's own bandwidth
    plus its latency per ring step; a profile without per-kind fits runs every kind at the one link."""
    from symmem.calibrate_kernels import kernel_profile
    from symmem.steptime.measured import collective_calls_seconds, p2p_seconds

    table = {"gemm": [["TN", 64, 32, 16, 1e-3], ["NN", 64, 16, 32, 2e-3], ["NT", 16, 64, 32, 4e-3]],
             "attention": [[1, 256, 8, 2, 64, 64, 0.01, 0.03]]}
    own = {"all_gather": (2e9, 1e-5), "reduce_scatter": (5e8, 3e-3), "all_reduce": (1.5e9, 2e-5),
           "all_to_all": (1e9, 4e-5), "p2p": (3e9, 5e-5)}
    links = {"intra_bytes_per_s": 1.4e9, "step_latency_s": 1e-4,
             "by_kind": {k: {"bytes_per_s": bw, "step_latency_s": lat} for k, (bw, lat) in own.items()}}
    p = kernel_profile("made up", table, 1e10, links)
    assert p.gpu == "made up" and "on made up" in p.source["measured"]  # (a loop once renamed it "p2p")
    nb, calls, n = 3e6, 5, 4
    for kind, key in (("all-gather", "all_gather"), ("reduce-scatter", "reduce_scatter"), ("all-reduce", "all_reduce"),
                      ("all-to-all", "all_to_all")):
        bw, lat = own[key]
        steps = 2 * (n - 1) if kind == "all-reduce" else n - 1
        assert collective_calls_seconds(p, kind, nb, calls, n) == pytest.approx(nb / bw + calls * steps * lat,
                                                                                rel=1e-12), kind
    assert p2p_seconds(p, nb) == pytest.approx(nb / 3e9 + 5e-5, rel=1e-12)
    one = kernel_profile("one link", table, 1e10, {"intra_bytes_per_s": 1.4e9, "step_latency_s": 1e-4})
    assert collective_calls_seconds(one, "all-to-all", nb, 1, n) == pytest.approx(nb / 1.4e9 + 3e-4, rel=1e-12)


NOISE = "the collectives' times do not grow with their size"


def calibrate_two_processes(path) -> None:
    """`symmem calibrate --devices 2` into `path`. The machines running the tests are shared: a neighbour's burst
    can make the small collectives as slow as the large ones, which calibrate refuses (rightly) as unmeasurable. A
    refusal for that reason alone is measured again, up to three times; any other failure fails at once."""
    import contextlib
    import io

    for _ in range(3):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["calibrate", "-o", str(path), "--quick", "--repeat", "5", "--devices", "2"])
        if code == 0 or NOISE not in err.getvalue():
            break
    assert code == 0, err.getvalue()


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    """A profile with the collectives timed among two gloo processes of this CPU."""
    path = tmp_path_factory.mktemp("calibrate") / "two.json"
    calibrate_two_processes(path)
    return path


def test_calibrate_times_the_collectives_among_processes(linked):
    from symmem.calibrate_collectives import by_kind, link

    raw = json.loads(linked.read_text())
    links = raw["links"]
    assert links["processes"] == 2 and links["backend"] in ("gloo", "NCCL") and links["inter_bytes_per_s"] is None
    assert sorted({r["kind"] for r in links["collectives"]}) == ["all_gather", "all_reduce", "all_to_all", "p2p",
                                                                  "reduce_scatter"]
    assert len(links["collectives"]) == 15 and all(r["seconds"] > 0 for r in links["collectives"])
    # the link written is the fit of the rows written, and so is each kind's
    bw, lat = link(links["collectives"], 2)
    assert links["intra_bytes_per_s"] == pytest.approx(bw) and links["step_latency_s"] == pytest.approx(lat)
    assert bw > 0 and lat >= 0
    assert links["by_kind"] == by_kind(links["collectives"], 2)  # (floats round-trip through JSON exactly)


def test_a_communicating_step_is_timed_with_the_measured_link(linked, capsys, tmp_path):
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.hardware import gpu
    from symmem.steptime import features
    from symmem.steptime.measured import stage_collectives

    links = json.loads(linked.read_text())["links"]
    bw, lat = links["intra_bytes_per_s"], links["step_latency_s"]
    own = {kind.replace("_", "-"): (f["bytes_per_s"], f["step_latency_s"]) for kind, f in links["by_kind"].items()}
    # the calibrated kernels: each collective's bytes over its kind's own measured link, its ring steps' latencies
    # (2 (n - 1) for an all-reduce, n - 1 otherwise; SimuMax's form, none fixed)
    argv = ["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(linked), "--tp", "2"]
    assert main([*argv, "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["step"]
    scn = scenario_from_args(build_parser().parse_args(argv))
    colls = stage_collectives(scn, scn.stages[0])
    want = sum(nb / own[kind][0] + calls * (2 if kind == "all-reduce" else 1) * own[kind][1]
               for (axis, kind), (nb, calls) in colls.items() if axis == "tp")
    assert step["model"] == "measured kernels"
    assert step["seconds_by_part"]["comm_tp"] == pytest.approx(want, rel=1e-12) and want > 0
    # a profile written before the kernel table: the fitted model's form, one latency a call
    old = _without_kernels(linked, tmp_path)
    argv = ["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(old), "--tp", "2"]
    assert main([*argv, "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)["step"]["seconds_by_part"]
    scn = scenario_from_args(build_parser().parse_args(argv))
    f = features(scn, gpu(scn.gpu_name))
    nb, calls = next((nb, c) for a, nb, c, _net in f.comm if a == "tp")
    want = f.slots * (nb / bw + calls * lat)
    assert parts["comm_tp"] == pytest.approx(want, rel=1e-12) and parts["comm_tp"] > 0


def test_one_machine_measured_no_step_across_machines(linked, capsys):
    # 16 GPUs of data parallelism: a group spanning two machines of 8
    assert main(["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(linked), "--dp", "16"]) == 2
    err = capsys.readouterr().err
    assert "measured the link within one machine only" in err and err.count("\n") == 1


def test_no_group_larger_than_the_processes_measured(linked, capsys):
    # two processes measured: a TP group of 4 runs over a link it did not see
    assert main(["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(linked), "--tp", "4"]) == 2
    err = capsys.readouterr().err
    assert "measured collectives among 2 processes" in err and "tp groups have 4" in err and err.count("\n") == 1


def test_too_many_devices_is_one_line(tmp_path, capsys):
    assert main(["calibrate", "-o", str(tmp_path / "x.json"), "--quick", "--devices", "64"]) == 2
    err = capsys.readouterr().err
    assert "--devices 64" in err and err.count("\n") == 1 and not (tmp_path / "x.json").exists()


def test_malformed_links_are_one_line(tmp_path, capsys):
    good = {"format": "symmem-hardware-profile/1", "name": "x", "memory_bytes": 2**34, "copy_bytes_per_s": 1e10,
            "dtype": "bf16", "launch_s": 1e-6,
            "gemm": [{"m": 1, "k": 1, "n": 1, "seconds": 2e-12, "flops_per_s": 1e12}],
            "attention": [{"s": 1, "flops_per_s": 1e11}]}
    for links, words in ((["x"], "links: must be an object"),
                         ({"intra_bytes_per_s": 1e9}, "step_latency_s = 'None'"),
                         ({"intra_bytes_per_s": 1e9, "step_latency_s": 0}, "processes = 'None'"),
                         ({"intra_bytes_per_s": 0, "step_latency_s": 0, "processes": 2}, "intra_bytes_per_s = '0'")):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({**good, "links": links}))
        assert main(["memory", "--model", "llama-3-8b", "--gpu", str(path)]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_a_bad_per_kind_link_is_one_line(linked, tmp_path, capsys):
    raw = json.loads(linked.read_text())
    for change, words in (({"broadcast": {"bytes_per_s": 1e9, "step_latency_s": 0}}, "by_kind: must be an object of"),
                          ({"p2p": {"bytes_per_s": 1e9, "step_latency_s": 5}}, "by_kind.p2p: step_latency_s = '5'"),
                          ({"p2p": {"bytes_per_s": -1, "step_latency_s": 0}}, "by_kind.p2p: bytes_per_s")):
        bad = json.loads(json.dumps(raw))
        bad["links"]["by_kind"] = change
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        assert main(["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(path)]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


_TABLE = {"gemm": [["TN", 8, 8, 8, 1e-4], ["NN", 8, 8, 8, 1e-4], ["NT", 8, 8, 8, 1e-5]], "attention": _ATTENTION}


@pytest.mark.parametrize("text, words", [
    # a key given twice: the standard parser keeps the last one silently (here a 1-byte GPU)
    (json.dumps(_BASE)[:-1] + ', "memory_bytes": 1048576}', "duplicate key 'memory_bytes'"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than the limit"),  # no RecursionError
    (json.dumps({**_BASE, "memory_bytes": 0.5}), "memory_bytes = '0.5': must be a whole number of bytes"),
    (json.dumps({**_BASE, "memory_bytes": 8.5e10}), "memory_bytes = '85000000000.0': must be a whole number"),
    (json.dumps({k: v for k, v in _BASE.items() if k != "dtype"}), "dtype = 'None': must be one of bf16"),
    (json.dumps({**_BASE, "gemm": [{"m": 8, "k": 8, "n": 8, "seconds": 1e-4, "flops_per_s": 1e19}]}),
     "gemm[0]: flops_per_s = 1e+19: must be 2 m k n / seconds"),
    (json.dumps({**_BASE, "kernels": {**_TABLE, "attention": [[1, 16, 8, 3, 64, 64, 1e-4, 2e-4]]}}),
     "attention[0]: 3 KV heads of 8 heads: the KV heads must divide the heads"),
])
def test_a_hostile_profile_is_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert main(["memory", "--model", "llama-3-8b", "--gpu", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_the_fitted_model_of_a_calibrated_device_runs_each_kernel_at_its_measured_rate(tmp_path):
    """Where the measured kernels do not time a step, the fitted model's GEMM and attention run at the rates the
    profile measured: their efficiencies are over the rate the GPU is given (the kernel table's peak, here its NT
    pass at ten times the forward's), not over the summary's best forward GEMM."""
    from symmem import hardware
    from symmem.hardware_profile import register
    from symmem.steptime.model import DEVICE_CONSTANTS

    path = tmp_path / "dev.json"
    path.write_text(json.dumps({**_BASE, "kernels": _TABLE}))
    key = register(str(path))
    g, k = hardware.GPUS[key], DEVICE_CONSTANTS[key]
    assert g.bf16 == pytest.approx(2 * 8**3 / 1e-5, rel=1e-12)  # the table's peak: the NT pass
    assert k.gemm_efficiency * g.bf16 == pytest.approx(1.024e7, rel=1e-12)  # the summary's GEMM rate
    assert k.attention_efficiency * g.bf16 == pytest.approx(1e7, rel=1e-12)  # the summary's attention rate


def test_a_device_calibrated_in_fp32_says_so(tmp_path, capsys):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({**_BASE, "dtype": "fp32", "kernels": _TABLE}))
    assert main(["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(path), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["profile_notes"]
    assert any("was calibrated in fp32" in n for n in notes), notes
    path.write_text(json.dumps({**_BASE, "kernels": _TABLE}))
    assert main(["memory", "--model", "llama-3-8b", "-s", "512", "--gpu", str(path), "--json"]) == 0
    assert not any("calibrated in" in n for n in json.loads(capsys.readouterr().out)["profile_notes"])


@pytest.fixture
def no_timing(monkeypatch):
    """calibrate's measurement replaced by a failure: a refusal that must come before any timing proves it does."""
    import symmem.cli.calibrate as cal

    def measure(_args):
        raise AssertionError("timed before refusing")

    monkeypatch.setattr(cal, "measure", measure)


def test_a_bad_output_or_name_is_refused_before_any_timing(no_timing, tmp_path, capsys):
    (tmp_path / "folder.json").mkdir()
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama"}')
    before = config.read_text()
    for argv, words in (
            (["-o", str(tmp_path / "no" / "x.json")], "cannot write: no such folder"),
            (["-o", str(tmp_path / "folder.json")], "must name a file (it is a folder)"),
            (["-o", str(config), "--model", str(config)], "is the input"),
            (["-o", str(tmp_path / "x.json"), "--name", "two\nlines"], "--name = 'two\\nlines': must be 1 to 60"),
            (["-o", str(tmp_path / "x.json"), "--name", "G" * 61], "must be 1 to 60 printable characters"),
            (["-o", "-", "--json"], "--json: says what was written to a file")):
        assert main(["calibrate", "--quick", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, (argv, err)
    assert config.read_text() == before and not (tmp_path / "x.json").exists()


def test_calibrates_number_and_flag_words(tmp_path, capsys):
    for argv, words in ((["--budget", "1_0"], "--budget 1_0: must be seconds"),
                        (["--budget", " 30 "], "must be seconds"),
                        (["-b", "4"], "-b: sets a model's shapes; give --model"),
                        (["-s", "64"], "-s: sets a model's shapes")):
        assert main(["calibrate", "--quick", "-o", str(tmp_path / "x.json"), *argv]) == 2, argv
        err = capsys.readouterr().err
        assert words in err and "--b:" not in err and err.count("\n") == 1, (argv, err)
    assert not (tmp_path / "x.json").exists()


def test_the_collectives_stop_at_the_budget():
    """Past the deadline every process stops before its next timed run, together (the flag's all-reduce), and the
    calibration is one line: --budget bounds the collectives too."""
    from symmem.calibrate_collectives import measure
    from symmem.errors import SymmemError

    with pytest.raises(SymmemError, match=r"still timing the collectives after --budget 5 s"):
        measure(2, True, 3, "cpu", deadline=0.0, budget=5.0)
