"""`symmem._cache.bound_cache`: one cache entry per meaning of a call, however it is spelled."""

from dataclasses import dataclass

import pytest

from symmem import load_model
from symmem._cache import bound_cache
from symmem.model import embedding_flow, layer_flow, mtp_flow


def test_spellings_of_one_call_share_one_entry():
    calls = []

    @bound_cache(maxsize=8)
    def f(a, b, c="x", d=None):
        calls.append((a, b, c, d))
        return (a, b, c, d)

    spellings = [f(1, 2), f(1, 2, "x"), f(1, 2, "x", None), f(1, b=2), f(a=1, b=2, d=None), f(1, 2, d=None)]
    assert spellings == [(1, 2, "x", None)] * 6
    assert calls == [(1, 2, "x", None)]
    assert f(1, 2, "y") == (1, 2, "y", None)
    assert len(calls) == 2
    assert f.cache_info().hits == 5


def test_bad_calls_still_fail_as_the_function_would():
    @bound_cache(maxsize=8)
    def f(a, b, c="x"):
        return a

    with pytest.raises(TypeError):
        f(1)
    with pytest.raises(TypeError):
        f(1, 2, 3, 4)
    with pytest.raises(TypeError):
        f(1, 2, e=5)


def test_a_dataflow_is_built_once_per_structure():
    # Dataflows are compared by identity, so every cache keyed on one depends on this (it did not hold with
    # functools.lru_cache, which keyed on the arguments as passed: V4's layers were built three times each)
    model = load_model("deepseek-v3")
    assert layer_flow(model, "moe") is layer_flow(model, "moe", "paper") is layer_flow(model, "moe", "paper", None,
                                                                                        None)
    assert layer_flow(model, "moe", convention="paper") is layer_flow(model, kind="moe")
    assert embedding_flow(model) is embedding_flow(model, None)
    assert mtp_flow(model) is mtp_flow(model, "paper", 0, None)
    assert layer_flow(model, "moe", "megatron") is not layer_flow(model, "moe")


def test_hash_once_keeps_hash_and_equality_and_is_never_pickled():
    import dataclasses
    import pickle

    from symmem._cache import hash_once

    computed = []

    @hash_once
    @dataclass(frozen=True)
    class Key:
        a: int
        b: tuple

        def __hash__(self):
            computed.append(self)
            return hash((self.a, self.b))

    k = Key(1, (2, 3))
    assert hash(k) == hash(k) == hash((1, (2, 3)))
    assert len(computed) == 1  # once per instance
    assert Key(1, (2, 3)) == k and hash(Key(1, (2, 3))) == hash(k)
    assert dataclasses.replace(k, a=2) != k and hash(dataclasses.replace(k, a=2)) == hash((2, (2, 3)))
    model = load_model("deepseek-v3")
    h = hash(model)
    back = pickle.loads(pickle.dumps(model))
    assert back == model and "_hash" not in back.__dict__  # another process hashes strings differently
    assert hash(back) == h
