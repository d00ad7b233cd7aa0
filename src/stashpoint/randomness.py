"""Randomness as an input: the ids the library makes come from the stash's source.

Logic never draws an id itself: it yields `NewId` and `NewWriteId` requests
(`stashpoint.steps`), and the stash answers them with its `Randomness`, as it answers time
requests with its clock. The default draws from the operating system; a
`SeededRandomness` draws from a seeded generator, so a test (or a reproduction of a bug)
makes the same run, attempt, purge and write ids on every run:
`stashpoint.open(url, clock=FakeClock(), randomness=SeededRandomness(7))`.

Ids are what tells writers apart (a write id is how a writer knows its own write landed),
so a seeded source is for tests: the stashes of one test share one instance (its draws
never repeat), never two instances with one seed, and never a seeded source in production.
Secrets (keys, callback tokens, receipt seals) never come from here: they are always the
operating system's.
"""

from __future__ import annotations

import random
import threading
from datetime import datetime
from typing import TYPE_CHECKING

from stashpoint.ids import IdSequence, new_id, new_write_id, write_id_text
from stashpoint.steps import NewId, NewWriteId

if TYPE_CHECKING:
    from stashpoint.clock import Clock


class Randomness:
    """The operating system's randomness, ids ordered by the system's clock (the default)."""

    def new_id(self, now: datetime) -> str:
        """Return a new time-ordered id (UUIDv7), monotonic within this process.

        `now` is the stash's clock; the system's source orders by the system's clock.
        """
        del now  # ids made across stashes of a process stay in one order
        return new_id()

    def new_write_id(self) -> str:
        """Return a new random write id (128 bits)."""
        return new_write_id()

    def answer(self, request: NewId | NewWriteId, clock: Clock) -> str:
        """Answer an id request (`NewId`, `NewWriteId`); `clock` dates a new id."""
        if isinstance(request, NewId):
            return self.new_id(clock.now())
        if isinstance(request, NewWriteId):
            return self.new_write_id()
        raise TypeError(f"not an id request: {request!r}")


SYSTEM = Randomness()
"""The operating system's randomness (the default of every stash)."""


class SeededRandomness(Randomness):
    """Ids from a seeded generator: the same seed, the same ids, in the same order.

    Thread-safe; share one instance among the stashes of a test. A new id is dated by the
    stash's clock (a `FakeClock` makes it reproducible too) and stays monotonic.
    """

    def __init__(self, seed: int | str = 0) -> None:
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._ids = IdSequence()

    def new_id(self, now: datetime) -> str:
        """Return the next time-ordered id, dated `now` (or just after the last one)."""
        with self._lock:
            bits = self._random.getrandbits(62)
        return self._ids.next(int(now.timestamp() * 1000), bits)

    def new_write_id(self) -> str:
        """Return the next write id of the seeded sequence."""
        with self._lock:
            raw = self._random.getrandbits(128).to_bytes(16, "big")
        return write_id_text(raw)
