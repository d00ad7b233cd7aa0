"""Issue 52 #3: a new process reads a chat's latest checkpoint in two rounds, writes unchanged.

A list snapshot or tail is named by the version of the put that names it, so a new process
lists it with the thread's log, in the same round, and fetches the newest entry, the newest
snapshot and tail and the versions from them to the top together in the second. The guess
is checked against what the head names: a wrong one costs requests, never a wrong read, and
what it missed is read in a third round, as before. Rounds are counted on an `AsyncStash`
(`tests.meter.Rounds`): a request sent while none is in flight starts one.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import HumanMessage

import stashpoint
from stashpoint.langgraph import AsyncStashpointSaver, StashpointSaver
from stashpoint.langgraph.values import list_object_holds, list_object_name, listed_version
from stashpoint.stores.objects import ListKeys, PutObject
from tests.langgraph.chat import chat_graph
from tests.meter import Rounds

_LATEST = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}


def _talk(url: str, turns: int, start: int = 0) -> None:
    with stashpoint.open(url) as stash:
        saver = StashpointSaver(stash)
        graph = chat_graph(saver)
        for turn in range(start, start + turns):
            graph.invoke({"messages": [HumanMessage(content=f"q{turn}")]}, _LATEST)
        assert saver.flush()


def _cold_read(url: str, keys: list[str | None] | None = None) -> tuple[int, list[str], list[Any]]:
    """Read the latest checkpoint from a new stash; return rounds, requests and messages.

    `keys`: filled with the key each request named.
    """

    async def read() -> tuple[int, list[str], list[Any]]:
        async with stashpoint.open_async(url) as stash:
            meter = Rounds(stash)
            found = await AsyncStashpointSaver(stash).aget_tuple(_LATEST)  # type: ignore[arg-type]
            assert found is not None
            if keys is not None:
                keys.extend(meter.keys)
            return meter.rounds, list(meter.sent), found.checkpoint["channel_values"]["messages"]

    return asyncio.run(read())


def _contents(messages: list[Any]) -> list[str]:
    return [str(m.content) for m in messages]


def _expected(turns: int) -> list[str]:
    said: list[str] = []
    for turn in range(turns):
        said.append(f"q{turn}")
        said.append(f"reply {len(said)}")
    return said


@pytest.mark.parametrize(
    ("turns", "rounds"),
    [
        (3, 3),  # no list object yet (a snapshot comes after 8 extensions): as before
        (30, 2),
        (100, 2),  # 500 versions: the first listing page holds them all
        (150, 3),  # 750: the listing resumes after the last sealed version, a round more
    ],
)
def test_a_new_process_reads_a_chats_latest_checkpoint_in_two_rounds(
    memory_url: tuple[str, Any], turns: int, rounds: int
) -> None:
    url = memory_url[0]
    _talk(url, turns)
    got, sent, messages = _cold_read(url)
    assert _contents(messages) == _expected(turns)
    assert got == rounds, sent
    assert sent.count("ListKeys") == (3 if turns < 150 else 4), sent
    assert "PutObject" not in sent and "DeleteObject" not in sent


def test_the_rounds_hold_at_every_turn_of_a_chat(memory_url: tuple[str, Any]) -> None:
    """Whichever turn a new process reads after (a tail 0 to 20 versions below the top,
    a snapshot just replaced), two rounds once the thread has a list snapshot."""
    url = memory_url[0]
    _talk(url, 6)
    for turn in range(6, 40):
        _talk(url, 1, start=turn)
        got, sent, messages = _cold_read(url)
        assert _contents(messages) == _expected(turn + 1)
        assert got == 2, (turn, sent)


def test_names_carry_the_version_and_the_hash_and_older_names_still_check() -> None:
    body = b"a list snapshot's bytes"
    digest = hashlib.sha256(body).hexdigest()
    name = list_object_name("t-", 123, body)
    assert name == f"t-{123:020d}-{digest}"
    assert listed_version(name) == 123 and list_object_holds(name, body)
    assert not list_object_holds(name, body + b"!")  # the hash is checked
    older = "s-" + digest  # as written before names carried a version
    assert listed_version(older) is None and list_object_holds(older, body)
    for foreign in (digest, f"x-{123:020d}-{digest}", f"s-{'1' * 19}a-{digest}", "s-"):
        assert listed_version(foreign) is None
    assert not list_object_holds(f"x-{123:020d}-{digest}", body)


def test_a_thread_written_with_older_names_reads_then_takes_the_new_ones(
    memory_url: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshots and tails named by their hash alone (as stashes written before hold) are
    read where the head names them; the next ones a put writes carry their version, and
    the thread is read in two rounds from then on."""
    from stashpoint.langgraph import values

    url = memory_url[0]
    with monkeypatch.context() as patched:
        patched.setattr(
            values,
            "list_object_name",
            lambda prefix, version, body: prefix + hashlib.sha256(body).hexdigest(),
        )
        _talk(url, 30)
    got, _, messages = _cold_read(url)
    assert _contents(messages) == _expected(30) and got == 3  # no guess: as before
    _talk(url, 20, start=30)  # 40 extensions: a new snapshot, named with its version
    got, sent, messages = _cold_read(url)
    assert _contents(messages) == _expected(50)
    assert got == 2, sent


def test_a_wrong_guess_costs_a_round_never_a_wrong_read(memory_url: tuple[str, Any]) -> None:
    """An object planted under a list name newer than the real ones (garbage, or another
    list) is fetched by the guess, but the head does not name it: the snapshot and tail it
    names are read in a third round and the messages are the thread's."""
    url = memory_url[0]
    _talk(url, 30)
    with stashpoint.open(url) as stash:
        prefix = stash.layout.namespace_prefix("langgraph-values")
        keys = stash.driver(ListKeys(prefix)).keys
        top = max(listed_version(k.rsplit("/", 1)[1]) or 0 for k in keys) + 3
        planted = []
        for kind, version, body in (("s-", top, b"garbage"), ("t-", top + 1, b"another list")):
            planted.append(f"{prefix}chat/{list_object_name(kind, version, body)}")
            stash.driver(PutObject(planted[-1], body, None))
    fetched: list[str | None] = []
    got, sent, messages = _cold_read(url, fetched)
    assert _contents(messages) == _expected(30)
    assert set(planted) <= set(fetched)  # the guess took them
    assert got == 3, sent


def test_a_damaged_version_the_head_does_not_name_is_passed_over(
    memory_url: tuple[str, Any],
) -> None:
    """The guess fetches versions the head may not name (another checkpoint's writes):
    one that does not decode is left to a read that needs it, which judges it."""
    url = memory_url[0]
    _talk(url, 30)
    with stashpoint.open(url) as stash:
        logs = stash.logs_in("langgraph")
        entries = logs.entries("chat")
        top = entries[-1].version
        latest = [e.records[0]["id"] for e in entries if e.records[0]["op"] == "put"][-1]
        values = stash.driver(ListKeys(stash.layout.namespace_prefix("langgraph-values"))).keys
        reach = max(listed_version(key.rsplit("/", 1)[1]) or 0 for key in values)
        writes = [  # another checkpoint's writes, in the guess's reach
            e.version
            for e in entries
            if reach < e.version < top
            and e.records[0]["op"] == "writes"
            and e.records[0]["id"] != latest
        ]
        assert writes
        damaged = f"{stash.layout.namespace_prefix('langgraph')}chat/{writes[-1]:020d}"
        stash.driver(PutObject(damaged, b"not zstd json", None))
    fetched: list[str | None] = []
    got, sent, messages = _cold_read(url, fetched)
    assert _contents(messages) == _expected(30)
    assert damaged in fetched  # fetched by the guess, and passed over
    assert got == 2, sent
