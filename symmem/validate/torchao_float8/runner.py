"""The torch side of `symmem measure --framework torchao-float8`: the Float8LinearConfig of a recipe and options,
the layer's saved bytes (through `symmem.validate.harness.measure_layer`, the module swap applied to the built
model) and its model states after one optimizer step. Sources: torchao v0.18.0 (tag, commit 5f2baf9) and torch
v2.13.0 (cf30153c).

Options of Float8LinearConfig that a run may set (torchao/float8/config.py:223-246); none of them changes what
`matmul_with_hp_or_float8_args.forward` saves, which is the high-precision input and the weight's transposed view
whatever the config (float8_linear.py:45); the FP8 casts made from them (float8_linear.py:51-83 in forward,
97-193 in backward) are transients. The runs measure that rather than assume it.
"""

from __future__ import annotations

import dataclasses
import logging

from symmem.errors import SymmemError

VERSION = "0.18.0"
RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")  # Float8LinearRecipeName (config.py:141-176)
# Boolean fields of Float8LinearConfig a run may set (config.py:231, 239, 246). enable_fsdp_float8_all_gather
# (config.py:225) wraps the weight in an FSDP2 all-gather subclass and needs FSDP2: not offered here.
OPTIONS = ("pad_inner_dim", "force_recompute_fp8_weight_in_bwd", "round_scales_to_power_of_2")
_MISSING = (f"torchao not installed: pip install -e '.[torchao]' (torchao=={VERSION}; its float8 training runs on "
            "the CPU)")


def require():
    """torchao.float8's two entry points, or a one-line SymmemError."""
    try:
        logging.disable(logging.WARNING)  # torchao warns that two CUDA extension libraries fail to load on the CPU
        try:
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        finally:
            logging.disable(logging.NOTSET)
    except ImportError:
        raise SymmemError(_MISSING) from None
    return Float8LinearConfig, convert_to_float8_training


def parse_options(items: list[str] | None) -> dict[str, bool]:
    """`KEY=true|false` items (the --option flag) as Float8LinearConfig overrides."""
    out: dict[str, bool] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if key not in OPTIONS:
            raise SymmemError(f"--option = {item[:60]!r}: unknown; known: {', '.join(OPTIONS)} (as KEY=true|false)")
        if not sep or value.lower() not in ("true", "false"):
            raise SymmemError(f"--option = {item[:60]!r}: the value must be true or false")
        out[key] = value.lower() == "true"
    return out


def float8_config(recipe: str, options: dict[str, bool]):
    """Float8LinearConfig.from_recipe_name(recipe) with emulate=True and the options (config.py:317-381)."""
    config_cls, _ = require()
    if recipe not in RECIPES:
        raise SymmemError(f"--recipe = {recipe!r}: must be one of {', '.join(RECIPES)}")
    return dataclasses.replace(config_cls.from_recipe_name(recipe), emulate=True, **options)


def converter(config):
    """convert(model): every nn.Linear of the model swapped for a Float8Linear (float8_linear_utils.py:86-135)."""
    _, convert = require()

    def run(model):
        convert(model, config=config)
        swapped = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
        if not swapped:
            raise SymmemError("convert_to_float8_training swapped no linear layer")

    return run


def measure_saved(raw: dict, layer: int, b: int, s: int, config, attn: str = "eager", seed: int = 0,
                  dtype: str = "fp32"):
    """The harness's `LayerMeasurement` of decoder layer `layer` with its linears in float8."""
    from symmem.validate import harness

    return harness.measure_layer(raw, layer, b, s, dtype=dtype, attn=attn, seed=seed,
                                 convert=converter(config))


def measure_states(raw: dict, layer: int, b: int, s: int, config, attn: str = "eager", seed: int = 0,
                   dtype: str = "fp32") -> dict[str, int]:
    """Bytes of the layer's model states after one forward, backward and torch.optim.AdamW step: parameters,
    gradients, optimizer state (exp_avg, exp_avg_sq, step), each distinct storage counted once."""
    import torch

    from symmem.validate import harness

    torch.manual_seed(seed)
    model = harness._build_model(raw, dtype, attn, "eager")
    n_layers = len(model.model.layers)
    if not 0 <= layer < n_layers:
        raise SymmemError(f"--layer = {layer}: must be in [0, {n_layers})")
    converter(config)(model)
    target = model.model.layers[layer]
    _args, kwargs = harness._capture_layer_inputs(model, layer, b, s, seed)
    kwargs.pop("hidden_states", None)
    g = torch.Generator().manual_seed(seed + 2)
    x = torch.randn(b, s, model.config.hidden_size, generator=g).to(model.dtype).requires_grad_(True)
    out = target(x, **kwargs)
    (out[0] if isinstance(out, tuple) else out).float().square().mean().backward()
    del out
    params = list(target.parameters())
    opt = torch.optim.AdamW(params)
    opt.step()
    seen: set[int] = set()

    def total(tensors) -> int:
        n = 0
        for t in tensors:
            st = t.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                n += st.nbytes()
        return n

    weights = total(params)
    grads = total(p.grad for p in params if p.grad is not None)
    optimizer = total(v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor))
    return {"weights": weights, "gradients": grads, "optimizer": optimizer, "total": weights + grads + optimizer,
            "parameter_tensors": len(params)}
