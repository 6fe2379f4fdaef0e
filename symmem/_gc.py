"""The garbage collector in a one-shot `symmem` process.

sympy and matplotlib leave hundreds of thousands of objects behind when imported; every full collection of
Python's cyclic garbage collector walks all of them again, and a `symmem paper` run triggers dozens. Once they
are loaded, `gc.freeze()` (Python 3.7+, made for this) moves every object alive to a permanent generation the
collector no longer walks: a quarter of the tables' CPU time in `symmem paper`, measured side by side. Only the
program itself opts in (`symmem.cli.main.cli`): a library user's or a test's process keeps its collector as is.
"""

from __future__ import annotations

import gc

_enabled = False


def enable() -> None:
    """Called once by the program's entry point."""
    global _enabled
    _enabled = True


def settle(load: tuple[str, ...] = ()) -> None:
    """Heavy libraries were just imported (or are, first, from `load`): stop collecting what is alive now.
    A no-op unless `enable`d."""
    if _enabled:
        import importlib

        for name in load:
            importlib.import_module(name)
        gc.freeze()
