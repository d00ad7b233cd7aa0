"""Issue 27 #2: a put from a new process (a Lambda per turn) stores only what the step added.

The thread's head says, for each list value, its length and a digest of its items; a put in
any process compares its list's prefix with it, so O(delta) writes need no memory of what
this process wrote, and no read of the stored items.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import stashpoint
from stashpoint.ids import thread_key
from stashpoint.langgraph import StashpointSaver


class _State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph(saver: StashpointSaver) -> Any:
    def agent(state: _State) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"reply {len(state['messages'])} " + "x" * 500)]}

    builder = StateGraph(_State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


def _list_parts(url: str, thread_id: str) -> list[tuple[str, int]]:
    """Return, for each put storing the messages list, ('whole'|'after', items stored)."""
    with stashpoint.open(url) as stash:
        records = stash.logs_in("langgraph").records(thread_key(thread_id))
    parts = []
    for record in records:
        if record.get("op") != "put" or "messages" not in record["values"]:
            continue
        value = record["values"]["messages"]["value"]
        if "list" in value:
            parts.append(("whole", len(value["list"])))
        else:
            parts.append(("after", len(value["items"])))
    return parts


def test_a_turn_per_process_stores_each_message_once(memory_url: tuple[str, Any]) -> None:
    url = memory_url[0]
    config = {"configurable": {"thread_id": "lambda-chat"}}
    turns = 12
    put_requests: list[int] = []
    for turn in range(turns):
        with stashpoint.open(url) as stash:  # a new process per turn, as a Lambda is
            requests: list[str] = []

            def counting(request: Any, proceed: Any, requests: list[str] = requests) -> Any:
                name = type(request).__name__
                if "langgraph-values" in getattr(request, "key", ""):
                    name += " (a list snapshot or tail)"
                requests.append(name)
                return proceed()

            stash.intercept(counting)
            _graph(StashpointSaver(stash)).invoke(
                {"messages": [HumanMessage(content=f"turn {turn}")]}, config
            )
            first_put = requests.index("PutObject")
            writes = [r for r in requests[first_put:] if "snapshot" not in r]
            put_requests.append(len(writes))
            assert set(writes) == {"PutObject"}, requests
    parts = _list_parts(url, "lambda-chat")
    # The first put stores the list whole; every later one only the message its step added.
    assert parts[0] == ("whole", 1)
    assert all(part == ("after", 1) for part in parts[1:]), parts
    assert len(parts) == 2 * turns
    # A turn is three puts and two put_writes, each one PUT to the log and nothing else
    # (beside a list's snapshot or tail when one is due): the read at the turn's start
    # seeded the head the writes start from.
    assert put_requests == [5] * turns, put_requests
    with stashpoint.open(url) as stash:
        messages = StashpointSaver(stash).get_tuple(config).checkpoint["channel_values"]["messages"]
    assert [m.content for m in messages[::2]] == [f"turn {t}" for t in range(turns)]


def test_a_cold_put_without_a_read_extends_the_stored_list(memory_url: tuple[str, Any]) -> None:
    """The digest lives in the head: even a put that did not read first (a process that
    only writes) stores only the new items, and a list that does not start with the stored
    one is stored whole."""
    url = memory_url[0]
    config: dict[str, Any] = {"configurable": {"thread_id": "writer", "checkpoint_ns": ""}}
    version = None
    lists = [["a"], ["a", "b"], ["a", "b", "c"], ["z", "b", "c", "d"], ["z", "b", "c", "d", "e"]]
    for values in lists:
        with stashpoint.open(url) as stash:
            saver = StashpointSaver(stash)
            checkpoint = empty_checkpoint()
            version = saver.get_next_version(version, None)
            checkpoint["channel_values"] = {"messages": values}
            checkpoint["channel_versions"] = {"messages": version}
            config = saver.put(config, checkpoint, {"source": "loop", "step": 0},
                               {"messages": version})  # fmt: skip
    assert _list_parts(url, "writer") == [
        ("whole", 1), ("after", 1), ("after", 1), ("whole", 4), ("after", 1)
    ]  # fmt: skip
    with stashpoint.open(url) as stash:
        found = StashpointSaver(stash).get_tuple({"configurable": {"thread_id": "writer"}})
    assert found.checkpoint["channel_values"]["messages"] == lists[-1]


_COLD_READ = """
import json, sys
import stashpoint
from stashpoint.langgraph import StashpointSaver

url, options, thread_id = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
with stashpoint.open(url, **options) as stash:
    found = StashpointSaver(stash, background=False).get_tuple(
        {"configurable": {"thread_id": thread_id}}
    )
    print(len(found.checkpoint["channel_values"]["messages"]), "boto3" in sys.modules)
"""


def test_a_cold_read_on_a_stash_indexed_on_dynamodb_loads_no_boto3(
    s3_dynamo_url: tuple[str, dict[str, Any]],
) -> None:
    """A Lambda that only reads a thread never touches the index: boto3's package (~20 ms
    of CPU over the botocore S3 needs) stays unloaded; a turn loads it for its index write."""
    import json
    import subprocess
    import sys

    url, options = s3_dynamo_url
    config = {"configurable": {"thread_id": "cold-reader"}}
    with stashpoint.open(url, **options) as stash:
        graph = _graph(StashpointSaver(stash))
        for turn in range(3):
            graph.invoke({"messages": [HumanMessage(content=f"hi {turn}")]}, config)
    out = subprocess.run(
        [sys.executable, "-c", _COLD_READ, url, json.dumps(options), "cold-reader"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.split()  # fmt: skip
    assert out == ["6", "False"]
