"""Megatron-Core 0.16.1 run on the CPU (gloo), measured to the byte: the reference of the `megatron-local` profile.

* `bridge`: the one module that lets Megatron-Core's local (non-TransformerEngine) spec run without CUDA.
* `tracker`: live storages over an iteration (peak and the op at it), saved-for-backward storages per layer.
* `runner`: builds GPTModel, DDP and the optimizer from an HF config and runs one whole iteration per rank.

Needs the `megatron` extra (`pip install -e '.[megatron]'`); without it every entry point raises SymmemError.
"""

MISSING = ("megatron-core not installed: pip install -e '.[megatron]' (megatron-core==0.16.1, with torch==2.13.0 "
           "from the validate extra)")
VERSION = "0.16.1"
