"""Issue 48 #4: every save's timestamps come from the stash's clock, so a `FakeClock`
reaches them (`update`'s next revision, a blob, a LangGraph store item)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope, InvalidPayload
from stashpoint.clock import FakeClock

_START = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)


def test_update_stamps_the_next_revision_with_the_stash_clock(
    memory_url: tuple[str, Any],
) -> None:
    clock = FakeClock(_START)
    with stashpoint.open(memory_url[0], clock=clock) as stash:
        first = Envelope.initial("job", None, "job", 1, {"n": 0}, at=clock.now())
        stash.checkpoints.compare_and_swap(first, None)
        clock.advance(3600)
        saved = stash.checkpoints.update("job", lambda e: {"n": e.payload["n"] + 1})
        assert saved.created_at == _START
        assert saved.updated_at == _START + timedelta(hours=1)
        assert stash.checkpoints.load("job").updated_at == _START + timedelta(hours=1)


def test_a_blob_is_written_at_the_stash_clock(memory_url: tuple[str, Any]) -> None:
    from stashpoint.stores.layout import BLOBS
    from stashpoint.stores.objects import GetObject, ListKeys

    clock = FakeClock(_START)
    with stashpoint.open(memory_url[0] + "?blob_threshold=16", clock=clock) as stash:
        run_id = stash.runs.create_run("g")
        stash.runs.record_attempt(run_id, "node", 0, {"text": "x" * 100})  # offloaded
        keys = stash.driver(ListKeys(stash.layout.namespace_prefix(BLOBS))).keys
        assert len(keys) == 1
        blob = stash.codec.decode(stash.driver(GetObject(keys[0])).body, name=keys[0])
        assert blob.created_at == blob.updated_at == _START


def test_a_store_item_is_written_at_the_stash_clock(memory_url: tuple[str, Any]) -> None:
    pytest.importorskip("langgraph.store.base")
    from stashpoint.langgraph import StashpointStore

    clock = FakeClock(_START)
    with stashpoint.open(memory_url[0], clock=clock) as stash:
        store = StashpointStore(stash)
        store.put(("users", "u1"), "prefs", {"theme": "dark"})
        clock.advance(60)
        store.put(("users", "u1"), "prefs", {"theme": "light"})
        item = store.get(("users", "u1"), "prefs")
        assert item is not None
        assert item.created_at == _START
        assert item.updated_at == _START + timedelta(seconds=60)


def test_next_refuses_a_time_without_a_zone() -> None:
    envelope = Envelope.initial("job", None, "job", 1, {})
    with pytest.raises(InvalidPayload):
        envelope.next({}, at=datetime(2030, 1, 1))
    assert envelope.next({}, at=_START).updated_at == _START
