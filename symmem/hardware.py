"""GPU presets for the step-time model: memory, dense tensor-core throughput, memory and NVLink bandwidth, each
from the vendor's datasheet (the SXM parts; dense, i.e. without 2:4 sparsity; bandwidths per direction).

* A100 80GB SXM: NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOPS, HBM2e 2,039 GB/s, NVLink 600 GB/s
  (bidirectional, so 300 GB/s each way); no FP8.
* H100 SXM: NVIDIA H100 Tensor Core GPU datasheet: BF16 1,979 TFLOPS with sparsity (989 dense), FP8 3,958 (1,979
  dense), HBM3 3.35 TB/s, NVLink 900 GB/s bidirectional.
* H800 SXM: as H100 SXM but NVLink 400 GB/s bidirectional (the export part; NVIDIA H800 product brief).
* H200 SXM: NVIDIA H200 Tensor Core GPU datasheet: 141 GB HBM3e at 4.8 TB/s, compute as H100 SXM, NVLink 900 GB/s.
* B200 (HGX B200): NVIDIA HGX B200 datasheet: FP16/BF16 4.5 PFLOPS with sparsity (2.25 dense), FP8 9 (4.5 dense),
  FP4 18 (9 dense; the only part here with FP4 tensor cores), HBM3e 8 TB/s, fifth-generation NVLink 1.8 TB/s
  bidirectional per GPU; 192 GB as symmem's capacity table has it (`symmem.units.GPUS`).

Between nodes (a group that spans more than one node's 8 GPUs) each GPU has its own network adapter: 400 Gb/s
(50 GB/s per direction) in the DGX H100 and DGX B200 datasheets (eight ConnectX-7 400 Gb/s InfiniBand ports), the
H800 clusters of the DeepSeek-V3 report (arXiv 2412.19437, section 3.2.2: "InfiniBand (IB) at 50 GB/s") and HGX
H200 systems built alike; 200 Gb/s (25 GB/s) in the DGX A100 datasheet (ConnectX-6). No measured run in this
project spans nodes: the network figures are the datasheets', uncalibrated.
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem.errors import SymmemError

T = 10**12
GB = 10**9


@dataclass(frozen=True)
class GPU:
    name: str
    memory: int  # bytes
    bf16: float  # dense BF16 tensor-core FLOP/s
    fp8: float | None  # dense FP8 FLOP/s (None: no FP8 tensor cores)
    hbm: float  # bytes/s
    nvlink: float  # bytes/s per direction, per GPU
    fp4: float | None = None  # dense FP4 FLOP/s (None: no FP4 tensor cores)
    compute_capability: tuple[int, int] = (9, 0)  # CUDA's: A100 8.0, Hopper 9.0, B200 10.0
    network: float = 50 * GB  # bytes/s per direction, per GPU, between nodes (one 400 Gb/s adapter a GPU)
    sms: int = 132  # streaming multiprocessors: H100/H800/H200 SXM 132, A100 108, B200 148 (the datasheets)
    # seconds per ring step of a collective, measured (`symmem calibrate --devices N`); None: the step-time
    # model's fitted latency (named GPUs)
    step_latency: float | None = None
    # the largest group its collectives were measured among (`symmem calibrate --devices N`); None: any
    measured_group: int | None = None

    def rate(self, fmt: str) -> float:
        """Dense tensor-core FLOP/s in `fmt` (bf16, fp8, fp4); a format the part lacks is one line."""
        value = {"bf16": self.bf16, "fp8": self.fp8, "fp4": self.fp4}[fmt]
        if value is None:
            raise SymmemError(f"gpu = {self.name}: has no {fmt.upper()} tensor cores (the precision recipe's GEMMs "
                              "run in it)")
        return value


GPUS = {g.name: g for g in (
    GPU("A100", 80 * GB, 312 * T, None, 2039 * GB, 300 * GB, None, (8, 0), 25 * GB, 108),
    GPU("H100", 80 * GB, 989 * T, 1979 * T, 3350 * GB, 450 * GB),
    GPU("H800", 80 * GB, 989 * T, 1979 * T, 3350 * GB, 200 * GB),
    GPU("H200", 141 * GB, 989 * T, 1979 * T, 4800 * GB, 450 * GB),
    GPU("B200", 192 * GB, 2250 * T, 4500 * T, 8000 * GB, 900 * GB, 9000 * T, (10, 0), sms=148),
)}


def has_speeds(name: object) -> bool:
    """Whether the GPU `name` has speed figures here (the step time needs them; its capacity is in symmem.units)."""
    return isinstance(name, str) and name.strip().upper() in GPUS


def no_speeds_note(name: str) -> str:
    """What a command says when a GPU it knows the capacity of has no speed figures for the step time."""
    return (f"step time not estimated: no speed figures for GPU {name} (symmem/hardware.py has "
            f"{', '.join(GPUS)}); memory uses its capacity")


def gpu(name: str) -> GPU:
    key = name.strip().upper() if isinstance(name, str) else None
    if key not in GPUS:
        raise SymmemError(f"gpu = {str(name)[:40]!r}: no speed figures for it; known: {', '.join(GPUS)}")
    return GPUS[key]
