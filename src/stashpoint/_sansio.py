"""Running I/O-free protocols: the one place where sync and async differ.

Every operation with logic (compare-and-swap, read-back, run transitions, index upkeep) is
written once as a generator that *yields* request objects and receives their results. A
driver executes the requests: `run_sync` with a blocking `execute`, `run_async` with an
awaitable one. Errors raised by `execute` are thrown into the generator, so the protocol
handles them as if it had made the call itself. (h11/httpcore are the model.)
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

Protocol = Generator[Any, Any, T]
"""A protocol: yields requests, receives their results, returns its outcome."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Request: wait this long before going on (backoff between retries)."""

    seconds: float
    """How long to wait."""


@dataclass(frozen=True, slots=True)
class Compute:
    """Request: do CPU-bound work (compressing, decompressing) and send back its result.

    The sync driver does it in place. The async driver does large work on a worker thread,
    so one big transcript does not stall every other task on the event loop (zstd releases
    the GIL, so it also runs beside them); small work stays on the loop, where a thread hop
    would cost more than it saves.
    """

    work: Callable[[], Any]
    """The work; its exceptions are raised into the protocol like a failed request's."""
    size: int
    """Bytes the work goes through, which decides where the async driver runs it."""


OFFLOAD_BYTES = 256 * 1024
"""Work on at least this many bytes leaves the event loop (about half a millisecond)."""


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
                result = request.work() if isinstance(request, Compute) else execute(request)
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
    import asyncio  # here, not at module level: sync users (Lambda cold starts) skip it

    try:
        request = next(protocol)
        while True:
            if isinstance(request, Sleep):
                await asyncio.sleep(request.seconds)
                request = protocol.send(None)
                continue
            try:
                if not isinstance(request, Compute):
                    result = await execute(request)
                elif request.size >= OFFLOAD_BYTES:
                    result = await asyncio.to_thread(request.work)
                else:
                    result = request.work()
            except Exception as exc:  # handed to the protocol, which decides
                request = protocol.throw(exc)
            else:
                request = protocol.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        protocol.close()


def blocking(
    operation: Callable[Concatenate[Any, P], Protocol[T]],
) -> Callable[Concatenate[Any, P], T]:
    """Turn an API operation that returns a protocol into a blocking method.

    The operation is defined once (its signature, its docstring); the method runs its
    protocol with the instance's `_execute`. `awaiting` makes the asyncio twin.
    """

    def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(operation(self, *args, **kwargs), self._execute)

    _describe(method, operation)
    return method


def awaiting(
    operation: Callable[Concatenate[Any, P], Protocol[T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """Turn an API operation that returns a protocol into an awaitable method."""

    async def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await run_async(operation(self, *args, **kwargs), self._execute)

    _describe(method, operation)
    return method


def _describe(method: Callable[..., Any], operation: Callable[..., Any]) -> None:
    """Give `method` the operation's name, docstring and signature (for help() and editors).

    The signature returns what the protocol returns, not the protocol.
    """
    functools.update_wrapper(method, operation)
    signature = inspect.signature(operation)
    returns = signature.return_annotation
    if isinstance(returns, str) and returns.startswith("Protocol[") and returns.endswith("]"):
        returns = returns.removeprefix("Protocol[")[:-1]
    method.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
