"""The sweep's listed rows replayed in two processes (symmem/sweep/replayed.py: `_in_two_processes`): the same
results, in order, as one process; a child that fails leaves its rows to the parent, so the answer never depends
on the fork."""

from __future__ import annotations

import os

import pytest

from symmem.sweep import replayed


@pytest.fixture
def two_cores(monkeypatch):
    import symmem.render.paper as paper

    monkeypatch.setattr(paper, "_cores", lambda: 2)


def test_results_in_order(two_cores):
    assert replayed._in_two_processes(lambda x: (x, x * x), list(range(9))) == [(x, x * x) for x in range(9)]


def test_a_failing_child_leaves_its_rows_to_the_parent(two_cores):
    parent = os.getpid()

    def work(x):
        if os.getpid() != parent:
            raise RuntimeError("the child fails")
        return -x

    assert replayed._in_two_processes(work, list(range(5))) == [0, -1, -2, -3, -4]


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
        if os.getpid() == parent and x == 2:
            raise ValueError("the parent's row fails")
        return x

    with pytest.raises(ValueError, match="the parent's row fails"):
        replayed._in_two_processes(work, list(range(5)))
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):  # the child was waited for: none left behind
        os.waitpid(forked[0], os.WNOHANG)
