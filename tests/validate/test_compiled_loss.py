"""torchtitan's compiled loss on the CPU (inductor's C++ backend): what it keeps for backward and what its kernels
allocate, read off the code inductor generates, against `symmem.accounting.compiled` (the cut `_cross_entropy`, the
transients `compiled_loss_workspace`). Both reductions torchtitan has compiled: 0.3.0's `reduction="sum"`
(torchtitan/components/loss.py, its own function) and e7c0cae's mean (torchtitan/components/loss.py:18-22 at
e7c0cae, `cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`, compiled by `build_cross_entropy_loss`
:25-30 there when `training.compile` is set)."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

N_ROWS, VOCAB = 2 * 32, 1000  # b 2, s 32


def _loss_e7c0cae(pred, labels):
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def _loss_0_3_0():
    loss = pytest.importorskip("torchtitan.components.loss",
                               reason="torchtitan missing: pip install -e '.[torchtitan]'")
    return loss.cross_entropy_loss


def _allocations(code: str) -> list[tuple[tuple[int, ...], str]]:
    """Each buffer a generated module's `call` allocates: (shape, dtype)."""
    out = []
    for shape, dtype in re.findall(r"empty_strided_cpu\(\(([\d, ]*)\), \([\d, ]*\), torch\.(\w+)\)", code):
        out.append((tuple(int(d) for d in shape.replace(" ", "").split(",") if d), dtype))
    return out


def _compiled_run(fn):
    """The forward's and the backward's generated code, and the tensors the forward keeps (saved-tensor hooks see
    what the compiled region saves)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="inductor")
    pred = torch.randn(2, 32, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (2, 32))
    kept = []

    def step():
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
            loss = compiled(pred, labels)
        loss.backward()

    _, codes = run_and_get_code(step)
    return codes, kept, pred


@pytest.mark.parametrize("which", ["0.3.0 (sum)", "e7c0cae (mean)"])
def test_compiled_loss_keeps_the_bf16_logits_and_allocates_no_fp32_logits(which):
    fn = _loss_0_3_0() if which.startswith("0.3.0") else _loss_e7c0cae
    codes, kept, pred = _compiled_run(fn)
    assert len(codes) == 2, "a forward and a backward module"
    forward, backward = (_allocations(c) for c in codes)
    # kept: the BF16 logits themselves (a region input), the labels, two FP32 values a row (max, log-sum-exp), and
    # under the mean the FP32 count of the rows counted
    big = [t for t in kept if t.numel() >= N_ROWS * VOCAB]
    assert len(big) == 1 and big[0].dtype == torch.bfloat16 and big[0].data_ptr() == pred.data_ptr()
    rows = sorted(str(t.dtype) for t in kept if tuple(t.shape) in ((N_ROWS, 1),))
    assert rows == ["torch.float32", "torch.float32"]
    scalars = [t for t in kept if t.numel() == 1 and t.dtype == torch.float32]
    assert len(scalars) == (1 if "mean" in which else 0)
    # the forward: one value a row at most, no logits-sized buffer
    assert all(max(shape, default=1) <= N_ROWS for shape, _ in forward), forward
    # the backward: the BF16 gradient of the logits and one FP32 value a row, nothing else
    assert sorted(backward) == sorted([((N_ROWS, VOCAB), "bfloat16"), ((N_ROWS, 1), "float32")]), backward


def test_the_model_says_the_same():
    """symmem's compiled loss: the cut keeps the BF16 logits and two FP32 values a row (not the FP32
    log-probabilities), and its backward allocates the BF16 gradient, on the CPU beside the row sums (inductor's
    CUDA code has no such buffer: tools/compile_study/cuda_codegen_loss.py)."""
    from symmem.accounting.compiled import compiled_loss_workspace
    from symmem.config import load_model
    from symmem.model import stage_parts
    from symmem.scenario import model_scenario

    scn = model_scenario(load_model("llama-3-8b")).replace(profile_name="torchtitan", b=2, s=8192, compiled=True)
    head = stage_parts(scn.model, scn.stages[-1], scn.convention, scn.flow_impl)[-1]
    rules = scn.rules
    assert rules.workspaces["cross_entropy"] is compiled_loss_workspace
    assert "cross_entropy" not in rules.grad_in_place
    from symmem.accounting.activations import kept_tensors

    kept = {k.tensor.name: k.tensor for k in kept_tensors(head.flow, rules, scn.policy.outside_layers())}
    assert kept["head.logits"].dtype.name == "act"  # the BF16 activations' dtype
    vocab = kept["head.logits"].dims[-1]
    assert not any(t.dtype.name == "fp32" and t.dims[-1] == vocab for t in kept.values())
    rows = [t for n, t in kept.items() if n.startswith("head.logits.") and t.dtype.name == "fp32"]
    assert [t.dims[-1].size for t in rows] == [1, 1]
    loss = next(op for op in head.flow.ops if op.kind == "cross_entropy")
    assert compiled_loss_workspace(loss, head.flow, "forward", None) == []
    assert compiled_loss_workspace(loss, head.flow, "backward", None) == []  # a GPU's kernel: the gradient alone
    (ws,) = compiled_loss_workspace(loss, head.flow, "backward", None, on_cpu=True)  # the CPU's: its row sums
    assert ws.tensor.dtype.name == "fp32" and ws.tensor.dims[-1].size == 1
