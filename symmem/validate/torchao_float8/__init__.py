"""torchao float8 training (torchao 0.18.0, the FP8 path of torchtitan) held against the engine: one Hugging Face
Llama-family decoder layer, its `nn.Linear`s swapped for torchao's `Float8Linear` by `convert_to_float8_training`
with `emulate=True` (the float8 GEMMs emulated, so that it runs on the CPU), measured to the byte (`runner`: what
autograd saves for backward, and the model states after one AdamW step) and predicted by the engine under the
recipe `torchao-float8-<recipe>` (`predict`).
"""
