"""The garbage collector in a one-shot `symmem` process.

sympy and matplotlib leave hundreds of thousands of objects behind when imported. While they are imported, the
heap grows by a quarter again and again, and each time Python's cyclic garbage collector runs a full collection
over everything alive; afterwards, every full collection walks all of it once more. Importing creates no cyclic
garbage worth collecting, so the program pauses the collector while it imports them, and then `gc.freeze()`
(Python 3.7+, made for this) moves every object alive to a permanent generation the collector no longer walks,
and turns the collector back on for the work. Measured side by side on one core, pausing during the imports took
another 0.1-0.2 s off `symmem paper`, and freezing a quarter of the tables' CPU time. Only the program itself opts
in (`symmem.cli.main.cli`): a library user's or a test's process keeps its collector as is.
"""

from __future__ import annotations

import gc

_enabled = False


def enable() -> None:
    """Called once by the program's entry point, before anything heavy is imported: the collector pauses until
    the first `settle`."""
    global _enabled
    _enabled = True
    gc.disable()


def enabled() -> bool:
    """Whether this is the one-shot program (`enable` called)."""
    return _enabled


def settle(load: tuple[str, ...] = ()) -> None:
    """Import the modules of `load` with the collector paused, then freeze every object alive (those modules',
    and whatever was imported before) and let the collector run again. A plain import of `load` unless
    `enable`d."""
    import importlib

    if not _enabled:
        for name in load:
            importlib.import_module(name)
        return
    gc.disable()
    try:
        for name in load:
            importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()
