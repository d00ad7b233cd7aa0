"""What a stash sends: requests by type, PUT body bytes and index items written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from stashpoint.index.requests import PutItems
from stashpoint.stores.objects import PutObject


class Meter:
    """Counts a (blocking) stash's requests, PUT body bytes and index items written.

    Through the stash's public request hook (`Stash.intercept`), so every operation of
    the stash is counted.
    """

    def __init__(self, stash: Any) -> None:
        self.requests: Counter[str] = Counter()
        self.sent: list[str] = []
        """Request types in the order they were sent."""
        self.put_bytes = 0
        self.index_items = 0

        def hook(request: Any, proceed: Callable[[], Any]) -> Any:
            self.requests[type(request).__name__] += 1
            self.sent.append(type(request).__name__)
            if isinstance(request, PutObject):
                self.put_bytes += len(request.body)
            if isinstance(request, PutItems):
                self.index_items += len(request.items)
            return proceed()

        self.interception = stash.intercept(hook)

    def reset(self) -> None:
        """Start counting again from zero."""
        self.requests.clear()
        self.sent.clear()
        self.put_bytes = self.index_items = 0


class Rounds:
    """Counts an `AsyncStash`'s round trips: a request sent while none is in flight starts one.

    Deterministic on any backend: the hook gives the loop one turn before it proceeds, so
    every request of one `Parallel` (gathered at once) is in flight before any of them ends;
    requests beyond the driver's width wait for a slot and start a round of their own, as
    they would on a network.
    """

    def __init__(self, stash: Any) -> None:
        import asyncio

        self.rounds = 0
        self.sent: list[str] = []
        """Request types in the order they were sent."""
        self.keys: list[str | None] = []
        """The key each request names (None: a listing, an index request)."""
        self._in_flight = 0

        async def hook(request: Any, proceed: Callable[[], Any]) -> Any:
            if self._in_flight == 0:
                self.rounds += 1
            self._in_flight += 1
            self.sent.append(type(request).__name__)
            self.keys.append(getattr(request, "key", None))
            try:
                await asyncio.sleep(0)
                return await proceed()
            finally:
                self._in_flight -= 1

        self.interception = stash.intercept(hook)

    def reset(self) -> None:
        """Start counting again from zero."""
        self.rounds = 0
        self.sent.clear()
        self.keys.clear()
