"""Durable conversations: a transcript per (namespace, conversation id), committed with CAS.

A turn commits its transcript only if the conversation is still at the version the turn
loaded (`expected_version`), persisting the transcript minus its leading runtime-only
messages. The rules live in `agent.protocol`; these are the blocking and asyncio handles.
"""

from __future__ import annotations

from collections.abc import Sequence

from stashpoint._sansio import run_async, run_sync
from stashpoint.agent import _io, protocol
from stashpoint.agent.models import Message
from stashpoint.agent.protocol import CONVERSATION_KIND, conversation_key
from stashpoint.stores.store import AsyncStore, Store

__all__ = ["CONVERSATION_KIND", "AsyncConversationStore", "ConversationStore", "conversation_key"]


class ConversationStore:
    """Conversation transcripts, versioned: version N = N commits (0: none yet)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        """The checkpoint store holding conversations."""

    def load(self, namespace: str, conversation_id: str) -> tuple[int, list[Message]]:
        """Return `(version, messages)`; `(0, [])` for a conversation never committed."""
        return run_sync(
            protocol.load_conversation(namespace, conversation_id), _io.blocking(self.store)
        )

    def commit(
        self, namespace: str, conversation_id: str, expected_version: int,
        messages: Sequence[Message],
    ) -> int:  # fmt: skip
        """Replace the transcript if still at `expected_version`; return the new version."""
        return run_sync(
            protocol.commit_conversation(namespace, conversation_id, expected_version, messages),
            _io.blocking(self.store),
        )


class AsyncConversationStore:
    """The asyncio twin of `ConversationStore`."""

    def __init__(self, store: AsyncStore) -> None:
        self.store = store
        """The checkpoint store holding conversations."""

    async def load(self, namespace: str, conversation_id: str) -> tuple[int, list[Message]]:
        """Return `(version, messages)`; `(0, [])` for a conversation never committed."""
        return await run_async(
            protocol.load_conversation(namespace, conversation_id), _io.awaiting(self.store)
        )

    async def commit(
        self, namespace: str, conversation_id: str, expected_version: int,
        messages: Sequence[Message],
    ) -> int:  # fmt: skip
        """Replace the transcript if still at `expected_version`; return the new version."""
        return await run_async(
            protocol.commit_conversation(namespace, conversation_id, expected_version, messages),
            _io.awaiting(self.store),
        )
