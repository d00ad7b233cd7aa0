"""The local backend, crashed at every file-system step of a write, in random sequences.

A crash is emulated by raising from the N-th file-system call a write makes (link, rename,
fsync, lock-file record): nothing after it runs, like a process killed at that instant,
and the lock is released as the kernel would release it. A fresh stash (a new process)
then checks what a user may rely on and carries on writing, possibly crashing again, also
in the middle of settling the previous crash.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stashpoint
from stashpoint import Envelope


class _Crash(BaseException):
    """The process died here (a BaseException, so no `except Exception` handles it)."""


_STEPS = ("link", "replace", "fsync", "pwrite")


@contextlib.contextmanager
def _crash_at(step: int) -> Iterator[list[str]]:
    """Raise `_Crash` from the `step`-th file-system call; yield the calls made."""
    calls: list[str] = []
    originals = {name: getattr(os, name) for name in _STEPS}

    def wrap(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            if len(calls) - 1 == step:
                raise _Crash(name)
            return originals[name](*args, **kwargs)

        return call

    with contextlib.ExitStack() as stack:
        for name in _STEPS:
            stack.enter_context(mock.patch.object(os, name, wrap(name)))
        yield calls


def _check(stash: stashpoint.Stash, acknowledged: int) -> int:
    head = stash.checkpoints.load("c")
    # Every acknowledged write survives; at most the one in flight is added.
    assert head.revision in (acknowledged, acknowledged + 1)
    assert head.payload == {"n": head.revision}
    history = stash.checkpoints.history("c")
    # Each older revision exactly once, newest first, each with its own payload.
    assert [h.revision for h in history] == list(range(head.revision - 1, -1, -1))
    assert all(h.payload == {"n": h.revision} for h in history)
    return head.revision


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(plan=st.lists(st.one_of(st.none(), st.integers(0, 9)), min_size=1, max_size=10))
def test_crash_at_any_step_keeps_acknowledged_revisions_and_a_clean_history(
    plan: list[int | None], tmp_path_factory: pytest.TempPathFactory
) -> None:
    url = f"local://{tmp_path_factory.mktemp('crashes')}"
    with stashpoint.open(url) as stash:
        stash.checkpoints.compare_and_swap(Envelope.initial("c", None, "k", 1, {"n": 0}), None)
    acknowledged = 0
    crashes = 0
    for step in [*plan, None]:  # the last write never crashes: everything settles
        with stashpoint.open(url) as stash:
            base = stash.checkpoints.load("c")
            acknowledged = _check(stash, acknowledged)
            following = base.next({"n": base.revision + 1})
            if step is None:
                stash.checkpoints.compare_and_swap(following, base.revision)
                acknowledged = following.revision
                continue
            with _crash_at(step) as calls:
                try:
                    stash.checkpoints.compare_and_swap(following, base.revision)
                except _Crash:
                    crashes += 1
                else:
                    assert len(calls) <= step  # finished before the planned crash point
                    acknowledged = following.revision
    with stashpoint.open(url) as stash:
        _check(stash, acknowledged)
    if any(step is not None and step < 4 for step in plan):
        assert crashes > 0  # the plan really crashed writes
