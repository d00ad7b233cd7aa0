"""Work done after the call that caused it returned: seals and clean-up.

An append that completes a range of 64 versions leaves the range to seal; a LangGraph put
that replaced a list snapshot leaves the old one to delete (`SaverSteps.background`).
Neither belongs on the caller's path: on Lambda a cold turn would pay ~70 requests in
13-44 rounds for it. A blocking owner runs that work on one thread of its own, an async one
on one task of its loop, after the call returned; `flush` waits for it. The LangGraph
savers own one each; `Stash.seal_later` makes one for any part that appends on a
caller's path (the OpenAI Agents and Strands sessions). On Lambda the environment is
frozen when the handler returns: the work goes on when it is thawed, and what an
environment that never comes back left, `stashpoint gc` seals. It is best effort by
design: no reader depends on a seal having happened.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable

logger = logging.getLogger("stashpoint")


def _said(exc: BaseException) -> None:
    """Log a failure of background work by its type (never its message: it may hold data)."""
    logger.warning(
        "stashpoint: a background seal failed (%s); `stashpoint gc` seals what it left",
        type(exc).__name__,
    )


class ThreadBackground:
    """Runs `work` on one daemon thread, again while more was asked meanwhile.

    Not `threaded`: the work waits for `flush`, which does it on the caller's thread.
    """

    def __init__(self, work: Callable[[], None], *, threaded: bool = True) -> None:
        self._work = work
        self._threaded = threaded
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = False

    def poke(self) -> None:
        """Ask for one more run of the work (a thread is started if none is running)."""
        with self._lock:
            self._again = True
            if self._thread is not None or not self._threaded:
                return
            self._thread = threading.Thread(
                target=self._loop, name="stashpoint-background", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._again:
                        self._forget_thread()  # under the lock: a poke now starts another
                        return
                    self._again = False
                try:
                    self._work()
                except Exception as exc:  # the work logs its own; this is the transport's end
                    _said(exc)
        except BaseException:
            with self._lock:  # ended by what ends threads (a test's crash): none is running
                self._forget_thread()
            raise

    def _forget_thread(self) -> None:
        if self._thread is threading.current_thread():
            self._thread = None

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until no work is running or asked for; False if `timeout` ran out first."""
        if not self._threaded:
            self._loop()
            return True
        while True:
            with self._lock:
                thread = self._thread
            if thread is None or thread is threading.current_thread():
                return True  # (the work's own close: nothing to wait for but itself)
            thread.join(timeout)
            if thread.is_alive():
                return False
            with self._lock:
                if self._thread is thread:  # ended without saying so: never wait for it again
                    self._thread = None


class TaskBackground:
    """Runs `work` as one task of the running event loop, again while more was asked.

    Not `tasked`: the work waits for `flush`, which awaits it itself.
    """

    def __init__(self, work: Callable[[], Awaitable[None]], *, tasked: bool = True) -> None:
        self._work = work
        self._tasked = tasked
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def poke(self) -> None:
        """Ask for one more run of the work (a task is started if none is running)."""
        self._again = True
        if self._tasked and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while self._again:
            self._again = False
            try:
                await self._work()
            except Exception as exc:
                _said(exc)

    async def flush(self) -> None:
        """Wait until no work is running or asked for."""
        if not self._tasked:
            await self._loop()
            return
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)


class BackgroundSealer:
    """Seals what a log namespace's appends left due, after the calls that appended.

    Made by `Stash.seal_later(logs)`: appends through those log steps no longer seal a
    completed range inside the call; `poke` after each call starts the seal on a
    background thread (an `AsyncStash`: a task of the running loop) when a range is due.
    Closing the stash waits for it.
    """

    def __init__(self, due: Callable[[], bool], runner: ThreadBackground | TaskBackground) -> None:
        self._due = due
        self._runner = runner

    def poke(self) -> None:
        """Start sealing what is due, if anything is (cheap when nothing is)."""
        if not self._due():
            return
        try:
            self._runner.poke()
        except RuntimeError:  # an AsyncStash poked outside its loop: the next poke, or gc
            logger.debug("stashpoint: a due seal waits for the next call (no running loop)")
