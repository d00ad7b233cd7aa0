"""The one batch-delete helper (`stores/objects.py` `delete_keys`), scripted: what it
sends for one key, for many, for more than a batch holds, and what a refusal does."""

from __future__ import annotations

import pytest

from stashpoint.errors import StorageUnavailable
from stashpoint.steps import Parallel
from stashpoint.stores.objects import (
    MAX_DELETE_BATCH,
    DeleteFailure,
    DeleteKeys,
    DeleteObject,
    WriteOutcome,
    WriteResult,
    delete_keys,
)
from tests.scripted import STORED, Script


def test_one_key_is_one_plain_delete() -> None:
    script = Script([(DeleteObject, STORED)])
    script.run(delete_keys(["a"]))
    (sent,) = script.requests
    assert sent == DeleteObject("a")  # unconditional, the current object


def test_no_key_sends_nothing() -> None:
    Script([]).run(delete_keys([]))


def test_many_keys_go_in_batches_of_a_thousand_sent_together() -> None:
    keys = [f"k{i:05d}" for i in range(2 * MAX_DELETE_BATCH + 5)]
    script = Script([(Parallel, lambda request: [[] for _ in request.requests])])
    script.run(delete_keys(keys))
    (parallel,) = script.requests
    batches = list(parallel.requests)
    assert all(isinstance(b, DeleteKeys) for b in batches)
    assert [len(b.keys) for b in batches] == [MAX_DELETE_BATCH, MAX_DELETE_BATCH, 5]
    assert [k for b in batches for k in b.keys] == keys  # each key once, in order


def test_a_key_storage_refused_raises_naming_it_unless_best_effort() -> None:
    refused = [[DeleteFailure("b", "", "AccessDenied")]]
    with pytest.raises(StorageUnavailable) as raised:
        Script([(Parallel, refused)]).run(delete_keys(["a", "b"]))
    assert raised.value.object_name == "b" and "AccessDenied" in str(raised.value)
    Script([(Parallel, refused)]).run(delete_keys(["a", "b"], best_effort=True))


@pytest.mark.parametrize(
    ("outcome", "raises"),
    [(WriteOutcome.STORED, False), (WriteOutcome.NOT_FOUND, False), (WriteOutcome.AMBIGUOUS, True)],
)
def test_one_key_whose_delete_may_not_have_happened_raises(
    outcome: WriteOutcome, raises: bool
) -> None:
    script = Script([(DeleteObject, WriteResult(outcome))])
    if raises:
        with pytest.raises(StorageUnavailable):
            script.run(delete_keys(["a"]))
    else:
        script.run(delete_keys(["a"]))


def test_a_transport_failure_is_raised_unless_best_effort() -> None:
    failure = StorageUnavailable("connection reset", object_name="a")
    with pytest.raises(StorageUnavailable):
        Script([(Parallel, failure)]).run(delete_keys(["a", "b"]))
    Script([(Parallel, failure)]).run(delete_keys(["a", "b"], best_effort=True))
