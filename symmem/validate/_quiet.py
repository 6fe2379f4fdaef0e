"""The libraries' own noise, silenced where `symmem measure` imports them (in its process and in every rank it
spawns): messages about the libraries' installation that say nothing about the measurement and would otherwise be
printed on every run, before the one-line answer. Each is named; nothing else is filtered.

* torchao 0.18 logs "Failed to load .../_C_mxfp8...so" and "_C_cutlass_90a" at import (CUDA-only extensions:
  torchao/__init__.py:96), and registers enums with torch's pytree, which logs that the registration is
  deprecated (torch/utils/_pytree.py:630);
* Megatron-Core 0.16.1 warns, once per module, that TransformerEngine and Apex are not installed (the local spec runs
  without them by design here), and that the default cuda_graph_scope "full" is deprecated
  (transformer/transformer_config.py:1705; no CUDA graph is captured on the CPU);
* torch.distributed warns (FutureWarning) about its deprecated reduce_op and _all_gather_base spellings, which
  Megatron-Core still calls.
"""

from __future__ import annotations

import logging
import warnings


def quiet() -> None:
    logging.getLogger("torchao").setLevel(logging.ERROR)
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed", category=UserWarning)
    warnings.filterwarnings("ignore", message="Apex is not installed", category=UserWarning)
    warnings.filterwarnings("ignore", message="full scope is deprecated", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
    warnings.filterwarnings("ignore", message=r".*(reduce_op|_all_gather_base|_reduce_scatter_base).*",
                            category=FutureWarning)
