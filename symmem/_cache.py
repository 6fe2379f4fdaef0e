"""A least-recently-used cache keyed on what a call means, not on how it is spelled.

`functools.lru_cache` keys on the arguments as passed: `layer_flow(m, "moe")`, `layer_flow(m, "moe", "paper")`
and `layer_flow(m, "moe", "paper", None, None)` are three entries, so the same dataflow was built three times (and,
being compared by identity, missed every cache keyed on it downstream). `bound_cache` binds each call to the
function's signature, defaults applied, and caches on that.
"""

from __future__ import annotations

import functools
import inspect


def bound_cache(maxsize: int):
    def decorate(fn):
        sig = inspect.signature(fn)
        defaults = [p.default for p in sig.parameters.values()]
        # the defaults a positional call of k arguments leaves out (binding with the signature is slower)
        tails = {k: tuple(defaults[k:]) for k in range(len(defaults) + 1)
                 if all(d is not inspect.Parameter.empty for d in defaults[k:])}
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if not kwargs and len(args) in tails:
                return cached(*args, *tails[len(args)])
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            return cached(*bound.args)

        call.cache_info = cached.cache_info
        call.cache_clear = cached.cache_clear
        return call

    return decorate
