"""What PyTorch eager autograd saves in HF DeepSeek-V3/V2 and Llama decoder layers (needs the validate extra)."""

from symmem.validate.harness import (
    LayerMeasurement,
    SavedTensor,
    format_measurement,
    measure_layer,
    measure_model_params,
    tiny_config,
)

__all__ = [
    "LayerMeasurement",
    "SavedTensor",
    "format_measurement",
    "measure_layer",
    "measure_model_params",
    "tiny_config",
]
