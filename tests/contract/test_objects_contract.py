"""Object requests every backend serves the same way, sync and async: `DeleteKeys`, and
listings rolled up by a delimiter (where the provider says it honours any)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from stashpoint.errors import StashpointError
from stashpoint.stores.objects import (
    Create,
    DeleteKeys,
    GetObject,
    ListKeys,
    PutObject,
    WriteOutcome,
)


def _put(stash: Any, key: str, body: bytes) -> None:
    result = stash.driver(PutObject(key, body, Create(), content_encoding=None))
    assert result.outcome is WriteOutcome.STORED, result


def test_delete_keys_deletes_the_named_objects_in_one_request_and_leaves_the_rest(
    stash: Any,
) -> None:
    prefix = stash.layout.key("logs", f"batch-{uuid.uuid4().hex[:8]}/")
    doomed = [f"{prefix}gone-{i}" for i in range(5)]
    kept = f"{prefix}kept"
    for key in [*doomed, kept]:
        _put(stash, key, b"x")
    # A key that never existed counts as deleted: a repeat of the request is harmless.
    failures = stash.driver(DeleteKeys((*doomed, f"{prefix}never")))
    assert failures == []
    assert stash.driver(ListKeys(prefix)).keys == [kept]
    assert stash.driver(GetObject(kept)).body == b"x"
    assert stash.driver(DeleteKeys(tuple(doomed))) == []  # again: nothing left to do
    # The keys were plain deletes (their names may be written again, as after DeleteObject).
    _put(stash, doomed[0], b"again")
    assert stash.driver(GetObject(doomed[0])).body == b"again"


def test_a_listing_rolls_keys_up_by_any_delimiter_page_by_page(stash: Any) -> None:
    prefix = stash.layout.key("langgraph-store", f"d{uuid.uuid4().hex[:8]}.")
    names = ["a..x", "a..y", "a.b..z", "a.b.c", "b..k", "c", "d.e..1", "d.e..2"]
    for name in names:
        _put(stash, prefix + name, b"x")
    if not stash.provider.any_delimiter:  # a directory bucket: only "/" (refused, typed)
        with pytest.raises(StashpointError):
            stash.driver(ListKeys(prefix, delimiter=".."))
        return
    keys: list[str] = []
    rolled: list[str] = []
    token = None
    for _ in range(10):  # bounded: 6 entries, 2 a page
        page = stash.driver(ListKeys(prefix, token, 2, delimiter=".."))
        assert len(page.keys) + len(page.prefixes) <= 2
        keys += page.keys
        rolled += page.prefixes
        token = page.next_token
        if token is None:
            break
    assert token is None
    assert [k[len(prefix) :] for k in keys] == ["a.b.c", "c"]
    # SeaweedFS resumes after a prefix that ended a page, so it names it again on the
    # next: callers take the set. Nothing is left out, and the order holds.
    assert [p[len(prefix) :] for p in dict.fromkeys(rolled)] == ["a..", "a.b..", "b..", "d.e.."]
