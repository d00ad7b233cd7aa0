"""Running I/O-free protocols: the one place where sync and async differ.

Every operation with logic (compare-and-swap, read-back, run transitions, index upkeep) is
written once as a generator that *yields* request objects and receives their results. A
driver executes the requests: `run_sync` with a blocking `execute`, `run_async` with an
awaitable one. Errors raised by `execute` are thrown into the generator, so the protocol
handles them as if it had made the call itself. (h11/httpcore are the model.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

Protocol = Generator[Any, Any, T]
"""A protocol: yields requests, receives their results, returns its outcome."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Request: wait this long before going on (backoff between retries)."""

    seconds: float
    """How long to wait."""


def run_sync(protocol: Protocol[T], execute: Callable[[Any], Any]) -> T:
    """Drive `protocol` to completion with a blocking `execute(request) -> result`."""
    try:
        request = next(protocol)
        while True:
            if isinstance(request, Sleep):
                time.sleep(request.seconds)
                request = protocol.send(None)
                continue
            try:
                result = execute(request)
            except Exception as exc:  # handed to the protocol, which decides
                request = protocol.throw(exc)
            else:
                request = protocol.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        protocol.close()


async def run_async(protocol: Protocol[T], execute: Callable[[Any], Awaitable[Any]]) -> T:
    """Drive `protocol` to completion with an awaitable `execute(request) -> result`."""
    try:
        request = next(protocol)
        while True:
            if isinstance(request, Sleep):
                await asyncio.sleep(request.seconds)
                request = protocol.send(None)
                continue
            try:
                result = await execute(request)
            except Exception as exc:  # handed to the protocol, which decides
                request = protocol.throw(exc)
            else:
                request = protocol.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        protocol.close()
