"""Shared fixtures for the PyTorch validation tests: fast, cached measurements.

`measure_layer` builds the model and calls gc.collect() at every point; with torch, transformers and sympy loaded a
full collection takes ~0.2 s. Freezing the objects that exist before each measurement (gc.freeze) leaves only the
measurement's own objects to collect: a point then takes ~25 ms. Models are built once per (config, dtype,
implementations) and reused: the weights do not change what autograd saves, and with eager experts only the
per-expert split of the tokens (not their total) depends on them. The tensors are tiny: one intra-op thread is
faster than two, and does not stall when the machine is busy.
"""

from __future__ import annotations

import gc
import json

import pytest


@pytest.fixture(scope="session")
def measure():
    """measure(config, layer, b, s, dtype, attn, experts) -> LayerMeasurement, cached per point."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from symmem.validate import harness

    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    built: dict = {}
    original = harness._build_model

    def build(config, dtype, attn, experts):
        key = (json.dumps(config, sort_keys=True), dtype, attn, experts)
        if key not in built:
            built[key] = original(config, dtype, attn, experts)
        return built[key]

    points: dict = {}

    def run(config, layer, b, s, dtype="fp32", attn="eager", experts="eager", seed=0):
        key = (json.dumps(config, sort_keys=True), layer, b, s, dtype, attn, experts, seed)
        if key not in points:
            harness._build_model = build  # only for these calls: other tests build their own models
            gc.freeze()  # what exists now (predictions' sympy caches, built models) is not the measurement's
            try:
                points[key] = harness.measure_layer(config, layer, b, s, dtype=dtype, attn=attn, experts=experts,
                                                    seed=seed)
            finally:
                harness._build_model = original
        return points[key]

    run(harness.tiny_config("deepseek-v3"), 1, 1, 2)  # warm up: transformers imports its modeling code lazily
    gc.collect()
    gc.freeze()
    try:
        yield run
    finally:
        gc.unfreeze()
        torch.set_num_threads(threads)
