"""The engine side of `symmem measure --framework torchao-float8`: what the engine derives for one HF Llama decoder
layer under the precision recipe `torchao-float8-<recipe>` (symmem.precision.recipes): its saved bytes (the
torch-eager rule set with the recipe's rules on saved tensors; torchao's keep the high-precision input, so the
rules are the torch-eager ones, torchao/float8/float8_linear.py:45 at v0.18.0) and the layer's model states per
parameter as the recipe counts them. Needs no torch.
"""

from __future__ import annotations

# torch v2.13.0 torch/optim/adam.py:168-175: without `capturable` or `fused` (the CPU default), AdamW (a subclass
# of Adam, adamw.py:20) keeps each parameter's `step` as torch.tensor(0.0) of the default scalar dtype, FP32
# (optimizer.py:210-215): 4 bytes per parameter tensor beside the moments, which the recipe counts per parameter.
ADAM_STEP_BYTES = 4
# A layer built in BF16 (--dtype bf16: every tensor BF16, as a pure-BF16 run keeps it) keeps BF16 parameters and
# gradients, and AdamW's moments as torch.zeros_like(p), BF16 too (adam.py:178-185): 2 + 2 + 4 bytes per parameter.
# In FP32 the recipe's own bytes apply (4 + 4 + 8: FP32 parameters, gradients and moments).
BF16_STATES = (2, 2, 4)
RECIPE_OF = {"tensorwise": "torchao-float8-tensorwise", "rowwise": "torchao-float8-rowwise",
             "rowwise_with_gw_hp": "torchao-float8-rowwise-gw-hp"}


def predicted(raw: dict, layer: int, b: int, s: int, recipe: str, attn: str = "eager", name: str = "config",
              dtype: str = "fp32") -> dict:
    """Saved bytes (the layer's own and the shared rotary tables, as the harness splits them) and model states
    by kind, under recipe `torchao-float8-<recipe>`."""
    from symmem.accounting.states import recipe as find
    from symmem.validate.predict import _layer_flow, predict, scenario_for

    precision = RECIPE_OF[recipe]
    p = predict(raw, layer, b, s, dtype, attn, "eager", name, precision)
    prec = find(precision)
    scn = scenario_for(raw, b, s, dtype, attn, "eager", name, precision)
    tensors = sum(1 for _ in _layer_flow(scn, layer).weights())
    n = p.params["total"]
    w, g, o = BF16_STATES if dtype == "bf16" else (prec.weight_bytes, prec.grad_bytes,
                                                    prec.master_bytes + prec.optimizer_bytes)
    weights, grads = n * w, n * g
    optimizer = n * o + ADAM_STEP_BYTES * tensors
    return {"precision": precision, "saved": p.layer_bytes + p.shared_bytes, "saved_layer": p.layer_bytes,
            "saved_shared": p.shared_bytes, "expression": str(p.expression),
            "states": {"weights": weights, "gradients": grads, "optimizer": optimizer,
                       "total": weights + grads + optimizer, "parameter_tensors": tensors},
            "layer_kind": p.layer_kind}
