"""What torchtitan e7c0cae's compiled Float8 blocks keep for backward under FSDP2's float8 all-gather and per-op AC,
run with the code itself (its Llama 3, its converter's config, its save list, its compile and FSDP units) on
whichever torch and torchao the interpreter has: torch 2.8.0 with torchao 0.12.0 is the stack of Trainy's H200 runs
(torch 2.8.0a0, torchao 0afa4c1, in 0.12.0 with no float8 change after it but a filter and a test), torch 2.13.0
with torchao 0.18 is this project's. Each rank's bytes kept per block are printed (the storages the saved-tensor
hooks see while the step's forward runs, less the gathered weights and buffers, as `symmem measure --framework
fsdp2` counts them: symmem/validate/fsdp2/runner.py).

An experiment, kept as it ran (not a test: it needs a torchtitan checkout and, for the run's stack, a venv):

    git -C TORCHTITAN show e7c0cae:torchtitan/models/llama3/model.py > /tmp/e7c0cae_model.py
    PYTHONPATH=. python tools/compile_study/e7c0cae_float8_blocks.py /tmp/e7c0cae_model.py [none|selective-op|full]

Tiny Llama: h 64, 2 blocks, 4 heads, 2 KV heads, FFN 256 (e7c0cae's rounding of 4h to multiple_of 256), vocabulary
256, b 1, s 32, FSDP 2 over gloo.
"""

from __future__ import annotations

import os
import sys
import types
from collections import defaultdict
from functools import partial

# e7c0cae's save list and policy (torchtitan/models/llama3/parallelize_llama.py:218-280 there)
SAVE_LIST_NAMES = ("aten.mm.default", "aten._scaled_dot_product_efficient_attention.default",
                   "aten._scaled_dot_product_flash_attention.default",
                   "_c10d_functional.reduce_scatter_tensor.default", "aten.max.default")


def load_model_module(path: str):
    """e7c0cae's model.py with its torchtitan imports stubbed (none is used by the model's forward but SDPA)."""
    import torch
    import torch.nn.functional as F

    class ScaledDotProductAttention(torch.nn.Module):  # torchtitan/models/attention.py:183-214 there, on the CPU
        def __init__(self, attn_mask_type):
            super().__init__()

        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    stubs = {
        "torchtitan": {}, "torchtitan.components": {}, "torchtitan.components.tokenizer": {"Tokenizer": object},
        "torchtitan.config_manager": {"JobConfig": object},
        "torchtitan.models": {},
        "torchtitan.models.attention": {"build_attention": lambda use_flex, mask, *a: ScaledDotProductAttention(mask),
                                        "init_attention_mask": None},
        "torchtitan.protocols": {},
        "torchtitan.protocols.train_spec": {"BaseModelArgs": object, "ModelProtocol": object},
    }
    for name, attrs in stubs.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
    module = types.ModuleType("e7c0cae_model")
    module.__file__ = path
    sys.modules["e7c0cae_model"] = module
    exec(compile(open(path).read(), path, "exec"), module.__dict__)
    return module


def policy_context():
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = set()
    for name in SAVE_LIST_NAMES:
        ns, op, overload = name.split(".")
        save.add(getattr(getattr(getattr(torch.ops, ns), op), overload))
    meta = defaultdict(int)

    def _custom_policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        key = f"{mode}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        to_save = func in save and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(_custom_policy)


def step(rank: int, world: int, path: str, ac: str, port: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from symmem.validate.fsdp2.runner import LocalSavedPerLayer, _LiveStorages, _plain
    from symmem.validate.megatron_core.tracker import _storages

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    m = load_model_module(path)
    torch.manual_seed(0)
    args = m.TransformerModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256, max_seq_len=32)
    model = m.Transformer(args)
    # torchtitan's Float8Converter (components/quantization/float8.py there): tensorwise, the float8 all-gather,
    # force_recompute_fp8_weight_in_bwd as the run's toml sets it, the output filtered out
    config = Float8LinearConfig(enable_fsdp_float8_all_gather=True, force_recompute_fp8_weight_in_bwd=True)
    convert_to_float8_training(model, config=config, module_filter_fn=lambda mod, fqn: fqn != "output")
    for layer_id, block in list(model.layers.named_children()):  # AC, then compile, then FSDP (apply_ac ...)
        if ac == "full":
            block = checkpoint_wrapper(block, preserve_rng_state=False)
        elif ac == "selective-op":
            block = checkpoint_wrapper(block, context_fn=policy_context, preserve_rng_state=False)
        model.layers.register_module(layer_id, block)
    for layer_id, block in list(model.layers.named_children()):
        model.layers.register_module(layer_id, torch.compile(block, fullgraph=True))
    mesh = init_device_mesh("cpu", (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    blocks = list(model.layers.items())
    for layer_id, block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=int(layer_id) < len(blocks) - 1)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=True)
    loss_fn = torch.compile(lambda pred, labels: torch.nn.functional.cross_entropy(
        pred.flatten(0, 1).float(), labels.flatten(0, 1)))

    excluded = _LiveStorages()
    for b in model.buffers():
        excluded.add(_plain(b).untyped_storage())
    saved = LocalSavedPerLayer(excluded)

    def gathered(name, mod):
        for p in mod.parameters():
            for stg in _storages(_plain(p), []):
                excluded.add(stg)
        saved.layer = name

    for layer_id, block in blocks:
        name = f"layer {layer_id}"
        block.register_forward_pre_hook(torch.compiler.disable(lambda mod, a, name=name: gathered(name, mod)))
        block.register_forward_hook(torch.compiler.disable(lambda mod, a, out: setattr(saved, "layer", None)))
    g = torch.Generator().manual_seed(1 + rank)
    tokens = torch.randint(0, 256, (1, 33), generator=g)
    inputs, labels = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    saved.active = True
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        loss = loss_fn(model(inputs), labels)
    saved.active = False
    result, detail = saved.result(), saved.detail()
    for layer in sorted(result):
        print(f"rank {rank} {ac} {layer}: {result[layer]} bytes {detail[layer]}", flush=True)
    if os.environ.get("E7C0CAE_BACKWARD"):  # (torch 2.8's CPU backward of the compiled blocks crashes here)
        loss.backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch
    import torch.multiprocessing as mp

    path = sys.argv[1]
    ac = sys.argv[2] if len(sys.argv) > 2 else "selective-op"
    print("torch", torch.__version__, "torchao", __import__("torchao").__version__, flush=True)
    mp.spawn(step, args=(2, path, ac, str(29500 + os.getpid() % 1000)), nprocs=2)
