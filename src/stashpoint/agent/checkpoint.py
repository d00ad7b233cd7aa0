"""Agent checkpoint handles and the cursor that saves every state with compare-and-swap.

A second process resuming the same checkpoint (a zombie spot worker, a duplicated Lambda
invocation) gets `CheckpointConflict` on its first save instead of forking the transcript.
`AgentCheckpoint` / `CheckpointCursor` work on a `Store`; the `Async` twins on an
`AsyncStore`; both run the protocols of `agent.protocol`.
"""

from __future__ import annotations

from typing import Generic, Self, TypeVar

from stashpoint._sansio import run_async, run_sync
from stashpoint.agent import _io, protocol
from stashpoint.agent.models import AgentCheckpointState
from stashpoint.envelope import Envelope
from stashpoint.ids import new_id, validate_id
from stashpoint.stores.store import AsyncStore, Store

StoreT = TypeVar("StoreT", Store, AsyncStore)


class _Handle(Generic[StoreT]):
    """Identity and store of a checkpoint handle, shared by the blocking and async ones."""

    def __init__(self, checkpoint_id: str, store: StoreT) -> None:
        self._id = validate_id(checkpoint_id)
        self.store: StoreT = store
        """The store holding the checkpoint."""

    @classmethod
    def new(cls, store: StoreT) -> Self:
        """Create a handle with a new unique (time-ordered) identity."""
        return cls(new_id(), store)

    @classmethod
    def existing(cls, checkpoint_id: str, store: StoreT) -> Self:
        """Reconnect to an existing checkpoint identity."""
        return cls(checkpoint_id, store)

    @property
    def id(self) -> str:
        """The stable checkpoint identity."""
        return self._id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._id!r})"


class AgentCheckpoint(_Handle[Store]):
    """Stable handle binding one checkpoint identity to a store."""

    def load(self) -> tuple[Envelope, AgentCheckpointState]:
        """Load and validate the latest typed agent state."""
        return run_sync(protocol.load(self._id), _io.blocking(self.store))


HandleT = TypeVar("HandleT", "AgentCheckpoint", "AsyncAgentCheckpoint")


class _Cursor(Generic[HandleT]):
    """The latest envelope of one execution, shared by the blocking and async cursors."""

    def __init__(self, handle: HandleT, envelope: Envelope) -> None:
        self.handle: HandleT = handle
        """The checkpoint this cursor saves to."""
        self.envelope = envelope
        """The envelope last saved or loaded."""

    @property
    def revision(self) -> int:
        """Revision of the envelope last saved or loaded."""
        return self.envelope.revision

    @property
    def id(self) -> str:
        """The checkpoint identity."""
        return self.envelope.id


class CheckpointCursor(_Cursor["AgentCheckpoint"]):
    """The latest saved envelope of one execution; each save is a compare-and-swap on it."""

    @classmethod
    def create(
        cls, handle: AgentCheckpoint, state: AgentCheckpointState, run_id: str | None = None
    ) -> CheckpointCursor:
        """Save the first state (create-only: fails if the id exists)."""
        envelope = run_sync(protocol.create(handle.id, state, run_id), _io.blocking(handle.store))
        return cls(handle, envelope)

    @classmethod
    def loaded(cls, handle: AgentCheckpoint, envelope: Envelope) -> CheckpointCursor:
        """Continue from an envelope that was loaded."""
        return cls(handle, envelope)

    def next(self, state: AgentCheckpointState) -> Envelope:
        """Return the envelope that would save `state` next."""
        return self.envelope.next(state.to_payload())

    def save(self, state: AgentCheckpointState) -> None:
        """Save `state` as the next revision; `CheckpointConflict` if another writer won."""
        self.envelope = run_sync(
            protocol.save(self.envelope, state), _io.blocking(self.handle.store)
        )


class AsyncAgentCheckpoint(_Handle[AsyncStore]):
    """The asyncio twin of `AgentCheckpoint`, on an `AsyncStore`."""

    async def load(self) -> tuple[Envelope, AgentCheckpointState]:
        """Load and validate the latest typed agent state."""
        return await run_async(protocol.load(self._id), _io.awaiting(self.store))


class AsyncCheckpointCursor(_Cursor["AsyncAgentCheckpoint"]):
    """The asyncio twin of `CheckpointCursor`."""

    @classmethod
    async def create(
        cls, handle: AsyncAgentCheckpoint, state: AgentCheckpointState, run_id: str | None = None
    ) -> AsyncCheckpointCursor:
        """Save the first state (create-only: fails if the id exists)."""
        envelope = await run_async(
            protocol.create(handle.id, state, run_id), _io.awaiting(handle.store)
        )
        return cls(handle, envelope)

    async def save(self, state: AgentCheckpointState) -> None:
        """Save `state` as the next revision; `CheckpointConflict` if another writer won."""
        self.envelope = await run_async(
            protocol.save(self.envelope, state), _io.awaiting(self.handle.store)
        )
