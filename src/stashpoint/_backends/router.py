"""Route each request to the transport that serves it: object storage or the index."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from stashpoint.clock import REAL, Clock, answer, answer_async
from stashpoint.errors import ConfigurationError
from stashpoint.randomness import SYSTEM, Randomness
from stashpoint.steps import CLOCK_REQUESTS, ID_REQUESTS, Request
from stashpoint.stores.objects import ListSource, ReadSource

_NO_INDEX = "this stash has no index (open it with ?index=...)"


Hook = Callable[[Request[Any], Callable[[], Any]], Any]
"""Sees one request on its way to a transport: `hook(request, proceed)` returns what
`proceed()` (the next hook, or the transport) returns, or raises. For the asyncio stash,
`proceed()` returns an awaitable and the hook is a coroutine function."""


class _Routes:
    """Which transport serves a request: index requests to the index, the rest to objects.

    The index transport is made on the first index request, not when the stash opens: a
    program that only saves and loads checkpoints never opens the SQLite file or imports
    the index's modules (a Lambda cold start pays for neither).
    """

    def __init__(
        self,
        objects: Any,
        index: Callable[[], Any] | None,
        clock: Clock = REAL,
        randomness: Randomness = SYSTEM,
    ) -> None:
        self.objects = objects
        """The object-storage transport."""
        self.clock = clock
        """Answers the logic's clock requests (`Now`, `Sleep`, `WaitDone`)."""
        self.randomness = randomness
        """Answers the logic's id requests (`NewId`, `NewWriteId`)."""
        self.hooks: tuple[Hook, ...] = ()
        """Hooks every request passes through, outermost first (`Stash.intercept`)."""
        self._make_index = index
        self._index: Any | None = None
        self._lock = threading.Lock()

    def route(self, request: Request[Any]) -> Any:
        """Return the transport that executes `request`."""
        if request.for_index:
            return self.index
        if isinstance(request, ListSource | ReadSource) and request.url.startswith("file://"):
            from stashpoint._backends.sources import FileSources

            return FileSources()  # local files, whatever the stash's storage
        return self.objects

    @property
    def index(self) -> Any:
        """The index transport, made now if it was not yet; `ConfigurationError` if none."""
        index = self._index
        if index is None:
            if self._make_index is None:
                raise ConfigurationError(_NO_INDEX)
            with self._lock:
                if self._index is None:
                    self._index = self._make_index()
                index = self._index
        return index

    def _opened_index(self) -> Any | None:
        """Return the index transport if one was made (so closing never makes one)."""
        with self._lock:
            index, self._make_index = self._index, None
            return index

    def chain(self, request: Request[Any], send: Callable[[], Any]) -> Callable[[], Any]:
        """Return `send` wrapped in the hooks, outermost first."""
        proceed = send
        for hook in reversed(self.hooks):
            proceed = functools.partial(hook, request, proceed)
        return proceed


class Router(_Routes):
    """Blocking router over blocking transports."""

    def execute(self, request: Request[Any]) -> Any:
        """Execute one request on the transport that serves it (through the hooks).

        The clock's requests are answered by the clock, and id requests by the stash's
        source of ids, before any hook: neither is storage.
        """
        if isinstance(request, CLOCK_REQUESTS):
            return answer(self.clock, request)
        if isinstance(request, ID_REQUESTS):
            return self.randomness.answer(request, self.clock)
        if not self.hooks:
            return self.route(request).execute(request)
        return self.chain(request, lambda: self.route(request).execute(request))()

    def close(self) -> None:
        """Close both transports."""
        self.objects.close()
        index = self._opened_index()
        if index is not None:
            index.close()


class AsyncRouter(_Routes):
    """The asyncio twin of `Router`."""

    async def execute(self, request: Request[Any]) -> Any:
        """Execute one request on the transport that serves it (through the hooks)."""
        if isinstance(request, CLOCK_REQUESTS):
            return await answer_async(self.clock, request)
        if isinstance(request, ID_REQUESTS):
            return self.randomness.answer(request, self.clock)
        if isinstance(request, ListSource | ReadSource) and request.url.startswith("file://"):
            import asyncio

            return await asyncio.to_thread(self.route(request).execute, request)
        if not self.hooks:
            return await self.route(request).execute(request)
        return await self.chain(request, lambda: self.route(request).execute(request))()

    async def close(self) -> None:
        """Close both transports."""
        await self.objects.close()
        index = self._opened_index()
        if index is not None:
            await index.close()
