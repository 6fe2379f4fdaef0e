"""PyTorch FSDP2 (`fully_shard`) over torchtitan 0.3.0's Llama 3 and DeepSeek-V3, run on the CPU (gloo) and measured
to the byte.

* `runner`: builds torchtitan's Llama 3 or DeepSeek-V3 (tiny sizes, SDPA attention), applies torchtitan's activation
  checkpointing, `fully_shard`s every block and the root, and runs one training step (forward, cross-entropy,
  backward, AdamW step) per rank; each rank returns its model states, what each block saves for backward and the
  peak of live storages (reusing `symmem.validate.megatron_core.tracker`).

Needs the `torchtitan` extra (`pip install -e '.[torchtitan]'`); without it every entry point raises SymmemError.
"""

MISSING = "torch/torchtitan not installed: pip install -e '.[torchtitan]'"
VERSION = "0.3.0"
