"""The conditional-delete engine (`stores.writes.delete`), driven by scripted answers.

A delete conditional on the ETag of the object judged: the four ways it can end (done, lost
race, landed unheard, refused, never lands), then each caller's read-back: a clean-up's
(`judged_read_back`) and a head's (`CompareAndSwap.delete`).
"""

from __future__ import annotations

from typing import Any

import pytest

from stashpoint import CheckpointConflict, StorageUnavailable
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Parallel
from stashpoint.stores.objects import (
    DeleteObject,
    HeadObject,
    ObjectInfo,
    WriteOutcome,
    WriteResult,
)
from stashpoint.stores.writes import delete, delete_all, judged_read_back
from tests.scripted import BUSY, REFUSED, STORED, TIMEOUT, Script
from tests.stores.test_cas_scripted import cas, chain, head

RETRY = RetryPolicy(max_attempts=4, base_delay=0, max_delay=0)
KEY = "blobs/abc"
JUDGED = DeleteObject(KEY, "etag-judged")
GONE = WriteResult(WriteOutcome.NOT_FOUND)


def _there(etag: str) -> ObjectInfo:
    return ObjectInfo(etag=etag, body=None)


def _cleanup() -> Any:
    return delete(JUDGED, judged_read_back(KEY, "etag-judged"), RETRY, what="blob delete")


def test_a_delete_storage_acknowledges_is_one_request() -> None:
    script = Script([(DeleteObject, STORED)])
    assert script.run(_cleanup()) is True
    assert script.requests == [JUDGED]


def test_a_404_is_gone_whoever_deleted_it() -> None:
    assert Script([(DeleteObject, GONE)]).run(_cleanup()) is True


def test_a_delete_that_lost_the_race_keeps_the_other_writers_object() -> None:
    """412: written over since judged (a save reused the blob): it stays, never deleted."""
    script = Script([(DeleteObject, REFUSED), (HeadObject, _there("etag-theirs"))])
    assert script.run(_cleanup()) is False
    assert [r for r in script.requests if isinstance(r, DeleteObject)] == [JUDGED]


def test_a_delete_landed_unheard_is_done_once_read_back() -> None:
    script = Script([(DeleteObject, TIMEOUT), (HeadObject, None)])
    assert script.run(_cleanup()) is True


def test_a_delete_that_did_not_land_is_sent_again_under_the_same_condition() -> None:
    script = Script(
        [(DeleteObject, TIMEOUT), (HeadObject, _there("etag-judged")), (DeleteObject, STORED)]
    )
    assert script.run(_cleanup()) is True
    assert [r for r in script.requests if isinstance(r, DeleteObject)] == [JUDGED, JUDGED]


def test_a_409_backs_off_and_sends_the_same_delete() -> None:
    script = Script([(DeleteObject, BUSY), (DeleteObject, STORED)])
    assert script.run(_cleanup()) is True and script.sleeps == 1


def test_a_delete_that_never_lands_is_not_reported_done() -> None:
    answers: list[tuple[type[Any], Any]] = []
    for _ in range(RETRY.max_attempts):
        answers += [(DeleteObject, TIMEOUT), (HeadObject, _there("etag-judged"))]
    with pytest.raises(StorageUnavailable, match="not done after 4 attempts"):
        Script(answers).run(_cleanup())


def test_a_read_back_that_fails_is_an_unknown_outcome() -> None:
    script = Script([(DeleteObject, TIMEOUT), (HeadObject, StorageUnavailable("down"))])
    with pytest.raises(StorageUnavailable, match="outcome unknown"):
        script.run(_cleanup())


def test_delete_all_sends_every_first_delete_at_once_then_judges_the_unclear() -> None:
    other = DeleteObject("blobs/def", "etag-2")
    deletes = [
        (JUDGED, judged_read_back(KEY, "etag-judged")),
        (other, judged_read_back("blobs/def", "etag-2")),
    ]
    script = Script([(Parallel, [STORED, REFUSED]), (HeadObject, _there("etag-moved"))])
    assert script.run(delete_all(deletes, RETRY, what="value delete")) == [True, False]


# -- a head's delete (`CompareAndSwap.delete`) -----------------------------------------------


def test_a_head_deleted_at_a_revision_that_moved_is_refused_as_a_conflict() -> None:
    first, second = chain(2)
    script = Script(
        [(HeadObject, head(first)), (DeleteObject, REFUSED), (HeadObject, head(second))]
    )
    with pytest.raises(CheckpointConflict):
        script.run(cas().delete("job", expected_revision=0))


def test_a_head_delete_without_a_revision_takes_the_head_saved_meanwhile() -> None:
    first, second = chain(2)
    script = Script(
        [
            (HeadObject, head(first)),
            (DeleteObject, REFUSED),
            (HeadObject, head(second)),
            (DeleteObject, STORED),
        ]
    )
    script.run(cas().delete("job"))
    deletes = [r for r in script.requests if isinstance(r, DeleteObject)]
    assert [d.etag for d in deletes] == ["etag-0", "etag-1"]


def test_a_head_delete_landed_unheard_is_done() -> None:
    (first,) = chain(1)
    script = Script([(HeadObject, head(first)), (DeleteObject, TIMEOUT), (HeadObject, None)])
    script.run(cas().delete("job"))
