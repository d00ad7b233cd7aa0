"""Deleting and rebasing threads in a few requests; `gc` vacates what lies below (issue 27
#5): the entries a deletion or a rebase leaves are never read, keep their keys, and become
markers when `gc` tidies the thread."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

import stashpoint
from stashpoint import CheckpointConflict
from stashpoint.ids import thread_key
from stashpoint.langgraph import StashpointSaver
from stashpoint.logs.format import SEGMENT_SPAN
from tests.langgraph.test_thread_storage import _grown, _put
from tests.meter import Meter
from tests.purging import bodies, plain, versions

THREAD = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def _whole_entries(stash: Any, thread_id: str = "t") -> int:
    """Entries of the thread's log still stored whole (not vacated markers)."""
    prefix = f"langgraph/{thread_key(thread_id)}/"
    current = [v for v in versions(stash, prefix) if v.is_latest and not v.is_delete_marker]
    return sum(
        1 for _, info in bodies(stash, current) if json.loads(plain(info.body))["type"] == "entry"
    )


def _counting(stash: Any) -> list[str]:
    return Meter(stash).sent


def test_delete_thread_is_a_few_requests_and_gc_vacates_below(
    memory_url: tuple[str, Any],
) -> None:
    steps = 3 * SEGMENT_SPAN + 10
    with stashpoint.open(memory_url[0]) as stash:
        _grown(StashpointSaver(stash), steps, thread_id="t", word="message")
    with stashpoint.open(memory_url[0]) as stash:  # a new process, as a Lambda is
        saver = StashpointSaver(stash)
        whole = _whole_entries(stash)
        requests = _counting(stash)
        saver.delete_thread("t")
        # Two listings in one round trip, the newest entry, the tombstone; then the
        # thread's large values (one listing, each read and deleted).
        assert requests.count("PutObject") == 1, requests
        assert requests.count("ListKeys") == 3 and requests.count("GetObject") <= 3, requests
        assert len(requests) <= 9, requests
        assert saver.get_tuple(THREAD) is None
        assert list(saver.list(THREAD)) == []
        assert _whole_entries(stash) == whole + 1  # nothing vacated yet: the tombstone added
        requests.clear()
        report = stash.collect_garbage(dry_run=False)
        assert report.lives_tidied >= steps - 3 * SEGMENT_SPAN  # entries, and segments deleted
        assert _whole_entries(stash) == 1  # the tombstone alone
        assert stash.collect_garbage(dry_run=False).lives_tidied == 0  # nothing left to do
        assert saver.get_tuple(THREAD) is None
        # The thread starts again where the deletion left it; nothing older is read.
        _put(saver, "t", {"messages": ["again"]})
        latest = saver.get_tuple(THREAD)
        assert latest is not None and latest.checkpoint["channel_values"] == {"messages": ["again"]}


def test_a_stale_writer_loses_before_and_after_gc_tidies(memory_url: tuple[str, Any]) -> None:
    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        config = _grown(saver, SEGMENT_SPAN + 5, thread_id="t")
    with stashpoint.open(memory_url[0]) as late, stashpoint.open(memory_url[0]) as stash:
        zombie = StashpointSaver(late)
        zombie.get_tuple(THREAD)  # it holds the thread's head from before the deletion
        StashpointSaver(stash).delete_thread("t")
        for tidy in (False, True):
            if tidy:
                stash.collect_garbage(dry_run=False)
            with pytest.raises(CheckpointConflict):
                _put(zombie, "t", {"messages": ["late"]}, parent=config["configurable"][
                    "checkpoint_id"], marker=True)  # fmt: skip
            assert StashpointSaver(stash).get_tuple(THREAD) is None


def test_prune_rebases_in_one_put_and_gc_vacates_below(memory_url: tuple[str, Any]) -> None:
    steps = 2 * SEGMENT_SPAN + 3
    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        _grown(saver, steps, thread_id="t", word="message")
        expected = saver.get_tuple(THREAD).checkpoint["channel_values"]
        requests = _counting(stash)
        saver.prune(["t"], strategy="keep_latest")
        assert requests.count("PutObject") == 1, requests  # the rebase alone
        assert [t.checkpoint["channel_values"] for t in saver.list(THREAD)] == [expected]
        report = stash.collect_garbage(dry_run=False)
        assert report.lives_tidied >= steps - 2 * SEGMENT_SPAN
        assert _whole_entries(stash) == 1  # the rebase alone
    with stashpoint.open(memory_url[0]) as stash:  # a new process reads the same
        saver = StashpointSaver(stash)
        assert [t.checkpoint["channel_values"] for t in saver.list(THREAD)] == [expected]
        latest = saver.get_tuple(THREAD)
        parent = latest.config["configurable"]["checkpoint_id"]
        _put(saver, "t", {"messages": [*expected["messages"], "next"]}, parent=parent)
        assert saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"][-1] == "next"
