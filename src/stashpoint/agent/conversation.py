"""Durable conversations: a transcript per (namespace, conversation id), committed with CAS.

A turn commits its transcript only if the conversation is still at the version the turn
loaded (`expected_version`), persisting the transcript minus its leading runtime-only
messages. Committing the same messages again at the next version is recognised as the
commit already made (a crash after commit, before the agent checkpoint moved on).
"""

from __future__ import annotations

from collections.abc import Sequence

from stashpoint.agent.models import Message
from stashpoint.envelope import Envelope
from stashpoint.errors import CheckpointConflict, CheckpointNotFound, InvalidPayload
from stashpoint.ids import validate_id
from stashpoint.stores.store import Store

CONVERSATION_KIND = "stashpoint.conversation"
"""Envelope kind of a durable conversation."""


def conversation_key(namespace: str, conversation_id: str) -> str:
    """Return the checkpoint id of a conversation (unambiguous for any two valid ids)."""
    validate_id(namespace, what="namespace")
    validate_id(conversation_id, what="conversation id")
    return f"conversation.{len(namespace)}.{namespace}.{conversation_id}"


class ConversationStore:
    """Conversation transcripts, versioned: version N = N commits (0: none yet)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        """The checkpoint store holding conversations."""

    def load(self, namespace: str, conversation_id: str) -> tuple[int, list[Message]]:
        """Return `(version, messages)`; `(0, [])` for a conversation never committed."""
        envelope = self._head(conversation_key(namespace, conversation_id))
        if envelope is None:
            return 0, []
        return envelope.revision + 1, self._messages(envelope)

    def commit(
        self,
        namespace: str,
        conversation_id: str,
        expected_version: int,
        messages: Sequence[Message],
    ) -> int:
        """Replace the transcript if still at `expected_version`; return the new version.

        Raises `CheckpointConflict` when another turn committed first.
        """
        key = conversation_key(namespace, conversation_id)
        payload = {"messages": [m.model_dump(mode="json") for m in messages]}
        head = self._head(key)
        version = 0 if head is None else head.revision + 1
        if version == expected_version:
            following = (
                Envelope.initial(key, None, CONVERSATION_KIND, 1, payload)
                if head is None
                else head.next(payload)
            )
            try:
                self.store.compare_and_swap(following, None if head is None else head.revision)
                return expected_version + 1
            except CheckpointConflict:
                head = self._head(key)
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

    def _head(self, key: str) -> Envelope | None:
        try:
            return self.store.load(key)
        except CheckpointNotFound:
            return None

    def _messages(self, envelope: Envelope) -> list[Message]:
        if envelope.kind != CONVERSATION_KIND or not isinstance(envelope.payload, dict):
            raise InvalidPayload("not a conversation", object_name=envelope.id)
        return [Message.model_validate(m) for m in envelope.payload.get("messages", [])]
