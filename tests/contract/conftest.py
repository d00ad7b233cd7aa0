"""The contract suite's fixtures: one `store` per (backend, driver) pair.

A new backend joins the suite by adding one entry to `BACKENDS` (a fixture name that
yields a stash URL and its options).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import stashpoint
from tests.contract.drivers import BlockingFacade

BACKENDS = [
    "memory_url", "local_url", "local_encrypted_url", "s3_moto_url", "s3_seaweed_url",
    "s3_directory_url",
]  # fmt: skip
"""Fixtures giving `(url, options)` for each backend under contract."""

DRIVERS = ["sync", "async"]
"""The two APIs every backend serves."""

# moto's in-process mock patches botocore's sync HTTP stack only; the async driver is
# covered on SeaweedFS, a real server. The directory-bucket stand-in runs the sync driver
# only: both drivers execute the same request steps (`_backends/s3.py`), and what a
# directory bucket changes (listing order, StartAfter, versions) is decided in those steps
# and in the sans-I/O logic above them, so its async run repeated the sync one (and cost
# a minute and a half of the suite).
UNSUPPORTED = {
    ("s3_moto_url", "async"),
    ("s3_directory_url", "async"),
    ("s3_directory_dynamo_url", "async"),
}


def backend_fixture(without: frozenset[str] = frozenset()) -> Any:
    """Return the `backend` fixture over `BACKENDS` and `DRIVERS`, less the `without` ones.

    moto (AWS's S3, emulated) runs the contracts of the write mechanisms: the store, the
    log, purges. The suites built on them (agents, fleet maps) leave it out
    (`backend = backend_fixture(MECHANISMS_ONLY)` in their module): they run on SeaweedFS,
    a real S3, and its directory-bucket stand-in.
    """

    @pytest.fixture(
        params=[
            (b, d)
            for b in BACKENDS
            for d in DRIVERS
            if (b, d) not in UNSUPPORTED and b not in without
        ],
        ids=lambda p: f"{p[0].removesuffix('_url')}-{p[1]}",
    )
    def backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], str]:
        name, driver = request.param
        url, options = request.getfixturevalue(name)
        return url, options, driver

    return backend


MECHANISMS_ONLY = frozenset({"s3_moto_url"})
"""Backends only the write mechanisms' contracts run on (see `backend_fixture`)."""

backend = backend_fixture()


@pytest.fixture
def stash(backend: tuple[str, dict[str, Any], str]) -> Iterator[Any]:
    """The stash under test, sync or async behind a blocking facade."""
    yield from _open(*backend)


def _open(url: str, options: dict[str, Any], driver: str) -> Iterator[Any]:
    if driver == "sync":
        with stashpoint.open(url, **options) as sync_stash:
            yield sync_stash
        return
    with asyncio.Runner() as runner:
        async_stash = stashpoint.open_async(url, **options)
        facade = BlockingFacade(async_stash, runner)
        facade.checkpoints = BlockingFacade(async_stash.checkpoints, runner)
        facade.runs = BlockingFacade(async_stash.runs, runner)
        facade.logs = BlockingFacade(async_stash.logs, runner)
        try:
            yield facade
        finally:
            runner.run(async_stash.close())


RUN_BACKENDS = [
    "memory_url", "local_url", "local_encrypted_url", "s3_dynamo_url", "s3_directory_dynamo_url",
]  # fmt: skip
"""Fixtures giving `(url, options)` for each backend under the run-store contract."""


@pytest.fixture(
    params=[(b, d) for b in RUN_BACKENDS for d in DRIVERS if (b, d) not in UNSUPPORTED],
    ids=lambda p: f"{p[0].removesuffix('_url')}-{p[1]}",
)
def run_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], str]:
    name, driver = request.param
    url, options = request.getfixturevalue(name)
    return url, options, driver


@pytest.fixture
def run_stash(run_backend: tuple[str, dict[str, Any], str]) -> Iterator[Any]:
    """A stash with an index, sync or async behind a blocking facade."""
    yield from _open(*run_backend)


@pytest.fixture
def runs(run_stash: Any) -> Any:
    return run_stash.runs


@pytest.fixture
def listed(run_backend: tuple[str, dict[str, Any], str]) -> Any:
    """What a listing shows of an error: the text, or on an encrypted stash its kind and
    length (the text stays in the sealed run log: `runs.indexing.listed_error`)."""
    from stashpoint.runs.indexing import listed_error

    plain = "encryption" not in run_backend[1]
    return lambda error: listed_error(error, plain=plain)


@pytest.fixture
def store(stash: Any) -> Any:
    return stash.checkpoints


@pytest.fixture
def other_stash(backend: tuple[str, dict[str, Any], str]) -> Iterator[stashpoint.Stash]:
    """A second, independent stash on the same storage (a different process's view)."""
    url, options, _ = backend
    with stashpoint.open(url, **options) as other:
        yield other


@pytest.fixture
def other_store(other_stash: stashpoint.Stash) -> stashpoint.Store:
    """The checkpoints of `other_stash`."""
    return other_stash.checkpoints


@pytest.fixture
def raw_put(backend: tuple[str, dict[str, Any], str]) -> Iterator[Any]:
    """Write bytes under a checkpoint id unconditionally, bypassing the codec."""
    from stashpoint.stores.objects import PutObject

    url, options, _ = backend
    with stashpoint.open(url, **options) as raw:

        def put(checkpoint_id: str, body: bytes) -> None:
            key = raw.checkpoints.steps.key(checkpoint_id)
            raw.driver(PutObject(key, body, None))

        yield put


class AgentKit:
    """The agent API of one driver, used the same way by every agent contract test.

    Sync: the blocking classes on a `Store`. Async: the asyncio classes on an `AsyncStore`,
    behind blocking facades, with turns passed as coroutine functions.
    """

    def __init__(self, stash: Any, driver: str) -> None:
        from stashpoint import agent

        self.driver = driver
        self.store = stash.checkpoints
        """The checkpoint store (a facade over an `AsyncStore` for the async driver)."""
        prefix = "" if driver == "sync" else "Async"
        for name in ("AgentCheckpoint", "AgentRunner", "CheckpointCursor", "ConversationStore"):
            cls = getattr(agent, prefix + name)
            setattr(self, name, cls if driver == "sync" else stash._wrap(cls))

    def turn(self, function: Any) -> Any:
        """Return a turn as this driver's users write it."""
        from tests.contract.drivers import as_coroutine

        return function if self.driver == "sync" else as_coroutine(function)


@pytest.fixture
def agent(stash: Any, backend: tuple[str, dict[str, Any], str]) -> AgentKit:
    """The agent API of the driver under test, on the backend under test."""
    return AgentKit(stash, backend[2])
