"""How much a read of a long log costs, counted in requests (memory backend)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

import stashpoint
from stashpoint.logs import SEGMENT_SPAN
from tests.meter import Meter


def _counting(stash: stashpoint.Stash) -> Counter[str]:
    counts: Counter[str] = Counter()

    def count(request: Any, proceed: Any) -> Any:
        counts[type(request).__name__] += 1
        return proceed()

    stash.intercept(count)
    return counts


def _append(stash: stashpoint.Stash, log_id: str, versions: int) -> None:
    """Append `versions` versions to a new log, each record its version and its state."""
    head = None
    for v in range(versions):
        head = stash.logs.append(log_id, [v], after=head, state={"v": v})


def test_sealed_entries_awaiting_clean_up_do_not_page_the_listing() -> None:
    """A fast writer leaves 1,100 sealed entries within the clean-up delay: a read lists
    the segments and only the entries after the last one, not 2 pages of sealed ones."""
    url = f"memory://fast-{stashpoint.new_id()}"
    versions = 17 * SEGMENT_SPAN + 5
    with stashpoint.open(url) as writer:
        _append(writer, "fast", versions)
        # The writer's own reads list from just before its last known top: one round.
        counts = _counting(writer)
        assert writer.logs.head("fast").state == {"v": versions - 1}
        assert counts["ListKeys"] == 2 and counts["GetObject"] <= 16
    with stashpoint.open(url) as stash:  # a reader that knows nothing of the log
        counts = _counting(stash)
        assert stash.logs.head("fast").state == {"v": versions - 1}
        assert counts["ListKeys"] == 3  # entries and segments at once, then past the sealed
        assert counts["GetObject"] <= 16
        counts.clear()
        assert stash.logs.tail("fast", 20)[1] == list(range(versions))[-20:]
        assert counts["ListKeys"] == 2 and counts["GetObject"] <= 32  # now it knows the top
        assert stash.logs.records("fast") == list(range(versions))


def test_a_cold_read_of_a_long_log_lists_few_keys_of_sealed_versions() -> None:
    """Keys are never freed: a reader that knows nothing of a 5,000-version log lists a
    first page of `COLD_LISTING_PAGE` keys (not S3's 1,000: each costs CPU to parse), then
    only what is after the last sealed version, in the same two rounds as before."""
    from stashpoint.logs.bounds import COLD_LISTING_PAGE
    from stashpoint.stores.objects import LIST_PAGE

    url = f"memory://cold-{stashpoint.new_id()}"
    versions = 78 * SEGMENT_SPAN + 9
    with stashpoint.open(url) as writer:
        _append(writer, "long", versions)
    with stashpoint.open(url) as stash:
        listed: list[int] = []

        def count(request: Any, proceed: Any) -> Any:
            result = proceed()
            if type(request).__name__ == "ListKeys" and "sealed" not in request.prefix:
                listed.append(len(result.keys))
            return result

        stash.intercept(count)
        assert stash.logs.head("long").state == {"v": versions - 1}
    assert listed[0] == COLD_LISTING_PAGE < LIST_PAGE
    assert len(listed) == 2 and listed[1] <= SEGMENT_SPAN + 9, listed


def test_a_full_read_is_three_rounds_however_long() -> None:
    with stashpoint.open("memory://") as stash:
        head = None
        for v in range(5 * SEGMENT_SPAN + 3):
            head = stash.logs.append("long", [v], after=head)
        counts = _counting(stash)
        records = stash.logs.records("long")
    assert records == list(range(5 * SEGMENT_SPAN + 3))
    # Two listings, the newest objects, then the five segments: no object twice.
    assert counts["ListKeys"] == 2 and counts["GetObject"] <= 5 + 16


def test_list_page_skips_past_long_logs_and_pages_by_cursor() -> None:
    with stashpoint.open(f"memory://page-{stashpoint.new_id()}") as stash:
        sizes = {"a": 700, "b": 5, "c": 600, "d": 1, "e": 2}  # "a" alone fills a LIST page
        for log_id, versions in sizes.items():
            head = None
            for v in range(versions):
                head = stash.logs.append(log_id, [v], after=head)
        counts = _counting(stash)
        first, cursor = stash.logs.list_page(limit=2)
        assert (first, cursor) == (["a", "b"], "b")
        second, cursor = stash.logs.list_page(limit=2, cursor=cursor)
        assert (second, cursor) == (["c", "d"], "d")
        last, cursor = stash.logs.list_page(limit=2, cursor=cursor)
        assert (last, cursor) == (["e"], None)
        # Each page skipped the long logs' remaining entries instead of reading them.
        assert counts["ListKeys"] <= 6
        assert stash.logs.list_page(prefix="c", limit=5) == (["c"], None)


def test_list_ids_lists_each_long_log_once() -> None:
    """Every id, in order, skipping the rest of each log's entries past a page: 2,500
    versions of one log cost one LIST for it, not three pages."""
    with stashpoint.open(f"memory://ids-{stashpoint.new_id()}") as stash:
        sizes = {"a": 2500, "b": 3, "c": 1200, "d": 1}
        for log_id, versions in sizes.items():
            head = None
            for v in range(versions):
                head = stash.logs.append(log_id, [v], after=head)
        counts = _counting(stash)
        assert stash.logs.list_ids() == ["a", "b", "c", "d"]
        assert counts["ListKeys"] <= 3, counts  # a (with b), c (with d), the end
        assert stash.logs.list_ids("c") == ["c"]


@pytest.mark.parametrize("listing", ["list_ids", "list_page"])
def test_objects_planted_without_a_slash_never_bring_a_listing_back(listing: str) -> None:
    """A page that ends in keys naming no log (1,500 planted objects) is passed by its last
    key: the listing ends, with every log, instead of reading the same page forever."""
    from stashpoint.stores.objects import PutObject

    with stashpoint.open(f"memory://planted-{stashpoint.new_id()}") as stash:
        stash.logs.append("a", ["x"], after=None)
        base = stash.logs.steps.keys.ids_prefix()
        for n in range(1500):
            stash.driver(PutObject(f"{base}b-planted-{n:05d}", b"x", None))
        stash.logs.append("c", ["x"], after=None)
        counts = _counting(stash)
        if listing == "list_ids":
            assert stash.logs.list_ids() == ["a", "c"]
        else:
            assert stash.logs.list_page(limit=10) == (["a", "c"], None)
        assert counts["ListKeys"] <= 3


def test_an_append_costs_the_same_requests_with_thousands_of_entries_awaiting_clean_up() -> None:
    """Sealed entries stay an hour: at 40 segments' worth, the seal an append makes still
    lists the recent entries and the oldest page only (not every page, twice)."""
    url = f"memory://many-{stashpoint.new_id()}"
    with stashpoint.open(url) as writer:
        counts = _counting(writer)
        head = None
        per_window: list[int] = []
        for v in range(40 * SEGMENT_SPAN):
            if v % SEGMENT_SPAN == 0:
                per_window.append(sum(counts.values()))
            head = writer.logs.append("many", [v], after=head, state={"v": v})
        costs = [b - a for a, b in itertools.pairwise(per_window)]
        assert costs[-1] <= costs[2] + 1, costs  # flat: not growing with the entries kept
        assert counts["ListKeys"] <= 4 * 40, counts  # a few listings per sealing
        assert writer.logs.records("many") == list(range(40 * SEGMENT_SPAN))


@pytest.fixture(params=["memory_url", "local_url", "s3_seaweed_url"], ids=lambda n: n[:-4])
def target(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.getfixturevalue(request.param)


def test_a_seal_reads_none_of_the_entries_this_process_wrote(
    target: tuple[str, dict[str, Any]],
) -> None:
    """Entries are immutable: the writer seals its own from memory, so an append costs one
    PUT (and the segment's) with no GET; a sealer that did not write them reads them."""
    url, options = target
    log_id = f"seal-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as writer:
        meter = Meter(writer)
        head = None
        for v in range(2 * SEGMENT_SPAN + 1):
            head = writer.logs.append(log_id, [v], after=head, state={"v": v})
        assert meter.requests["GetObject"] == 0, meter.requests
        assert meter.requests["PutObject"] == 2 * SEGMENT_SPAN + 1 + 2  # entries, 2 segments
        assert writer.logs.records(log_id) == list(range(2 * SEGMENT_SPAN + 1))
    with stashpoint.open(url, **options) as other:
        head = other.logs.head(log_id)
        meter = Meter(other)
        for v in range(2 * SEGMENT_SPAN + 1, 3 * SEGMENT_SPAN + 1):
            head = other.logs.append(log_id, [v], after=head, state={"v": v})
        # Its seal of versions 128-191 read back version 128 alone: the writer's.
        assert meter.requests["GetObject"] == 1, meter.requests
        other.logs.append(log_id, ["x"], after=head)
        assert other.logs.seal(log_id) == 0  # sealed already
    with stashpoint.open(url, **options) as sealer:  # a third process seals what others wrote
        meter = Meter(sealer)
        head = sealer.logs.head(log_id)
        for v in range(SEGMENT_SPAN - 1):
            head = sealer.logs.append(log_id, [v], after=head)
        assert meter.requests["GetObject"] >= 1  # the entries of the others, read back
        assert sealer.logs.records(log_id)[: 3 * SEGMENT_SPAN + 1] == list(
            range(3 * SEGMENT_SPAN + 1)
        )


def test_the_seal_cache_keeps_small_entries_only_by_their_decoded_size(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """A very compressible entry is small on the wire but not in memory: it is read back
    when sealed rather than kept."""
    url, options = memory_url
    with stashpoint.open(url, **options) as writer:
        meter = Meter(writer)
        head = None
        for v in range(SEGMENT_SPAN + 1):
            big = "x" * 20_000 if v == 5 else "small"
            head = writer.logs.append("squeezed", [big], after=head)
        assert meter.requests["GetObject"] == 1  # version 5 alone, read back for the seal
        assert writer.logs.records("squeezed")[5] == "x" * 20_000


@pytest.fixture(params=["memory_url", "s3_seaweed_url"])
def listed_etags_url(request: pytest.FixtureRequest) -> str:
    """A stash whose listings give each object's ETag (memory, a real S3)."""
    url, _ = request.getfixturevalue(request.param)
    return str(url)


def test_a_second_read_of_a_head_gets_only_the_versions_written_since(
    listed_etags_url: str,
) -> None:
    """Entries a process read are kept by their ETag: reading the head again (a writer
    that lost a race does) costs one GET per version written since, not one per version
    since the last whole state. The top is always read from storage."""
    with stashpoint.open(listed_etags_url) as writer, stashpoint.open(listed_etags_url) as reader:
        head = None
        for v in range(10):  # versions 0-9 patch the whole state of version 0
            head = writer.logs.append("l", [v], after=head, state={"v": v})
        counts = _counting(reader)
        assert reader.logs.head("l").state == {"v": 9}
        assert counts["GetObject"] == 10
        for v in (10, 11):
            head = writer.logs.append("l", [v], after=head, state={"v": v})
        counts.clear()
        assert reader.logs.head("l").state == {"v": 11}
        assert counts["GetObject"] == 2, counts  # versions 10 and 11
        counts.clear()
        assert reader.logs.head("l").state == {"v": 11}
        assert counts["GetObject"] == 1, counts  # the top, from storage each time
        # The writer's own entries are kept as it stored them: only the top is read.
        counts = _counting(writer)
        assert writer.logs.head("l").state == {"v": 11}
        assert counts["GetObject"] == 1, counts


def test_a_stash_that_keeps_no_entries_reads_every_one_again(listed_etags_url: str) -> None:
    """`log_read_cache_bytes=0`: a process short of memory keeps no entry it read, and its
    reads take none from memory (not even its own appends)."""
    with (
        stashpoint.open(listed_etags_url, log_read_cache_bytes=0) as writer,
        stashpoint.open(listed_etags_url, log_read_cache_bytes=0) as reader,
    ):
        head = None
        for v in range(10):
            head = writer.logs.append("l", [v], after=head, state={"v": v})
        assert reader.logs.head("l").state == {"v": 9}
        counts = _counting(reader)
        assert reader.logs.head("l").state == {"v": 9}
        assert counts["GetObject"] == 10, counts
        counts = _counting(writer)
        assert writer.logs.head("l").state == {"v": 9}
        assert counts["GetObject"] == 10, counts


@pytest.mark.parametrize("bad", [-1, 1.5, "16MB", True])
def test_the_read_cache_size_is_an_int_of_bytes(bad: object) -> None:
    with pytest.raises(stashpoint.ConfigurationError, match="log_read_cache_bytes"):
        stashpoint.open("memory://cache-size", log_read_cache_bytes=bad)  # type: ignore[arg-type]


def test_an_entry_replaced_in_storage_is_read_again_not_taken_from_memory(
    listed_etags_url: str,
) -> None:
    """An object planted over a kept entry's key has another ETag: the reader reads and
    judges what storage holds (here, refuses it), never the copy it kept."""
    from stashpoint.stores.objects import DeleteObject, PutObject

    with stashpoint.open(listed_etags_url) as writer, stashpoint.open(listed_etags_url) as reader:
        head = None
        for v in range(6):
            head = writer.logs.append("l", [v], after=head, state={"v": v})
        assert reader.logs.head("l").state == {"v": 5}  # versions 0-5 kept
        key = reader.logs.steps.keys.entry("l", 3)
        reader.driver(DeleteObject(key))
        reader.driver(PutObject(key, b"not an entry", None, content_encoding=None))
        counts = _counting(reader)
        with pytest.raises(stashpoint.InvalidPayload):
            reader.logs.head("l")
        assert counts["GetObject"] == 2, counts  # the planted object and the top
