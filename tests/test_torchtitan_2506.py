"""The `torchtitan-2506` profile (torchtitan e7c0cae, the code of Trainy's published H200 runs) against the
`torchtitan-2412` one it differs from, by hand: the RoPE table of s rows, fused AdamW's device step scalars, the
composite RMSNorm's FP32 saves, the loss compiled with the blocks, and the refusals."""

import pytest

from symmem.cli.main import main


def _scenario(profile: str, dp: int = 8, b: int = 2, s: int = 8192, ac: str = "selective-op", **changes):
    from symmem.accounting.states import recipe, zero_stage
    from symmem.config import load_model
    from symmem.parallel.sizes import Parallel
    from symmem.scenario import model_scenario

    return model_scenario(load_model("llama-3-8b")).replace(
        profile_name=profile, precision=recipe("fp32"), zero=zero_stage(3), parallel=Parallel(dp=dp), b=b, s=s,
        recompute_name=ac, gpu_memory=141 * 10**9, gpu_name="H100", **changes)


def test_rope_table_has_s_rows_not_2s():
    # e7c0cae: precompute_freqs_cis(128, max_seq_len = 8,192), complex64: 8,192 x 64 x 8 bytes; 9dec370: 16,384 rows
    from symmem.accounting.analysis import stage_buffers

    tables = {}
    for profile in ("torchtitan-2412", "torchtitan-2506"):
        scn = _scenario(profile)
        tables[profile] = [b for b in stage_buffers(scn, scn.stages[0]) if b.name.startswith("RoPE table")]
    (new,), (old,) = tables["torchtitan-2506"], tables["torchtitan-2412"]
    assert new.nbytes == 8192 * 64 * 8 and old.nbytes == 2 * new.nbytes


def test_fused_adamw_keeps_a_device_step_per_parameter():
    # 9dec370's foreach AdamW keeps its steps on the host; e7c0cae's fused AdamW one device scalar per parameter
    # tensor, each the allocator's 512-byte block: 32 x 9 + 3 = 291 tensors (two norms, wq, wk, wv, wo, w1, w2, w3)
    from symmem.accounting.analysis import memory

    (old,), (new,) = (memory(_scenario(p)) for p in ("torchtitan-2412", "torchtitan-2506"))
    assert new.states.weights == old.states.weights == 4 * 8_030_261_248 // 8
    assert new.states.optimizer - old.states.optimizer == 512 * (32 * 9 + 3)


def test_final_norm_is_atens_composite_rms_norm():
    # nn.RMSNorm under torch 2.8: the FP32 input copy and the FP32 normalized input [b, s, h], and the FP32 rstd
    from symmem.accounting.activations import kept_tensors
    from symmem.model import stage_parts

    scn = _scenario("torchtitan-2506", ac="none")
    head = stage_parts(scn.model, scn.stages[-1], scn.convention, scn.flow_impl)[-1]
    kept = [k.tensor for k in kept_tensors(head.flow, scn.rules, scn.policy.outside_layers())
            if k.op == "norm"]
    assert sorted(t.name.rsplit(".", 1)[-1] for t in kept) == ["input_fp32", "normed_fp32", "rstd"]
    assert all(t.dtype.name == "fp32" for t in kept)


def test_loss_compiled_with_the_blocks():
    # e7c0cae compiles the loss (components/loss.py:25-30 there); 9dec370 did not
    for profile, loss in (("torchtitan-2412", False), ("torchtitan-2506", True)):
        rules = _scenario(profile, compiled=True).rules
        assert rules.compile.loss is loss
        assert ("cross_entropy" in rules.grad_in_place) is not loss


@pytest.mark.parametrize("flags, words", [
    (["--tp", "2"], "--tp 2: e7c0cae's TP (PyTorch's parallelize_module and loss_parallel) is not modelled"),
    (["--cp", "2"], "--cp 2: the 'torchtitan-2506' rule set has no context-parallel rule"),
    (["--pp", "2"], "--pp 2: only FSDP and HSDP data parallelism are modelled for torchtitan e7c0cae"),
    (["--pp", "2", "--schedule", "1f1b"], "profile torchtitan-2506 (torchtitan e7c0cae, the code of published runs) "
                                         "models no pipelining"),
])
def test_refusals(capsys, flags, words):
    code = main(["memory", "--model", "llama-3-8b", "--profile", "torchtitan-2506", "--dp", "4", "-s", "4096",
                 *flags])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err


@pytest.mark.parametrize("axis", ["--tp", "--cp", "--pp"])
def test_the_sweep_keeps_every_other_axis_at_one(capsys, axis):
    code = main(["sweep", "--model", "llama-3-8b", "--gpus", "8", "--profile", "torchtitan-2506", axis, "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{axis} = '2': profile torchtitan-2506 models FSDP (and HSDP); TP, PP, CP and EP stay 1" in err
