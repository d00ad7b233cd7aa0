"""Agent checkpoint handles and the cursor that saves every state with compare-and-swap.

A second process resuming the same checkpoint (a zombie spot worker, a duplicated Lambda
invocation) gets `CheckpointConflict` on its first save instead of forking the transcript.
`AgentCheckpoint` / `CheckpointCursor` work on a `Store`; the `Async` twins on an
`AsyncStore`; both run the protocols of `agent.protocol`.
"""

from __future__ import annotations

from stashpoint._sansio import run_async, run_sync
from stashpoint.agent import _io, protocol
from stashpoint.agent.models import AgentCheckpointState
from stashpoint.envelope import Envelope
from stashpoint.ids import new_id, validate_id
from stashpoint.stores.store import AsyncStore, Store


class AgentCheckpoint:
    """Stable handle binding one checkpoint identity to a store."""

    def __init__(self, checkpoint_id: str, store: Store) -> None:
        self._id = validate_id(checkpoint_id)
        self.store = store
        """The store holding the checkpoint."""

    @classmethod
    def new(cls, store: Store) -> AgentCheckpoint:
        """Create a handle with a new unique (time-ordered) identity."""
        return cls(new_id(), store)

    @classmethod
    def existing(cls, checkpoint_id: str, store: Store) -> AgentCheckpoint:
        """Reconnect to an existing checkpoint identity."""
        return cls(checkpoint_id, store)

    @property
    def id(self) -> str:
        """The stable checkpoint identity."""
        return self._id

    def load(self) -> tuple[Envelope, AgentCheckpointState]:
        """Load and validate the latest typed agent state."""
        return run_sync(protocol.load(self._id), _io.blocking(self.store))

    def __repr__(self) -> str:
        return f"AgentCheckpoint({self._id!r})"


class CheckpointCursor:
    """The latest saved envelope of one execution; each save is a compare-and-swap on it."""

    def __init__(self, handle: AgentCheckpoint, envelope: Envelope) -> None:
        self.handle = handle
        """The checkpoint this cursor saves to."""
        self.envelope = envelope
        """The envelope last saved or loaded."""

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

    @property
    def revision(self) -> int:
        """Revision of the envelope last saved or loaded."""
        return self.envelope.revision

    @property
    def id(self) -> str:
        """The checkpoint identity."""
        return self.envelope.id


class AsyncAgentCheckpoint:
    """The asyncio twin of `AgentCheckpoint`, on an `AsyncStore`."""

    def __init__(self, checkpoint_id: str, store: AsyncStore) -> None:
        self._id = validate_id(checkpoint_id)
        self.store = store
        """The store holding the checkpoint."""

    @classmethod
    def new(cls, store: AsyncStore) -> AsyncAgentCheckpoint:
        """Create a handle with a new unique (time-ordered) identity."""
        return cls(new_id(), store)

    @classmethod
    def existing(cls, checkpoint_id: str, store: AsyncStore) -> AsyncAgentCheckpoint:
        """Reconnect to an existing checkpoint identity."""
        return cls(checkpoint_id, store)

    @property
    def id(self) -> str:
        """The stable checkpoint identity."""
        return self._id

    async def load(self) -> tuple[Envelope, AgentCheckpointState]:
        """Load and validate the latest typed agent state."""
        return await run_async(protocol.load(self._id), _io.awaiting(self.store))

    def __repr__(self) -> str:
        return f"AsyncAgentCheckpoint({self._id!r})"


class AsyncCheckpointCursor:
    """The asyncio twin of `CheckpointCursor`."""

    def __init__(self, handle: AsyncAgentCheckpoint, envelope: Envelope) -> None:
        self.handle = handle
        """The checkpoint this cursor saves to."""
        self.envelope = envelope
        """The envelope last saved or loaded."""

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

    @property
    def revision(self) -> int:
        """Revision of the envelope last saved or loaded."""
        return self.envelope.revision

    @property
    def id(self) -> str:
        """The checkpoint identity."""
        return self.envelope.id
