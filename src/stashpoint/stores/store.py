"""The checkpoint store contract: `Store` (blocking) and `AsyncStore` (asyncio).

Both run the same protocols from `stores.cas`; they differ only in how requests are executed.
"""

from __future__ import annotations

from stashpoint._sansio import run_async, run_sync
from stashpoint.envelope import Envelope
from stashpoint.stores.cas import CasProtocol
from stashpoint.stores.objects import AsyncObjectTransport, ObjectTransport


class Store:
    """Checkpoint envelopes with compare-and-swap saves, over any object transport.

    Thread-safe: share one per process.
    """

    def __init__(self, cas: CasProtocol, transport: ObjectTransport) -> None:
        self._cas = cas
        self._transport = transport

    def load(self, checkpoint_id: str, revision: int | None = None) -> Envelope:
        """Return the latest envelope, or an older `revision` from history.

        Raises `CheckpointNotFound`, `InvalidPayload`, `UnsupportedFormat`, `InvalidId`.
        """
        return run_sync(self._cas.load(checkpoint_id, revision), self._transport.execute)

    def compare_and_swap(self, next: Envelope, expected_revision: int | None) -> None:
        """Save `next` only if the stored head is at `expected_revision`.

        `None` creates: it fails if the id exists. Otherwise `next.revision` must be
        `expected_revision + 1`. A lost race raises `CheckpointConflict`; an outcome that
        storage would not confirm raises `StorageUnavailable` carrying the write id.
        """
        run_sync(self._cas.compare_and_swap(next, expected_revision), self._transport.execute)

    def delete(self, checkpoint_id: str, expected_revision: int | None = None) -> None:
        """Delete the head (history stays); with `expected_revision`, only if still at it."""
        run_sync(self._cas.delete(checkpoint_id, expected_revision), self._transport.execute)

    def history(self, checkpoint_id: str, limit: int | None = None) -> list[Envelope]:
        """Return older revisions, newest first, the head excluded."""
        return run_sync(self._cas.history(checkpoint_id, limit), self._transport.execute)

    def list_ids(self, prefix: str = "") -> list[str]:
        """Return the ids of existing checkpoints starting with `prefix`, ascending."""
        return run_sync(self._cas.list_ids(prefix), self._transport.execute)


class AsyncStore:
    """The asyncio twin of `Store`: the same methods, awaitable."""

    def __init__(self, cas: CasProtocol, transport: AsyncObjectTransport) -> None:
        self._cas = cas
        self._transport = transport

    async def load(self, checkpoint_id: str, revision: int | None = None) -> Envelope:
        """Return the latest envelope, or an older `revision` (see `Store.load`)."""
        return await run_async(self._cas.load(checkpoint_id, revision), self._transport.execute)

    async def compare_and_swap(self, next: Envelope, expected_revision: int | None) -> None:
        """Save `next` only if the head is at `expected_revision` (see `Store`)."""
        await run_async(
            self._cas.compare_and_swap(next, expected_revision), self._transport.execute
        )

    async def delete(self, checkpoint_id: str, expected_revision: int | None = None) -> None:
        """Delete the head (see `Store.delete`)."""
        await run_async(self._cas.delete(checkpoint_id, expected_revision), self._transport.execute)

    async def history(self, checkpoint_id: str, limit: int | None = None) -> list[Envelope]:
        """Return older revisions, newest first (see `Store.history`)."""
        return await run_async(self._cas.history(checkpoint_id, limit), self._transport.execute)

    async def list_ids(self, prefix: str = "") -> list[str]:
        """Return existing checkpoint ids starting with `prefix` (see `Store.list_ids`)."""
        return await run_async(self._cas.list_ids(prefix), self._transport.execute)
