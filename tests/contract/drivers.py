"""Run the async API through a blocking facade, so one contract suite covers both drivers.

Every call goes through the real async object on one long-lived event loop; nothing of the
sync path is used. Facades unwrap facade arguments, await awaitable results, and wrap
asyncio twins they return (a runner's cursor), so a test reads the same for both drivers.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

from stashpoint.twins import Awaiting


class BlockingFacade:
    """Calls an async object's coroutine methods to completion on a private loop."""

    def __init__(self, target: Any, runner: asyncio.Runner) -> None:
        self._target = target
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value) or isinstance(value, type):
            return self._wrap(value)

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(value, args, kwargs)

        return call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(self._target, args, kwargs)

    def _call(self, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        result = function(*args, **kwargs)
        if inspect.isawaitable(result):
            result = self._runner.run(_awaited(result))
        return self._wrap(result)

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, Awaiting) or (isinstance(value, type) and issubclass(value, Awaiting)):
            return BlockingFacade(value, self._runner)
        if isinstance(value, tuple):
            return tuple(self._wrap(v) for v in value)
        return value

    def __repr__(self) -> str:
        return f"BlockingFacade({self._target!r})"


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _unwrap(value: Any) -> Any:
    return value._target if isinstance(value, BlockingFacade) else value


def as_coroutine(function: Callable[..., Any]) -> Callable[..., Any]:
    """Return `function` as a coroutine function (what asyncio users pass as a turn)."""

    async def coroutine(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        return function(*args, **kwargs)

    return coroutine
