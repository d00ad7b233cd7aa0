"""The store's catalog logic driven by scripted storage answers: no server, no network.

The paths of `StoreSteps` that read and write a namespace's catalog, each request checked in
order (`tests/scripted.py`): listing pages sent at once from where a catalog says they
start, and a catalog write that is never let over a purge's tombstone it did not read.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("langgraph.store.base")

from stashpoint import Envelope
from stashpoint.codec import Codec
from stashpoint.langgraph.catalog import (
    CATALOG_KIND,
    CATALOG_SCHEMA_VERSION,
    Copy,
    catalog_id,
    catalog_payload,
)
from stashpoint.langgraph.items import KIND, SCHEMA_VERSION, StoredItem, item_id
from stashpoint.langgraph.store_steps import PAGE_STRIDE, StoreSteps
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Parallel
from stashpoint.stores.cas import CompareAndSwap, EtagCache
from stashpoint.stores.head_facts import head_metadata
from stashpoint.stores.layout import LANGGRAPH_STORE, LANGGRAPH_STORE_CATALOG, Layout
from stashpoint.stores.objects import (
    LIST_PAGE,
    Create,
    HeadObject,
    KeyPage,
    ListKeys,
    Match,
    ObjectInfo,
    PutObject,
)
from tests.scripted import REFUSED, STORED, Script

NS = ("memories", "u1")
CODEC = Codec()
LAYOUT = Layout()
AT = datetime(2026, 1, 1, tzinfo=UTC)


def _steps(*, seeks: bool = True) -> StoreSteps:
    retry = RetryPolicy(max_attempts=4, base_delay=0, max_delay=0)
    cache = EtagCache()
    return StoreSteps(
        CompareAndSwap(LANGGRAPH_STORE, LAYOUT, CODEC, retry, cache, seeks=seeks),
        catalogs=CompareAndSwap(LANGGRAPH_STORE_CATALOG, LAYOUT, CODEC, retry, cache, seeks=seeks),
    )


def _item(key: str) -> tuple[Envelope, StoredItem]:
    item = StoredItem(NS, key, {"key": key}, {}, None, None)
    return Envelope.initial(
        item_id(NS, key), None, KIND, SCHEMA_VERSION, item.payload(), at=AT
    ), item


def _key(object_id: str) -> str:
    return LAYOUT.key(LANGGRAPH_STORE, object_id)


def _catalog_info(keys: list[str]) -> ObjectInfo:
    copies = []
    for key in keys:
        envelope, item = _item(key)
        copies.append(Copy(f"e-{key}", envelope, item))
    payload = catalog_payload(NS, copies, 1 << 30)
    envelope = Envelope.initial(
        catalog_id(NS), None, CATALOG_KIND, CATALOG_SCHEMA_VERSION, payload, at=AT
    )
    return ObjectInfo(etag="cat-1", body=CODEC.encode(envelope), metadata=head_metadata(envelope))


def _page(keys: list[str], truncated: bool) -> KeyPage:
    return KeyPage(
        [_key(item_id(NS, k)) for k in keys],
        f"after-{keys[-1]}" if truncated else None,
        etags=[f"e-{k}" for k in keys],
    )


def test_a_catalogued_namespace_lists_its_pages_at_once() -> None:
    keys = [f"k{i:05d}" for i in range(2500)]
    script = Script(
        [
            (Parallel, [_page(keys[:LIST_PAGE], True), _catalog_info(keys)]),
            # After the first page's last key, and where the catalog's next pages start.
            (Parallel, [_page(keys[1000:2000], True), _page(keys[1800:2500], False)]),
        ]
    )
    found = script.run(_steps().candidates(NS))
    assert sorted(f.item.key for f in found) == keys  # every copy, no item read
    second = script.requests[1].requests
    # The first page goes on with its token; the next run starts where the catalog says.
    assert [(r.token, r.start_after) for r in second] == [
        (f"after-{keys[999]}", None),
        (None, _key(item_id(NS, keys[2 * PAGE_STRIDE - 1]))),
    ]


def test_storage_that_cannot_list_from_a_key_is_listed_page_after_page() -> None:
    """A directory bucket (no StartAfter, no order): the catalog's starts are not used."""
    keys = [f"k{i:05d}" for i in range(2500)]
    steps = _steps(seeks=False)
    script = Script(
        [
            (Parallel, [_page(keys[:LIST_PAGE], True), _catalog_info(keys)]),
            (ListKeys, _page(keys[1000:2000], True)),
            (ListKeys, _page(keys[2000:], False)),
        ]
    )
    found = script.run(steps.candidates(NS))
    assert sorted(f.item.key for f in found) == keys
    assert all(r.start_after is None for r in script.requests[1:])
    assert [r.token for r in script.requests[1:]] == [f"after-{keys[999]}", f"after-{keys[1999]}"]


def test_a_page_lengthened_by_new_items_is_listed_on_to_the_next_start() -> None:
    keys = [f"k{i:05d}" for i in range(2000)]
    new = [f"k00999x{n:03d}" for n in range(250)]  # after k00999: its page grows past stride
    listed = sorted(keys + new)
    second = listed[1000:2000]  # 1,000 keys after k00999: short of the next start, k01799
    rest = listed[listed.index(second[-1]) + 1 :]
    script = Script(
        [
            (Parallel, [_page(listed[:LIST_PAGE], True), _catalog_info(keys)]),
            (Parallel, [_page(second, True), _page(listed[listed.index("k01799") + 1 :], False)]),
            (ListKeys, _page(rest, False)),
            *[(Parallel, [_body(k) for k in new[s : s + 64]]) for s in range(0, 250, 64)],
            (PutObject, STORED),  # 250 items read one by one: the catalog is rewritten
        ]
    )
    found = script.run(_steps().candidates(NS))
    assert sorted(f.item.key for f in found) == listed
    [put] = script.puts()
    assert put.condition == Match("cat-1")  # over the catalog read, and that one alone
    assert script.requests[2].token == f"after-{second[-1]}"  # the lengthened run goes on
    assert second[-1] < "k01799"


def _body(key: str) -> ObjectInfo:
    envelope, _ = _item(key)
    return ObjectInfo(
        etag=f"e-{key}", body=CODEC.encode(envelope), metadata=head_metadata(envelope)
    )


def _tombstone(etag: str) -> ObjectInfo:
    tombstone = Envelope(
        id=catalog_id(NS), kind="stashpoint.purged", schema_version=1, revision=3,
        write_id=Envelope.initial("x", None, "k", 1, {}).write_id, created_at=AT, updated_at=AT,
        payload={"purge_id": "purge-1", "reusable": True},
    )  # fmt: skip
    return ObjectInfo(etag=etag, body=CODEC.encode(tombstone), metadata=head_metadata(tombstone))


@pytest.mark.parametrize("seen", ["nothing", "a tombstone"])
def test_a_catalog_write_never_lands_over_a_tombstone_it_did_not_read(seen: str) -> None:
    """A purge ended the catalog after the search read it: its write is refused, once."""
    keys = ["a", "b"]
    first = None if seen == "nothing" else _tombstone("t-1")
    catalog_key = LAYOUT.key(LANGGRAPH_STORE_CATALOG, catalog_id(NS))
    script = Script(
        [
            (Parallel, [_page(keys, False), first]),
            (Parallel, [_body(k) for k in keys]),
            (PutObject, REFUSED),
            (HeadObject, _tombstone("t-2")),  # another purge's, since
            (ListKeys, KeyPage([catalog_key], None)),
        ]
    )
    assert script.run(_steps().reindex(NS)) == 0
    [put] = script.puts()
    assert put.condition == (Create() if first is None else Match("t-1"))
