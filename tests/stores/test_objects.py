"""The one batch-delete helper (`stores/objects.py` `delete_keys`), scripted: what it
sends for one key, for many, for more than a batch holds, and what a refusal does; and the
one key-listing loop (`every_key_page`): page after page, or runs from given starts at once."""

from __future__ import annotations

import pytest

from stashpoint.errors import InvalidArgument, StorageUnavailable
from stashpoint.steps import Parallel
from stashpoint.stores.objects import (
    MAX_DELETE_BATCH,
    DeleteFailure,
    DeleteKeys,
    DeleteObject,
    KeyPage,
    ListKeys,
    WriteOutcome,
    WriteResult,
    delete_keys,
    delimited,
    every_key_page,
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


def _page(first: int, last: int, token: str | None) -> KeyPage:
    return KeyPage([f"p/{n:04d}" for n in range(first, last)], token)


def test_a_listing_goes_page_after_page_with_its_tokens() -> None:
    script = Script([(ListKeys, _page(0, 3, "t1")), (ListKeys, _page(3, 5, None))])
    pages = script.run(every_key_page("p/", page_size=3))
    assert [k for page in pages for k in page.keys] == [f"p/{n:04d}" for n in range(5)]
    assert [(r.token, r.start_after, r.page_size) for r in script.requests] == [
        (None, None, 3), ("t1", None, 3),
    ]  # fmt: skip


def test_runs_from_starts_are_listed_at_once_each_up_to_the_next_start() -> None:
    """Pages from each start in one round; a run lengthened by new keys is listed on up
    to the next start (an overlap, never a gap); one that reached it stops."""
    script = Script(
        [
            # The first run, lengthened by new keys, ends short of p/0003; the second
            # reaches the third's start (p/0007): it stops.
            (Parallel, [_page(0, 2, "a1"), _page(4, 8, "b1"), _page(8, 10, None)]),
            (ListKeys, _page(2, 5, "a2")),  # past p/0003: an overlap, never a gap
        ]
    )
    pages = script.run(every_key_page("p/", page_size=3, starts=["p/0003", "p/0007", "x/0001"]))
    listed = sorted({k for page in pages for k in page.keys})
    assert listed == [f"p/{n:04d}" for n in range(10)]
    sent = script.requests[0].requests
    assert [r.start_after for r in sent] == [None, "p/0003", "p/0007"]  # not outside prefix
    assert script.requests[1].token == "a1"


def test_a_first_page_listed_already_is_not_listed_again() -> None:
    first = _page(0, 3, "a1")
    script = Script([(Parallel, [_page(3, 6, "a2"), _page(6, 9, None)])])
    pages = script.run(every_key_page("p/", first=first, starts=["p/0001", "p/0005"]))
    assert pages[0] is first
    # The start before the first page's end is passed over; the first page goes on.
    assert [(r.token, r.start_after) for r in script.requests[0].requests] == [
        ("a1", None), (None, "p/0005"),
    ]  # fmt: skip
    done = Script([])
    assert done.run(every_key_page("p/", first=_page(0, 2, None), starts=["p/0001"])) == [
        _page(0, 2, None)
    ]


def test_keys_are_rolled_up_by_a_delimiter_as_s3_does() -> None:
    keys = ["p/a..x", "p/a..y", "p/a.b..z", "p/a.b.c", "p/b..k", "p/c"]
    assert delimited(keys, "p/", "..", 10) == (
        ["p/a.b.c", "p/c"],
        ["p/a..", "p/a.b..", "p/b.."],
        None,
    )
    # Only after the prefix: "p/a." keeps "p/a..x" (".x" holds no "..").
    assert delimited(keys[:4], "p/a.", "..", 10) == (
        ["p/a..x", "p/a..y", "p/a.b.c"],
        ["p/a.b.."],
        None,
    )


def test_a_rolled_up_page_counts_each_prefix_once_and_resumes_past_it() -> None:
    keys = ["p/a..1", "p/a..2", "p/a..3", "p/b..1", "p/c"]
    first = delimited(keys, "p/", "..", 1)
    assert first[:2] == ([], ["p/a.."]) and first[2] is not None
    after = first[2]
    assert all(k <= after for k in keys[:3]) and after < "p/b..1"  # past every key it holds
    second = delimited([k for k in keys if k > after], "p/", "..", 2)
    assert second == (["p/c"], ["p/b.."], None)


def test_a_listing_rolls_up_with_its_delimiter_and_refuses_a_repeated_token() -> None:
    script = Script(
        [
            (ListKeys, KeyPage([], "t1", prefixes=["p/a.."])),
            (ListKeys, KeyPage(["p/c"], None, prefixes=["p/b.."])),
        ]
    )
    pages = script.run(every_key_page("p/", delimiter=".."))
    assert [p for page in pages for p in page.prefixes] == ["p/a..", "p/b.."]
    assert [r.delimiter for r in script.requests] == ["..", ".."]
    looping = Script([(ListKeys, KeyPage([], "same")), (ListKeys, KeyPage([], "same"))])
    with pytest.raises(StorageUnavailable, match="repeated"):
        looping.run(every_key_page("p/", delimiter=".."))  # MinIO's bug: never forever
    with pytest.raises(InvalidArgument):
        Script([]).run(every_key_page("p/", delimiter="..", starts=["p/x"]))
