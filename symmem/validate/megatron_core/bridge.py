"""What must be bridged for Megatron-Core 0.16.1's local spec to run on a CPU, and nothing else.

Every patch below replaces a CUDA-only call with its CPU equivalent or a no-op; none allocates, frees or changes
the dtype or shape of a tensor the tracker measures (paths are in the installed package, megatron/core/):

* device arguments: about 250 places name CUDA directly, e.g. `models/common/embeddings/rotary_pos_embedding.py:162`
  (`torch.cuda.current_device()`), `transformer/utils.py:35` and `:40` (`device="cuda"` masks). A
  `TorchFunctionMode` (`CpuDevices`) rewrites a `device=` that names CUDA to `cpu`, and `Tensor.cuda()` to the
  tensor itself (a CPU tensor moved to the CPU is the same tensor: no copy). `torch.cuda.current_device()` returns
  "cpu". `torch.autograd.backward` is run by the mode with the mode kept on (torch's own steps), so that what is
  recomputed in backward is bridged too.
* the model-parallel RNG tracker, `tensor_parallel/random.py:243-248`: `fork()` restores CUDA RNG states; here it is
  a null context (dropout runs at p = 0 in every measured configuration, so no random number is drawn under it).
  `model_parallel_cuda_manual_seed` is not called; the CPU generator is seeded instead. Activation checkpointing
  stores and restores the CUDA RNG state (`tensor_parallel/random.py:444-460`, through `_get_cuda_rng_state` `:41-55`
  and `_set_cuda_rng_state` `:72`): here there is none (None, and setting it does nothing). The CPU RNG state it
  also stores (`torch.get_rng_state()`, `:446`) is host memory on a GPU, and made outside the dispatcher here: not
  counted.
* CUDA streams and events: `transformer/moe/token_dispatcher.py:445`, `transformer/moe/shared_experts.py:123` create
  `torch.cuda.Stream`, `token_dispatcher.py:899` synchronises an event: stand-ins with no effect (everything on a
  CPU is one stream).
* `transformer/moe/moe_utils.py:34` imports `te_general_gemm` from TransformerEngine only when it is installed;
  `:1192` then reads an undefined name. Set to None, Megatron's own torch path is taken (`:1195-1197`).
* the alltoall dispatcher's split sizes: `transformer/moe/token_dispatcher.py:879-887` hands them to
  `moe_utils.maybe_move_tensor_to_cpu(..., as_numpy=True)`, which makes NumPy arrays of CUDA tensors only
  (`moe_utils.py:1093-1096`); a CPU tensor stays a tensor, and torch's `all_to_all_single` refuses it as a split-size
  list (TypeError). Here a CPU tensor asked for as NumPy is returned as `tensor.numpy()`, a view of the same storage
  (nothing allocated). The split sizes exist only with EP > 1 or TP > 1 (`token_dispatcher.py:525`).
* the optimizers accept tensors by their CUDA type string (`optimizer/distrib_optimizer.py:361`, `:432`, `:582`,
  `optimizer/clip_grads.py:167`: `torch.cuda.FloatTensor`, ...): while they are built and stepped, `Tensor.type()`
  without arguments answers the CUDA name of the same dtype.
"""

from __future__ import annotations

import contextlib

_CUDA_TYPES = {"torch.FloatTensor": "torch.cuda.FloatTensor", "torch.HalfTensor": "torch.cuda.HalfTensor",
               "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor"}


def _is_cuda(device) -> bool:
    import torch

    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int) and not isinstance(device, bool)  # an index means a CUDA device


def _mode_class():
    import torch
    from torch.overrides import TorchFunctionMode

    class CpuDevices(TorchFunctionMode):
        """`device=cuda` becomes `device=cpu`; `.cuda()` and `.to("cuda")` return the CPU tensor."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if "device" in kwargs and _is_cuda(kwargs["device"]):
                kwargs = {**kwargs, "device": "cpu"}
            if func is torch.autograd.backward or func is torch.Tensor.backward:
                return self._backward(*args, **kwargs)
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.to and len(args) > 1 and _is_cuda(args[1]):
                args = (args[0], "cpu", *args[2:])
            return func(*args, **kwargs)

        def _backward(self, tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None,
                      **kwargs):
            """`torch.autograd.backward` with this mode kept on: a mode is off while it handles a call, and
            backward reaches the mode (torch/autograd/__init__.py:377), so recomputation in backward
            (tensor_parallel/random.py:557) would run without it. The same steps as torch's (`:382-395`)."""
            from torch.autograd import _make_grads, _tensor_or_tensors_to_tuple
            from torch.autograd.graph import _engine_run_backward

            grad_tensors = kwargs.get("gradient", grad_tensors)  # Tensor.backward's name
            tensors = (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors)
            inputs = () if inputs is None else ((inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs))
            with self:
                grads = _make_grads(tensors, _tensor_or_tensors_to_tuple(grad_tensors, len(tensors)),
                                    is_grads_batched=False)
                _engine_run_backward(tensors, grads, create_graph if retain_graph is None else retain_graph,
                                     create_graph, inputs, allow_unreachable=True, accumulate_grad=True)

    return CpuDevices


class _Stream:
    """A CUDA stream stand-in: one CPU stream, nothing to wait for."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def synchronize(self):
        pass

    def record_event(self, event=None):
        return event or _Event()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Event(_Stream):
    def record(self, stream=None):
        pass

    def query(self):
        return True


@contextlib.contextmanager
def cpu_megatron():
    """Run Megatron-Core's local spec on the CPU inside this context (see the module's docstring)."""
    import torch
    from megatron.core.tensor_parallel import random as mrandom
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    saved = {
        (torch.cuda, "current_device"): torch.cuda.current_device,
        (torch.cuda, "Stream"): torch.cuda.Stream,
        (torch.cuda, "Event"): torch.cuda.Event,
        (torch.cuda, "stream"): torch.cuda.stream,
        (torch.cuda, "current_stream"): torch.cuda.current_stream,
        (torch.cuda, "synchronize"): torch.cuda.synchronize,
        (mrandom.CudaRNGStatesTracker, "fork"): mrandom.CudaRNGStatesTracker.fork,
        (mrandom, "_get_cuda_rng_state"): mrandom._get_cuda_rng_state,
        (mrandom, "_set_cuda_rng_state"): mrandom._set_cuda_rng_state,
        (token_dispatcher, "maybe_move_tensor_to_cpu"): token_dispatcher.maybe_move_tensor_to_cpu,
    }
    to_cpu = token_dispatcher.maybe_move_tensor_to_cpu
    had_gemm = hasattr(moe_utils, "te_general_gemm")

    @contextlib.contextmanager
    def fork(self, name=None):
        yield

    @contextlib.contextmanager
    def stream(s=None):
        yield s

    def split_sizes(tensor, as_numpy=False, record_stream=False):
        if as_numpy and torch.is_tensor(tensor) and not tensor.is_cuda:
            return tensor.numpy()  # a view: the same storage
        return to_cpu(tensor, as_numpy, record_stream)

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.Stream = _Stream
    torch.cuda.Event = _Event
    torch.cuda.stream = stream
    torch.cuda.current_stream = lambda device=None: _Stream()
    torch.cuda.synchronize = lambda device=None: None
    mrandom.CudaRNGStatesTracker.fork = fork
    mrandom._get_cuda_rng_state = lambda *args, **kwargs: None
    mrandom._set_cuda_rng_state = lambda *args, **kwargs: None
    token_dispatcher.maybe_move_tensor_to_cpu = split_sizes
    if not had_gemm:
        moe_utils.te_general_gemm = None
    try:
        with _mode_class()():
            yield
    finally:
        for (owner, name), value in saved.items():
            setattr(owner, name, value)
        if not had_gemm:
            del moe_utils.te_general_gemm


@contextlib.contextmanager
def cuda_type_names():
    """While Megatron's optimizer is built and stepped: `Tensor.type()` answers `torch.cuda.*Tensor` for the
    dtypes it accepts (`optimizer/distrib_optimizer.py:361`, `:432`, `:582`, `optimizer/clip_grads.py:167`). No
    tensor is touched."""
    import torch

    original = torch.Tensor.type

    def type_(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is not None:
            return original(self, dtype, non_blocking, **kwargs)
        name = original(self)
        return _CUDA_TYPES.get(name, name)

    torch.Tensor.type = type_
    try:
        yield
    finally:
        torch.Tensor.type = original
