"""Deleting and rebasing threads in a few requests; `gc` vacates what lies below (issue 27
#5): the entries a deletion or a rebase leaves are never read, keep their keys, and become
markers when `gc` tidies the thread."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

import stashpoint
from stashpoint import CheckpointConflict
from stashpoint.ids import thread_key
from stashpoint.langgraph import StashpointSaver
from stashpoint.logs.format import SEGMENT_SPAN
from stashpoint.stores.objects import ListKeys
from tests import servers
from tests.crashes import Crash, crash_at
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
        # thread's values (one listing; the ended snapshot and tail deleted unread).
        assert requests.count("PutObject") == 1, requests
        assert requests.count("ListKeys") == 3 and requests.count("GetObject") == 1, requests
        assert len(requests) <= 7, requests
        assert saver.get_tuple(THREAD) is None
        assert list(saver.list(THREAD)) == []
        assert _whole_entries(stash) == whole + 1  # nothing vacated yet: the tombstone added
        requests.clear()
        report = stash.admin.collect_garbage(dry_run=False)
        assert report.lives_tidied >= steps - 3 * SEGMENT_SPAN  # entries, and segments deleted
        assert _whole_entries(stash) == 1  # the tombstone alone
        assert stash.admin.collect_garbage(dry_run=False).lives_tidied == 0  # nothing left to do
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
                stash.admin.collect_garbage(dry_run=False)
            with pytest.raises(CheckpointConflict):
                _put(zombie, "t", {"messages": ["late"]}, parent=config["configurable"][
                    "checkpoint_id"], marker=True)  # fmt: skip
            assert StashpointSaver(stash).get_tuple(THREAD) is None


def test_prune_rebases_in_one_put_and_gc_vacates_below(memory_url: tuple[str, Any]) -> None:
    steps = 2 * SEGMENT_SPAN + 3
    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        _grown(saver, steps, thread_id="t", word="message")
        assert saver.flush()  # the puts' seals, made after they returned
        expected = saver.get_tuple(THREAD).checkpoint["channel_values"]
        requests = _counting(stash)
        saver.prune(["t"], strategy="keep_latest")
        assert requests.count("PutObject") == 1, requests  # the rebase alone
        assert [t.checkpoint["channel_values"] for t in saver.list(THREAD)] == [expected]
        report = stash.admin.collect_garbage(dry_run=False)
        assert report.lives_tidied >= steps - 2 * SEGMENT_SPAN
        assert _whole_entries(stash) == 1  # the rebase alone
    with stashpoint.open(memory_url[0]) as stash:  # a new process reads the same
        saver = StashpointSaver(stash)
        assert [t.checkpoint["channel_values"] for t in saver.list(THREAD)] == [expected]
        latest = saver.get_tuple(THREAD)
        parent = latest.config["configurable"]["checkpoint_id"]
        _put(saver, "t", {"messages": [*expected["messages"], "next"]}, parent=parent)
        assert saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"][-1] == "next"


def _list_objects(stash: Any, thread_id: str) -> list[str]:
    """Names of the thread's list snapshots (`s-`) and tails (`t-`) stored now."""
    prefix = stash.layout.key("langgraph-values", f"{thread_key(thread_id)}/")
    names = [k[len(prefix) :] for k in stash.driver(ListKeys(prefix)).keys]
    return sorted(n for n in names if n.startswith(("s-", "t-")))


def test_the_saver_that_wrote_a_thread_deletes_it_in_three_requests_reading_nothing(
    saver_url: tuple[str, Any],
) -> None:
    """Issue 27 #5: the tombstone after the head this saver knows, one listing of the
    values, and the ended life's snapshot and tail deleted unread in one batch request
    (their names hold their life). A new process reads the head first (two listings, the
    newest entry)."""
    with stashpoint.open(saver_url[0], **saver_url[1]) as stash:
        saver = StashpointSaver(stash)
        _grown(saver, 50, thread_id="warm", word="message")  # a snapshot and a tail
        _grown(saver, 50, thread_id="cold", word="message")
        assert saver.flush()  # replaced snapshots are deleted after the puts that replaced them
        assert [n[:2] for n in _list_objects(stash, "warm")] == ["s-", "t-"]
        requests = _counting(stash)
        saver.delete_thread("warm")
        assert sorted(requests) == ["DeleteKeys", "ListKeys", "PutObject"]
        assert _list_objects(stash, "warm") == []
        assert saver.get_tuple({"configurable": {"thread_id": "warm", "checkpoint_ns": ""}}) is None
    with stashpoint.open(saver_url[0], **saver_url[1]) as stash:  # a new process
        saver = StashpointSaver(stash)
        requests = _counting(stash)
        saver.delete_thread("cold")
        assert requests.count("GetObject") == 1, requests  # the newest entry, no value read
        assert requests.count("PutObject") == 1 and requests.count("DeleteKeys") == 1, requests
        assert "DeleteObject" not in requests and len(requests) <= 6, requests
        assert _list_objects(stash, "cold") == []


def test_a_stale_known_head_loses_its_tombstone_and_the_thread_is_deleted_from_the_latest(
    memory_url: tuple[str, Any],
) -> None:
    """A saver whose known head is not the latest (another process put since) appends its
    tombstone after it, loses, reads the head and deletes from there: the other process's
    checkpoint is deleted too, and its newer snapshot is judged, not assumed."""
    thread = {"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}
    with (
        stashpoint.open(memory_url[0]) as first,
        stashpoint.open(memory_url[0]) as second,
    ):
        saver = StashpointSaver(first)
        _grown(saver, 10, thread_id="shared")
        other = StashpointSaver(second)
        latest = other.get_tuple(thread)
        assert latest is not None
        _grown(other, 40, thread_id="shared", word="later")  # a snapshot the first never saw
        requests = _counting(first)
        saver.delete_thread("shared")
        assert requests.count("PutObject") == 2, requests  # the lost tombstone, then ours
        assert saver.get_tuple(thread) is None and other.get_tuple(thread) is None
        assert _list_objects(first, "shared") == []


def test_a_fresh_start_during_a_delete_keeps_its_snapshot_and_tail(
    memory_url: tuple[str, Any],
) -> None:
    """A thread deleted while another worker starts it afresh and writes a snapshot and a
    tail before the deletion lists the values: both are the new life's, judged so, and
    kept (a tail read as a large value did not decode and was deleted)."""
    from stashpoint.stores.objects import ListKeys

    thread = {"configurable": {"thread_id": "again", "checkpoint_ns": ""}}
    with (
        stashpoint.open(memory_url[0]) as deleting,
        stashpoint.open(memory_url[0]) as starting,
    ):
        saver, starter = StashpointSaver(deleting), StashpointSaver(starting)
        _grown(saver, 50, thread_id="again", word="old")
        ended = _list_objects(deleting, "again")
        prefix = deleting.layout.namespace_prefix("langgraph-values")
        started: list[Any] = []

        def start_afresh(request: Any, proceed: Any) -> Any:
            if isinstance(request, ListKeys) and request.prefix.startswith(prefix) and not started:
                started.append(_grown(starter, 20, thread_id="again", word="new"))
            return proceed()

        with deleting.intercept(start_afresh):
            saver.delete_thread("again")
        assert started, "the fresh start ran during the delete"
        kept = _list_objects(deleting, "again")
        assert [n[:2] for n in kept] == ["s-", "t-"] and not set(kept) & set(ended)
        found = StashpointSaver(deleting).get_tuple(thread)
        assert found is not None
        assert found.checkpoint["channel_values"]["messages"][-1] == "new 19"


def _delete_requests(url: str) -> int:
    """How many requests the warm delete of `_doomed`'s thread sends, crash-free."""
    with stashpoint.open(url) as stash:
        saver = _doomed(stash)
        requests = _counting(stash)
        saver.delete_thread("doomed")
        return len(requests)


def _doomed(stash: Any) -> StashpointSaver:
    """A thread with a list snapshot and tail and a large value, by the returned saver."""
    saver = StashpointSaver(stash)
    config = _grown(saver, 20, thread_id="doomed", word="item")
    _put(saver, "doomed", {"big": "z" * 300_000}, parent=config["configurable"]["checkpoint_id"])
    return saver


@pytest.mark.parametrize("after", [False, True])
def test_a_crash_at_any_request_of_a_delete_leaves_the_thread_whole_or_deleted(
    after: bool,
) -> None:
    """Every request of a warm `delete_thread`, crashed before or after: a new process
    finds the thread whole (the tombstone never landed: every checkpoint reads) or
    deleted, and deleting again leaves nothing of it; a fresh start then reads alone."""
    thread = {"configurable": {"thread_id": "doomed", "checkpoint_ns": ""}}
    count = _delete_requests(f"memory://delete-count-{uuid.uuid4().hex}")
    assert count >= 4
    for step in range(count):
        url = f"memory://delete-crash-{uuid.uuid4().hex}"
        with stashpoint.open(url) as stash:
            saver = _doomed(stash)
            whole = [c.checkpoint["channel_values"] for c in saver.list(thread)]
            with crash_at(stash, step, after), pytest.raises(Crash):
                saver.delete_thread("doomed")
        with stashpoint.open(url) as stash:  # a new process
            saver = StashpointSaver(stash)
            found = [c.checkpoint["channel_values"] for c in saver.list(thread)]
            assert found in ([], whole), (step, after)
            saver.delete_thread("doomed")
            assert saver.get_tuple(thread) is None
            prefix = stash.layout.key("langgraph-values", f"{thread_key('doomed')}/")
            assert stash.driver(ListKeys(prefix)).keys == [], (step, after)
            _put(saver, "doomed", {"messages": ["afresh"]})
            latest = saver.get_tuple(thread)
            assert latest is not None
            assert latest.checkpoint["channel_values"] == {"messages": ["afresh"]}


def test_deletes_through_the_fault_proxy_leave_every_thread_deleted_and_nothing_behind(
    seaweedfs: servers.S3Server,
) -> None:
    """A saver grows threads, then deletes them (warm: the tombstone after its own head)
    while the wire drops requests and responses and answers with false conflicts: each
    delete that returns leaves its thread deleted, with no value object under it."""
    from botocore.config import Config

    from tests.faultproxy import FaultPlan, FaultProxy

    plan = FaultPlan({})  # the threads grow on a clean wire; the deletes meet the faults
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    prefix = f"t-{uuid.uuid4().hex}"
    threads = ["doomed", *(f"grown-{n}" for n in range(7))]
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            saver = _doomed(stash)  # "doomed": a snapshot, a tail and a large value
            for thread_id in threads[1:]:
                _grown(saver, 10, thread_id=thread_id, word="item")
            plan.rates.update({"drop_response": 0.25, "drop_request": 0.15, "conflict": 0.2})
            for thread_id in threads:
                saver.delete_thread(thread_id)
    assert all(plan.injected[f] > 0 for f in ("drop_response", "drop_request", "conflict"))
    with stashpoint.open(seaweedfs.url(prefix)) as stash:
        saver = StashpointSaver(stash)
        for thread_id in threads:
            assert saver.get_tuple({"configurable": {"thread_id": thread_id}}) is None
            values = stash.layout.key("langgraph-values", f"{thread_key(thread_id)}/")
            assert stash.driver(ListKeys(values)).keys == [], thread_id
