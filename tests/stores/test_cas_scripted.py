"""The compare-and-swap steps driven by scripted storage answers: no server, no network.

Each test is one row of the README's Guarantees table, played as the exact sequence of
answers a server (or botocore) gives. The steps are I/O-free, so a script stands in for
storage and every request the logic makes is checked, in order. The same rows are tested
end to end through a fault proxy against SeaweedFS in `tests/stores/test_s3.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from stashpoint import (
    CheckpointConflict,
    ConfigurationError,
    Envelope,
    InvalidPayload,
    StorageUnavailable,
)
from stashpoint.codec import Codec
from stashpoint.envelope import LINEAGE_DEPTH, WRITERS_DEPTH
from stashpoint.ids import writer_token
from stashpoint.retry import RetryPolicy
from stashpoint.stores.cas import CompareAndSwap, EtagCache
from stashpoint.stores.head_facts import head_metadata
from stashpoint.stores.layout import CHECKPOINTS, Layout
from stashpoint.stores.objects import (
    Create,
    GetObject,
    HeadObject,
    ListVersions,
    Match,
    ObjectInfo,
    PutObject,
    VersionRef,
)
from tests.scripted import (
    BUSY,
    REFUSED,
    REFUSED_AFTER_RETRY,
    STORED,
    TIMEOUT,
    Answer,
    Script,
)


def cas() -> CompareAndSwap:
    retry = RetryPolicy(max_attempts=4, base_delay=0, max_delay=0)
    return CompareAndSwap(CHECKPOINTS, Layout(), Codec(), retry, EtagCache())


def chain(length: int) -> list[Envelope]:
    """Revisions 0..length-1 of one checkpoint, each built on the one before."""
    envelopes = [Envelope.initial("job", None, "test.job", 1, {"n": 0})]
    for n in range(1, length):
        envelopes.append(envelopes[-1].next({"n": n}))
    return envelopes


def head(envelope: Envelope, etag: str | None = None) -> ObjectInfo:
    """What a HEAD of `envelope` as the current object returns."""
    return ObjectInfo(etag=etag or f"etag-{envelope.revision}", metadata=head_metadata(envelope))


def stored(envelope: Envelope) -> ObjectInfo:
    """What a GET of `envelope` as the current object returns."""
    return ObjectInfo(etag=f"etag-{envelope.revision}", body=Codec().encode(envelope))


def save(store: CompareAndSwap, envelope: Envelope, expected: int | None, script: Script) -> None:
    if expected is not None:
        store.cache.remember(store.key(envelope.id), expected, f"etag-{expected}")
    script.run(store.compare_and_swap(envelope, expected))


def test_save_is_one_conditional_put() -> None:
    envelopes, script = chain(2), Script([(PutObject, STORED)])
    save(cas(), envelopes[1], 0, script)
    assert len(script.requests) == 1
    assert script.puts()[0].condition == Match("etag-0")


def test_create_is_if_none_match() -> None:
    script = Script([(PutObject, STORED)])
    save(cas(), chain(1)[0], None, script)
    assert script.puts()[0].condition == Create()


def test_lost_race_is_a_conflict_and_stores_nothing() -> None:
    envelopes = chain(3)
    winner = envelopes[1]
    loser = envelopes[0].next({"n": "mine"})
    script = Script([(PutObject, REFUSED), (HeadObject, head(winner, "etag-winner"))])
    with pytest.raises(CheckpointConflict) as info:
        save(cas(), loser, 0, script)
    assert info.value.actual_revision == 1 and len(script.puts()) == 1


def test_412_after_a_client_retry_of_our_landed_write_is_success() -> None:
    envelopes = chain(2)
    script = Script([(PutObject, REFUSED_AFTER_RETRY), (HeadObject, head(envelopes[1]))])
    save(cas(), envelopes[1], 0, script)  # no error: botocore's repeat tripped on our write
    assert len(script.puts()) == 1


def test_timeout_then_head_still_at_expected_resends_the_same_bytes() -> None:
    envelopes = chain(2)
    script = Script(
        [
            (PutObject, TIMEOUT),
            (HeadObject, head(envelopes[0], "etag-0")),  # not landed (yet)
            (PutObject, STORED),
        ]
    )
    save(cas(), envelopes[1], 0, script)
    first, second = script.puts()
    assert first.body == second.body and first.condition == second.condition == Match("etag-0")
    assert first.metadata == second.metadata  # the same write id: at most one copy lands


def test_timeout_on_create_then_nothing_there_resends_create() -> None:
    envelope = chain(1)[0]
    script = Script([(PutObject, TIMEOUT), (HeadObject, None), (PutObject, STORED)])
    save(cas(), envelope, None, script)
    assert [p.condition for p in script.puts()] == [Create(), Create()]


def test_timeout_then_others_built_on_our_write_is_success() -> None:
    envelopes = chain(6)
    # Our revision 1 landed; four more saves by others followed within milliseconds.
    script = Script([(PutObject, TIMEOUT), (HeadObject, head(envelopes[5]))])
    save(cas(), envelopes[1], 0, script)
    assert len(script.puts()) == 1  # never resent: resending would duplicate the update


def test_timeout_then_head_moved_without_our_write_is_a_conflict() -> None:
    envelopes = chain(3)
    mine = envelopes[0].next({"n": "mine"})
    script = Script([(PutObject, TIMEOUT), (HeadObject, head(envelopes[2]))])
    with pytest.raises(CheckpointConflict):
        save(cas(), mine, 0, script)


def _versions(envelopes: list[Envelope]) -> list[VersionRef]:
    newest_first = list(reversed(envelopes))
    return [VersionRef(f"v{e.revision}", i == 0) for i, e in enumerate(newest_first)]


def _version_head(envelopes: list[Envelope]) -> Callable[[HeadObject], ObjectInfo]:
    by_version = {f"v{e.revision}": e for e in envelopes}
    return lambda request: head(by_version[request.version_id or ""])


def test_head_moved_past_the_lineage_window_asks_the_version_history() -> None:
    envelopes = chain(LINEAGE_DEPTH + 10)
    ours = envelopes[1]
    steps: list[tuple[type[Any], Answer]] = [
        (PutObject, TIMEOUT),
        (HeadObject, head(envelopes[-1])),
        (GetObject, stored(envelopes[-1])),  # its writers do not name ours: no one knows
        (ListVersions, _versions(envelopes)),
    ]
    # Binary search over the versions: every HEAD is answered from the stored chain.
    steps += [(HeadObject, _version_head(envelopes))] * 8
    script = Script(steps)
    store = cas()
    store.cache.remember(store.key(ours.id), 0, "etag-0")
    with pytest.raises(AssertionError, match="left over"):
        script.run(store.compare_and_swap(ours, 0))  # found before using all 8 HEADs
    version_heads = [r for r in script.requests if isinstance(r, HeadObject) and r.version_id]
    assert 1 <= len(version_heads) <= 7  # a search, not a walk through 42 versions


def test_head_moved_past_the_window_finds_a_foreign_write_is_a_conflict() -> None:
    envelopes = chain(LINEAGE_DEPTH + 10)
    mine = envelopes[0].next({"n": "mine"})  # revision 1, never landed: theirs did
    steps: list[tuple[type[Any], Answer]] = [
        (PutObject, TIMEOUT),
        (HeadObject, head(envelopes[-1])),
        (GetObject, stored(envelopes[-1])),
        (ListVersions, _versions(envelopes)),
    ]
    script = Script(steps + [(HeadObject, _version_head(envelopes))] * 8)
    store = cas()
    store.cache.remember(store.key(mine.id), 0, "etag-0")
    with pytest.raises(CheckpointConflict):
        Script.run(script, store.compare_and_swap(mine, 0))


def test_head_moved_past_the_window_without_versioning_is_unavailable_with_write_id() -> None:
    envelopes = chain(LINEAGE_DEPTH + 10)
    ours = envelopes[1]
    script = Script(
        [
            (PutObject, TIMEOUT),
            (HeadObject, head(envelopes[-1])),
            (GetObject, stored(envelopes[-1])),  # written by writers it no longer remembers
            (ListVersions, ConfigurationError("versioning is off")),
        ]
    )
    with pytest.raises(StorageUnavailable) as info:
        save(cas(), ours, 0, script)
    assert info.value.write_id == ours.write_id  # the caller can look for it later


def _after(
    first: Envelope, others: int, *, writers: int = 1, by: str | None = ""
) -> list[Envelope]:
    """`first` saved by `by` (default: this writer; None: as it is, unrecorded, as an
    older release saves), then `others` saves by `writers` other writers."""
    saved = [first if by is None else first.saved_by(by or writer_token())]
    for n in range(others):
        saved.append(saved[-1].next({"n": f"theirs {n}"}).saved_by(f"other-{n % writers}"))
    return saved


def test_head_moved_past_the_window_still_naming_our_save_for_us_is_success() -> None:
    ours = chain(1)[0].next({"n": "ours"})
    latest = _after(ours, LINEAGE_DEPTH + 10, writers=8)[-1]  # 8 writers, 41 saves since
    script = Script([(PutObject, TIMEOUT), (HeadObject, head(latest)), (GetObject, stored(latest))])
    save(cas(), ours, 0, script)  # landed: no version history needed, none asked
    assert len(script.puts()) == 1


def test_head_moved_past_the_window_naming_another_save_for_us_is_a_conflict() -> None:
    mine = chain(1)[0].next({"n": "mine"})
    earlier = chain(1)[0].next({"n": "an earlier save of this writer"})
    latest = _after(earlier, LINEAGE_DEPTH + 10, writers=8)[-1]
    script = Script([(PutObject, TIMEOUT), (HeadObject, head(latest)), (GetObject, stored(latest))])
    with pytest.raises(CheckpointConflict):
        save(cas(), mine, 0, script)  # never StorageUnavailable, even without versions


def _unclear_without_versions(latest: Envelope) -> Script:
    """A save whose answer is lost, the head at `latest`, on a bucket without versions."""
    return Script(
        [
            (PutObject, TIMEOUT),
            (HeadObject, head(latest)),
            (GetObject, stored(latest)),
            (ListVersions, ConfigurationError("versioning is off")),
        ]
    )


def test_a_writer_the_head_forgot_falls_back_to_the_version_history() -> None:
    ours = chain(1)[0].next({"n": "ours"})
    latest = _after(ours, WRITERS_DEPTH + 5, writers=WRITERS_DEPTH + 5)[-1]
    assert writer_token() not in dict(latest.writers)  # 37 other writers saved since
    script = _unclear_without_versions(latest)
    with pytest.raises(StorageUnavailable):
        save(cas(), ours, 0, script)


def test_a_first_save_the_head_never_recorded_is_a_conflict_without_versions() -> None:
    # The CI failure of stop 41: a writer whose very first save's answer was lost, the head
    # 41 saves on. Its ledger is complete since revision 0, so a writer it does not name
    # saved nothing since: not landed, a conflict, asked of no version history.
    created = chain(1)[0]
    latest = _after(created, LINEAGE_DEPTH + 10, writers=8, by="other-first")[-1]
    assert latest.writers_since == 0
    mine = created.next({"n": "mine"})
    script = Script([(PutObject, TIMEOUT), (HeadObject, head(latest)), (GetObject, stored(latest))])
    with pytest.raises(CheckpointConflict):
        save(cas(), mine, 0, script)


def test_a_save_that_did_not_record_itself_restarts_the_ledger() -> None:
    # An older release saves without recording itself (it carries `writers` unchanged):
    # from then on a missing writer proves nothing about the saves before.
    created = chain(1)[0]
    before = _after(created, 5, writers=2, by="other-first")[-1]
    unrecorded = before.next({"n": "an older release"})  # no saved_by
    latest = _after(unrecorded, LINEAGE_DEPTH + 5, writers=4, by=None)[-1]
    assert latest.writers_since == unrecorded.revision + 1
    assert not unrecorded.missing_writer_saved_nothing(0)
    mine = created.next({"n": "mine"})
    script = _unclear_without_versions(latest)
    with pytest.raises(StorageUnavailable):
        save(cas(), mine, 0, script)  # honest: the ledger cannot vouch for revision 1


def test_writers_since_is_stored_checked_and_never_past_the_revision() -> None:
    codec = Codec()
    saved = _after(chain(1)[0], 3, writers=2, by="other-first")[-1]
    loaded = codec.decode(codec.encode(saved))
    assert loaded.writers == saved.writers and loaded.writers_since == saved.writers_since == 0
    with pytest.raises(InvalidPayload, match="writers_since"):
        dataclasses.replace(saved, writers_since=saved.revision + 1)


def test_409_conditional_request_conflict_is_retried_with_backoff() -> None:
    envelopes = chain(2)
    script = Script([(PutObject, BUSY), (PutObject, BUSY), (PutObject, STORED)])
    save(cas(), envelopes[1], 0, script)
    assert len(script.puts()) == 3 and script.sleeps == 2


def test_409_on_every_attempt_is_a_certain_failure_not_an_unknown_outcome() -> None:
    envelopes = chain(2)
    busy = [(PutObject, BUSY)] * 4
    script = Script([*busy, (HeadObject, head(envelopes[0], "etag-0"))])
    with pytest.raises(StorageUnavailable, match="not stored") as info:
        save(cas(), envelopes[1], 0, script)  # refused every time: certainly not landed
    assert info.value.write_id is None and len(script.puts()) == 4


def test_read_back_failure_is_unavailable_carrying_the_write_id() -> None:
    envelopes = chain(2)
    script = Script([(PutObject, TIMEOUT), (HeadObject, StorageUnavailable("connection refused"))])
    with pytest.raises(StorageUnavailable) as info:
        save(cas(), envelopes[1], 0, script)
    assert info.value.write_id == envelopes[1].write_id
    assert "lineage" in str(info.value)


def test_resends_that_never_land_end_as_unavailable_not_success() -> None:
    envelopes = chain(2)
    answers: list[tuple[type[Any], Answer]] = []
    for _ in range(4):
        answers += [(PutObject, TIMEOUT), (HeadObject, head(envelopes[0], "etag-0"))]
    script = Script(answers)
    with pytest.raises(StorageUnavailable) as info:
        save(cas(), envelopes[1], 0, script)
    assert info.value.write_id == envelopes[1].write_id and len(script.puts()) == 4


def test_update_retries_a_lost_race_on_the_fresh_head_and_mutate_can_abort() -> None:
    envelopes = chain(3)
    store = cas()
    from stashpoint.stores.objects import GetObject

    codec = store.codec

    def body(envelope: Envelope) -> ObjectInfo:
        return ObjectInfo(etag=f"etag-{envelope.revision}", body=codec.encode(envelope))

    script = Script(
        [
            (GetObject, body(envelopes[0])),
            (PutObject, REFUSED),  # someone saved revision 1 first
            (HeadObject, head(envelopes[1])),
            (GetObject, body(envelopes[1])),
            (PutObject, STORED),
        ]
    )
    saved = script.run(store.update("job", lambda h: {"n": h.payload["n"] + 10}))
    assert saved.revision == 2 and saved.payload == {"n": 11}
    assert script.sleeps == 1

    def refuse(head: Envelope) -> Any:
        raise CheckpointConflict("job", expected_revision=head.revision, message="abort")

    abort = Script([(GetObject, body(envelopes[2]))])
    with pytest.raises(CheckpointConflict, match="abort"):
        abort.run(store.update("job", refuse))
    assert abort.puts() == []  # nothing written


def test_a_delete_from_a_seen_etag_is_one_conditional_request() -> None:
    from stashpoint.stores.objects import DeleteObject

    script = Script([(DeleteObject, STORED)])
    script.run(cas().delete("job", seen_etag='"seen"'))
    (sent,) = script.requests
    assert sent.etag == '"seen"'  # If-Match: a head saved or purged since fails it


def test_a_delete_from_a_seen_etag_that_finds_the_head_gone_is_done() -> None:
    from stashpoint.stores.objects import DeleteObject, WriteOutcome, WriteResult

    script = Script([(DeleteObject, WriteResult(WriteOutcome.NOT_FOUND))])
    script.run(cas().delete("job", seen_etag='"seen"'))
    assert len(script.requests) == 1


def test_without_conditional_deletes_a_seen_etag_still_reads_the_head_first() -> None:
    """Storage that ignores If-Match on a DELETE (R2) would delete a purge's tombstone
    planted since the ETag was seen: the head is read and judged first."""
    from stashpoint.stores.objects import DeleteObject

    retry = RetryPolicy(max_attempts=4, base_delay=0, max_delay=0)
    steps = CompareAndSwap(
        CHECKPOINTS, Layout(), Codec(), retry, EtagCache(), conditional_delete=False
    )
    script = Script([(HeadObject, None), (DeleteObject, STORED)])
    script.run(steps.delete("job", seen_etag='"seen"'))
    assert isinstance(script.requests[0], HeadObject)
