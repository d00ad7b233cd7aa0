"""The checkpoint store contract: `Store` (blocking) and `AsyncStore` (asyncio).

The contract is defined once, in `_StoreApi`: each operation returns the steps of
`stores.cas` that do the work. `Store` and `AsyncStore` inherit it and differ only in their
driver (`stashpoint.twins`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stashpoint.envelope import CheckpointInfo, Envelope
from stashpoint.steps import Steps
from stashpoint.stores.cas import CompareAndSwap
from stashpoint.stores.objects import RestoreReport
from stashpoint.twins import Awaiting, Blocking, operation


class _StoreApi:
    """The checkpoint operations, each returning its steps."""

    def __init__(
        self,
        cas: CompareAndSwap,
        execute: Callable[[Any], Any],
        log_steps: Callable[[str], Any] | None = None,
    ) -> None:
        self.steps = cas
        """The compare-and-swap steps behind these operations (what other logic composes)."""
        self.driver = execute
        """Runs this object's requests: what its operations' steps are driven with."""
        self.log_steps = log_steps
        """Makes the log steps of a namespace with the stash's settings (agent transcripts
        live in logs beside the heads); None for a store built by hand (defaults apply)."""

    @operation
    def load(self, checkpoint_id: str, revision: int | None = None) -> Steps[Envelope]:
        """Return the latest envelope, or an older `revision` from history.

        Raises `CheckpointNotFound`, `InvalidPayload`, `UnsupportedFormat`, `InvalidId`.
        """
        return self.steps.load(checkpoint_id, revision)

    @operation
    def compare_and_swap(self, next: Envelope, expected_revision: int | None) -> Steps[Envelope]:
        """Save `next` only if the stored head is at `expected_revision`; return it, saved.

        `None` creates: it fails if the id exists. Otherwise `next.revision` must be
        `expected_revision + 1`. A lost race raises `CheckpointConflict`; an outcome that
        storage would not confirm raises `StorageUnavailable` carrying the write id.
        Returns `next` (what `update` returns too: the envelope now stored).
        """
        yield from self.steps.compare_and_swap(next, expected_revision)
        return next

    @operation
    def update(
        self,
        checkpoint_id: str,
        mutate: Callable[[Envelope], Any],
        *,
        max_attempts: int | None = None,
        known: Envelope | None = None,
    ) -> Steps[Envelope]:
        """Apply `mutate` to the head and save the result, retrying lost races.

        `mutate(head)` returns the next payload; it runs again on a fresh head after every
        lost race, so it must not have side effects. It may raise to abort: nothing is
        written and the error propagates. After `max_attempts` lost races (default: the
        stash's retry policy) the last `CheckpointConflict` is raised. Returns the saved
        envelope. Raises `CheckpointNotFound` if there is no head to update.

        `known`: the head as the caller last saved or loaded it. It is tried first, so a
        single writer updates with one PUT and no GET; a lost race loads the fresh head.
        """
        return self.steps.update(checkpoint_id, mutate, max_attempts=max_attempts, known=known)

    @operation
    def restore(
        self, checkpoint_id: str, days: int = 7, tier: str = "Standard"
    ) -> Steps[RestoreReport]:
        """Restore the checkpoint's archived revisions for `days`; call again for progress.

        A bucket lifecycle may move old revisions to an archive tier; reading one then
        raises `ArchivedObject` until its restore is done. `tier`: `Expedited`,
        `Standard` or `Bulk`. Raises `ConfigurationError` where storage keeps no versions.
        """
        return self.steps.restore(checkpoint_id, days, tier)

    @operation
    def delete(self, checkpoint_id: str, expected_revision: int | None = None) -> Steps[None]:
        """Delete the head (history stays); with `expected_revision`, only if still at it."""
        return self.steps.delete(checkpoint_id, expected_revision)

    @operation
    def history(self, checkpoint_id: str, limit: int | None = None) -> Steps[list[Envelope]]:
        """Return older revisions, newest first, the head excluded."""
        return self.steps.history(checkpoint_id, limit)

    @operation
    def list_ids(self, prefix: str = "") -> Steps[list[str]]:
        """Return the ids of existing checkpoints starting with `prefix`, ascending."""
        return self.steps.list_ids(prefix)

    @operation
    def describe(self, checkpoint_id: str) -> Steps[CheckpointInfo]:
        """Return the head's kind, revision, run, size and time without its payload.

        On S3 this is one HEAD request: listing large transcripts downloads none of them.
        Raises `CheckpointNotFound`, `InvalidId`.
        """
        return self.steps.describe(checkpoint_id)


class Store(Blocking, _StoreApi):
    """Checkpoint envelopes with compare-and-swap saves, over any object transport.

    Thread-safe: share one per process.
    """


class AsyncStore(Awaiting, _StoreApi):
    """The asyncio twin of `Store`: the same methods, awaitable."""
