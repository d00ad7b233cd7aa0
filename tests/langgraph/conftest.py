"""LangGraph fixtures: the savers and the store on every backend, with both drivers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

SAVER_BACKENDS = ["memory_url", "local_url", "s3_seaweed_url", "s3_dynamo_url", "s3_directory_url"]
"""Where the saver is tested: the embedded default, a folder, S3, S3 with its index."""


@pytest.fixture(params=SAVER_BACKENDS, ids=lambda name: name.removesuffix("_url"))
def saver_url(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """A fresh stash URL and options on one backend."""
    url, options = request.getfixturevalue(request.param)
    return url, options


STORE_BACKENDS = ["memory_url", "local_url", "s3_seaweed_url", "s3_directory_url"]
"""Where the store is tested: the embedded default, a folder, S3 (it uses no index)."""


class StoreKit:
    """A store under test, on one backend and one driver, with what tests reach around it.

    The async driver's store lives on an event loop in a thread of its own; the test calls
    its blocking methods from the test's thread, which hand the work to that loop (as
    LangGraph's sync APIs do on an async store), so every call runs `abatch`.
    """

    def __init__(self, url: str, options: dict[str, Any], driver: str) -> None:
        self.url = url
        self.options = options
        self.driver = driver
        self.opened: list[Any] = []
        self._loop: Any = None
        self._fresh = 0

    def fresh_url(self) -> str:
        """Return the URL of new, empty storage on this kit's backend (a prefix of its own)."""
        self._fresh += 1
        base, separator, query = self.url.partition("?")
        return f"{base}-{self._fresh}{separator}{query}"

    def store(self, *, fresh: bool = False, **settings: Any) -> Any:
        """Open a new store (a new process, as far as caches go) on this kit's stash.

        `fresh`: on new, empty storage instead (what a test's second `InMemoryStore()` is).
        """
        import asyncio
        import threading

        import stashpoint
        from stashpoint.langgraph import AsyncStashpointStore, StashpointStore

        url = self.fresh_url() if fresh else self.url
        if self.driver == "sync":
            stash = stashpoint.open(url, **self.options)
            self.opened.append(stash)
            return StashpointStore(stash, **settings)
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, daemon=True).start()

        async def make() -> Any:
            stash = stashpoint.open_async(url, **self.options)
            self.opened.append(stash)
            return AsyncStashpointStore(stash, **settings)

        return asyncio.run_coroutine_threadsafe(make(), self._loop).result()

    def update(self, store: Any, *args: Any, **kwargs: Any) -> Any:
        """`update` on either driver's store."""
        import asyncio

        if self.driver == "sync":
            return store.update(*args, **kwargs)
        return asyncio.run_coroutine_threadsafe(store.aupdate(*args, **kwargs), self._loop).result()

    def sweep(self, store: Any) -> int:
        """`sweep_ttl` on either driver's store."""
        import asyncio

        if self.driver == "sync":
            return int(store.sweep_ttl())
        return int(asyncio.run_coroutine_threadsafe(store.asweep_ttl(), self._loop).result())

    def close(self) -> None:
        import asyncio

        for stash in self.opened:
            if self.driver == "sync":
                stash.close()
            else:
                asyncio.run_coroutine_threadsafe(stash.close(), self._loop).result()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)


# The directory-bucket stand-in with the sync driver only: both drivers execute the same
# request steps, so what a directory bucket changes is covered once (as in the contract
# suites, `tests/contract/conftest.py`).
_ONE_DRIVER = {"s3_directory_url"}


@pytest.fixture(
    params=[
        (b, d)
        for b in STORE_BACKENDS
        for d in ("sync", "async")
        if b not in _ONE_DRIVER or d == "sync"
    ],
    ids=lambda p: f"{p[0].removesuffix('_url')}-{p[1]}",
)
def store_kit(request: pytest.FixtureRequest) -> Iterator[StoreKit]:
    """A `StoreKit` on every backend, with both drivers."""
    backend, driver = request.param
    url, options = request.getfixturevalue(backend)
    kit = StoreKit(url, options, driver)
    yield kit
    kit.close()
