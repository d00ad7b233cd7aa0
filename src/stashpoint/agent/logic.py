"""The agent layer's logic, written once as steps over the compare-and-swap logic.

Phases, the resume policy and conversation commits exist once, here. Each operation
`yield from`s the store's compare-and-swap steps directly (one driver per call, no store
inside a store) and runs the caller's turn function as a `Call` request, which the blocking
driver calls and the asyncio driver awaits. The handles, cursors, runners and conversation
stores (`agent.checkpoint`, `agent.runner`, `agent.conversation`) only bind these steps to a
store and a driver.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stashpoint.agent.models import (
    AGENT_KIND,
    AGENT_SCHEMA_VERSION,
    SEED_AGENT_KIND,
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
from stashpoint.envelope import Envelope, typed_payload
from stashpoint.errors import (
    AmbiguousResume,
    CheckpointConflict,
    CheckpointNotFound,
    IdentityMismatch,
    InvalidPayload,
    LimitExceeded,
    TerminalStateConflict,
)
from stashpoint.ids import new_id, validate_id
from stashpoint.steps import Call, Steps, ask
from stashpoint.stores.cas import CompareAndSwap

CONVERSATION_KIND = "stashpoint.conversation"
"""Envelope kind of a durable conversation."""


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
AsyncTurn = Callable[[AgentCheckpointState, int], Awaitable[TurnResult] | TurnResult]
"""A turn for the asyncio API: a coroutine function (or a plain function)."""


# -- pure rules ------------------------------------------------------------------------------


def parse_state(envelope: Envelope) -> AgentCheckpointState:
    """Return the typed agent state of an envelope; never a half-parsed one.

    Another kind is `InvalidPayload`; another schema version is `UnsupportedFormat`.
    """
    return typed_payload(
        envelope,
        AgentCheckpointState,
        kind=(AGENT_KIND, SEED_AGENT_KIND),
        schema_version=AGENT_SCHEMA_VERSION,
        what="agent checkpoint",
    )


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
        raise IdentityMismatch(
            f"checkpoint belongs to agent {state.agent!r}, not {agent!r}",
            object_name=checkpoint_id,
        )
    if model is not None and (state.model.provider, state.model.name) != (
        model.provider,
        model.name,
    ):
        raise IdentityMismatch(
            f"checkpoint was made with model {state.model.name!r}, not {model.name!r}",
            object_name=checkpoint_id,
        )


def conversation_key(namespace: str, conversation_id: str) -> str:
    """Return the checkpoint id of a conversation (unambiguous for any two valid ids)."""
    validate_id(namespace, what="namespace")
    validate_id(conversation_id, what="conversation id")
    return f"conversation.{len(namespace)}.{namespace}.{conversation_id}"


# -- steps -----------------------------------------------------------------------------------


def load(cas: CompareAndSwap, checkpoint_id: str) -> Steps[tuple[Envelope, AgentCheckpointState]]:
    """Load and validate the latest typed agent state."""
    envelope = yield from cas.load(checkpoint_id)
    return envelope, parse_state(envelope)


def create(
    cas: CompareAndSwap, checkpoint_id: str, state: AgentCheckpointState, run_id: str | None
) -> Steps[Envelope]:
    """Save the first state (create-only: fails if the id exists)."""
    envelope = Envelope.initial(
        checkpoint_id, run_id, AGENT_KIND, AGENT_SCHEMA_VERSION, state.to_payload()
    )
    yield from cas.compare_and_swap(envelope, None)
    return envelope


def save(cas: CompareAndSwap, envelope: Envelope, state: AgentCheckpointState) -> Steps[Envelope]:
    """Save `state` as the revision after `envelope`; `CheckpointConflict` if beaten."""
    following = envelope.next(state.to_payload())
    yield from cas.compare_and_swap(following, envelope.revision)
    return following


def start(
    cas: CompareAndSwap,
    checkpoint_id: str,
    *,
    agent: str,
    model: ModelRef,
    transcript: list[Message],
    execution_id: str | None,
    run_id: str | None,
    durable: DurableConversationCheckpoint | None,
) -> Steps[tuple[Envelope, AgentCheckpointState]]:
    """Create the checkpoint with a ready state."""
    state = AgentCheckpointState(
        execution_id=execution_id or new_id(),
        agent=agent,
        model=model,
        transcript=transcript,
        durable_conversation=durable,
    )
    envelope = yield from create(cas, checkpoint_id, state, run_id)
    return envelope, state


def resume(
    cas: CompareAndSwap,
    checkpoint_id: str,
    policy: ResumePolicy,
    agent: str | None,
    model: ModelRef | None,
) -> Steps[tuple[Envelope, AgentCheckpointState]]:
    """Load the checkpoint, check its identity and apply the resume policy."""
    envelope, state = yield from load(cas, checkpoint_id)
    check_identity(checkpoint_id, state, agent, model)
    return envelope, resume_state(state, policy)


def run_turn(
    cas: CompareAndSwap,
    envelope: Envelope,
    state: AgentCheckpointState,
    commit_conversations: bool,
    turn: AsyncTurn,
) -> Steps[tuple[Envelope, AgentCheckpointState]]:
    """Run one turn durably: in flight before the model runs, stable after."""
    if state.outcome() is not None or _completed(envelope):
        raise TerminalStateConflict(
            "the agent completed: its outcome is stored and a new turn would overwrite it "
            "(run() returns the stored outcome)",
            object_name=envelope.id,
        )
    number = state.turns + 1
    # Durable *before* the model or any tool runs: a crash from here on is ambiguous.
    envelope = yield from save(
        cas, envelope, state.model_copy(update={"phase": TurnInFlight(turn=number)})
    )
    result = yield from ask(Call(turn, (state, number)))
    if not isinstance(result, TurnResult):
        raise TypeError(f"a turn must return a TurnResult, not {type(result).__name__}")
    after = after_turn(state, result)
    durable = after.durable_conversation
    if durable is not None and commit_conversations:
        version = yield from commit_conversation(
            cas,
            durable.namespace,
            durable.conversation_id,
            durable.expected_version,
            after.transcript[durable.persisted_prefix_len :],
        )
        durable = durable.model_copy(update={"expected_version": version})
        after = after.model_copy(update={"durable_conversation": durable})
    envelope = yield from save(cas, envelope, after)
    return envelope, after


def _completed(envelope: Envelope) -> bool:
    payload = envelope.payload
    phase = payload.get("phase") if isinstance(payload, dict) else None
    return isinstance(phase, dict) and phase.get("state") == "completed"


def run(
    cas: CompareAndSwap,
    checkpoint_id: str,
    turn: AsyncTurn,
    *,
    policy: ResumePolicy,
    commit_conversations: bool,
    agent: str,
    model: ModelRef,
    transcript: list[Message],
    max_turns: int,
    durable: DurableConversationCheckpoint | None,
) -> Steps[AgentOutcome]:
    """Resume (or start) and run turns until completion.

    A completed checkpoint returns its outcome without running a turn.
    """
    try:
        envelope, state = yield from resume(cas, checkpoint_id, policy, agent, model)
    except CheckpointNotFound:
        envelope, state = yield from start(
            cas, checkpoint_id, agent=agent, model=model, transcript=transcript,
            execution_id=None, run_id=None, durable=durable,
        )  # fmt: skip
    while (outcome := state.outcome()) is None:
        if state.turns >= max_turns:
            raise LimitExceeded(
                f"agent did not complete within {max_turns} turns", object_name=checkpoint_id
            )
        envelope, state = yield from run_turn(cas, envelope, state, commit_conversations, turn)
    return outcome


def _conversation_head(cas: CompareAndSwap, key: str) -> Steps[Envelope | None]:
    try:
        return (yield from cas.load(key))
    except CheckpointNotFound:
        return None


def load_conversation(
    cas: CompareAndSwap, namespace: str, conversation_id: str
) -> Steps[tuple[int, list[Message]]]:
    """Return `(version, messages)`; `(0, [])` for a conversation never committed."""
    envelope = yield from _conversation_head(cas, conversation_key(namespace, conversation_id))
    if envelope is None:
        return 0, []
    if envelope.kind != CONVERSATION_KIND or not isinstance(envelope.payload, dict):
        raise InvalidPayload("not a conversation", object_name=envelope.id)
    return envelope.revision + 1, [
        Message.model_validate(m) for m in envelope.payload.get("messages", [])
    ]


def commit_conversation(
    cas: CompareAndSwap,
    namespace: str,
    conversation_id: str,
    expected_version: int,
    messages: Sequence[Message],
) -> Steps[int]:
    """Replace the transcript if still at `expected_version`; return the new version.

    Version N means N commits (0: none yet). Committing the same messages again at the next
    version is the commit already made (a crash after it, before the agent checkpoint moved
    on). Another turn's commit raises `CheckpointConflict`.
    """
    key = conversation_key(namespace, conversation_id)
    payload = {"messages": [m.model_dump(mode="json") for m in messages]}

    def replace(head: Envelope) -> Any:
        if head.revision + 1 != expected_version:  # another turn committed: abort
            raise CheckpointConflict(key, expected_revision=expected_version - 1)
        return payload

    try:
        if expected_version == 0:
            initial = Envelope.initial(key, None, CONVERSATION_KIND, 1, payload)
            yield from cas.compare_and_swap(initial, None)
        else:
            yield from cas.update(key, replace)
        return expected_version + 1
    except (CheckpointConflict, CheckpointNotFound):
        head = yield from _conversation_head(cas, key)
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
