"""The step-time model (symmem/steptime.py) against the 18 measured iterations (SimuMax's published B200 runs)."""

import json

from derivations.measured_step_times import rows
from symmem.cli.main import main
from symmem.hardware import GPUS, gpu
from symmem.steptime import EFFICIENCY, FIXED_SECONDS, TP_BANDWIDTH, fit
from symmem.units import GPUS as CAPACITIES


def test_measured_iterations_within_five_percent_on_average_ten_at_worst():
    # issue 19: mean absolute error at most 5 %, worst at most 10 % (an in-sample fit: see the module's docstring)
    rs = rows()
    assert len(rs) == 18
    errors = [abs(r["error"]) for r in rs]
    assert sum(errors) / len(errors) <= 5 and max(errors) <= 10, errors


def test_constants_are_the_fit():
    eff, bw, fixed = fit([(r["features"], gpu("B200"), r["measured"] / 1000) for r in rows()])
    assert round(eff["dense"], 4) == EFFICIENCY["dense"] and round(eff["moe"], 4) == EFFICIENCY["moe"]
    assert round(bw, 4) == TP_BANDWIDTH and round(fixed, 5) == FIXED_SECONDS


def test_presets_agree_with_the_capacity_table():
    for name, g in GPUS.items():
        assert CAPACITIES[name.lower()] == g.memory


def test_memory_json_step(capsys):
    assert main(["memory", "--model", "llama-3-8b", "--profile", "megatron-te", "--gpu", "H100", "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["step"]
    assert step["gpu"] == "H100" and step["time_s"] > 0 and 0 < step["mfu"] < 1
    assert step["flops_hardware"] >= step["flops_model"] > 0
    assert set(step["comm_bytes"]) == {"tp", "cp", "ep", "dp", "pp"}
    # without a GPU by name there is no time to give
    assert main(["memory", "--model", "llama-3-8b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step"] is None


def test_bubble_of_each_schedule():
    # the bubbles in slots (F = B_input = W = 1/3 of a slot), from the formulas the function's docstring cites:
    # 1F1B PP - 1; interleaved (PP - 1)/v; ZB-1P (PP - 1)(F + B - 2W) = (PP - 1)/3 with B the whole backward
    # (2/3); DualPipe, each chunk a whole stage (deepseek-ai/DualPipe's example builds full_modules[rank] and
    # full_modules[pp - 1 - rank]), (PP/2 - 1)(F&B + B - 3W) = (PP/2 - 1)(1 + 2/3 - 1) = 2(PP/2 - 1)/3
    from symmem.parallel.schedule import Schedule
    from symmem.steptime import bubble_slots

    assert bubble_slots(Schedule("1f1b"), 8) == 7 and bubble_slots(Schedule("gpipe"), 8) == 7
    assert bubble_slots(Schedule("interleaved", 2), 8) == 3.5
    assert bubble_slots(Schedule("zb1p"), 8) == 7 / 3
    assert bubble_slots(Schedule("dualpipe"), 8) == 2.0
    assert bubble_slots(Schedule("1f1b"), 1) == 0


def test_step_flops_equal_the_flops_module():
    # the step's cached FLOP count is symmem.flops.model_flops under the megatron convention at the same sizes,
    # times the micro-batches and data-parallel replicas of one iteration
    from symmem import symbols
    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.flops import model_flops
    from symmem.steptime import step_time

    args = build_parser().parse_args(["memory", "--model", "deepseek-v3", "--profile", "megatron-te", "--tp", "2",
                                      "--pp", "4", "--ep", "8", "--dp", "8", "--microbatches", "8",
                                      "--recompute", "full", "--gpu", "H800"])
    scn = scenario_from_args(args)
    st = step_time(scn)
    at = {**scn.size_values(), symbols.b: scn.b, symbols.s: scn.s}
    reps = scn.m * scn.parallel.dp
    assert st.flops_model == int(model_flops(scn, False, "megatron")[0].subs(at)) * reps
    assert st.flops_hardware == int(model_flops(scn, True, "megatron")[0].subs(at)) * reps > st.flops_model


def test_low_precision_gemms_at_their_tensor_core_rate(capsys):
    # an FP8 recipe runs its eligible GEMMs (every linear but the router and the output head) at the GPU's dense
    # FP8 rate, the rest at BF16, both at the fitted efficiency; the time saved is exactly those FLOPs' difference
    import dataclasses

    from symmem.cli.args import scenario_from_args
    from symmem.cli.main import build_parser
    from symmem.steptime import features, seconds

    argv = ["memory", "--model", "deepseek-v3", "--profile", "megatron-te", "--tp", "2", "--pp", "16", "--ep", "8",
            "--dp", "32", "--microbatches", "16", "--gpu", "B200"]
    f8 = features(scenario_from_args(build_parser().parse_args([*argv, "--precision", "deepseek-v3-fp8"])))
    assert f8.low_format == "fp8" and 0 < f8.flops_low_mb < f8.flops_mb
    as_bf16 = dataclasses.replace(f8, flops_low_mb=0.0, low_format="bf16")
    g, eff = gpu("B200"), EFFICIENCY["moe"]
    saved = f8.slots * f8.flops_low_mb * (1 / (g.bf16 * eff) - 1 / (g.fp8 * eff))
    assert abs(seconds(as_bf16, g) - seconds(f8, g) - saved) < 1e-9
    # NVFP4 and MXFP8 need Blackwell (TE's check_nvfp4_support / check_mxfp8_support: compute capability 10.0),
    # an H100 is 9.0; FP8 on an A100 (8.0; TE check_fp8_support needs 8.9) is refused too (one line, exit 2)
    for name, recipe, words in (("H100", "te-nvfp4", "needs 10.0"), ("H100", "te-mxfp8", "needs 10.0"),
                                ("A100", "deepseek-v3-fp8", "needs 8.9")):
        assert main([*argv[:-1], name, "--precision", recipe]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
    # torchao's rowwise_with_gw_hp keeps the weight gradient's GEMM in BF16: two of the three passes run in FP8
    base = ["memory", "--model", "llama-3-8b", "--gpu", "H100", "--precision"]
    rowwise = features(scenario_from_args(build_parser().parse_args([*base, "torchao-float8-rowwise"])))
    gw_hp = features(scenario_from_args(build_parser().parse_args([*base, "torchao-float8-rowwise-gw-hp"])))
    assert gw_hp.flops_low_mb * 3 == rowwise.flops_low_mb * 2 and gw_hp.flops_mb == rowwise.flops_mb
