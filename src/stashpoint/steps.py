"""Steps: logic written once, free of I/O, and the two drivers that run it.

Every operation with logic (compare-and-swap, read-back, run transitions, index upkeep, the
agent's turn phases) is a generator of *steps*: it yields `Request` objects and receives
their results. A driver executes the requests: `run_sync` with a blocking `execute`,
`run_async` with an awaitable one. Errors raised while executing a request are thrown into
the generator, so the logic handles them as if it had made the call itself. h11 and
httpcore are the model.

Each request type names its result type (`class GetObject(Request[ObjectInfo | None])`),
so `info = yield from ask(GetObject(key))` is typed without a local annotation.

Three requests are understood by the drivers themselves, so every backend gets them free:
`Compute` (CPU-bound work the async driver may move to a thread), `Call` (a caller's own
function, such as an agent turn, awaited if it returns an awaitable) and `Parallel`
(independent requests sent at once: one round trip, not N). Time is a request like any
other: `Now`, `Sleep` and `WaitDone` go to `execute`, and the stash answers them with its
clock (`stashpoint.clock`), so every guarantee that rests on time is tested on a fake one.
Randomness is one too: `NewId` and `NewWriteId` are answered by the stash's source of ids
(`stashpoint.randomness`), a seeded one in tests that want the same ids on every run.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Request(Generic[R]):
    """Base of every request a step yields; `R` is the type of its result."""

    __slots__ = ()

    for_index: ClassVar[bool] = False
    """Whether the index transport executes it (else object storage, or the driver)."""


Steps = Generator[Request[Any], Any, T]
"""Logic that yields requests, receives their results and returns a `T`."""


def ask(request: Request[R]) -> Steps[R]:
    """Yield `request` and return its result, typed by the request's result type."""
    result: R = yield request
    return result


@dataclass(frozen=True, slots=True)
class Sleep(Request[None]):
    """Request: wait this long before going on (backoff between retries). A clock request."""

    seconds: float
    """How long to wait."""


@dataclass(frozen=True, slots=True)
class Now(Request[datetime]):
    """Request: the current time (timezone-aware UTC), as the stash's clock says."""


@dataclass(frozen=True, slots=True)
class WaitDone(Request[bool]):
    """Request: wait until `future` is done, at most `seconds` on the stash's clock.

    Result: whether it is done. The drivers send it while a `Call` with beats runs (a
    `concurrent.futures.Future` for the blocking driver, an asyncio task for the other).
    """

    future: Any
    """What is awaited."""
    seconds: float
    """The longest wait, in the clock's seconds."""


CLOCK_REQUESTS = (Sleep, Now, WaitDone)
"""The requests a stash's clock answers (`stashpoint.clock.answer`)."""


@dataclass(frozen=True, slots=True)
class NewId(Request[str]):
    """Request: a new time-ordered id (UUIDv7), from the stash's source of ids."""


@dataclass(frozen=True, slots=True)
class NewWriteId(Request[str]):
    """Request: a new random write id (22 URL-safe characters), from the stash's source."""


ID_REQUESTS = (NewId, NewWriteId)
"""The requests a stash's source of ids answers (`stashpoint.randomness`)."""


@dataclass(frozen=True, slots=True)
class Compute(Request[R]):
    """Request: do CPU-bound work (compressing, decompressing) and send back its result.

    The sync driver does it in place. The async driver does large work on a worker thread,
    so one big transcript does not stall every other task on the event loop (zstd releases
    the GIL, so it also runs beside them); small work stays on the loop, where a thread hop
    would cost more than it saves.
    """

    work: Callable[[], R]
    """The work; its exceptions are raised into the steps like a failed request's."""
    size: int
    """Bytes the work goes through, which decides where the async driver runs it."""


@dataclass(frozen=True, slots=True)
class Call(Request[Any]):
    """Request: call a caller's function (an agent turn) and send back what it returns.

    The async driver awaits the result when it is awaitable, so the asyncio API takes
    coroutine functions; the blocking driver refuses an awaitable with a `TypeError`.
    """

    function: Callable[..., Any]
    """The caller's function."""
    args: tuple[Any, ...]
    """Its positional arguments."""
    beat: Callable[[], Steps[Any]] | None = None
    """Steps the driver runs every `every` seconds of the stash's clock while the
    function runs (a durable step's lease renewal): the function then runs on a thread of
    its own (blocking driver) or as a task (asyncio; a plain function blocks the loop, so
    it gets no beats); None: none. A beat that fails is left for the next one, unless it
    raises one of `fatal`: see there."""
    every: float = 0.0
    """Seconds between beats."""
    fatal: tuple[type[BaseException], ...] = ()
    """Errors of a beat that end the work (a heartbeat that finds its worker `Fenced`):
    the driver marks the call stopped (the function may poll `stopped()` and return
    early), stops beating, and raises the error once the function has returned, so its
    result is never reported as the step's."""


_STOPPED: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "stashpoint_stopped", default=None
)


def stopped() -> bool:
    """Whether the work running in this context was stopped by a fatal beat.

    A long step's function may poll it (a durable step whose lease was taken over: its
    result will not be stored, whatever it returns) and return early.
    """
    flag = _STOPPED.get()
    return flag is not None and flag.is_set()


class _Beats:
    """The beats of one running call: when each is due, and the first fatal error."""

    def __init__(self, request: Call | Parallel) -> None:
        self.request = request
        self.stop = threading.Event()
        self.fatal: BaseException | None = None

    def failed(self, exc: Exception) -> None:
        if self.request.fatal and isinstance(exc, self.request.fatal):
            self.fatal = self.fatal or exc
            self.stop.set()

    def finish(self, result: T) -> T:
        if self.fatal is not None:
            raise self.fatal
        return result


@dataclass(frozen=True, slots=True)
class Parallel(Request[list[Any]]):
    """Request: execute independent requests at once; results come back in their order.

    The asyncio driver gathers them; the blocking driver sends them from a small shared
    thread pool (boto3 clients are thread-safe). The first failure is raised into the steps
    once every request has ended, so none is left running behind the caller's back.
    """

    requests: tuple[Request[Any], ...]
    """The requests: transport requests, or `Call`s (a caller's functions, run at once on
    threads of their own, or gathered by asyncio); never `Sleep`, `Compute`, `Parallel`."""
    beat: Callable[[], Steps[Any]] | None = None
    """As `Call.beat`, while the `Call`s run (a batch of mapped steps' lease renewal)."""
    every: float = 0.0
    """Seconds between beats."""
    fatal: tuple[type[BaseException], ...] = ()
    """As `Call.fatal`."""


PARALLEL_WIDTH = 24
"""Most requests a `Parallel` has in flight at once (each holds a connection)."""


def in_rounds(
    items: Sequence[T], read: Callable[[Sequence[T]], Steps[Sequence[R]]], width: int
) -> Steps[list[tuple[T, R]]]:
    """Return each item with what `read` says of it, reading `width` items a round.

    `read` gets a slice of `items` and returns a result for each, in order (as one
    `Parallel` does): a long list is read in rounds, so no round holds more than `width`.
    """
    out: list[tuple[T, R]] = []
    for start in range(0, len(items), width):
        chunk = items[start : start + width]
        out += zip(chunk, (yield from read(chunk)), strict=True)
    return out


_pool: Any = None
_pool_lock = threading.Lock()
_POOL_PREFIX = "stashpoint-pool"


def _blocking_parallel(request: Parallel, execute: Callable[[Any], Any]) -> list[Any]:
    global _pool
    calls = any(isinstance(r, Call) for r in request.requests)

    def one(item: Request[Any]) -> Any:
        return _blocking_call(item, execute) if isinstance(item, Call) else execute(item)

    if len(request.requests) <= 1 or (
        not calls and threading.current_thread().name.startswith(_POOL_PREFIX)
    ):
        # A request already on the shared pool that fans out again (a transport's own
        # calls at once) runs them in turn: waiting on the pool from it could deadlock.
        return [one(r) for r in request.requests]
    from concurrent.futures import ThreadPoolExecutor  # here: most users never need it

    if calls:
        # A caller's functions get threads of their own: one that waits on stashpoint
        # (whose requests use the shared pool) must never hold a shared thread meanwhile.
        beats = _Beats(request)
        with ThreadPoolExecutor(len(request.requests), thread_name_prefix="step") as own:
            futures = [own.submit(_in_context(beats), one, r) for r in request.requests]
            if request.beat is not None:
                from concurrent.futures import wait

                everything = own.submit(wait, futures)
                _beat_until_done(beats, everything, execute)
            return beats.finish(_gathered(futures))
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(PARALLEL_WIDTH, thread_name_prefix=_POOL_PREFIX)
    return _gathered([_pool.submit(one, r) for r in request.requests])


def _gathered(futures: list[Any]) -> list[Any]:
    results: list[Any] = []
    failure: BaseException | None = None
    for future in futures:
        try:
            results.append(future.result())
        except Exception as exc:
            failure = failure or exc
            results.append(None)
    if failure is not None:
        raise failure
    return results


async def _async_parallel(request: Parallel, execute: Callable[[Any], Awaitable[Any]]) -> list[Any]:
    import asyncio

    gate = asyncio.Semaphore(PARALLEL_WIDTH)
    beats = _Beats(request)

    async def one(item: Request[Any]) -> Any:
        if isinstance(item, Call):  # the caller's own concurrency: not bounded here
            return await _async_call(item, execute)
        async with gate:
            return await execute(item)

    flag = _STOPPED.set(beats.stop)
    try:
        gathered = asyncio.ensure_future(
            asyncio.gather(*(one(r) for r in request.requests), return_exceptions=True)
        )
    finally:
        _STOPPED.reset(flag)
    if request.beat is not None:
        await _async_beat_until_done(beats, gathered, execute)
    outcomes = await gathered
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return beats.finish(list(outcomes))


async def _async_call(request: Call, execute: Callable[[Any], Awaitable[Any]]) -> Any:
    import asyncio

    beats = _Beats(request)
    flag = _STOPPED.set(beats.stop)
    try:
        result = request.function(*request.args)
        if not isinstance(result, Awaitable):
            return result  # a plain function ran on the loop: nothing could beat meanwhile
        if request.beat is None:
            return await result
        running = asyncio.ensure_future(result)  # the task keeps this context's flag
    finally:
        _STOPPED.reset(flag)
    try:
        await _async_beat_until_done(beats, running, execute)
        return beats.finish(running.result())
    finally:
        running.cancel()  # only if the caller was cancelled first: it has ended otherwise


async def _async_beat_until_done(
    beats: _Beats, running: Any, execute: Callable[[Any], Awaitable[Any]]
) -> None:
    request = beats.request
    assert request.beat is not None
    while not await execute(WaitDone(running, request.every)):
        if beats.stop.is_set():
            continue  # stopped: no more beats, the function's end is awaited
        try:
            await run_async(request.beat(), execute)
        except Exception as exc:  # best effort, unless fatal
            beats.failed(exc)
    await running  # done: let its outcome (or exception) be read


OFFLOAD_BYTES = 256 * 1024
"""Work on at least this many bytes leaves the event loop (about half a millisecond)."""


def _blocking_call(request: Call, execute: Callable[[Any], Any]) -> Any:
    if request.beat is None:
        return _blocking_plain_call(request)
    from concurrent.futures import ThreadPoolExecutor  # here: most users never need it

    # The function gets a thread of its own (and the caller's context variables, such as
    # the current span); this one beats until it returns.
    beats = _Beats(request)
    with ThreadPoolExecutor(1, thread_name_prefix="step") as own:
        running = own.submit(_in_context(beats), _blocking_plain_call, request)
        _beat_until_done(beats, running, execute)
        return beats.finish(running.result())


def _in_context(beats: _Beats) -> Callable[..., Any]:
    """Return a runner of a function in a copy of this context that sees `beats.stop`."""
    context = contextvars.copy_context()
    context.run(_STOPPED.set, beats.stop)
    return context.run


def _beat_until_done(beats: _Beats, running: Any, execute: Callable[[Any], Any]) -> None:
    """Beat every `every` seconds of the stash's clock until `running` is done."""
    request = beats.request
    assert request.beat is not None
    while not execute(WaitDone(running, request.every)):
        if beats.stop.is_set():
            continue  # stopped: no more beats, the function's end is awaited
        try:
            run_sync(request.beat(), execute)
        except Exception as exc:
            # A beat is best effort: its failure must never end the caller's function,
            # unless it says the work is over (fatal): then its result is not reported.
            beats.failed(exc)


def _blocking_plain_call(request: Call) -> Any:
    result = request.function(*request.args)
    if isinstance(result, Awaitable):
        close = getattr(result, "close", None)
        if close is not None:
            close()  # no "never awaited" warning for a coroutine handed to the wrong API
        raise TypeError(
            f"{request.function!r} returned an awaitable: use the asyncio API for coroutines"
        )
    return result


def run_sync(steps: Steps[T], execute: Callable[[Any], Any]) -> T:
    """Drive `steps` to completion with a blocking `execute(request) -> result`."""
    try:
        request = next(steps)
        while True:
            try:
                if isinstance(request, Compute):
                    result = request.work()
                elif isinstance(request, Call):
                    result = _blocking_call(request, execute)
                elif isinstance(request, Parallel):
                    result = _blocking_parallel(request, execute)
                else:
                    result = execute(request)
            except Exception as exc:  # handed to the logic, which decides
                request = steps.throw(exc)
            else:
                request = steps.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        steps.close()


async def run_async(steps: Steps[T], execute: Callable[[Any], Awaitable[Any]]) -> T:
    """Drive `steps` to completion with an awaitable `execute(request) -> result`."""
    import asyncio  # here, not at module level: sync users (Lambda cold starts) skip it

    try:
        request = next(steps)
        while True:
            try:
                if isinstance(request, Compute):
                    if request.size >= OFFLOAD_BYTES:
                        result = await asyncio.to_thread(request.work)
                    else:
                        result = request.work()
                elif isinstance(request, Call):
                    result = await _async_call(request, execute)
                elif isinstance(request, Parallel):
                    result = await _async_parallel(request, execute)
                else:
                    result = await execute(request)
            except Exception as exc:  # handed to the logic, which decides
                request = steps.throw(exc)
            else:
                request = steps.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        steps.close()
