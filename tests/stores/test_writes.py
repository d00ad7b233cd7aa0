"""The one conditional-write engine (`stores.writes`), driven by scripted storage answers.

Each test plays the exact answers a server gives to one caller's write: a blob, a log
entry, a sealed segment's judge, a content-named object of any kind. The envelope's rows
are in `test_cas_scripted.py`; end to end through the fault proxy, crashes and `kill -9`,
each write path is tested where its feature is.
"""

from __future__ import annotations

from typing import Any

import pytest

from stashpoint import CheckpointConflict, Purged, StorageUnavailable
from stashpoint.codec import Codec
from stashpoint.logs.log import LogKeys, LogSteps
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Parallel, Steps
from stashpoint.stores.blobs import Blobs
from stashpoint.stores.layout import Layout
from stashpoint.stores.objects import (
    Create,
    GetObject,
    KeyPage,
    Match,
    ObjectInfo,
    PutObject,
    WriteOutcome,
    WriteResult,
)
from stashpoint.stores.writes import Found, create_named
from tests.scripted import BUSY, REFUSED, REFUSED_AFTER_RETRY, STORED, TIMEOUT, Script

RETRY = RetryPolicy(max_attempts=4, base_delay=0, max_delay=0)
NAMED = PutObject("values/abc", b"the bytes", Create())


def _judging(found: Found, seen: list[bytes] | None = None) -> Any:
    def judge(info: ObjectInfo) -> Steps[Found]:
        if seen is not None:
            seen.append(info.body or b"")
        return found
        yield

    return judge


def _named(found: Found, *, refresh: bool) -> Steps[str | None]:
    return create_named(NAMED, _judging(found), RETRY, what="value", limit=1 << 20, refresh=refresh)


def _at(body: bytes, etag: str = "etag-there") -> ObjectInfo:
    return ObjectInfo(etag=etag, body=body)


# -- content-named objects (blobs, segments, LangGraph values and list snapshots) -------------


def test_a_named_create_is_one_put_if_none_match() -> None:
    script = Script([(PutObject, STORED)])
    assert script.run(_named(Found.OTHER, refresh=True)) == "etag-new"
    assert script.puts()[0].condition == Create()


@pytest.mark.parametrize("refused", [REFUSED, REFUSED_AFTER_RETRY, TIMEOUT])
def test_something_else_under_the_name_is_written_over_its_etag(refused: WriteResult) -> None:
    script = Script([(PutObject, refused), (GetObject, _at(b"planted")), (PutObject, STORED)])
    assert script.run(_named(Found.OTHER, refresh=False)) == "etag-new"
    assert script.puts()[1].condition == Match("etag-there")
    assert script.puts()[1].body == NAMED.body


def test_the_same_content_is_kept_without_refresh() -> None:
    script = Script([(PutObject, REFUSED), (GetObject, _at(NAMED.body))])
    assert script.run(_named(Found.SAME, refresh=False)) == "etag-there"
    assert len(script.puts()) == 1


def test_the_same_content_is_refreshed_once_so_a_judged_delete_fails() -> None:
    script = Script([(PutObject, REFUSED), (GetObject, _at(NAMED.body)), (PutObject, STORED)])
    assert script.run(_named(Found.SAME, refresh=True)) == "etag-new"
    assert script.puts()[1].condition == Match("etag-there")


def test_a_refresh_that_loses_to_another_copy_reads_back_once_more() -> None:
    script = Script(
        [
            (PutObject, REFUSED),
            (GetObject, _at(NAMED.body)),
            (PutObject, REFUSED),  # another writer refreshed it first
            (GetObject, _at(NAMED.body, "etag-theirs")),
        ]
    )
    assert script.run(_named(Found.SAME, refresh=True)) == "etag-theirs"


def test_our_own_copy_landed_unheard_is_success() -> None:
    script = Script([(PutObject, TIMEOUT), (GetObject, _at(NAMED.body))])
    assert script.run(_named(Found.OURS, refresh=True)) == "etag-there"


def test_nothing_there_after_a_timeout_resends_the_create() -> None:
    script = Script([(PutObject, TIMEOUT), (GetObject, None), (PutObject, STORED)])
    assert script.run(_named(Found.OTHER, refresh=True)) == "etag-new"
    assert [p.condition for p in script.puts()] == [Create(), Create()]


def test_a_key_that_keeps_changing_ends_as_not_stored() -> None:
    answers: list[tuple[type[Any], Any]] = [(PutObject, REFUSED)]
    for n in range(5):
        answers += [(GetObject, _at(b"x", f"etag-{n}")), (PutObject, REFUSED)]
    answers.pop()
    script = Script(answers)
    with pytest.raises(StorageUnavailable, match="kept changing"):
        script.run(_named(Found.OTHER, refresh=False))


def test_a_read_back_that_fails_after_an_unclear_answer_is_an_unknown_outcome() -> None:
    failing = StorageUnavailable("read failed")
    script = Script([(PutObject, TIMEOUT), (GetObject, failing)])
    with pytest.raises(StorageUnavailable, match="outcome unknown"):
        script.run(_named(Found.OTHER, refresh=False))


def test_409_is_retried_with_the_same_bytes() -> None:
    script = Script([(PutObject, BUSY), (PutObject, STORED)])
    assert script.run(_named(Found.OTHER, refresh=False)) == "etag-new"
    assert script.sleeps == 1 and script.puts()[0] == script.puts()[1]


# -- blobs ---------------------------------------------------------------------------------


def _blobs() -> Blobs:
    return Blobs(Layout(), Codec(), threshold=16, retry=RETRY)


def _blob_copy(blobs: Blobs, value: Any) -> bytes:
    """Another writer's stored copy of `value` (the same content, another write id)."""
    script = Script([(PutObject, STORED)])
    script.run(blobs.offload(value))
    return script.puts()[0].body


def test_a_planted_blob_under_our_hash_is_replaced() -> None:
    blobs, value = _blobs(), {"text": "v" * 100}
    script = Script([(PutObject, REFUSED), (GetObject, _at(b"{}")), (PutObject, STORED)])
    ref = script.run(blobs.offload(value))
    assert ref["bytes"] > 16
    assert script.puts()[1].condition == Match("etag-there")


def test_another_writers_copy_of_a_blob_is_made_young_again() -> None:
    blobs, value = _blobs(), {"text": "v" * 100}
    theirs = _blob_copy(blobs, value)
    script = Script([(PutObject, REFUSED), (GetObject, _at(theirs)), (PutObject, STORED)])
    script.run(blobs.offload(value))
    assert script.puts()[1].condition == Match("etag-there")
    assert script.puts()[1].body != theirs  # ours: its new ETag fails a judged delete


def test_our_own_blob_landed_unheard_is_not_written_again() -> None:
    blobs, value = _blobs(), {"text": "v" * 100}
    script = Script([(PutObject, TIMEOUT), (GetObject, lambda r: _at(first[0]))])
    first: list[bytes] = []
    steps = blobs.offload(value)

    def remember_body(request: PutObject) -> WriteResult:
        first.append(request.body)
        return TIMEOUT

    script.answers[0] = (PutObject, remember_body)
    script.run(steps)
    assert len(script.puts()) == 1


# -- log entries ---------------------------------------------------------------------------


def _logs() -> LogSteps:
    return LogSteps(LogKeys(Layout(), "app"), Codec(), RETRY)


def _listing_with(*keys: str) -> list[KeyPage]:
    """A log's listing: its entries, then its (no) sealed segments."""
    return [KeyPage(list(keys), None), KeyPage([], None)]


def _their_entry(log_id: str) -> bytes:
    """Version 0 of `log_id` as another writer stored it."""
    theirs: list[bytes] = []

    def stored(request: PutObject) -> WriteResult:
        theirs.append(request.body)
        return STORED

    Script([(PutObject, stored)]).run(_logs().append(log_id, [2], after=None, state={}))
    return theirs[0]


def test_an_append_that_loses_is_a_conflict_naming_the_winner() -> None:
    logs, theirs = _logs(), _their_entry("job")
    entry_key = logs.keys.entry("job", 0)
    script = Script(
        [
            (PutObject, REFUSED),
            (Parallel, _listing_with(entry_key)),  # the conflict names the winner's version
            (GetObject, _at(theirs)),  # ... and reads it: a purge's tombstone says Purged
            (Parallel, _listing_with(entry_key)),  # a create: was the log deleted? no
            (Parallel, [_at(theirs)]),
        ]
    )
    with pytest.raises(CheckpointConflict) as raised:
        script.run(logs.append("job", [1], after=None, state={}))
    assert raised.value.actual_revision == 0
    assert len(script.puts()) == 1


def test_an_append_that_loses_to_a_purge_tombstone_is_purged() -> None:
    logs = _logs()
    tombstone: list[bytes] = []

    def stored(request: PutObject) -> WriteResult:
        tombstone.append(request.body)
        return STORED

    # The tombstone a purge appends after version 0 (a listing, the top, the append).
    first = _their_entry("job")
    Script(
        [
            (Parallel, _listing_with(logs.keys.entry("job", 0))),
            (Parallel, [_at(first)]),
            (PutObject, stored),
        ]
    ).run(logs.end_for_purge("job", "purge-1"))
    head = Script([(PutObject, STORED)]).run(logs.append("job", [1], after=None, state={}))
    keys = [logs.keys.entry("job", v) for v in (0, 1)]
    script = Script(
        [
            (PutObject, REFUSED),  # version 1 is the tombstone
            (Parallel, _listing_with(*keys)),
            (GetObject, _at(tombstone[0])),
        ]
    )
    with pytest.raises(Purged) as raised:
        script.run(logs.append("job", [2], after=head, state={}))
    assert raised.value.purge_id == "purge-1" and len(script.puts()) == 1


def test_an_append_landed_unheard_is_success_once_read_back() -> None:
    logs = _logs()
    sent: list[bytes] = []

    def timed_out(request: PutObject) -> WriteResult:
        sent.append(request.body)
        return TIMEOUT

    script = Script([(PutObject, timed_out), (GetObject, lambda r: _at(sent[0]))])
    head = script.run(logs.append("job", [1], after=None, state={"n": 1}))
    assert head.version == 0 and len(script.puts()) == 1


def test_an_append_whose_version_holds_another_entry_is_a_conflict() -> None:
    logs, theirs = _logs(), _their_entry("job")
    entry_key = logs.keys.entry("job", 0)
    script = Script(
        [
            (PutObject, TIMEOUT),
            (GetObject, _at(theirs)),  # the read-back: another writer's entry
            (Parallel, _listing_with(entry_key)),
            (GetObject, _at(theirs)),
            (Parallel, _listing_with(entry_key)),
            (Parallel, [_at(theirs)]),
        ]
    )
    with pytest.raises(CheckpointConflict):
        script.run(logs.append("job", [1], after=None, state={}))
    assert len(script.puts()) == 1


def test_an_append_that_never_lands_is_not_stored_without_a_false_success() -> None:
    logs = _logs()
    answers: list[tuple[type[Any], Any]] = []
    for _ in range(RETRY.max_attempts):
        answers += [(PutObject, WriteResult(WriteOutcome.AMBIGUOUS, detail="reset"))]
        answers += [(GetObject, None)] * 3  # the entry, then its segment, then its pack
    script = Script(answers)
    with pytest.raises(StorageUnavailable, match="outcome unknown") as raised:
        script.run(logs.append("job", [1], after=None, state={}))
    assert raised.value.write_id is not None
