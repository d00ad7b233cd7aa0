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
