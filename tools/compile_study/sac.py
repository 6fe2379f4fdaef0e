# torchtitan-style per-op SAC (policy copied from torchtitan/distributed/activation_checkpoint.py SelectiveAC)
import sys, torch, block
from functools import partial
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy
from torchtitan.distributed.activation_checkpoint import _get_default_save_ops
from saved_eager import report
SAVE = set(_get_default_save_ops())
if "cpu_sdpa" in sys.argv:   # GPU flash-attn analogue on CPU
    SAVE.add(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)
LOG = []
def policy_factory():
    meta = {"forward_mm_count": 0, "recompute_mm_count": 0}
    def pol(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        k = f"{mode}_mm_count"
        if func in (torch.ops.aten.mm.default, torch.ops.aten.linear.default):
            meta[k] += 1
        if func in SAVE:
            if func in (torch.ops.aten.mm.default, torch.ops.aten.linear.default) and meta[k] % 2 == 0:
                r = CheckpointPolicy.PREFER_RECOMPUTE
            else:
                r = CheckpointPolicy.MUST_SAVE
        else:
            r = CheckpointPolicy.PREFER_RECOMPUTE
        if mode == "forward" and r == CheckpointPolicy.MUST_SAVE:
            LOG.append((str(func), [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]))
        return r
    return pol
def context_fn():
    return create_selective_checkpoint_contexts(policy_factory())
class Wrap(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, x):
        return checkpoint(s.m, x, use_reentrant=False, context_fn=context_fn)
if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "eager":
        m, x = block.make(torch.float32); y = Wrap(m)(x); y.sum().backward()
        print("eager SAC MUST_SAVE ops (forward):"); [print("  ", l) for l in LOG]
    else:
        from saved_compiled import run
        print(report(run(torch.float32, wrap=Wrap), f"Compiled + SAC saved tensors fp32 ({sys.argv[2:]})"))
        print("policy MUST_SAVE decisions during tracing:"); [print("  ", l) for l in LOG]
