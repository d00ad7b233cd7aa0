"""A chat graph for the tests and benches of cold reads: a user message and one reply a turn."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph


def chat_graph(saver: Any) -> Any:
    """Compile the chat graph over `saver`: each turn stores five versions (two puts that
    extend `messages`, the input's put and two tasks' writes)."""

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"reply {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)
