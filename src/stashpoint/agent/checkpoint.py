"""Agent checkpoint handles and the cursor that saves every state with compare-and-swap.

A second process resuming the same checkpoint (a zombie spot worker, a duplicated Lambda
invocation) gets `CheckpointConflict` on its first save instead of forking the transcript.
`AgentCheckpoint` / `CheckpointCursor` work on a `Store`, the `Async` twins on an
`AsyncStore`; both are made from one definition (`stashpoint.twins`) of the steps in
`agent.logic`.
"""

from __future__ import annotations

from typing import Any, Generic, Self, TypeVar

from stashpoint.agent import logic
from stashpoint.agent.models import AgentCheckpointState
from stashpoint.envelope import Envelope
from stashpoint.ids import new_id, validate_id
from stashpoint.steps import Steps
from stashpoint.stores.store import AsyncStore, Store
from stashpoint.twins import Awaiting, Blocking, classoperation, operation

StoreT = TypeVar("StoreT", Store, AsyncStore)


class _CheckpointApi(Generic[StoreT]):
    """A checkpoint handle, defined once; see `AgentCheckpoint`."""

    def __init__(self, checkpoint_id: str, store: StoreT) -> None:
        self._id = validate_id(checkpoint_id)
        self.store: StoreT = store
        """The store holding the checkpoint."""
        self.storage = logic.AgentStorage.of(store.steps, store.log_steps)
        """The agent storage steps behind this handle (what runners compose)."""
        self.driver = store.driver
        """Runs this object's requests: what its operations' steps are driven with."""

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

    @operation
    def load(self, revision: int | None = None) -> Steps[tuple[Envelope, AgentCheckpointState]]:
        """Load and validate the latest typed agent state (with its whole transcript).

        A listing and two rounds of parallel GETs, however long the transcript. With
        `revision`, the state saved at that revision: the checkpoint's log is its history.
        """
        return logic.load(self.storage, self._id, revision)

    @operation
    def load_tail(self, count: int) -> Steps[logic.AgentTail]:
        """Load the latest state with only its last `count` transcript messages.

        Reads only the newest objects of the log (a Lambda resuming a long conversation
        with a summary needs no more); `AgentTail.earlier` says how many were left out.
        """
        return logic.load_tail(self.storage, self._id, count)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._id!r})"


class AgentCheckpoint(Blocking, _CheckpointApi[Store]):
    """Stable handle binding one checkpoint identity to a store."""


class AsyncAgentCheckpoint(Awaiting, _CheckpointApi[AsyncStore]):
    """The asyncio twin of `AgentCheckpoint`, on an `AsyncStore`."""


HandleT = TypeVar("HandleT", AgentCheckpoint, AsyncAgentCheckpoint)
CursorT = TypeVar("CursorT")


class _CursorApi(Generic[HandleT, CursorT]):
    """A cursor, defined once; see `CheckpointCursor`."""

    def __init__(self, handle: HandleT, saved: logic.Saved) -> None:
        self.handle: HandleT = handle
        """The checkpoint this cursor saves to."""
        self.saved = saved
        """The save last made or loaded (what the next save extends)."""
        self.driver = handle.driver
        """Runs this object's requests: what its operations' steps are driven with."""

    @classoperation
    def create(
        cls: type[Any], handle: HandleT, state: AgentCheckpointState, run_id: str | None = None
    ) -> Steps[CursorT]:
        """Save the first state (create-only: fails if the id exists)."""
        saved = yield from logic.create(handle.storage, handle.id, state, run_id)
        return cls(handle, saved)  # type: ignore[no-any-return]

    @classmethod
    def loaded(cls, handle: HandleT, envelope: Envelope) -> Self:
        """Continue from an envelope that `load()` returned."""
        return cls(handle, logic.Saved.from_envelope(envelope))

    @property
    def envelope(self) -> Envelope:
        """The save last made or loaded, as an envelope (the whole state as payload)."""
        return self.saved.envelope()

    @property
    def revision(self) -> int:
        """Revision (log version) of the save last made or loaded."""
        return self.saved.revision

    @property
    def id(self) -> str:
        """The checkpoint identity."""
        return self.saved.checkpoint_id

    def next(self, state: AgentCheckpointState) -> Envelope:
        """Return the envelope that would save `state` next."""
        return self.envelope.next(state.to_payload())

    @operation
    def save(self, state: AgentCheckpointState) -> Steps[None]:
        """Save `state` as the next revision; `CheckpointConflict` if another writer won.

        Sends only the messages added since the last save (and the small state).
        """
        self.saved = yield from logic.save_saved(self.handle.storage, self.saved, state)


class CheckpointCursor(Blocking, _CursorApi[AgentCheckpoint, "CheckpointCursor"]):
    """The latest saved envelope of one execution; each save is a compare-and-swap on it."""


class AsyncCheckpointCursor(Awaiting, _CursorApi[AsyncAgentCheckpoint, "AsyncCheckpointCursor"]):
    """The asyncio twin of `CheckpointCursor`."""
