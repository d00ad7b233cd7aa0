"""Running an agent turn by turn, durably: `AgentRunner` and `AsyncAgentRunner`.

Before a turn calls the model (and its tools), the checkpoint is saved as
`TurnInFlight(turn)`; after the turn, as `ReadyForTurn` with the new transcript (or
`Completed`). A process that dies mid-turn leaves `TurnInFlight` behind: whether resuming
may run that turn again is the `ResumePolicy`'s call, never a guess. The steps are the
protocols of `agent.protocol`; these classes only run them.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from stashpoint._sansio import run_async, run_sync
from stashpoint.agent import _io, protocol
from stashpoint.agent._io import AsyncTurn, Turn
from stashpoint.agent.checkpoint import (
    AgentCheckpoint,
    AsyncAgentCheckpoint,
    AsyncCheckpointCursor,
    CheckpointCursor,
)
from stashpoint.agent.models import (
    AgentCheckpointState,
    AgentOutcome,
    DurableConversationCheckpoint,
    Message,
    ModelRef,
    ResumePolicy,
)

HandleT = TypeVar("HandleT", AgentCheckpoint, AsyncAgentCheckpoint)


class _Runner(Generic[HandleT]):
    """A runner's settings, shared by the blocking and async runners."""

    def __init__(
        self,
        checkpoint: HandleT,
        *,
        policy: ResumePolicy = ResumePolicy.REJECT_AMBIGUOUS,
        commit_conversations: bool = True,
    ) -> None:
        self.checkpoint: HandleT = checkpoint
        """The checkpoint this runner saves to."""
        self.policy = policy
        """What to do with a turn found in flight."""
        self.commit_conversations = commit_conversations
        """Whether turns commit their durable conversation (same store) at the end."""


class AgentRunner(_Runner[AgentCheckpoint]):
    """Runs an agent's turns against one checkpoint, saving each boundary with CAS."""

    def start(
        self,
        *,
        agent: str,
        model: ModelRef,
        transcript: list[Message],
        execution_id: str | None = None,
        run_id: str | None = None,
        durable: DurableConversationCheckpoint | None = None,
    ) -> tuple[CheckpointCursor, AgentCheckpointState]:
        """Create the checkpoint with a ready state (create-only)."""
        envelope, state = run_sync(
            protocol.start(
                self.checkpoint.id, agent=agent, model=model, transcript=transcript,
                execution_id=execution_id, run_id=run_id, durable=durable,
            ),
            _io.blocking(self.checkpoint.store),
        )  # fmt: skip
        return CheckpointCursor.loaded(self.checkpoint, envelope), state

    def resume(
        self, *, agent: str | None = None, model: ModelRef | None = None
    ) -> tuple[CheckpointCursor, AgentCheckpointState]:
        """Load the checkpoint and apply the resume policy; check identity if given."""
        envelope, state = run_sync(
            protocol.resume(self.checkpoint.id, self.policy, agent, model),
            _io.blocking(self.checkpoint.store),
        )
        return CheckpointCursor.loaded(self.checkpoint, envelope), state

    def run_turn(
        self, cursor: CheckpointCursor, state: AgentCheckpointState, turn: Turn
    ) -> AgentCheckpointState:
        """Run one turn durably; return the state saved after it."""
        cursor.envelope, state = run_sync(
            protocol.run_turn(cursor.envelope, state, self.commit_conversations),
            _io.blocking(self.checkpoint.store, turn),
        )
        return state

    def run(
        self,
        turn: Turn,
        *,
        agent: str,
        model: ModelRef,
        transcript: list[Message] | None = None,
        max_turns: int = 100,
        durable: DurableConversationCheckpoint | None = None,
    ) -> AgentOutcome:
        """Resume the checkpoint (or start it) and run turns until the agent completes.

        A completed checkpoint returns its outcome without calling the model again.
        """
        return run_sync(
            protocol.run(
                self.checkpoint.id, policy=self.policy,
                commit_conversations=self.commit_conversations, agent=agent, model=model,
                transcript=transcript or [], max_turns=max_turns, durable=durable,
            ),
            _io.blocking(self.checkpoint.store, turn),
        )  # fmt: skip


class AsyncAgentRunner(_Runner[AsyncAgentCheckpoint]):
    """The asyncio twin of `AgentRunner`; turns may be coroutine functions."""

    async def start(
        self,
        *,
        agent: str,
        model: ModelRef,
        transcript: list[Message],
        execution_id: str | None = None,
        run_id: str | None = None,
        durable: DurableConversationCheckpoint | None = None,
    ) -> tuple[AsyncCheckpointCursor, AgentCheckpointState]:
        """Create the checkpoint with a ready state (create-only)."""
        envelope, state = await run_async(
            protocol.start(
                self.checkpoint.id, agent=agent, model=model, transcript=transcript,
                execution_id=execution_id, run_id=run_id, durable=durable,
            ),
            _io.awaiting(self.checkpoint.store),
        )  # fmt: skip
        return AsyncCheckpointCursor(self.checkpoint, envelope), state

    async def resume(
        self, *, agent: str | None = None, model: ModelRef | None = None
    ) -> tuple[AsyncCheckpointCursor, AgentCheckpointState]:
        """Load the checkpoint and apply the resume policy; check identity if given."""
        envelope, state = await run_async(
            protocol.resume(self.checkpoint.id, self.policy, agent, model),
            _io.awaiting(self.checkpoint.store),
        )
        return AsyncCheckpointCursor(self.checkpoint, envelope), state

    async def run_turn(
        self, cursor: AsyncCheckpointCursor, state: AgentCheckpointState, turn: AsyncTurn
    ) -> AgentCheckpointState:
        """Run one turn durably; return the state saved after it."""
        cursor.envelope, state = await run_async(
            protocol.run_turn(cursor.envelope, state, self.commit_conversations),
            _io.awaiting(self.checkpoint.store, turn),
        )
        return state

    async def run(
        self,
        turn: AsyncTurn,
        *,
        agent: str,
        model: ModelRef,
        transcript: list[Message] | None = None,
        max_turns: int = 100,
        durable: DurableConversationCheckpoint | None = None,
    ) -> AgentOutcome:
        """Resume the checkpoint (or start it) and run turns until the agent completes."""
        return await run_async(
            protocol.run(
                self.checkpoint.id, policy=self.policy,
                commit_conversations=self.commit_conversations, agent=agent, model=model,
                transcript=transcript or [], max_turns=max_turns, durable=durable,
            ),
            _io.awaiting(self.checkpoint.store, turn),
        )  # fmt: skip
