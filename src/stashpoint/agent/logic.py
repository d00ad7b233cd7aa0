"""The agent layer's logic, written once as steps over the compare-and-swap logic.

Phases, the resume policy and conversation commits exist once, here. Each operation
`yield from`s the store's compare-and-swap steps directly (one driver per call, no store
inside a store) and runs the caller's turn function as a `Call` request, which the blocking
driver calls and the asyncio driver awaits. The handles, cursors, runners and conversation
stores (`agent.checkpoint`, `agent.runner`, `agent.conversation`) only bind these steps to a
store and a driver.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pydantic

from stashpoint.agent.conversation_log import (
    WHOLE_TRANSCRIPT,
    ConversationForm,
    ConversationState,
    commit_conversation,
)
from stashpoint.agent.models import (
    AGENT_KIND,
    AGENT_SCHEMA_VERSION,
    SEED_AGENT_KIND,
    TURN_HISTORY,
    AgentCheckpointState,
    AgentOutcome,
    Completed,
    DurableConversationCheckpoint,
    Message,
    ModelRef,
    ModelResponse,
    ReadyForTurn,
    ResumePolicy,
    Suspended,
    TurnInFlight,
    Usage,
)
from stashpoint.deadline import Deadline
from stashpoint.envelope import Envelope, typed_payload
from stashpoint.errors import (
    AmbiguousResume,
    CheckpointNotFound,
    IdentityMismatch,
    InvalidArgument,
    InvalidPayload,
    LimitExceeded,
    Purged,
    TerminalStateConflict,
    UnsupportedFormat,
    described,
)
from stashpoint.ids import validate_id
from stashpoint.logs.format import LogKeys
from stashpoint.logs.log import LogHead, LogSteps
from stashpoint.logs.state import LoggedState
from stashpoint.steps import Call, NewId, Steps, ask
from stashpoint.stores.cas import CompareAndSwap
from stashpoint.stores.layout import AGENTS, CONVERSATIONS


@dataclass
class TurnResult:
    """What one model-and-tools turn produced: the turn contract.

    A turn function gets the stable state (its transcript holds every message so far)
    and the one-based turn number, calls the model and runs the tools, and returns this.
    `messages` are appended to the transcript. **`response` ends the agent**: a turn that
    returns a response is the last one (the outcome is stored and `run()` returns it,
    completing the checkpoint's run when there is one); a turn that needs another model
    call leaves it None, and the runner calls the next turn.
    """

    messages: list[Message]
    """Messages the turn appended (assistant message, tool results)."""
    response: ModelResponse | None = None
    """The final response: set it only when the agent is done (no further turn runs);
    None to continue with another turn."""
    usage: Usage = field(default_factory=Usage)
    """Usage of the turn."""
    tool_calls: int = 0
    """Local tool attempts completed in the turn."""
    delegations: int = 0
    """Successful delegations completed in the turn."""


class TurnNotStarted(Exception):
    """Raise it from a turn that had no effect yet: the turn runs again, no operator needed.

    For a model call refused (a 503) before anything ran, or a tool that failed before it
    touched anything; usually raised `from` the cause. The runner clears the turn's
    in-flight mark, so the next `run` runs the turn again without `AmbiguousResume`: the
    turn is not counted, and its attempt (in a run) is recorded failed. Any other exception
    leaves the turn in flight, since its model call or tools may have had effects. It is
    raised on to the caller.
    """


Turn = Callable[[AgentCheckpointState, int], TurnResult]
"""A turn: given the stable state and the one-based turn number, call the model and tools,
and return a `TurnResult` (with `response` only on the last turn). It may raise: the turn
is then not saved, and the next `run()` meets the in-flight marker (`ResumePolicy`)."""
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


def resume_state(
    state: AgentCheckpointState, policy: ResumePolicy, checkpoint_id: str | None = None
) -> AgentCheckpointState:
    """Return the state to continue from, applying the resume policy.

    `TurnInFlight` under `REJECT_AMBIGUOUS` raises `AmbiguousResume`; under
    `RETRY_INTERRUPTED_TURN` the turn restarts from the last stable transcript, which is the
    one saved with the in-flight marker.
    """
    match state.phase:
        case TurnInFlight(turn=turn):
            if policy is ResumePolicy.RETRY_INTERRUPTED_TURN:
                return state.model_copy(update={"phase": ReadyForTurn()})
            # Named by the agent's id, which `stashpoint agent resolve` takes.
            raise AmbiguousResume(checkpoint_id or state.execution_id, turn)
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


# -- where an agent's checkpoint lives ----------------------------------------------------

_ALL = WHOLE_TRANSCRIPT


@dataclass(frozen=True)
class AgentStorage:
    """Where agent checkpoints and durable conversations live: their logs."""

    logs: LogSteps
    """Agent checkpoint logs (one per checkpoint id)."""
    conversations: LogSteps
    """Durable conversation logs (one per conversation key)."""
    conversation_states: LoggedState[ConversationState]
    """The conversations' states: the one log-backed state, with its cached heads."""
    agent_states: LoggedState[AgentHead]
    """The agent checkpoints' states (appended after the head a cursor holds)."""

    @classmethod
    def of(cls, cas: CompareAndSwap, logs: Callable[[str], LogSteps] | None = None) -> AgentStorage:
        """Return the agent storage beside a checkpoint store's compare-and-swap steps.

        `logs(namespace)` makes log steps with the stash's settings; default ones otherwise.
        """
        if logs is None:
            logs = lambda namespace: LogSteps(  # noqa: E731 - the default, as one expression
                LogKeys(cas.layout, namespace), cas.codec, cas.retry
            )
        agents, conversations = logs(AGENTS), logs(CONVERSATIONS)
        states = LoggedState(conversations, ConversationForm(conversations))
        # A cursor holds the head an agent save appends after: the cache is never read.
        agent_states = LoggedState(agents, _AgentForm(agents), cache_size=64)
        return cls(agents, conversations, states, agent_states)


@dataclass(frozen=True)
class Saved:
    """The last save a cursor knows: its place in the checkpoint's log and the state saved.

    A checkpoint is a log whose records are transcript messages and whose state is the rest
    of `AgentCheckpointState` plus where the current transcript starts among the records
    (`transcript_start`) and how long it is. A turn appends only its new messages; a
    transcript that is not an extension of the saved one (summarised, edited) is appended
    whole and `transcript_start` moves to it, so the log itself stays append-only.
    """

    checkpoint_id: str
    """The checkpoint."""
    head: LogHead | None
    """The log head saved or loaded; None before the first save (`create`)."""
    state: AgentCheckpointState
    """The state saved there, with its whole transcript."""
    transcript_start: int
    """Record position where `state.transcript` starts in the log."""
    run_id: str | None = None
    """The run the checkpoint belongs to."""

    @property
    def revision(self) -> int:
        """The log version of this save."""
        return self._saved_head().version

    def _saved_head(self) -> LogHead:
        if self.head is None:
            raise InvalidArgument(
                "this checkpoint is not saved yet", object_name=self.checkpoint_id
            )
        return self.head

    def envelope(self) -> Envelope:
        """Return this save as an envelope (id, kind, revision, full state as payload)."""
        head = self._saved_head()
        return Envelope.from_fields(
            id=self.checkpoint_id,
            run_id=self.run_id,
            kind=AGENT_KIND,
            schema_version=AGENT_SCHEMA_VERSION,
            revision=head.version,
            write_id=head.write_id,
            created_at=head.written_at,
            updated_at=head.written_at,
            payload=self.state.to_payload(),
            log={
                "next_record": head.next_record,
                "transcript_start": self.transcript_start,
                "base": head.base,
            },
        )

    @classmethod
    def from_envelope(cls, envelope: Envelope) -> Saved:
        """Return the save an envelope made by `envelope()` (or `load()`) describes."""
        state = parse_state(envelope)
        position = envelope.extra.get("log")
        if not isinstance(position, dict):
            raise InvalidPayload(
                "not a save of an agent checkpoint log: the envelope has no log position",
                object_name=envelope.id,
            )
        try:
            head = LogHead(
                log_id=envelope.id,
                version=envelope.revision,
                next_record=int(position["next_record"]),
                state=None,
                kind=AGENT_KIND,
                schema_version=AGENT_SCHEMA_VERSION,
                write_id=envelope.write_id,
                written_at=envelope.updated_at,
                base=int(position.get("base", 0)),
            )
            start = int(position["transcript_start"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidPayload(f"envelope's log position is invalid: {exc}") from None
        return cls(envelope.id, head, state, start, envelope.run_id)


@dataclass(frozen=True, slots=True)
class AgentHead:
    """What an agent checkpoint log's newest entry stores: the state but its messages."""

    fields: dict[str, Any]
    """`AgentCheckpointState` without its transcript (`to_payload(transcript=False)`)."""
    transcript_start: int
    """Record position where the transcript starts among the log's records."""
    transcript_length: int
    """Messages in the transcript (the log's last records)."""

    @classmethod
    def of(cls, state: AgentCheckpointState, start: int) -> AgentHead:
        """Return what an entry stores of `state`, whose transcript starts at `start`."""
        return cls(state.to_payload(transcript=False), start, len(state.transcript))


class _AgentForm:
    """How an agent checkpoint's state is kept in its log (`logs.state.StateForm`)."""

    kind = AGENT_KIND
    schema_version = AGENT_SCHEMA_VERSION

    def __init__(self, logs: LogSteps) -> None:
        self.logs = logs

    def parse(self, head: LogHead) -> AgentHead:
        """Return the typed head of an agent checkpoint log, or a typed error."""
        name = self.logs.keys.entry(head.log_id, head.version)
        if head.kind not in (AGENT_KIND, SEED_AGENT_KIND):
            raise InvalidPayload(
                f"not an agent checkpoint: kind is {head.kind!r}", object_name=name
            )
        if head.schema_version != AGENT_SCHEMA_VERSION:
            raise UnsupportedFormat(
                f"agent checkpoint schema version {head.schema_version} is not the one this "
                f"library reads ({AGENT_SCHEMA_VERSION})",
                object_name=name,
            )
        stored = head.state
        if not isinstance(stored, dict):
            raise InvalidPayload("agent checkpoint state is not an object", object_name=name)
        fields = dict(stored)
        start = fields.pop("transcript_start", None)
        length = fields.pop("transcript_length", None)
        if type(start) is not int or type(length) is not int or start < 0 or length < 0:
            raise InvalidPayload(
                "agent checkpoint has no valid transcript position", object_name=name
            )
        if start + length != head.next_record:
            raise InvalidPayload(
                f"transcript of {length} messages from record {start} does not end at the "
                f"log's {head.next_record} records",
                object_name=name,
            )
        return AgentHead(fields, start, length)

    def document(self, state: AgentHead) -> dict[str, Any]:
        """Return what an entry stores of the head."""
        return {
            **state.fields,
            "transcript_start": state.transcript_start,
            "transcript_length": state.transcript_length,
        }


def _state_from_log(
    storage: AgentStorage, head: LogHead, records: list[Any], *, tail: bool = False
) -> tuple[AgentCheckpointState, int]:
    """Return the typed state of a log head and the transcript records read for it.

    `tail`: `records` are only the end of the transcript, which then holds just them.
    """
    stored = storage.agent_states.form.parse(head)
    name = storage.logs.keys.entry(head.log_id, head.version)
    length = stored.transcript_length
    if not tail and len(records) < min(length, head.next_record):
        raise InvalidPayload(
            f"transcript of {length} messages from record {stored.transcript_start} does "
            f"not end at the log's {head.next_record} records",
            object_name=name,
        )
    fields = dict(stored.fields)
    if tail:
        fields["transcript"] = records[max(0, len(records) - length) :]
    else:
        fields["transcript"] = records[len(records) - length :] if length else []
    try:
        state = AgentCheckpointState.model_validate(fields)
    except pydantic.ValidationError as exc:
        raise InvalidPayload(f"agent checkpoint state is invalid: {exc}", object_name=name) from exc
    return state, stored.transcript_start


def _read(storage: AgentStorage, checkpoint_id: str, count: int) -> Steps[Saved | None]:
    """Read the checkpoint's log head and its last `count` transcript messages (None: no log)."""
    logs = storage.logs
    validate_id(checkpoint_id)
    try:
        head, entries = yield from logs.tail(
            checkpoint_id, count, since=lambda h: _transcript_start(h)
        )
    except Purged:
        raise  # erased on purpose: said so, never read as a checkpoint never saved
    except CheckpointNotFound:
        return None
    floor = max(_transcript_start(head), head.next_record - count)
    records: list[Any] = []
    for entry in entries:
        records.extend(entry.records[max(0, floor - entry.first_record) :])
    run_id = entries[-1].extra.get("run_id")
    state, start = _state_from_log(storage, head, records, tail=count < _ALL)
    return Saved(checkpoint_id, head, state, start, run_id if isinstance(run_id, str) else None)


def _transcript_start(head: LogHead) -> int:
    stored = head.state
    start = stored.get("transcript_start") if isinstance(stored, dict) else None
    return start if type(start) is int and 0 <= start <= head.next_record else 0


def load_saved(storage: AgentStorage, checkpoint_id: str) -> Steps[Saved]:
    """Load the latest save from the checkpoint's log (`CheckpointNotFound`: none)."""
    saved = yield from _read(storage, checkpoint_id, _ALL)
    if saved is None:
        raise CheckpointNotFound("no agent checkpoint with this id", object_name=checkpoint_id)
    return saved


def load_tail(storage: AgentStorage, checkpoint_id: str, count: int) -> Steps[AgentTail]:
    """Load the latest state with only the last `count` transcript messages."""
    if type(count) is not int or count < 0:
        raise InvalidArgument(f"count must be an int >= 0, not {described(count)}")
    saved = yield from _read(storage, checkpoint_id, count)
    if saved is None or saved.head is None:
        raise CheckpointNotFound("no agent checkpoint with this id", object_name=checkpoint_id)
    total = saved.head.next_record - _transcript_start(saved.head)
    return AgentTail(saved.state, total - len(saved.state.transcript), saved.revision)


@dataclass(frozen=True)
class AgentTail:
    """The latest agent state with only the end of its transcript (`load_tail`)."""

    state: AgentCheckpointState
    """The state; its `transcript` holds only the last messages asked for."""
    earlier: int
    """How many earlier transcript messages were not loaded."""
    revision: int
    """The revision (log version) this state was saved at."""


def _extends(old: list[Message], new: list[Message]) -> bool:
    if len(new) < len(old):
        return False
    # A turn's transcript reuses the saved message objects, and list equality checks
    # identity first, in C: microseconds for 20,000 messages.
    return new[: len(old)] == old


def save_saved(storage: AgentStorage, saved: Saved, state: AgentCheckpointState) -> Steps[Saved]:
    """Save `state` after `saved` (one append of the new messages and the small state).

    `CheckpointConflict` if another writer saved first.
    """
    if saved.head is not None and _extends(saved.state.transcript, state.transcript):
        new_messages = state.transcript[len(saved.state.transcript) :]
        start = saved.transcript_start
    else:
        new_messages = state.transcript
        start = 0 if saved.head is None else saved.head.next_record
    records = [m.model_dump(mode="json") for m in new_messages]
    extra = {"run_id": saved.run_id} if saved.run_id is not None else None
    known = yield from storage.agent_states.append(
        saved.checkpoint_id, saved.head, records, AgentHead.of(state, start), extra=extra,
        names_winner=True,  # the caller's conflict: no loop reads the head again here
    )  # fmt: skip
    return Saved(saved.checkpoint_id, known.log, state, start, saved.run_id)


# -- steps -----------------------------------------------------------------------------------


def load(
    storage: AgentStorage, checkpoint_id: str, revision: int | None = None
) -> Steps[tuple[Envelope, AgentCheckpointState]]:
    """Load and validate the latest typed agent state, or the one saved at `revision`."""
    if revision is None:
        saved = yield from load_saved(storage, checkpoint_id)
        return saved.envelope(), saved.state
    saved_at = yield from _read_version(storage, checkpoint_id, revision)
    if saved_at is None:
        raise CheckpointNotFound("no agent checkpoint with this id", object_name=checkpoint_id)
    return saved_at.envelope(), saved_at.state


def _read_version(storage: AgentStorage, checkpoint_id: str, version: int) -> Steps[Saved | None]:
    """Return the save at log version `version` (None: no log); the log is its own history."""
    if type(version) is not int or version < 0:
        raise InvalidArgument(f"revision must be an int >= 0, not {described(version)}")
    try:
        entries = yield from storage.logs.entries(checkpoint_id, 0, version)
    except Purged:
        raise
    except CheckpointNotFound as exc:
        listing = yield from storage.logs.listing(checkpoint_id)
        if listing.top is None:
            return None
        raise exc
    head = LogHead.of(entries[-1])
    start = _transcript_start(head)
    records = [r for e in entries for r in e.records][start : head.next_record]
    state, start = _state_from_log(storage, head, records)
    run_id = entries[-1].extra.get("run_id")
    return Saved(checkpoint_id, head, state, start, run_id if isinstance(run_id, str) else None)


def create(
    storage: AgentStorage, checkpoint_id: str, state: AgentCheckpointState, run_id: str | None
) -> Steps[Saved]:
    """Save the first state (create-only: `CheckpointConflict` if the id exists)."""
    validate_id(checkpoint_id)
    if run_id is not None:
        validate_id(run_id, what="run id")
    # Appending after no head creates the log with one create-only PUT: it fails if the
    # log exists.
    return (yield from save_saved(storage, Saved(checkpoint_id, None, state, 0, run_id), state))


def start(
    storage: AgentStorage,
    checkpoint_id: str,
    *,
    agent: str,
    model: ModelRef,
    transcript: list[Message],
    execution_id: str | None,
    run_id: str | None,
    durable: DurableConversationCheckpoint | None,
) -> Steps[tuple[Saved, AgentCheckpointState]]:
    """Create the checkpoint with a ready state."""
    if not execution_id:
        execution_id = yield from ask(NewId())
    try:
        state = AgentCheckpointState(
            execution_id=execution_id,
            agent=agent,
            model=model,
            transcript=transcript,
            durable_conversation=durable,
        )
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise InvalidArgument(
            f"cannot start the agent ({problems})", object_name=checkpoint_id
        ) from None
    saved = yield from create(storage, checkpoint_id, state, run_id)
    return saved, state


def resume(
    storage: AgentStorage,
    checkpoint_id: str,
    policy: ResumePolicy,
    agent: str | None,
    model: ModelRef | None,
) -> Steps[tuple[Saved, AgentCheckpointState]]:
    """Load the checkpoint, check its identity and apply the resume policy."""
    saved = yield from load_saved(storage, checkpoint_id)
    check_identity(checkpoint_id, saved.state, agent, model)
    return saved, resume_state(saved.state, policy, checkpoint_id=checkpoint_id)


@dataclass(frozen=True)
class TurnSteps:
    """How turns become steps of the run a checkpoint belongs to (`start(run_id=...)`).

    Runs sit beside agents, not below: the runner is given the run store's operations
    as steps, and the turn logic stays free of them.
    """

    begin: Callable[[str, int], Steps[str]]
    """(run id, turn number) -> the attempt id of the turn, recorded running."""
    end: Callable[[str, Any, str | None], Steps[None]]
    """(attempt id, output, error): the turn ended; with an error, it failed."""
    finish: Callable[[str], Steps[None]]
    """(run id): the agent completed, so its run completes (a completed run stays so)."""
    refuse: Callable[[str, str], Steps[None]] | None = None
    """(run id, error): the run was handed an agent that belongs elsewhere: it fails, so
    it never stays running with nothing to run it."""


def _turn_summary(number: int, result: TurnResult) -> dict[str, Any]:
    return {
        "turn": number,
        "messages": len(result.messages),
        "tool_calls": result.tool_calls,
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
    }


def run_turn(
    storage: AgentStorage,
    saved: Saved,
    state: AgentCheckpointState,
    commit_conversations: bool,
    turn: AsyncTurn,
    *,
    marked: bool = False,
    mark_next: bool = False,
    clock: Callable[[], float] = time.monotonic,
    goes_on: Callable[[AgentCheckpointState], Steps[bool]] | None = None,
    steps: TurnSteps | None = None,
) -> Steps[tuple[Saved, AgentCheckpointState]]:
    """Run one turn durably: in flight before the model runs, stable after.

    With `steps` and a checkpoint that belongs to a run, the turn is also an attempt of
    node `turn-N` in that run, recorded once the turn is marked in flight and ended once
    it is saved, so `stashpoint runs show` lists an agent's turns like any other step.

    `marked`: the in-flight marker of this turn is saved already (by the previous turn's
    commit). `mark_next`: if the agent goes on, save this turn's commit with the next
    turn's in-flight marker, one append instead of two; only `run()` knows that a next
    turn follows at once, and `goes_on(state)` (a deadline's plan) may still say it does
    not. The turn's duration on `clock` joins `turn_seconds`. Returns the saved state (in
    flight for the next turn if it was marked) and the state to continue from
    (`ReadyForTurn` or `Completed`).
    """
    if state.outcome() is not None or saved.state.outcome() is not None:
        raise TerminalStateConflict(
            "the agent completed: its outcome is stored and a new turn would overwrite it "
            "(run() returns the stored outcome)",
            object_name=saved.checkpoint_id,
        )
    number = state.turns + 1
    if not marked:
        # Durable *before* the model or any tool runs: a crash from here on is ambiguous.
        # Only the phase changes: the append carries no message.
        saved = yield from save_saved(
            storage, saved, state.model_copy(update={"phase": TurnInFlight(turn=number)})
        )
    attempt_id = yield from _begin_attempt(steps, saved, number)
    started = yield from ask(Call(clock, ()))
    result = yield from _turn_result(storage, saved, state, turn, number, steps, attempt_id)
    took = (yield from ask(Call(clock, ()))) - started
    after = after_turn(state, result)
    durations = [*state.turn_seconds, round(max(0.0, took), 3)][-TURN_HISTORY:]
    after = after.model_copy(update={"turn_seconds": durations})
    if commit_conversations:
        after = yield from _committed(storage, after)
    if mark_next and after.outcome() is None and goes_on is not None:
        mark_next = yield from goes_on(after)
    saved = yield from _save_turn(storage, saved, after, mark_next=mark_next)
    if steps is not None and attempt_id is not None:
        yield from steps.end(attempt_id, _turn_summary(number, result), None)
    return saved, after


def _begin_attempt(steps: TurnSteps | None, saved: Saved, number: int) -> Steps[str | None]:
    """Record turn `number` as an attempt of the agent's run; its id (None: no run)."""
    if steps is None or saved.run_id is None:
        return None
    return (yield from steps.begin(saved.run_id, number))


def _save_turn(
    storage: AgentStorage, saved: Saved, after: AgentCheckpointState, *, mark_next: bool
) -> Steps[Saved]:
    """Save a turn's commit; with `mark_next`, the next turn in flight in the same append."""
    if mark_next and after.outcome() is None:
        # The next turn starts as soon as this one is stored: one append says both.
        marker = after.model_copy(update={"phase": TurnInFlight(turn=after.turns + 1)})
        return (yield from save_saved(storage, saved, marker))
    return (yield from save_saved(storage, saved, after))


def _turn_result(
    storage: AgentStorage,
    saved: Saved,
    state: AgentCheckpointState,
    turn: AsyncTurn,
    number: int,
    steps: TurnSteps | None,
    attempt_id: str | None,
) -> Steps[TurnResult]:
    """Run the caller's turn; return its result, checked.

    A turn that raises ends its attempt as failed; one that raises `TurnNotStarted` (it
    had no effect) also takes its in-flight mark back, so the next run runs it again
    without an operator settling it.
    """
    try:
        result = yield from ask(Call(turn, (state, number)))
    except Exception as exc:
        if steps is not None and attempt_id is not None:
            yield from steps.end(attempt_id, None, f"{type(exc).__name__}: {exc}")
        if isinstance(exc, TurnNotStarted):
            yield from save_saved(
                storage, saved, state.model_copy(update={"phase": ReadyForTurn()})
            )
        raise
    if not isinstance(result, TurnResult):
        raise InvalidArgument(f"a turn must return a TurnResult, not {described(result)}")
    if not isinstance(result.messages, list) or not all(
        isinstance(message, Message) for message in result.messages
    ):
        raise InvalidArgument(
            "a TurnResult's messages must be a list of stashpoint.agent.Message, not "
            f"{described(result.messages)}"
        )
    return result


def _committed(storage: AgentStorage, after: AgentCheckpointState) -> Steps[AgentCheckpointState]:
    """Commit a durable conversation's new messages; return the state at its new version."""
    durable = after.durable_conversation
    if durable is None:
        return after
    version = yield from commit_conversation(
        storage.conversation_states,
        durable.namespace,
        durable.conversation_id,
        durable.expected_version,
        after.transcript[durable.persisted_prefix_len :],
    )
    durable = durable.model_copy(update={"expected_version": version})
    return after.model_copy(update={"durable_conversation": durable})


def run(
    storage: AgentStorage,
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
    deadline: Deadline | None = None,
    run_id: str | None = None,
    steps: TurnSteps | None = None,
) -> Steps[AgentOutcome | Suspended]:
    """Resume (or start) and run turns until completion, or until the deadline is near.

    A completed checkpoint returns its outcome without running a turn. With `deadline`, a
    turn starts only if the time left covers what recent turns needed
    (`Deadline.needed`); otherwise the finished turns are saved with no turn in flight and
    `Suspended` is returned.
    """
    try:
        saved, state = yield from resume(storage, checkpoint_id, policy, agent, model)
    except CheckpointNotFound:
        saved, state = yield from start(
            storage, checkpoint_id, agent=agent, model=model, transcript=transcript,
            execution_id=None, run_id=run_id, durable=durable,
        )  # fmt: skip
    yield from _refuse_run(checkpoint_id, saved, state, run_id, steps)
    fits = _Fits(deadline)
    shortfall = fits.shortfall
    clock = time.monotonic if deadline is None else deadline.clock
    marked = False
    if state.outcome() is None and not (yield from fits(state, first=True)):
        left, needed = shortfall[-1]
        return Suspended(turns=state.turns, remaining_seconds=left, needed_seconds=needed)
    while (outcome := state.outcome()) is None:
        if state.turns >= max_turns:
            raise LimitExceeded(
                f"agent did not complete within {max_turns} turns", object_name=checkpoint_id
            )
        # A commit that also marks the next turn in flight saves a request per turn; the
        # last turn allowed commits alone, leaving `ReadyForTurn` behind the limit.
        mark_next = state.turns + 1 < max_turns
        saved, state = yield from run_turn(
            storage, saved, state, commit_conversations, turn, marked=marked,
            mark_next=mark_next, clock=clock, goes_on=fits, steps=steps,
        )  # fmt: skip
        marked = isinstance(saved.state.phase, TurnInFlight)
        if state.outcome() is None and not marked and shortfall:
            left, needed = shortfall[-1]
            return Suspended(turns=state.turns, remaining_seconds=left, needed_seconds=needed)
    yield from _finish_run(steps, saved)
    return outcome


def _finish_run(steps: TurnSteps | None, saved: Saved) -> Steps[None]:
    """Complete the run of an agent whose outcome is stored.

    Repeated when a completed checkpoint is run again, which writes nothing; a run
    ended otherwise conflicts.
    """
    if steps is not None and saved.run_id is not None:
        yield from steps.finish(saved.run_id)


@dataclass
class _Fits:
    """Whether the next turn fits the time a deadline leaves (always, without one)."""

    deadline: Deadline | None
    """The invocation's deadline."""
    shortfall: list[tuple[float, float]] = field(default_factory=list)
    """(time left, time needed) each time a turn did not fit."""

    def __call__(self, after: AgentCheckpointState, first: bool = False) -> Steps[bool]:
        """Whether the next turn fits the time left (the shortfall is kept when not)."""
        if self.deadline is None:
            return True
        left = float((yield from ask(Call(self.deadline.remaining, ()))))
        needed = self.deadline.needed(after.turn_seconds, first=first)
        if left < needed:
            self.shortfall.append((left, needed))
            return False
        return True


def _refuse_run(
    checkpoint_id: str,
    saved: Saved,
    state: AgentCheckpointState,
    run_id: str | None,
    steps: TurnSteps | None,
) -> Steps[None]:
    """End a run handed an agent that belongs to another run (or none), and say so.

    A completed agent answers from its checkpoint and runs nothing: the run it was handed
    would otherwise stay `running` forever. It fails with the reason, and the caller gets
    `IdentityMismatch` naming the agent, its run and what to do. Nothing to do when no
    run was named, or the agent's own.
    """
    if run_id is None or run_id == saved.run_id:
        return
    where = "outside any run" if saved.run_id is None else f"in run {saved.run_id!r}"
    done = "completed" if state.outcome() is not None else "was started"
    reason = (
        f"agent {checkpoint_id!r} {done} {where}, not in run {run_id!r}: a new run needs a "
        "new agent id (or pass the agent's own run id)"
    )
    if steps is not None and steps.refuse is not None:
        # Refused before (a retried invocation): the run has ended already.
        with contextlib.suppress(TerminalStateConflict):
            yield from steps.refuse(run_id, f"IdentityMismatch: {reason}")
    raise IdentityMismatch(reason, object_name=checkpoint_id)


def resolve(
    storage: AgentStorage, checkpoint_id: str, *, retry: bool
) -> Steps[tuple[bool, AgentCheckpointState]]:
    """Settle a turn left in flight (the process died mid-turn), as an operator decided.

    `retry`: the turn runs again from the transcript saved before it (its effects may
    repeat). Otherwise it is abandoned: counted as done with nothing added, and listed in
    `abandoned_turns`. Returns whether there was a turn to settle, and the state now.
    """
    saved = yield from load_saved(storage, checkpoint_id)
    phase = saved.state.phase
    if not isinstance(phase, TurnInFlight):
        return False, saved.state
    if retry:
        state = saved.state.model_copy(update={"phase": ReadyForTurn()})
    else:
        state = saved.state.model_copy(
            update={
                "phase": ReadyForTurn(),
                "turns": saved.state.turns + 1,
                "abandoned_turns": [*saved.state.abandoned_turns, phase.turn],
            }
        )
    yield from save_saved(storage, saved, state)
    return True, state
