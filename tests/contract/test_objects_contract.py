"""Object requests every backend serves the same way, sync and async: `DeleteKeys`."""

from __future__ import annotations

import uuid
from typing import Any

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
