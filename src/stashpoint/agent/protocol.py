"""The agent layer's logic, written once as protocols over the public store contract.

Each operation yields three kinds of request: load an envelope, save one with
compare-and-swap, and run a turn (the caller's model-and-tools function). The blocking
handles execute them with a `Store` and a plain function, the asyncio ones with an
`AsyncStore` and a coroutine, so phases, resume policy and conversation commits exist once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic

from stashpoint._sansio import Protocol
from stashpoint.agent.models import (
    AGENT_KIND,
    AGENT_SCHEMA_VERSION,
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
from stashpoint.envelope import Envelope
from stashpoint.errors import (
    AmbiguousResume,
    CheckpointConflict,
    CheckpointNotFound,
    InvalidPayload,
    UnsupportedFormat,
)
from stashpoint.ids import new_id, validate_id

CONVERSATION_KIND = "stashpoint.conversation"
"""Envelope kind of a durable conversation."""


@dataclass(frozen=True, slots=True)
class LoadEnvelope:
    """Request: the latest envelope of a checkpoint. Raises `CheckpointNotFound`."""

    checkpoint_id: str
    """Checkpoint to load."""


@dataclass(frozen=True, slots=True)
class SaveEnvelope:
    """Request: compare-and-swap an envelope. Raises `CheckpointConflict` on a lost race."""

    envelope: Envelope
    """The envelope to store."""
    expected_revision: int | None
    """The revision the head must be at (None: create-only)."""


@dataclass(frozen=True, slots=True)
class RunTurn:
    """Request: run one model-and-tools turn. Result: `TurnResult`."""

    state: AgentCheckpointState
    """The stable state the turn starts from."""
    number: int
    """The one-based turn number."""


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


# -- pure rules ------------------------------------------------------------------------------


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


def resume_state(state: AgentCheckpointState, policy: ResumePolicy) -> AgentCheckpointState:
    """Return the state to continue from, applying the resume policy.

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
    """Return the state after a turn: transcript, counters, usage and phase."""
    update: dict[str, Any] = {
        "transcript": [*state.transcript, *result.messages],
        "turns": state.turns + 1,
        "tool_calls": state.tool_calls + result.tool_calls,
        "delegations": state.delegations + result.delegations,
        "usage": state.usage + result.usage,
        "phase": ReadyForTurn() if result.response is None else Completed(response=result.response),
    }
    return state.model_copy(update=update)


def check_identity(
    checkpoint_id: str, state: AgentCheckpointState, agent: str | None, model: ModelRef | None
) -> None:
    """Refuse to resume another agent's checkpoint, or one made with another model."""
    if agent is not None and state.agent != agent:
        raise InvalidPayload(
            f"checkpoint belongs to agent {state.agent!r}, not {agent!r}",
            object_name=checkpoint_id,
        )
    if model is not None and (state.model.provider, state.model.name) != (
        model.provider,
        model.name,
    ):
        raise InvalidPayload(
            f"checkpoint was made with model {state.model.name!r}, not {model.name!r}",
            object_name=checkpoint_id,
        )


def conversation_key(namespace: str, conversation_id: str) -> str:
    """Return the checkpoint id of a conversation (unambiguous for any two valid ids)."""
    validate_id(namespace, what="namespace")
    validate_id(conversation_id, what="conversation id")
    return f"conversation.{len(namespace)}.{namespace}.{conversation_id}"


# -- protocols -------------------------------------------------------------------------------


def load(checkpoint_id: str) -> Protocol[tuple[Envelope, AgentCheckpointState]]:
    """Load and validate the latest typed agent state."""
    envelope: Envelope = yield LoadEnvelope(checkpoint_id)
    return envelope, parse_state(envelope)


def create(
    checkpoint_id: str, state: AgentCheckpointState, run_id: str | None
) -> Protocol[Envelope]:
    """Save the first state (create-only: fails if the id exists)."""
    envelope = Envelope.initial(
        checkpoint_id, run_id, AGENT_KIND, AGENT_SCHEMA_VERSION, state.to_payload()
    )
    yield SaveEnvelope(envelope, None)
    return envelope


def save(envelope: Envelope, state: AgentCheckpointState) -> Protocol[Envelope]:
    """Save `state` as the revision after `envelope`; `CheckpointConflict` if beaten."""
    following = envelope.next(state.to_payload())
    yield SaveEnvelope(following, envelope.revision)
    return following


def start(
    checkpoint_id: str,
    *,
    agent: str,
    model: ModelRef,
    transcript: list[Message],
    execution_id: str | None,
    run_id: str | None,
    durable: DurableConversationCheckpoint | None,
) -> Protocol[tuple[Envelope, AgentCheckpointState]]:
    """Create the checkpoint with a ready state."""
    state = AgentCheckpointState(
        execution_id=execution_id or new_id(),
        agent=agent,
        model=model,
        transcript=transcript,
        durable_conversation=durable,
    )
    envelope = yield from create(checkpoint_id, state, run_id)
    return envelope, state


def resume(
    checkpoint_id: str, policy: ResumePolicy, agent: str | None, model: ModelRef | None
) -> Protocol[tuple[Envelope, AgentCheckpointState]]:
    """Load the checkpoint, check its identity and apply the resume policy."""
    envelope, state = yield from load(checkpoint_id)
    check_identity(checkpoint_id, state, agent, model)
    return envelope, resume_state(state, policy)


def run_turn(
    envelope: Envelope, state: AgentCheckpointState, commit_conversations: bool
) -> Protocol[tuple[Envelope, AgentCheckpointState]]:
    """Run one turn durably: in flight before the model runs, stable after."""
    number = state.turns + 1
    # Durable *before* the model or any tool runs: a crash from here on is ambiguous.
    envelope = yield from save(
        envelope, state.model_copy(update={"phase": TurnInFlight(turn=number)})
    )
    result: TurnResult = yield RunTurn(state, number)
    after = after_turn(state, result)
    durable = after.durable_conversation
    if durable is not None and commit_conversations:
        version = yield from commit_conversation(
            durable.namespace,
            durable.conversation_id,
            durable.expected_version,
            after.transcript[durable.persisted_prefix_len :],
        )
        durable = durable.model_copy(update={"expected_version": version})
        after = after.model_copy(update={"durable_conversation": durable})
    envelope = yield from save(envelope, after)
    return envelope, after


def run(
    checkpoint_id: str,
    *,
    policy: ResumePolicy,
    commit_conversations: bool,
    agent: str,
    model: ModelRef,
    transcript: list[Message],
    max_turns: int,
    durable: DurableConversationCheckpoint | None,
) -> Protocol[AgentOutcome]:
    """Resume (or start) and run turns until completion.

    A completed checkpoint returns its outcome without running a turn.
    """
    try:
        envelope, state = yield from resume(checkpoint_id, policy, agent, model)
    except CheckpointNotFound:
        envelope, state = yield from start(
            checkpoint_id, agent=agent, model=model, transcript=transcript,
            execution_id=None, run_id=None, durable=durable,
        )  # fmt: skip
    while (outcome := state.outcome()) is None:
        if state.turns >= max_turns:
            raise InvalidPayload(
                f"agent did not complete within {max_turns} turns", object_name=checkpoint_id
            )
        envelope, state = yield from run_turn(envelope, state, commit_conversations)
    return outcome


def _conversation_head(key: str) -> Protocol[Envelope | None]:
    try:
        envelope: Envelope = yield LoadEnvelope(key)
    except CheckpointNotFound:
        return None
    return envelope


def load_conversation(namespace: str, conversation_id: str) -> Protocol[tuple[int, list[Message]]]:
    """Return `(version, messages)`; `(0, [])` for a conversation never committed."""
    envelope = yield from _conversation_head(conversation_key(namespace, conversation_id))
    if envelope is None:
        return 0, []
    if envelope.kind != CONVERSATION_KIND or not isinstance(envelope.payload, dict):
        raise InvalidPayload("not a conversation", object_name=envelope.id)
    return envelope.revision + 1, [
        Message.model_validate(m) for m in envelope.payload.get("messages", [])
    ]


def commit_conversation(
    namespace: str, conversation_id: str, expected_version: int, messages: Sequence[Message]
) -> Protocol[int]:
    """Replace the transcript if still at `expected_version`; return the new version.

    Version N means N commits (0: none yet). Committing the same messages again at the next
    version is the commit already made (a crash after it, before the agent checkpoint moved
    on). Another turn's commit raises `CheckpointConflict`.
    """
    key = conversation_key(namespace, conversation_id)
    payload = {"messages": [m.model_dump(mode="json") for m in messages]}
    head = yield from _conversation_head(key)
    version = 0 if head is None else head.revision + 1
    if version == expected_version:
        following = (
            Envelope.initial(key, None, CONVERSATION_KIND, 1, payload)
            if head is None
            else head.next(payload)
        )
        try:
            yield SaveEnvelope(following, None if head is None else head.revision)
            return expected_version + 1
        except CheckpointConflict:
            head = yield from _conversation_head(key)
            version = 0 if head is None else head.revision + 1
    if head is not None and version == expected_version + 1 and head.payload == payload:
        return version  # our own commit, made before a crash: nothing to do
    raise CheckpointConflict(
        key,
        expected_revision=expected_version - 1 if expected_version else None,
        actual_revision=None if head is None else head.revision,
        message=f"conversation moved to version {version}; this turn loaded "
        f"version {expected_version}",
    )
