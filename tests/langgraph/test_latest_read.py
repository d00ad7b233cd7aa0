"""Issue 27 #1: the latest checkpoint of a thread this process knows, in one round.

A saver that read or wrote a thread GETs the head it knows, the key after it and what that
head names, at once, with no listing. Keys are never freed, so an absent next key proves the
head is still the latest; anything else (the thread went on, a snapshot was replaced, the
versions were sealed and packed, the thread was purged) is read with a listing instead.
Each case here is one a stale fast read would get wrong.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint

import stashpoint
from stashpoint import Purged
from stashpoint.langgraph import StashpointSaver
from tests.meter import Meter

_LATEST = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def _grow(saver: StashpointSaver, items: list[str], config: Any = None) -> Any:
    """Put one checkpoint whose list is `items`, after `config` (the parent)."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(len(items) - 1 or None, None)
    checkpoint["channel_values"] = {"messages": list(items)}
    checkpoint["channel_versions"] = {"messages": version}
    parent = config or {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    return saver.put(parent, checkpoint, {"source": "loop", "step": len(items)},
                     {"messages": version})  # fmt: skip


def _counted(stash: Any) -> list[str]:
    """Return the list of request types the stash sends from now on (cleared by callers)."""
    return Meter(stash).sent


def _messages(saver: StashpointSaver) -> list[str]:
    found = saver.get_tuple(_LATEST)
    assert found is not None
    return found.checkpoint["channel_values"]["messages"]  # type: ignore[no-any-return]


def test_a_thread_another_process_went_on_with_is_read_at_its_new_head(
    memory_url: tuple[str, Any],
) -> None:
    with stashpoint.open(memory_url[0]) as a, stashpoint.open(memory_url[0]) as b:
        mine, theirs = StashpointSaver(a), StashpointSaver(b)
        config = None
        items: list[str] = []
        for i in range(40):  # past a snapshot, so the read needs one
            items.append(f"m{i}")
            config = _grow(mine, items, config)
        requests = _counted(a)
        assert _messages(mine) == items
        assert "ListKeys" not in requests  # known head: one round, no listing
        for i in range(40, 45):  # another process goes on
            items.append(f"m{i}")
            config = _grow(theirs, items, config)
        requests.clear()
        assert _messages(mine) == items  # the key after the known head exists: listed
        assert "ListKeys" in requests
        requests.clear()
        assert _messages(mine) == items  # ...and the head read is known from then on
        assert "ListKeys" not in requests


def test_a_known_head_whose_versions_were_packed_is_read_from_the_pack(
    memory_url: tuple[str, Any],
) -> None:
    with stashpoint.open(memory_url[0], log_delete_after=timedelta(0)) as stash:
        saver = StashpointSaver(stash)
        config = None
        items: list[str] = []
        for i in range(1300):  # more than one pack's span of versions
            items.append(f"m{i}")
            config = _grow(saver, items, config)
        assert _messages(saver) == items
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0), pack=True)
        assert report.packs >= 1
        assert _messages(saver) == items  # same head, its older versions moved


def test_a_known_head_of_a_purged_thread_is_not_read(memory_url: tuple[str, Any]) -> None:
    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        config = None
        for i in range(5):
            config = _grow(saver, [f"m{j}" for j in range(i + 1)], config)
        assert _messages(saver) == [f"m{j}" for j in range(5)]
        with stashpoint.open(memory_url[0]) as other:
            other.admin.purge(thread="t")
        with pytest.raises(Purged):
            saver.get_tuple(_LATEST)


def test_a_known_head_after_delete_thread_reads_no_checkpoint(
    memory_url: tuple[str, Any],
) -> None:
    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        _grow(saver, ["a"])
        assert _messages(saver) == ["a"]
        with stashpoint.open(memory_url[0]) as other:
            StashpointSaver(other).delete_thread("t")
        assert saver.get_tuple(_LATEST) is None


def test_a_reader_fetches_a_snapshot_a_tail_and_at_most_seven_extensions(
    memory_url: tuple[str, Any],
) -> None:
    """Whatever the list's length, the latest read is bounded: two objects and at most
    `TAIL_EVERY - 1` extensions, from a new process and from the writer's."""
    from stashpoint.langgraph.thread import TAIL_EVERY

    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        config = None
        items: list[str] = []
        requests = _counted(stash)
        for i in range(120):
            items.append(f"m{i}")
            config = _grow(saver, items, config)
            assert saver.flush()  # the put's seal and clean-up happen after it returned
            requests.clear()
            assert _messages(saver) == items
            # The head, the key after it, the put, extensions, a snapshot and a tail.
            assert requests.count("GetObject") <= 2 + TAIL_EVERY + 2, (i, requests)
            assert "ListKeys" not in requests
            if i % 17 == 0:
                with stashpoint.open(memory_url[0]) as cold:
                    cold_requests = _counted(cold)
                    assert _messages(StashpointSaver(cold)) == items
                    assert cold_requests.count("GetObject") <= 1 + TAIL_EVERY + 2


def test_a_tail_whose_snapshot_is_gone_is_read_from_the_chain(
    memory_url: tuple[str, Any],
) -> None:
    from stashpoint.stores.objects import DeleteObject, ListKeys

    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        config = None
        items: list[str] = []
        for i in range(30):  # a snapshot at 8 extensions, tails at 16 and 24
            items.append(f"m{i}")
            config = _grow(saver, items, config)
        assert saver.flush()  # the replaced tail is deleted after the put that replaced it
        prefix = stash.layout.namespace_prefix("langgraph-values")
        keys = stash.driver(ListKeys(prefix)).keys
        assert sorted(k.rsplit("/", 1)[1][:2] for k in keys) == ["s-", "t-"]
        stash.driver(DeleteObject(next(k for k in keys if "/s-" in k)))
        assert _messages(saver) == items
        with stashpoint.open(memory_url[0]) as cold:
            assert _messages(StashpointSaver(cold)) == items


def test_a_thread_this_saver_writes_is_read_in_one_or_two_requests(
    memory_url: tuple[str, Any],
) -> None:
    """The entries a saver appended (until sealed) and the snapshots and tails it wrote
    are kept: its next read of the thread sends the key after the head, and at times a
    sealed segment the list's chain crosses into."""
    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        config = None
        items: list[str] = []
        requests = _counted(stash)
        reads = []
        for i in range(150):
            items.append(f"m{i}")
            config = _grow(saver, items, config)
            assert saver.flush()  # the put's seal and clean-up happen after it returned
            requests.clear()
            assert _messages(saver) == items
            reads.append(len(requests))
        assert max(reads) <= 2 and sum(reads) <= 1.2 * len(reads), reads


class _OwnSerializer:
    """A serializer of the user's own (LangGraph's inside): the saver cannot assume how it
    unpacks msgpack, so it unpacks item by item."""

    def __init__(self) -> None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        self.inner = JsonPlusSerializer()
        self.lists_unpacked = 0

    def dumps_typed(self, value: Any) -> tuple[str, bytes]:
        return self.inner.dumps_typed(value)  # type: ignore[no-any-return]

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        loaded = self.inner.loads_typed(data)
        self.lists_unpacked += isinstance(loaded, list)
        return loaded


@pytest.mark.parametrize("serializer", ["langgraph", "own"])
def test_a_long_list_reads_item_for_item_the_same_whatever_the_serializer(
    memory_url: tuple[str, Any], serializer: str
) -> None:
    """LangGraph's serializer unpacks a snapshot, a tail and the extensions after them as
    one msgpack array, the snapshot's items converted from their readable form once per
    saver; any other serializer item by item. Both read every kind of item back: messages,
    mappings, strings, bytes (not msgpack: read item by item) and a value over 256 KB (an
    object of its own), from the writer and from a new process."""
    from langchain_core.messages import AIMessage, HumanMessage

    def kind(i: int) -> Any:
        return [
            HumanMessage(content=f"q{i}", id=f"h{i}"),
            AIMessage(content=f"a{i}", id=f"a{i}"),
            {"turn": i, "tags": ["x", i]},
            f"m{i}",
        ][i % 4]

    with stashpoint.open(memory_url[0]) as stash:
        own = _OwnSerializer()
        serde = None if serializer == "langgraph" else own
        saver = StashpointSaver(stash, serde=serde)
        config = None
        items: list[Any] = []
        for i in range(75):
            if i == 50:
                items.append(b"raw bytes")  # not msgpack: this tail is read item by item
            elif i == 60:
                items.append("x" * (300 * 1024))  # a large value: an object of its own
            else:
                items.append(kind(i))
            config = _grow(saver, items, config)
            if i % 3 == 0:
                assert _messages(saver) == items, i
        assert _messages(saver) == items
        with stashpoint.open(memory_url[0]) as cold:
            assert _messages(StashpointSaver(cold, serde=serde)) == items
        assert own.lists_unpacked == 0  # the user's serializer only ever saw single items


def test_a_kept_snapshot_followed_by_a_tail_that_is_not_msgpack_reads_the_chain(
    memory_url: tuple[str, Any],
) -> None:
    """A snapshot this saver keeps only as msgpack, and a newer tail holding an item that
    is not msgpack (bytes): the whole list cannot be joined from them, so it is read from
    the chain, and reads right."""
    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        config = None
        items: list[Any] = []
        for i in range(12):  # a snapshot at 8 extensions, read: kept as msgpack
            items.append(f"m{i}")
            config = _grow(saver, items, config)
        assert _messages(saver) == items
        for i in range(12, 20):  # a tail at 16 extensions, holding bytes
            items.append(b"bytes" if i == 13 else f"m{i}")
            config = _grow(saver, items, config)
        assert _messages(saver) == items
        with stashpoint.open(memory_url[0]) as cold:
            assert _messages(StashpointSaver(cold)) == items
