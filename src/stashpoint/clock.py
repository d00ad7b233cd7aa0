"""Time as an input: what the library asks for "now", and how it waits.

Logic never reads a clock: it yields `Now` and `Sleep` requests (`stashpoint.steps`), and
the stash answers them with its `Clock`. The real one reads the system's clocks; a
`FakeClock` moves only when something sleeps on it or a test advances it, so leases,
heartbeats, waits and retries are tested in milliseconds, and on a busy machine exactly
as on an idle one (`stashpoint.open(url, clock=FakeClock())`).

A step's function runs in real time (it is the caller's code); a durable step's lease is
renewed every `lease / 3` seconds *of the stash's clock* while it runs, so a test's step
that sleeps on the fake clock sees its lease renewed as fake time passes.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from stashpoint.steps import Now, Sleep, WaitDone


class Clock:
    """The system's clocks: wall time for what is recorded, real waits."""

    def now(self) -> datetime:
        """Return the current time, timezone-aware in UTC."""
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`."""
        time.sleep(max(0.0, seconds))

    async def async_sleep(self, seconds: float) -> None:
        """Wait `seconds` without blocking the event loop."""
        import asyncio  # here: sync users (Lambda cold starts) never import it

        await asyncio.sleep(max(0.0, seconds))

    def wait(self, future: Any, seconds: float) -> bool:
        """Wait until `future` (a `concurrent.futures.Future`) is done; say if it is.

        At most `seconds` on this clock.
        """
        from concurrent.futures import wait

        done, _ = wait([future], timeout=max(0.0, seconds))
        return bool(done)

    async def async_wait(self, task: Any, seconds: float) -> bool:
        """Wait until an asyncio task is done, at most `seconds` on this clock."""
        import asyncio

        done, _ = await asyncio.wait({task}, timeout=max(0.0, seconds))
        return bool(done)


REAL = Clock()
"""The system's clocks (the default of every stash)."""


class FakeClock(Clock):
    """A clock that moves only when slept on or advanced: for tests of time.

    Thread-safe; every stash opened with it shares its time. `sleep` advances it at once
    (no real wait); `wait` lets real time pass in small slices while another thread (a
    step's function) advances the clock, and returns once `seconds` of fake time passed.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._changed = threading.Condition()

    def now(self) -> datetime:
        """Return the fake current time."""
        with self._changed:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds`."""
        with self._changed:
            self._now += timedelta(seconds=max(0.0, seconds))
            self._changed.notify_all()

    def sleep(self, seconds: float) -> None:
        """Advance the clock by `seconds` (returns at once)."""
        self.advance(seconds)

    async def async_sleep(self, seconds: float) -> None:
        """Advance the clock by `seconds`, letting other tasks run once."""
        import asyncio

        self.advance(seconds)
        await asyncio.sleep(0)

    def wait(self, future: Any, seconds: float) -> bool:
        """Return whether `future` is done, once it is or `seconds` of fake time passed.

        Fake time passes only when another thread (a step's function) advances it.
        """
        with self._changed:
            until = self._now + timedelta(seconds=seconds)
            while not future.done():
                if self._now >= until:
                    return False
                self._changed.wait(_SLICE)
        return True

    async def async_wait(self, task: Any, seconds: float) -> bool:
        """Return once `task` is done, or once `seconds` of fake time have passed."""
        import asyncio

        with self._changed:
            until = self._now + timedelta(seconds=seconds)
        while not task.done():
            if self.now() >= until:
                return False
            await asyncio.sleep(_SLICE)
        return True


_SLICE = 0.005
"""Real seconds between looks at a fake clock while waiting on it."""


def answer(clock: Clock, request: Any) -> Any:
    """Answer a clock request (`Now`, `Sleep`, `WaitDone`) with `clock`, blocking."""
    if isinstance(request, Now):
        return clock.now()
    if isinstance(request, Sleep):
        clock.sleep(request.seconds)
        return None
    if isinstance(request, WaitDone):
        return clock.wait(request.future, request.seconds)
    raise TypeError(f"not a clock request: {request!r}")


async def answer_async(clock: Clock, request: Any) -> Any:
    """Answer a clock request with `clock`, for the asyncio driver."""
    if isinstance(request, Now):
        return clock.now()
    if isinstance(request, Sleep):
        await clock.async_sleep(request.seconds)
        return None
    if isinstance(request, WaitDone):
        return await clock.async_wait(request.future, request.seconds)
    raise TypeError(f"not a clock request: {request!r}")
