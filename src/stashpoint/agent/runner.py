"""Running an agent turn by turn, durably: the turn helper and the resume policy.

Before a turn calls the model (and its tools), the checkpoint is saved as
`TurnInFlight(turn)`; after the turn, as `ReadyForTurn` with the new transcript (or
`Completed`). A process that dies mid-turn leaves `TurnInFlight` behind: whether resuming
may run that turn again is the `ResumePolicy`'s call, never a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stashpoint.agent.checkpoint import AgentCheckpoint, CheckpointCursor
from stashpoint.agent.conversation import ConversationStore
from stashpoint.agent.models import (
    AgentCheckpointState,
    AgentOutcome,
    Completed,
    DurableConversationCheckpoint,
    Message,
    ModelRef,
    ModelResponse,
    ReadyForTurn,
    ResumePolicy,
    TurnInFlight,
    Usage,
)
from stashpoint.errors import AmbiguousResume, CheckpointNotFound, InvalidPayload
from stashpoint.ids import new_id


@dataclass
class TurnResult:
    """What one model-and-tools turn produced."""

    messages: list[Message]
    """Messages the turn appended (assistant message, tool results)."""
    response: ModelResponse | None = None
    """The final response, if the agent is done; None to continue."""
    usage: Usage = field(default_factory=Usage)
    """Usage of the turn."""
    tool_calls: int = 0
    """Local tool attempts completed in the turn."""
    delegations: int = 0
    """Successful delegations completed in the turn."""


Turn = Callable[[AgentCheckpointState, int], TurnResult]
"""A turn: given the stable state and the one-based turn number, call the model and tools."""


def resume_state(state: AgentCheckpointState, policy: ResumePolicy) -> AgentCheckpointState:
    """Return the state to continue from, applying the resume policy (pure).

    `TurnInFlight` under `REJECT_AMBIGUOUS` raises `AmbiguousResume`; under
    `RETRY_INTERRUPTED_TURN` the turn restarts from the last stable transcript, which is the
    one saved with the in-flight marker.
    """
    match state.phase:
        case TurnInFlight(turn=turn):
            if policy is ResumePolicy.RETRY_INTERRUPTED_TURN:
                return state.model_copy(update={"phase": ReadyForTurn()})
            raise AmbiguousResume(state.execution_id, turn)
        case _:
            return state


def after_turn(state: AgentCheckpointState, result: TurnResult) -> AgentCheckpointState:
    """Return the state after a turn (pure): transcript, counters, usage and phase."""
    update: dict[str, Any] = {
        "transcript": [*state.transcript, *result.messages],
        "turns": state.turns + 1,
        "tool_calls": state.tool_calls + result.tool_calls,
        "delegations": state.delegations + result.delegations,
        "usage": state.usage + result.usage,
        "phase": ReadyForTurn() if result.response is None else Completed(response=result.response),
    }
    return state.model_copy(update=update)


class AgentRunner:
    """Runs an agent's turns against one checkpoint, saving each boundary with CAS."""

    def __init__(
        self,
        checkpoint: AgentCheckpoint,
        *,
        policy: ResumePolicy = ResumePolicy.REJECT_AMBIGUOUS,
        conversations: ConversationStore | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        """The checkpoint this runner saves to."""
        self.policy = policy
        """What to do with a turn found in flight."""
        self.conversations = conversations
        """Where durable conversations are committed, if the agent uses them."""

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
        state = AgentCheckpointState(
            execution_id=execution_id or new_id(),
            agent=agent,
            model=model,
            transcript=transcript,
            durable_conversation=durable,
        )
        return CheckpointCursor.create(self.checkpoint, state, run_id), state

    def resume(
        self, *, agent: str | None = None, model: ModelRef | None = None
    ) -> tuple[CheckpointCursor, AgentCheckpointState]:
        """Load the checkpoint and apply the resume policy; check identity if given."""
        envelope, state = self.checkpoint.load()
        if agent is not None and state.agent != agent:
            raise InvalidPayload(
                f"checkpoint belongs to agent {state.agent!r}, not {agent!r}",
                object_name=self.checkpoint.id,
            )
        if model is not None and (state.model.provider, state.model.name) != (
            model.provider,
            model.name,
        ):
            raise InvalidPayload(
                f"checkpoint was made with model {state.model.name!r}, not {model.name!r}",
                object_name=self.checkpoint.id,
            )
        return CheckpointCursor.loaded(self.checkpoint, envelope), resume_state(state, self.policy)

    def run_turn(
        self, cursor: CheckpointCursor, state: AgentCheckpointState, turn: Turn
    ) -> AgentCheckpointState:
        """Run one turn durably; return the state saved after it."""
        number = state.turns + 1
        # Durable *before* the model or any tool runs: a crash from here on is ambiguous.
        cursor.save(state.model_copy(update={"phase": TurnInFlight(turn=number)}))
        result = turn(state, number)
        after = after_turn(state, result)
        durable = after.durable_conversation
        if durable is not None and self.conversations is not None:
            version = self.conversations.commit(
                durable.namespace,
                durable.conversation_id,
                durable.expected_version,
                after.transcript[durable.persisted_prefix_len :],
            )
            after = after.model_copy(
                update={
                    "durable_conversation": durable.model_copy(update={"expected_version": version})
                }
            )
        cursor.save(after)
        return after

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
        try:
            cursor, state = self.resume(agent=agent, model=model)
        except CheckpointNotFound:
            cursor, state = self.start(
                agent=agent, model=model, transcript=transcript or [], durable=durable
            )
        while (outcome := state.outcome()) is None:
            if state.turns >= max_turns:
                raise InvalidPayload(
                    f"agent did not complete within {max_turns} turns",
                    object_name=self.checkpoint.id,
                )
            state = self.run_turn(cursor, state, turn)
        return outcome
