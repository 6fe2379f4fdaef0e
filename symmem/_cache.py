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


def hash_once(cls):
    """Class decorator for a frozen dataclass used as a cache key: its hash is computed once per instance (a model
    config hashes some thirty (name, value) pairs, and the engine looks it up in its caches thousands of times per
    run). The hash lives beside the fields and is never pickled: another process hashes strings differently."""
    compute = cls.__hash__

    def __hash__(self) -> int:
        d = self.__dict__
        h = d.get("_hash")
        if h is None:
            h = d["_hash"] = compute(self)  # beside the fields, not through the frozen __setattr__
        return h

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    return cls


def bounded(cache: dict, key, limit: int, make):
    """`cache[key]`, made by `make()` on a miss; the cache emptied first when it holds more than `limit` entries
    (the step-time costs and the replays' ops: a sweep asks for thousands of alike, a process for a bounded few)."""
    hit = cache.get(key)
    if hit is None:
        if len(cache) > limit:
            cache.clear()
        hit = cache[key] = make()
    return hit
