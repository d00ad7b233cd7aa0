"""A LangGraph agent with long-term memory: the store beside the checkpointer (issue 27 #4).

A `create_react_agent` graph whose tools write and search memories through LangGraph's
`InjectedStore`: a fact remembered in one thread is recalled in another (by semantic search
over the store's index), on SeaweedFS with the DynamoDB index, and the conversation comes
out the same as with LangGraph's `InMemoryStore` and `InMemorySaver`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.prebuilt")

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import InjectedStore, create_react_agent
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

import stashpoint
from stashpoint.langgraph import (
    AsyncStashpointSaver,
    AsyncStashpointStore,
    StashpointSaver,
    StashpointStore,
)
from tests.langgraph.test_langgraph_store_suite import CharacterEmbeddings

# `create_react_agent` moved to `langchain.agents` in LangGraph 1.0 (not installed here); it
# is the graph the issue names, and it still runs.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")


class _ScriptedModel(BaseChatModel):
    """A chat model that calls the memory tools as a real one would, deterministically."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> _ScriptedModel:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=f"done: {last.content}")
        else:
            text = str(last.content)
            verb, _, argument = text.partition(": ")
            call_id = f"call-{len(messages)}"
            name, args = (
                ("remember", {"fact": argument})
                if verb == "remember"
                else (
                    "recall",
                    {"query": argument},
                )
            )
            reply = AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def remember(
    fact: str, config: RunnableConfig, store: Annotated[BaseStore, InjectedStore()]
) -> str:
    """Remember a fact about the user."""
    user = config["configurable"]["user_id"]
    key = str(uuid.uuid5(uuid.NAMESPACE_URL, fact))  # the same key in every run compared
    store.put(("memories", user), key, {"text": fact})
    return f"remembered {fact!r}"


@tool
def recall(query: str, config: RunnableConfig, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Recall what is known about the user."""
    user = config["configurable"]["user_id"]
    found = store.search(("memories", user), query=query, limit=2)
    return "; ".join(item.value["text"] for item in found) or "nothing"


TURNS = [
    ("thread-1", "remember: my dog is called Biscuit"),
    ("thread-1", "remember: I live in Lisbon"),
    ("thread-2", "recall: what is my dog called"),
    ("thread-3", "recall: where do I live"),
]


def _conversation(saver: Any, store: Any) -> list[list[str]]:
    agent = create_react_agent(
        _ScriptedModel(), [remember, recall], checkpointer=saver, store=store
    )
    seen = []
    for thread, text in TURNS:
        config = {"configurable": {"thread_id": thread, "user_id": "u1"}}
        result = agent.invoke({"messages": [HumanMessage(content=text)]}, config)
        seen.append([str(m.content) for m in result["messages"]])
    return seen


def _index() -> dict[str, Any]:
    return {"dims": 64, "embed": CharacterEmbeddings(dims=64), "fields": ["text"]}


def test_memories_written_in_one_thread_are_recalled_in_another(
    s3_dynamo_url: tuple[str, dict[str, Any]],
) -> None:
    expected = _conversation(InMemorySaver(), InMemoryStore(index=_index()))  # type: ignore[arg-type]
    url, options = s3_dynamo_url
    with stashpoint.open(url, **options) as stash:
        got = _conversation(StashpointSaver(stash), StashpointStore(stash, index=_index()))  # type: ignore[arg-type]
    assert got == expected
    assert "Biscuit" in got[2][-1] and "Lisbon" in got[3][-1]
    with stashpoint.open(url, **options) as stash:  # a new process reads the memories
        store = StashpointStore(stash, index=_index())  # type: ignore[arg-type]
        texts = sorted(item.value["text"] for item in store.search(("memories", "u1")))
    assert texts == ["I live in Lisbon", "my dog is called Biscuit"]


async def test_the_async_store_serves_an_async_agent(local_url: tuple[str, dict[str, Any]]) -> None:
    expected = []
    agent = create_react_agent(
        _ScriptedModel(),
        [remember, recall],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(index=_index()),  # type: ignore[arg-type]
    )
    async with (
        AsyncStashpointSaver.from_url(local_url[0]) as saver,
        AsyncStashpointStore.from_url(local_url[0], index=_index()) as store,  # type: ignore[arg-type]
    ):
        ours = create_react_agent(
            _ScriptedModel(), [remember, recall], checkpointer=saver, store=store
        )
        got = []
        for thread, text in TURNS[:3]:
            config = {"configurable": {"thread_id": thread, "user_id": "u1"}}
            message = {"messages": [HumanMessage(content=text)]}
            theirs = await agent.ainvoke(message, config)
            mine = await ours.ainvoke(message, config)
            expected.append([str(m.content) for m in theirs["messages"]])
            got.append([str(m.content) for m in mine["messages"]])
    assert got == expected and "Biscuit" in got[2][-1]
