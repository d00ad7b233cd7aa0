"""Agent checkpoint handles and the cursor that saves every state with compare-and-swap.

A second process resuming the same checkpoint (a zombie spot worker, a duplicated Lambda
invocation) gets `CheckpointConflict` on its first save instead of forking the transcript.
"""

from __future__ import annotations

import pydantic

from stashpoint.agent.models import AGENT_KIND, AGENT_SCHEMA_VERSION, AgentCheckpointState
from stashpoint.envelope import Envelope
from stashpoint.errors import InvalidPayload, UnsupportedFormat
from stashpoint.ids import new_id, validate_id
from stashpoint.stores.store import Store


def parse_state(envelope: Envelope) -> AgentCheckpointState:
    """Return the typed agent state of an envelope; never a half-parsed one.

    Another kind is `InvalidPayload`; another schema version is `UnsupportedFormat`.
    """
    if envelope.kind != AGENT_KIND:
        raise InvalidPayload(
            f"not an agent checkpoint: kind is {envelope.kind!r}", object_name=envelope.id
        )
    if envelope.schema_version != AGENT_SCHEMA_VERSION:
        raise UnsupportedFormat(
            f"agent schema version {envelope.schema_version} is not supported "
            f"(this library reads {AGENT_SCHEMA_VERSION})",
            object_name=envelope.id,
        )
    try:
        return AgentCheckpointState.model_validate(envelope.payload)
    except pydantic.ValidationError as exc:
        raise InvalidPayload(f"agent state is invalid: {exc}", object_name=envelope.id) from exc


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
        envelope = self.store.load(self._id)
        return envelope, parse_state(envelope)

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
        envelope = Envelope.initial(
            handle.id, run_id, AGENT_KIND, AGENT_SCHEMA_VERSION, state.to_payload()
        )
        handle.store.compare_and_swap(envelope, None)
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
        following = self.next(state)
        self.handle.store.compare_and_swap(following, self.envelope.revision)
        self.envelope = following

    @property
    def revision(self) -> int:
        """Revision of the envelope last saved or loaded."""
        return self.envelope.revision

    @property
    def id(self) -> str:
        """The checkpoint identity."""
        return self.envelope.id
