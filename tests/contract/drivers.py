"""Run the async API through a blocking facade, so one contract suite covers both drivers.

Every call goes through the real async store on one long-lived event loop; nothing of the
sync path is used.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any


class BlockingFacade:
    """Calls an async object's coroutine methods to completion on a private loop."""

    def __init__(self, target: Any, runner: asyncio.Runner) -> None:
        self._target = target
        self._runner = runner

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._target, name)

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(method(*args, **kwargs))

        return call
