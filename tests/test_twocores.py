"""Work shared with a forked child (symmem/_twocores.py, the sweep's pipeline depths and its listed rows' replays):
the same results, in order, as one process; each process takes the next item when it is free; a child that fails
leaves its items to the parent, so the answer never depends on the fork."""

from __future__ import annotations

import os

import pytest

from symmem import _twocores
from symmem._twocores import map_on_two_cores


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(_twocores, "_cores", lambda: 2)


def test_results_in_order(two_cores):
    assert map_on_two_cores(lambda x: (x, x * x), list(range(9))) == [(x, x * x) for x in range(9)]


def test_both_processes_take_items(two_cores):
    import time

    def work(x):
        time.sleep(0.05)  # (long enough that the child starts before the parent has taken every item)
        return x, os.getpid()

    out = map_on_two_cores(work, list(range(8)))
    assert [x for x, _ in out] == list(range(8))
    assert os.getpid() in {p for _, p in out} and len({p for _, p in out}) == 2


def test_the_child_runs_child_work(two_cores):
    import time

    def work(x):
        time.sleep(0.05)
        return ("parent", x)

    out = map_on_two_cores(work, list(range(6)), child_work=lambda x: (time.sleep(0.05), ("child", x))[1])
    assert [x for _, x in out] == list(range(6)) and {who for who, _ in out} == {"parent", "child"}


def test_one_core_or_one_item_never_forks(monkeypatch):
    monkeypatch.setattr(os, "fork", lambda: pytest.fail("forked"))
    monkeypatch.setattr(_twocores, "_cores", lambda: 1)
    assert map_on_two_cores(lambda x: x + 1, [1, 2, 3]) == [2, 3, 4]
    monkeypatch.setattr(_twocores, "_cores", lambda: 2)
    assert map_on_two_cores(lambda x: x + 1, [1]) == [2]


def test_a_failing_child_leaves_its_rows_to_the_parent(two_cores):
    parent = os.getpid()

    def work(x):
        if os.getpid() != parent:
            raise RuntimeError("the child fails")
        return -x

    assert map_on_two_cores(work, list(range(5))) == [0, -1, -2, -3, -4]


def test_the_listed_rows_carry_reserved_by_default(capsys):
    # every listed row's reserved memory (was: the first five), replayed as symmem memory replays it
    import json

    from symmem.cli.main import main

    assert main(["sweep", "--model", "llama-3-8b", "--gpus", "8", "-s", "2048", "--profile", "megatron-te",
                 "--top", "7", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ranked"]
    assert len(rows) == 7 and all(isinstance(r["reserved"], int) for r in rows)


def test_an_error_of_the_parent_waits_for_the_child(two_cores, monkeypatch):
    parent = os.getpid()
    forked = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)

    def work(x):
        if os.getpid() == parent:
            raise ValueError(f"the parent's item {x} fails")
        return x

    with pytest.raises(ValueError, match="the parent's item . fails"):
        map_on_two_cores(work, list(range(5)))
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):  # the child was waited for: none left behind
        os.waitpid(forked[0], os.WNOHANG)


def test_the_first_error_in_order_is_raised(two_cores):
    # the parent fails at the first item it takes; what comes before it in order is worked (here: raises first)
    def work(x):
        if x == 0:
            raise KeyError("item 0")
        return x

    with pytest.raises(KeyError, match="item 0"):
        map_on_two_cores(work, list(range(4)))


def test_take_order_hands_items_out_but_results_and_errors_keep_item_order(two_cores):
    assert map_on_two_cores(lambda x: 2 * x, [1, 2, 3, 4], take_order=[3, 2, 1, 0]) == [2, 4, 6, 8]

    def work(x):
        if x in (1, 3):
            raise KeyError(f"item {x}")
        return x

    # handed out last first, the error of item 1, the first in the items' order, is raised (as without the fork)
    with pytest.raises(KeyError, match="item 1"):
        map_on_two_cores(work, [0, 1, 2, 3], take_order=[3, 2, 1, 0])
    with pytest.raises(ValueError, match="each item's index once"):
        map_on_two_cores(work, [0, 1, 2, 3], take_order=[0, 0, 1, 2])
