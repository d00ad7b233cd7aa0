"""Durable conversations: a transcript per (namespace, conversation id), committed with CAS.

A turn commits its transcript only if the conversation is still at the version the turn
loaded (`expected_version`), persisting the transcript minus its leading runtime-only
messages. A conversation is an append-only log (namespace `conversations`): a commit
appends the messages added since the last one. The rules live in `agent.logic`;
`ConversationStore` and `AsyncConversationStore` are made from one definition
(`stashpoint.twins`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from stashpoint.agent import conversation_log, logic
from stashpoint.agent.conversation_log import CONVERSATION_KIND, conversation_key
from stashpoint.agent.models import Message
from stashpoint.steps import Steps
from stashpoint.stores.store import AsyncStore, Store
from stashpoint.twins import Awaiting, Blocking, operation

__all__ = ["CONVERSATION_KIND", "AsyncConversationStore", "ConversationStore", "conversation_key"]

StoreT = TypeVar("StoreT", Store, AsyncStore)


class _ConversationApi(Generic[StoreT]):
    """The conversation operations, defined once; see `ConversationStore`."""

    def __init__(self, store: StoreT) -> None:
        self.store: StoreT = store
        """The checkpoint store holding conversations."""
        self._storage = logic.AgentStorage.of(store.steps, store.log_steps)
        self.driver = store.driver
        """Runs this object's requests: what its operations' steps are driven with."""

    @operation
    def load(self, namespace: str, conversation_id: str) -> Steps[tuple[int, list[Message]]]:
        """Return `(version, messages)`; `(0, [])` for a conversation never committed."""
        return conversation_log.load_conversation(
            self._storage.conversation_states, namespace, conversation_id
        )

    @operation
    def commit(
        self,
        namespace: str,
        conversation_id: str,
        expected_version: int,
        messages: Sequence[Message],
    ) -> Steps[int]:
        """Commit the transcript if still at `expected_version`; return the new version.

        One append of the messages added since the last commit (the whole transcript when
        it is not an extension of it, for example after a summary).
        """
        return conversation_log.commit_conversation(
            self._storage.conversation_states,
            namespace,
            conversation_id,
            expected_version,
            messages,
        )


class ConversationStore(Blocking, _ConversationApi[Store]):
    """Conversation transcripts, versioned: version N = N commits (0: none yet)."""


class AsyncConversationStore(Awaiting, _ConversationApi[AsyncStore]):
    """The asyncio twin of `ConversationStore`."""
