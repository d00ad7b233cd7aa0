"""A simulated crash at one storage request: the process dies before or after it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class Crash(BaseException):
    """The process died here (a BaseException, so no `except Exception` handles it)."""


@contextlib.contextmanager
def crash_at(stash: Any, step: int, after: bool) -> Iterator[list[str]]:
    """Die at the `step`-th storage request: before it is sent, or after it took effect.

    Every way a stash's operations reach storage is patched: the transport, the stash's
    own `_execute` (which savers read at call time) and its stores created so far.
    """
    calls: list[str] = []
    real = stash._transport.execute
    lock = threading.Lock()

    def execute(request: Any) -> Any:
        with lock:
            calls.append(type(request).__name__)
            mine = len(calls) - 1
        if mine == step and not after:
            raise Crash(type(request).__name__)
        result = real(request)
        if mine == step:
            raise Crash(type(request).__name__)
        return result

    holders = [stash, *(v for v in vars(stash).values() if hasattr(v, "_execute"))]
    saved = [(holder, holder._execute) for holder in holders]
    stash._transport.execute = execute
    for holder in holders:
        holder._execute = execute
    try:
        yield calls
    finally:
        stash._transport.execute = real
        for holder, original in saved:
            holder._execute = original
