"""Archive packing (issue 26 #4): sixteen segments become one pack, every read still works.

The durability side (a crash at every request of packing, `kill -9`, writers and packers
racing on SeaweedFS, the fault proxy) is `test_log_packing_durability.py`.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import stashpoint
from stashpoint import CheckpointConflict, InvalidPayload, Limits
from stashpoint.cli.export import log_lines
from stashpoint.codec import Codec
from stashpoint.logs.format import PACK_SPAN, SEGMENT_SPAN, LogKeys, segment_document
from stashpoint.logs.log import LogListing, LogSteps
from stashpoint.logs.repair import first_gap
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Parallel
from stashpoint.stores.layout import Layout
from stashpoint.stores.objects import (
    Create,
    GetObject,
    Match,
    ObjectInfo,
    PutObject,
    WriteOutcome,
    WriteResult,
)
from tests.purging import replay, versions
from tests.scripted import STORED, Script


def _build(stash: Any, log_id: str = "c", *, versions_: int) -> list[Any]:
    heads = []
    head = None
    for n in range(versions_):
        head = stash.logs.append(log_id, [n, "x" * 40], after=head, state={"n": n})
        heads.append(head)
    return heads


def _sealed_keys(stash: Any, log_id: str = "c") -> list[str]:
    return sorted(
        v.key.rsplit("/", 1)[1]
        for v in versions(stash, f"sealed/logs/{log_id}/")
        if v.is_latest and not v.is_delete_marker
    )


def _name(first: int, span: int) -> str:
    return f"{first:020d}-{first + span - 1:020d}"


@pytest.mark.parametrize(
    "backend", ["memory_url", "local_url", "local_encrypted_url", "s3_seaweed_url"]
)
def test_packing_keeps_every_record_and_every_way_to_read_it(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url, options = request.getfixturevalue(backend)
    # Two packs in memory; one elsewhere (a thousand PUTs a pack). On a server the log
    # is written in memory and its objects copied in parallel (the same keys and bytes),
    # its sealed entries vacated already (vacating on SeaweedFS: the durability tests).
    packs = 2 if backend == "memory_url" else 1
    top = packs * PACK_SPAN + SEGMENT_SPAN + 9
    server = backend == "s3_seaweed_url"
    with stashpoint.open(url, **options) as stash:
        if server:
            memory = f"memory://{uuid.uuid4().hex}"
            with stashpoint.open(memory, vacate_sealed_entries=True) as built:
                heads = _build(built, versions_=top + 1)
                replay(built, stash)
        else:
            heads = _build(stash, versions_=top + 1)
        records = stash.logs.records("c")
        report = stash.logs.pack("c")
        assert report.packed == packs
        assert report.segments_deleted == packs * PACK_SPAN // SEGMENT_SPAN
        # Every sealed entry is vacated (the last range sealed, after the packs, too).
        assert report.vacated == (0 if server else packs * PACK_SPAN + SEGMENT_SPAN)
        assert _sealed_keys(stash) == [
            *(_name(n * PACK_SPAN, PACK_SPAN) for n in range(packs)),
            _name(packs * PACK_SPAN, SEGMENT_SPAN),
        ]
    with stashpoint.open(url, **options) as stash:  # a new process: nothing remembered
        assert stash.logs.records("c") == records
        assert [e.records[0] for e in stash.logs.entries("c", 1000, 1002)] == [1000, 1001, 1002]
        assert stash.logs.entries("c", 5, 5)[0].state == {"n": 5}
        assert stash.logs.tail("c", 3)[1] == records[-3:]
        assert stash.logs.tail("c", 200)[1] == records[-200:]
        assert stash.logs.head("c").version == top
        if not server:  # an export reads the pack once a window: a server adds only time
            lines = list(log_lines(stash.logs, "logs", "c", top))
            assert [line["version"] for line in lines] == list(range(top + 1))
        # Keys are never freed: a writer holding any old head loses its append.
        for stale in (heads[5], heads[1000], heads[top - 5]):
            with pytest.raises(CheckpointConflict):
                stash.logs.append("c", ["stale"], after=stale)
        # The log goes on, and packing again finds nothing to do.
        head = stash.logs.append("c", ["more"], after=stash.logs.head("c"))
        assert stash.logs.records("c")[-1] == "more" and head.version == top + 1
        again = stash.logs.pack("c")
        assert (again.packed, again.vacated, again.segments_deleted) == (0, 0, 0)


def test_a_late_sealer_that_recreates_a_packed_segment_changes_nothing(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        _build(stash, versions_=PACK_SPAN + SEGMENT_SPAN + 1)
        segment_key = LogKeys(stash.layout, "logs").segment("c", SEGMENT_SPAN)
        body = stash.driver(GetObject(segment_key)).body
        assert stash.logs.pack("c").segments_deleted == PACK_SPAN // SEGMENT_SPAN
        # A sealer that read the entries before they were vacated writes its segment late.
        stash.driver(PutObject(segment_key, body, Create()))
        assert _name(SEGMENT_SPAN, SEGMENT_SPAN) in _sealed_keys(stash)
        assert stash.logs.records("c")[:3] == [0, "x" * 40, 1]
        assert stash.logs.pack("c").segments_deleted == 1  # the next pack deletes it
        assert _name(SEGMENT_SPAN, SEGMENT_SPAN) not in _sealed_keys(stash)


@pytest.mark.parametrize("planted", ["garbage", "another log's pack"])
def test_an_object_planted_at_a_pack_key_is_judged_and_replaced(
    planted: str, memory_url: tuple[str, dict[str, Any]]
) -> None:
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        _build(stash, versions_=PACK_SPAN + SEGMENT_SPAN + 1)
        _build(stash, "other", versions_=PACK_SPAN + SEGMENT_SPAN + 1)
        records = stash.logs.records("c")
        keys = LogKeys(stash.layout, "logs")
        if planted == "garbage":
            body = b"\x28\xb5\x2f\xfd not really zstd"
        else:
            stash.logs.pack("other")
            body = stash.driver(GetObject(keys.pack("other", 0))).body
        stash.driver(PutObject(keys.pack("c", 0), body, Create()))
        # Readers read packs first: a planted one is a typed error naming it, never
        # another transcript.
        with pytest.raises(InvalidPayload) as caught:
            stash.logs.records("c")
        assert caught.value.object_name == keys.pack("c", 0)
        report = stash.logs.pack("c")
        assert report.packed == 1 and report.segments_deleted == PACK_SPAN // SEGMENT_SPAN
        assert stash.logs.records("c") == records


def test_a_pack_beyond_the_readers_limits_is_not_written() -> None:
    # Segments of ~20 KB decoded fit the limit; their pack (16 times as big) would not.
    limits = Limits(max_decompressed_bytes=64 * 1024)
    url = f"memory://pack-{uuid.uuid4().hex}"
    with stashpoint.open(url, limits=limits) as stash:
        head = None
        for n in range(PACK_SPAN + SEGMENT_SPAN + 1):
            head = stash.logs.append("big", [n, "y" * 150], after=head)
        records = stash.logs.records("big")
        report = stash.logs.pack("big")
        assert report.too_large == (0,) and report.packed == 0
        assert report.vacated == PACK_SPAN + SEGMENT_SPAN  # still vacated against segments
        assert stash.logs.records("big") == records


def test_deleting_or_purging_a_packed_log_removes_its_packs(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        _build(stash, "gone", versions_=PACK_SPAN + SEGMENT_SPAN + 1)
        _build(stash, "erased", versions_=PACK_SPAN + SEGMENT_SPAN + 1)
        stash.logs.pack("gone")
        stash.logs.pack("erased")
        stash.logs.delete("gone")
        assert _sealed_keys(stash, "gone") == []
        receipt = stash.admin.purge(log="erased")
        assert receipt.verified
        assert versions(stash, "sealed/logs/erased/") == []


def test_gc_packs_every_log_and_reports_it(memory_url: tuple[str, dict[str, Any]]) -> None:
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        _build(stash, "a", versions_=PACK_SPAN + SEGMENT_SPAN + 1)
        _build(stash, "b", versions_=SEGMENT_SPAN + 1)  # too short to pack
        dry = stash.admin.collect_garbage(dry_run=True, pack=True)
        assert dry.packs == 0 and _name(0, PACK_SPAN) not in _sealed_keys(stash, "a")
        report = stash.admin.collect_garbage(dry_run=False, pack=True)
        assert (report.packs, report.segments_deleted) == (1, PACK_SPAN // SEGMENT_SPAN)
        assert report.entries_vacated == PACK_SPAN + SEGMENT_SPAN + SEGMENT_SPAN
        assert _sealed_keys(stash, "b") == [_name(0, SEGMENT_SPAN)]


def test_a_listing_with_packs_has_no_gap() -> None:
    listing = LogListing("c")
    listing.packs[0] = "p0"
    listing.segments.update({PACK_SPAN: "s1", PACK_SPAN + SEGMENT_SPAN: "s2"})
    listing.entries.update({v: f"e{v}" for v in range(PACK_SPAN + 128, PACK_SPAN + 130)})
    assert first_gap(listing) is None
    assert listing.top == PACK_SPAN + 129
    assert [s.key for s in listing.sources(1000, PACK_SPAN + 129)] == [
        "p0", "s1", "s2", f"e{PACK_SPAN + 128}", f"e{PACK_SPAN + 129}",
    ]  # fmt: skip
    del listing.segments[PACK_SPAN]
    assert first_gap(listing) == PACK_SPAN


# --- the pack write, scripted (sans-I/O) ----------------------------------------------------


def _scripted_range() -> tuple[LogSteps, LogListing, list[bytes], list[str]]:
    """Steps and a listing of a log whose range 0 is sixteen segments (bodies made here)."""
    codec = Codec(Limits())
    steps = LogSteps(LogKeys(Layout("p"), "logs"), codec, RetryPolicy())
    with stashpoint.open(f"memory://pack-{uuid.uuid4().hex}") as stash:
        _build(stash, versions_=PACK_SPAN + 1)
        entries = stash.logs.entries("c", 0, PACK_SPAN - 1)
    bodies = []
    listing = LogListing("c")
    for first in range(0, PACK_SPAN, SEGMENT_SPAN):
        document = segment_document("c", entries[first : first + SEGMENT_SPAN])
        bodies.append(Script([]).run(codec.document_encoding(document, name="s")))
        listing.segments[first] = steps.keys.segment("c", first)
    return steps, listing, bodies, [e.write_id for e in entries]


def _segments_answer(bodies: list[bytes]) -> Any:
    return lambda request: [ObjectInfo(etag=f"s{i}", body=b) for i, b in enumerate(bodies)]


def test_scripted_pack_write_that_times_out_and_landed_is_one_pack() -> None:
    steps, listing, bodies, write_ids = _scripted_range()
    sent: list[bytes] = []

    def landed(request: GetObject) -> ObjectInfo:
        return ObjectInfo(etag="ours", body=sent[0])

    def timeout(request: PutObject) -> WriteResult:
        sent.append(request.body)
        return WriteResult(WriteOutcome.AMBIGUOUS, detail="ReadTimeoutError")

    script = Script(
        [(Parallel, _segments_answer(bodies)), (PutObject, timeout), (GetObject, landed)]
    )
    assert script.run(steps.pack_range("c", listing, 0)) == write_ids
    assert [type(p.condition) for p in script.puts()] == [Create]
    assert listing.packs == {0: steps.keys.pack("c", 0)}


def test_scripted_pack_write_replaces_a_planted_object_over_its_etag() -> None:
    steps, listing, bodies, write_ids = _scripted_range()
    planted = ObjectInfo(etag="planted", body=bodies[0])  # a segment where a pack belongs
    script = Script(
        [
            (Parallel, _segments_answer(bodies)),
            (PutObject, WriteResult(WriteOutcome.PRECONDITION_FAILED)),
            (GetObject, planted),
            (PutObject, STORED),
        ]
    )
    assert script.run(steps.pack_range("c", listing, 0)) == write_ids
    conditions = [p.condition for p in script.puts()]
    assert isinstance(conditions[0], Create) and conditions[1] == Match("planted")


def test_scripted_pack_of_a_range_with_a_missing_segment_writes_nothing() -> None:
    steps, listing, _, _ = _scripted_range()
    del listing.segments[3 * SEGMENT_SPAN]
    assert Script([]).run(steps.pack_range("c", listing, 0)) is None
