"""Inductor's CUDA (Triton) code for torchtitan's compiled loss, generated on a machine without a GPU.

What it shows (torch 2.13 and torch 2.8.0 alike, run 2026-12-07): the buffers each compiled graph of
`cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))` (torchtitan e7c0cae's loss, components/loss.py:18-22
there) allocates on a GPU, at Llama 3 8B's logits (b 2, s 8,192, vocabulary 128,256):

* forward: two FP32 values a row ([16384, 1]) and scalars, no logits-sized buffer;
* backward: the BF16 gradient of the logits [16384, 128256] alone.

The joint-graph pass `scatter_upon_const_tensor` (torch/_inductor/fx_passes/joint_graph.py) turns nll_loss's
zeros-and-scatter into a pointwise select; run with `--no-joint-passes` (the bare min-cut partitioner) and the backward
allocates an FP32 [16384, 128256] buffer for it first. torch.compile runs the pass (inductor's `partition_fn`), so
symmem's compiled loss (`symmem.accounting.compiled.compiled_loss_workspace`, read on the CPU) holds on a GPU.

How: AOTAutograd traces forward and backward with fake CPU tensors through inductor's own partition function; each
graph is then compiled by `compile_fx_inner` on fake CUDA inputs with the CUDA device queries answered by an H100's
figures, and the wrapper module's source is captured where inductor would load it (its Triton kernels are never
compiled). An experiment, kept as it ran; not a test (it patches torch internals).
"""

import sys
import types

import torch
from torch._functorch.aot_autograd import aot_function
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table
from torch._subclasses.fake_tensor import FakeTensorMode


def loss_fn(pred, labels):
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def fake_an_h100() -> None:
    props = types.SimpleNamespace(
        name="NVIDIA H100", major=9, minor=0, multi_processor_count=132, total_memory=80 * 2**30,
        max_threads_per_multi_processor=2048, regs_per_multiprocessor=65536, warp_size=32,
        shared_memory_per_block_optin=232448, gcnArchName="", L2_cache_size=50 * 2**20, uuid="x",
        max_threads_per_block=1024, clock_rate=1980000, memory_clock_rate=2619000, memory_bus_width=5120)
    import torch.cuda.random as cuda_random
    import torch.utils._triton as ut
    from torch._dynamo.device_interface import get_interface_for_device
    from torch._inductor import scheduler

    for name, value in (("is_available", lambda: True), ("device_count", lambda: 1), ("current_device", lambda: 0),
                        ("get_device_properties", lambda *a, **k: props),
                        ("get_device_capability", lambda *a, **k: (9, 0)), ("set_device", lambda *a, **k: None),
                        ("_lazy_init", lambda: None), ("_exchange_device", lambda idx: 0),
                        ("_maybe_exchange_device", lambda idx: 0),
                        ("get_rng_state", lambda *a, **k: torch.zeros(16, dtype=torch.uint8)),
                        ("set_rng_state", lambda *a, **k: None)):
        setattr(torch.cuda, name, value)
    cuda_random.get_rng_state, cuda_random.set_rng_state = torch.cuda.get_rng_state, torch.cuda.set_rng_state
    iface = get_interface_for_device("cuda")
    iface.get_device_properties = staticmethod(lambda *a, **k: props)
    iface.get_compute_capability = staticmethod(lambda *a, **k: 90)
    iface.is_available = staticmethod(lambda: True)
    iface.current_device = staticmethod(lambda: 0)
    iface.device_count = staticmethod(lambda: 1)
    scheduler.has_triton = ut.has_triton = lambda *a, **k: True
    ut.triton_hash_with_backend = lambda *a, **k: "no-gpu"
    ut.triton_backend = lambda *a, **k: None


def main(joint_passes: bool = True, b: int = 2, s: int = 8192, vocab: int = 128256) -> None:
    from torch._inductor import codecache
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx_inner
    try:
        from torch._inductor.compile_fx import partition_fn as inductor_partition
    except ImportError:  # torch 2.8 defines it inside compile_fx (compile_fx.py:2281-2306 there): the same steps
        from torch._inductor.compile_fx import _recursive_joint_graph_passes

        def inductor_partition(gm, joint_inputs, **kwargs):
            _recursive_joint_graph_passes(gm, skip_invoke_subgraph=True)
            kwargs.pop("static_lifetime_input_indices", None)
            return min_cut_rematerialization_partition(gm, joint_inputs, compiler="inductor", **kwargs)

    graphs = {}

    def capture(name):
        def compiler(gm, inputs):
            graphs[name] = (gm, [(tuple(i.shape), i.dtype) for i in inputs])
            return gm
        return compiler

    with FakeTensorMode():
        pred = torch.empty(b, s, vocab, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.zeros(b, s, dtype=torch.int64)
        f = aot_function(loss_fn, fw_compiler=capture("forward"), bw_compiler=capture("backward"),
                         partition_fn=inductor_partition if joint_passes else min_cut_rematerialization_partition,
                         decompositions=select_decomp_table())
        f(pred, labels).backward()

    fake_an_h100()
    import torch._subclasses.fake_tensor as fake_tensor

    if hasattr(fake_tensor, "init_gpu_context"):  # torch 2.8: a fake CUDA tensor first touches the device
        fake_tensor.init_gpu_context = lambda *a, **k: None
    sources = []

    def load(key, path, *args, **kwargs):
        sources.append(open(path).read())
        raise RuntimeError("captured")

    codecache.PyCodeCache.load_by_key_path = staticmethod(load)
    inductor_config.compile_threads = 1
    for name, (gm, shapes) in graphs.items():
        for node in gm.graph.nodes:
            if "device" in node.kwargs:
                node.kwargs = {**node.kwargs, "device": torch.device("cuda", 0)}
        gm.recompile()
        with FakeTensorMode():
            inputs = [torch.empty(shape, dtype=dtype, device="cuda") for shape, dtype in shapes]
            try:
                compile_fx_inner(gm, inputs, is_backward=name == "backward")
            except Exception as e:  # the capture stops inductor before it loads the module
                if "captured" not in str(e):
                    raise
        print(f"== {name}")
        for line in sources[-1].splitlines():
            if "empty_strided_cuda(" in line:
                print("  ", line.strip())


if __name__ == "__main__":
    main(joint_passes="--no-joint-passes" not in sys.argv)
