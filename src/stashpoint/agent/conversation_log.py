"""A durable conversation as one log: its state, its reads and its commits.

A conversation's log holds the transcript's messages as records; its newest entry's
state says where the transcript starts among them, how long it is and a digest of it,
so a commit compares without reading and a read checks what it read. A commit appends
only the messages added since the last one (the whole transcript again when it is not an
extension of it, for example after a summary). The store (`agent.conversation`) binds
these steps to a stash and a driver.

Free of I/O, like every step.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pydantic_core

from stashpoint.agent.models import Message
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    InvalidArgument,
    InvalidPayload,
    Purged,
    described,
    whole,
)
from stashpoint.ids import validate_id
from stashpoint.logs.log import LogHead, LogSteps
from stashpoint.logs.state import Known, LoggedState
from stashpoint.steps import Steps

__all__ = [
    "CONVERSATION_KIND",
    "WHOLE_TRANSCRIPT",
    "ConversationForm",
    "ConversationState",
    "commit_conversation",
    "conversation_key",
    "load_conversation",
]

CONVERSATION_KIND = "stashpoint.conversation"
"""Envelope kind of a durable conversation."""
WHOLE_TRANSCRIPT = 2**62
"""A record count larger than any log: "the whole transcript"."""


def conversation_key(namespace: str, conversation_id: str) -> str:
    """Return the checkpoint id of a conversation (unambiguous for any two valid ids)."""
    validate_id(namespace, what="namespace")
    validate_id(conversation_id, what="conversation id")
    return f"conversation.{len(namespace)}.{namespace}.{conversation_id}"


def _transcript_digest(messages: Sequence[Any]) -> str:
    """Return a digest of a transcript's JSON (what a commit compares, without reading)."""
    digest = hashlib.sha256()
    for message in messages:
        try:
            text = pydantic_core.to_json(message)
        except ValueError as exc:  # a lone surrogate, bytes that are not UTF-8
            raise InvalidPayload(
                f"a message cannot be written as UTF-8 JSON ({type(exc).__name__})"
            ) from exc
        digest.update(hashlib.sha256(text).digest())
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class ConversationState:
    """A durable conversation's latest commit, as its log's newest entry says."""

    version: int
    """Commits so far (0: none)."""
    version_base: int
    """Commits made before the log's current versions began (its version 0 is commit
    `version_base + 1`)."""
    start: int
    """Record position where the transcript starts among the log's records."""
    length: int
    """Messages in the transcript."""
    digest: str
    """Digest of the transcript's messages (`_transcript_digest`)."""


_NO_CONVERSATION = ConversationState(0, 0, 0, 0, _transcript_digest([]))


class ConversationForm:
    """How a conversation's state is kept in its log (`logs.state.StateForm`)."""

    kind = CONVERSATION_KIND
    schema_version = 1

    def __init__(self, logs: LogSteps) -> None:
        self.logs = logs

    def parse(self, head: LogHead) -> ConversationState:
        """Return the commit a conversation log's head describes, or a typed error."""
        state = head.state if isinstance(head.state, dict) else {}
        name = self.logs.keys.entry(head.log_id, head.version)
        try:
            base, start = int(state["version_base"]), int(state["start"])
            length, digest = int(state["length"]), str(state["digest"])
        except (KeyError, TypeError, ValueError):
            raise InvalidPayload("not a conversation log state", object_name=name) from None
        if head.kind != CONVERSATION_KIND or start < 0 or start + length != head.next_record:
            raise InvalidPayload("not a conversation log, or a broken one", object_name=name)
        return ConversationState(base + head.version + 1, base, start, length, digest)

    def document(self, state: ConversationState) -> dict[str, Any]:
        """Return what an entry stores of the state."""
        return {
            "version_base": state.version_base,
            "start": state.start,
            "length": state.length,
            "digest": state.digest,
        }


def load_conversation(
    states: LoggedState[ConversationState], namespace: str, conversation_id: str
) -> Steps[tuple[int, list[Message]]]:
    """Return `(version, messages)`; `(0, [])` for a conversation never committed.

    `states`: the conversations' log-backed state (their logs and cached heads).
    """
    key = conversation_key(namespace, conversation_id)
    form = states.form
    try:
        head, entries = yield from states.logs.tail(
            key, WHOLE_TRANSCRIPT, since=lambda h: form.parse(h).start
        )
    except Purged:
        raise
    except CheckpointNotFound:
        return 0, []
    found = form.parse(head)
    records = [r for e in entries for r in e.records[max(0, found.start - e.first_record) :]]
    if len(records) != found.length or _transcript_digest(records) != found.digest:
        raise InvalidPayload(
            "conversation log's messages do not match its state (missing or changed)",
            object_name=states.logs.keys.entry(key, head.version),
        )
    return found.version, [Message.model_validate(m) for m in records]


def _sequence(messages: object, key: str) -> Sequence[Any]:
    """Return `messages` if it is a sequence (not a string or a mapping)."""
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise InvalidArgument(
            f"messages must be a list of Message, not {described(messages)}", object_name=key
        )
    return messages


def _message(message: object, key: str) -> dict[str, Any]:
    """Return a `Message` as JSON (a dict is refused: `Message(**d)` makes one)."""
    if not isinstance(message, Message):
        raise InvalidArgument(
            f"messages must be Message objects, not {described(message)}", object_name=key
        )
    try:
        return message.model_dump(mode="json")
    except ValueError as exc:  # pydantic's serialization errors (bytes not UTF-8, ...)
        raise InvalidPayload(
            f"a message cannot be written as JSON ({type(exc).__name__})", object_name=key
        ) from exc


def commit_conversation(
    states: LoggedState[ConversationState],
    namespace: str,
    conversation_id: str,
    expected_version: int,
    messages: Sequence[Message],
) -> Steps[int]:
    """Commit the transcript if the conversation is still at `expected_version`.

    Returns the new version; one append of the messages added since the last commit when
    the transcript extends it. Version N means N commits (0: none yet). Committing the
    same messages again at the next version is the commit already made (a crash after it,
    before the agent checkpoint moved on). Another turn's commit raises
    `CheckpointConflict`.
    """
    key = conversation_key(namespace, conversation_id)
    whole(expected_version, "expected_version", object_name=key)
    dumped = [_message(m, key) for m in _sequence(messages, key)]
    digest = _transcript_digest(dumped)
    Planned = tuple[list[Any], ConversationState]

    def change(known: Known[ConversationState], fresh: bool) -> Steps[Planned | None]:
        found = known.state
        if found.version != expected_version:
            if found.version == expected_version + 1 and found.digest == digest:
                return None  # our own commit (made before a crash, or resent): nothing to do
            raise CheckpointConflict(
                key,
                expected_revision=expected_version - 1 if expected_version else None,
                actual_revision=found.version - 1 if found.version else None,
                message=f"conversation moved to version {found.version}; this turn loaded "
                f"version {expected_version}",
            )
        new = ConversationState(
            expected_version + 1, found.version_base, found.start, len(dumped), digest
        )
        if known.log is None:
            return dumped, new
        extends = len(dumped) >= found.length and (
            _transcript_digest(dumped[: found.length]) == found.digest
        )
        if extends:
            return dumped[found.length :], new
        # Not an extension (summarised, edited): the whole transcript again, after the rest.
        return dumped, dataclasses.replace(new, start=known.log.next_record)
        yield  # a generator, like every change

    def write(known: Known[ConversationState], planned: Planned | None) -> Steps[int]:
        if planned is None:
            return known.state.version
        records, new = planned
        yield from states.append(key, known.log, records, new)
        return new.version

    return (yield from states.update(key, change, write, initial=lambda: _NO_CONVERSATION))
