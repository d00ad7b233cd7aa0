"""Real LangGraph graphs through the savers, each compared with LangGraph's InMemorySaver."""

from __future__ import annotations

import asyncio
import functools
import operator
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

import stashpoint
from stashpoint.langgraph import AsyncStashpointSaver, StashpointSaver

GRAPH_BACKENDS = ["local_url", "s3_seaweed_url"]


@pytest.fixture(params=GRAPH_BACKENDS, ids=lambda n: n.removesuffix("_url"))
def graph_url(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    url, options = request.getfixturevalue(request.param)
    return url, options


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]
    approved: str


def _approval_graph() -> StateGraph[Any]:
    def draft(state: Chat) -> dict[str, Any]:
        return {"messages": [f"draft {len(state['messages'])}"]}

    def review(state: Chat) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "seen": len(state["messages"])})
        return {"approved": answer, "messages": [f"review: {answer}"]}

    builder = StateGraph(Chat)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", END)
    return builder


def _subgraph_parent() -> StateGraph[Any]:
    def ask(state: Chat) -> dict[str, Any]:
        answer = interrupt("inner question")
        return {"messages": [f"inner got {answer}"]}

    inner = StateGraph(Chat)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)

    def before(state: Chat) -> dict[str, Any]:
        return {"messages": ["outer before"]}

    def after(state: Chat) -> dict[str, Any]:
        return {"messages": ["outer after"]}

    outer = StateGraph(Chat)
    outer.add_node("before", before)
    outer.add_node("inner", inner.compile())
    outer.add_node("after", after)
    outer.add_edge(START, "before")
    outer.add_edge("before", "inner")
    outer.add_edge("inner", "after")
    outer.add_edge("after", END)
    return outer


class FanOut(TypedDict):
    items: list[int]
    results: Annotated[list[int], operator.add]


def _fan_out_graph() -> StateGraph[Any]:
    def spread(state: FanOut) -> list[Send]:
        return [Send("work", {"items": [i], "results": []}) for i in state["items"]]

    def work(state: FanOut) -> dict[str, Any]:
        return {"results": [state["items"][0] ** 2]}

    builder = StateGraph(FanOut)
    builder.add_node("work", work)
    builder.add_conditional_edges(START, spread, ["work"])
    builder.add_edge("work", END)
    return builder


class Blob(TypedDict):
    payload: str
    size: int


def _blob_graph() -> StateGraph[Any]:
    def grow(state: Blob) -> dict[str, Any]:
        return {"payload": state["payload"] * 2, "size": len(state["payload"]) * 2}

    builder = StateGraph(Blob)
    builder.add_node("grow", grow)
    builder.add_edge(START, "grow")
    builder.add_edge("grow", END)
    return builder


def _chat_graph() -> StateGraph[Any]:
    def reply(state: Chat) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [f"echo {last} ({len(state['messages'])})"]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


# -- scripts: what a user does with a compiled graph; each returns what it observed ----------


def _values(snapshot: Any) -> Any:
    return (snapshot.values, snapshot.next, [t.name for t in snapshot.tasks])


def interrupt_resume(graph: Any, config: dict[str, Any]) -> Any:
    first = graph.invoke({"messages": ["hi"], "approved": ""}, config)
    waiting = _values(graph.get_state(config))
    done = graph.invoke(Command(resume="yes"), config)
    return first["messages"], waiting, done


def subgraph_interrupt(graph: Any, config: dict[str, Any]) -> Any:
    graph.invoke({"messages": ["start"], "approved": ""}, config)
    state = graph.get_state(config, subgraphs=True)
    inner = state.tasks[0].state
    done = graph.invoke(Command(resume="42"), config)
    return _values(state), _values(inner), done


def fan_out(graph: Any, config: dict[str, Any]) -> Any:
    done = graph.invoke({"items": list(range(12)), "results": []}, config)
    return sorted(done["results"]), _values(graph.get_state(config))


def fork_and_history(graph: Any, config: dict[str, Any]) -> Any:
    graph.invoke({"messages": ["one"], "approved": ""}, config)
    graph.invoke({"messages": ["two"], "approved": ""}, config)
    history = list(graph.get_state_history(config))
    # Branch from the state after the first turn, on purpose (time travel).
    first_turn = next(s for s in history if s.values.get("messages") == ["one", "echo one (1)"])
    forked = graph.update_state(first_turn.config, {"messages": ["edited"]})
    branch = graph.invoke(None, forked)
    after = [s.values for s in graph.get_state_history(config)]
    return [s.values for s in history], branch, after, graph.get_state(config).values


def big_value(graph: Any, config: dict[str, Any]) -> Any:
    five_mb = "x" * (5 * 1024 * 1024 // 2)
    done = graph.invoke({"payload": five_mb, "size": 0}, config)
    again = graph.get_state(config).values
    return done["size"], len(again["payload"]), again["payload"] == five_mb * 2


def long_conversation(graph: Any, config: dict[str, Any], turns: int = 200) -> Any:
    for turn in range(turns):
        graph.invoke({"messages": [f"user {turn}"], "approved": ""}, config)
    return graph.get_state(config).values


CASES: dict[str, tuple[Callable[[], StateGraph[Any]], Callable[..., Any]]] = {
    "interrupt_resume": (_approval_graph, interrupt_resume),
    "subgraph_interrupt": (_subgraph_parent, subgraph_interrupt),
    "fan_out_12": (_fan_out_graph, fan_out),
    "fork_and_history": (_chat_graph, fork_and_history),
    "value_5mb": (_blob_graph, big_value),
    "conversation_200": (_chat_graph, long_conversation),
}


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"thread/{uuid.uuid4().hex[:8]} ü"}}


def _reference_of(build: Callable[[], StateGraph[Any]], script: Callable[..., Any]) -> Any:
    return script(build().compile(checkpointer=InMemorySaver()), _config())


@pytest.mark.parametrize("case", list(CASES))
def test_graph_matches_in_memory_saver(case: str, graph_url: tuple[str, dict[str, Any]]) -> None:
    url, options = graph_url
    build, script = CASES[case]
    if case == "conversation_200" and url.startswith("s3://"):
        # 200 turns on SeaweedFS take a minute; 60 cross the same seals and list chains.
        script = functools.partial(long_conversation, turns=60)
    with stashpoint.open(url, **options) as stash:
        observed = script(build().compile(checkpointer=StashpointSaver(stash)), _config())
    assert observed == _reference_of(build, script)


async def _async_interrupt_resume(graph: Any, config: dict[str, Any]) -> Any:
    first = await graph.ainvoke({"messages": ["hi"], "approved": ""}, config)
    waiting = _values(await graph.aget_state(config))
    done = await graph.ainvoke(Command(resume="yes"), config)
    return first["messages"], waiting, done


async def _async_fan_out_and_fork(graph: Any, config: dict[str, Any]) -> Any:
    done = await graph.ainvoke({"items": list(range(12)), "results": []}, config)
    history = [s async for s in graph.aget_state_history(config)]
    # Branch from a past checkpoint, as if one worker had returned 1000.
    forked = await graph.aupdate_state(history[1].config, {"results": [1000]}, as_node="work")
    branch = await graph.ainvoke(None, forked)
    return sorted(done["results"]), len(history), sorted(branch["results"])


@pytest.mark.parametrize(
    ("build", "script"),
    [(_approval_graph, _async_interrupt_resume), (_fan_out_graph, _async_fan_out_and_fork)],
    ids=["interrupt_resume", "fan_out_and_fork"],
)
def test_async_graph_matches_in_memory_saver(
    build: Callable[[], StateGraph[Any]], script: Any, graph_url: tuple[str, dict[str, Any]]
) -> None:
    url, options = graph_url

    async def with_stash() -> Any:
        async with stashpoint.open_async(url, **options) as stash:
            graph = build().compile(checkpointer=AsyncStashpointSaver(stash))
            return await script(graph, _config())

    async def reference() -> Any:
        return await script(build().compile(checkpointer=InMemorySaver()), _config())

    assert asyncio.run(with_stash()) == asyncio.run(reference())


def test_blocking_saver_serves_async_graphs(local_url: tuple[str, dict[str, Any]]) -> None:
    url, options = local_url

    async def run(saver: Any) -> Any:
        return await _async_interrupt_resume(
            _approval_graph().compile(checkpointer=saver), _config()
        )

    with stashpoint.open(url, **options) as stash:
        observed = asyncio.run(run(StashpointSaver(stash)))
    assert observed == asyncio.run(run(InMemorySaver()))


@pytest.mark.parametrize("case", ["interrupt_resume", "subgraph_interrupt", "value_5mb"])
def test_async_saver_serves_blocking_graphs_from_another_thread(
    case: str, local_url: tuple[str, dict[str, Any]]
) -> None:
    """LangGraph's sync API on an async saver: its loop runs in another thread."""
    import threading

    url, options = local_url
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        stash = asyncio.run_coroutine_threadsafe(_open_async(url, options), loop).result()
        saver = asyncio.run_coroutine_threadsafe(_make_async_saver(stash), loop).result()
        build, script = CASES[case]
        observed = script(build().compile(checkpointer=saver), _config())
        asyncio.run_coroutine_threadsafe(stash.close(), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(timeout=10)
    assert observed == _reference_of(build, script)


async def _open_async(url: str, options: dict[str, Any]) -> Any:
    return stashpoint.open_async(url, **options)


async def _make_async_saver(stash: Any) -> AsyncStashpointSaver:
    return AsyncStashpointSaver(stash)  # made on its loop: blocking calls are handed to it


def test_async_saver_refuses_blocking_calls_on_its_own_loop(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    async def blocking_on_the_loop() -> None:
        async with stashpoint.open_async(local_url[0]) as stash:
            saver = AsyncStashpointSaver(stash)
            with pytest.raises(stashpoint.ConfigurationError, match="own event loop"):
                saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})

    asyncio.run(blocking_on_the_loop())


def _last(_: Any, new: Any) -> Any:
    return new


class Asks(TypedDict):
    items: list[int]
    item: Annotated[int, _last]
    answers: Annotated[list[str], operator.add]


class Ask(TypedDict):
    item: int
    answers: Annotated[list[str], operator.add]


def _send_to_interrupting_subgraphs() -> StateGraph[Any]:
    """A `Send` fan-out whose every branch is a subgraph that interrupts (human review of
    each item): each branch is a checkpoint namespace of its own."""

    def ask(state: Ask) -> dict[str, Any]:
        answer = interrupt({"item": state["item"]})
        return {"answers": [f"{state['item']}={answer}"]}

    inner = StateGraph(Ask)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)

    def spread(state: Asks) -> list[Send]:
        return [Send("review", {"item": i, "answers": []}) for i in state["items"]]

    outer = StateGraph(Asks)
    outer.add_node("review", inner.compile())
    outer.add_conditional_edges(START, spread, ["review"])
    outer.add_edge("review", END)
    return outer


def review_every_item(
    graph: Any, config: dict[str, Any], items: int, durability: str = "async"
) -> Any:
    graph.invoke(
        {"items": list(range(items)), "item": -1, "answers": []}, config, durability=durability
    )
    waiting = graph.get_state(config)
    asked = sorted(i.value["item"] for i in waiting.interrupts)
    answers = {i.id: f"ok-{i.value['item']}" for i in waiting.interrupts}
    done = graph.invoke(Command(resume=answers), config, durability=durability)
    return asked, sorted(done["answers"])


def approve_many_times(graph: Any, config: dict[str, Any], times: int) -> Any:
    seen = []
    for n in range(times):
        thread = {"configurable": {"thread_id": f"{config['configurable']['thread_id']}-{n}"}}
        graph.invoke({"messages": ["hi"], "approved": ""}, thread)
        seen.append([i.value for i in graph.get_state(thread).interrupts])
    return seen


@pytest.mark.parametrize(
    ("items", "durability"),
    [(8, "async"), (15, "async"), (16, "async"), (20, "async"), (20, "sync"), (20, "exit")],
)
def test_resuming_a_fan_out_of_interrupting_subgraphs_matches_in_memory_saver(
    items: int, durability: str, graph_url: tuple[str, dict[str, Any]]
) -> None:
    """Issue 23 #7 and #8: the writes of each branch landed before their checkpoint (the
    default async durability) and were dropped; 16 or more namespaces evicted one from the
    thread's state, and resuming it was a false `CheckpointConflict`."""
    url, options = graph_url
    script = functools.partial(review_every_item, items=items, durability=durability)
    with stashpoint.open(url, **options) as stash:
        observed = script(
            _send_to_interrupting_subgraphs().compile(checkpointer=StashpointSaver(stash)),
            _config(),
        )
    assert observed == _reference_of(_send_to_interrupting_subgraphs, script)
    assert len(observed[0]) == items and len(observed[1]) == items


def test_every_interrupt_of_a_human_in_the_loop_graph_is_in_its_state(
    graph_url: tuple[str, dict[str, Any]],
) -> None:
    """Issue 23 #7: after a plain `interrupt()` most interrupts were missing from
    `get_state()` (the writes landed before their checkpoint)."""
    url, options = graph_url
    script = functools.partial(approve_many_times, times=20)
    with stashpoint.open(url, **options) as stash:
        observed = script(_approval_graph().compile(checkpointer=StashpointSaver(stash)), _config())
    assert observed == _reference_of(_approval_graph, script)
    assert all(len(seen) == 1 for seen in observed)
