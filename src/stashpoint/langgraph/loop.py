"""Blocking calls on an asyncio object: LangGraph's sync methods on an async saver or store.

LangGraph calls a checkpointer's or store's blocking methods from worker threads while the
graph's event loop runs; the async classes hand that work to their own loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from stashpoint.errors import ConfigurationError


def on_loop(loop: asyncio.AbstractEventLoop | None, work: Callable[[], Any], owner: str) -> Any:
    """Run the coroutine `work()` makes on `loop`, from another thread, and return its result.

    What the async saver and store do for LangGraph's blocking calls: their loop must be
    running in another thread; from the loop's own thread they raise `ConfigurationError`.
    """
    if loop is None or not loop.is_running():
        raise ConfigurationError(
            f"{owner}'s blocking methods need its event loop running in another thread; "
            "use the async methods, or the blocking class"
        )
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        raise ConfigurationError(
            f"{owner}: a blocking method was called on its own event loop; await the async "
            "method instead"
        )
    return asyncio.run_coroutine_threadsafe(work(), loop).result()
