"""The engine held against real frameworks: what they allocate, measured to the byte, beside what symmem predicts
(`symmem measure`). Each measuring part needs the framework it runs (the extras `validate`: torch and transformers;
`megatron`; `torchao`); the predicting sides (`predict`, `torchao_float8.predict`) need none.

* `harness`: PyTorch eager autograd's saved-for-backward tensors in one Hugging Face decoder layer (DeepSeek-V3/V2,
  Llama), and a model's parameters; re-exported here.
* `predict`: what the torch-eager rule set predicts for that layer, through the engine like any scenario.
* `megatron_core`: one Megatron-Core 0.16.1 training iteration per rank on the CPU (gloo) with its local spec:
  peak and saved storages (`tracker`), every collective (`collectives`), and symmem.comm's volumes held against
  them (`comm_check`); the reference of the `megatron-local` profile.
* `torchao_float8`: torchao float8 training (emulated on the CPU) in one Llama-family layer, measured (`runner`) and
  predicted under the `torchao-float8-<recipe>` precision recipes (`predict`).
"""

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
