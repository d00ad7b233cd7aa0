"""A simulated crash at one storage request: the process dies before or after it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any


class Crash(BaseException):
    """The process died here (a BaseException, so no `except Exception` handles it)."""


@contextlib.contextmanager
def crash_at(stash: Any, step: int, after: bool) -> Iterator[list[str]]:
    """Die at the `step`-th storage request: before it is sent, or after it took effect.

    Uses the stash's public request hook (`Stash.intercept`), which every operation of
    the stash (its stores, logs, runs, savers) goes through.
    """
    calls: list[str] = []
    lock = threading.Lock()

    def hook(request: Any, proceed: Callable[[], Any]) -> Any:
        with lock:
            calls.append(type(request).__name__)
            mine = len(calls) - 1
        if mine == step and not after:
            raise Crash(type(request).__name__)
        result = proceed()
        if mine == step:
            raise Crash(type(request).__name__)
        return result

    with stash.intercept(hook):
        yield calls


def crash_everywhere(
    open_stash: Callable[[], Any],
    scenario: Callable[[Any], None],
    action: Callable[[Any], Any],
    check: Callable[[Any, int, bool], None],
    *,
    at_least: int = 1,
) -> int:
    """Crash `action` at each of its requests, before and after each, on a fresh stash.

    Each round opens a stash (`open_stash`), sets it up (`scenario`), runs `action` until
    it dies at the chosen request, then calls `check(stash, step, after)` (the next
    process: a rerun, a resume, and what must hold). Returns how many requests `action`
    makes when nothing dies (asserted to be at least `at_least`).
    """
    with open_stash() as stash:
        scenario(stash)
        with crash_at(stash, 10**6, False) as calls:
            action(stash)
    total = len(calls)
    assert total >= at_least, calls
    for step in range(total):
        for after in (False, True):
            with open_stash() as stash:
                scenario(stash)
                with crash_at(stash, step, after), _raises_crash():
                    action(stash)
                check(stash, step, after)
    return total


@contextlib.contextmanager
def _raises_crash() -> Iterator[None]:
    try:
        yield
    except Crash:
        return
    raise AssertionError("the action did not meet the crash")


def fresh_local_stashes(root: Any) -> Callable[[], Any]:
    """Return an opener of a new local stash in a new folder under `root` at each call
    (`crash_everywhere`'s `open_stash`: each round starts from nothing)."""
    import itertools

    import stashpoint

    folders = itertools.count()
    return lambda: stashpoint.open(f"local://{root / str(next(folders))}")
