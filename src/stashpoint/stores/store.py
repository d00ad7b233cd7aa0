"""The checkpoint store contract: `Store` (blocking) and `AsyncStore` (asyncio).

The contract is defined once, in `_StoreApi`: each operation returns the protocol from
`stores.cas` that does the work; the two stores are made from it and differ only in how
requests are executed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from stashpoint._sansio import Protocol, awaiting, blocking
from stashpoint.envelope import CheckpointInfo, Envelope
from stashpoint.stores.cas import CasProtocol


class _StoreApi:
    """The checkpoint operations, each returning its protocol."""

    _cas: CasProtocol

    def load(self, checkpoint_id: str, revision: int | None = None) -> Protocol[Envelope]:
        """Return the latest envelope, or an older `revision` from history.

        Raises `CheckpointNotFound`, `InvalidPayload`, `UnsupportedFormat`, `InvalidId`.
        """
        return self._cas.load(checkpoint_id, revision)

    def compare_and_swap(self, next: Envelope, expected_revision: int | None) -> Protocol[None]:
        """Save `next` only if the stored head is at `expected_revision`.

        `None` creates: it fails if the id exists. Otherwise `next.revision` must be
        `expected_revision + 1`. A lost race raises `CheckpointConflict`; an outcome that
        storage would not confirm raises `StorageUnavailable` carrying the write id.
        """
        return self._cas.compare_and_swap(next, expected_revision)

    def delete(self, checkpoint_id: str, expected_revision: int | None = None) -> Protocol[None]:
        """Delete the head (history stays); with `expected_revision`, only if still at it."""
        return self._cas.delete(checkpoint_id, expected_revision)

    def history(self, checkpoint_id: str, limit: int | None = None) -> Protocol[list[Envelope]]:
        """Return older revisions, newest first, the head excluded."""
        return self._cas.history(checkpoint_id, limit)

    def list_ids(self, prefix: str = "") -> Protocol[list[str]]:
        """Return the ids of existing checkpoints starting with `prefix`, ascending."""
        return self._cas.list_ids(prefix)

    def describe(self, checkpoint_id: str) -> Protocol[CheckpointInfo]:
        """Return the head's kind, revision, run, size and time without its payload.

        On S3 this is one HEAD request: listing large transcripts downloads none of them.
        Raises `CheckpointNotFound`, `InvalidId`.
        """
        return self._cas.describe(checkpoint_id)


class Store:
    """Checkpoint envelopes with compare-and-swap saves, over any object transport.

    Thread-safe: share one per process.
    """

    def __init__(self, cas: CasProtocol, execute: Callable[[Any], Any]) -> None:
        self._cas = cas
        self._execute = execute

    load = blocking(_StoreApi.load)
    compare_and_swap = blocking(_StoreApi.compare_and_swap)
    delete = blocking(_StoreApi.delete)
    history = blocking(_StoreApi.history)
    list_ids = blocking(_StoreApi.list_ids)
    describe = blocking(_StoreApi.describe)


class AsyncStore:
    """The asyncio twin of `Store`: the same methods, awaitable."""

    def __init__(self, cas: CasProtocol, execute: Callable[[Any], Awaitable[Any]]) -> None:
        self._cas = cas
        self._execute = execute

    load = awaiting(_StoreApi.load)
    compare_and_swap = awaiting(_StoreApi.compare_and_swap)
    delete = awaiting(_StoreApi.delete)
    history = awaiting(_StoreApi.history)
    list_ids = awaiting(_StoreApi.list_ids)
    describe = awaiting(_StoreApi.describe)
