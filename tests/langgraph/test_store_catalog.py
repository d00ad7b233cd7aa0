"""The store's catalogs: a cold search in one or two rounds, never trusted over the items.

Issue 52, item 4. A namespace's catalog (`langgraph.catalog`) copies its items with the
ETag each had; a search lists the items and GETs the catalog in one round and reads only
what the listing shows changed. Rounds are counted on an `AsyncStash` (`tests.meter.Rounds`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.store.base import PutOp

import stashpoint
from stashpoint.langgraph import AsyncStashpointStore, StashpointStore
from stashpoint.langgraph.catalog import CATALOG_MISSES, catalog_id
from stashpoint.steps import run_sync
from stashpoint.stores.layout import LANGGRAPH_STORE_CATALOG
from stashpoint.stores.objects import GetObject, PutObject
from tests.crashes import Crash, crash_at
from tests.langgraph.conftest import StoreKit
from tests.meter import Meter, Rounds
from tests.purging import holding

NS = ("memories", "user-1")


def _fill(url: str, count: int, namespace: tuple[str, ...] = NS) -> None:
    async def fill() -> None:
        async with stashpoint.open_async(url) as stash:
            store = AsyncStashpointStore(stash)
            ops = [
                PutOp(namespace, f"k{i:06d}", {"n": i, "text": f"memory {i}"}) for i in range(count)
            ]
            for start in range(0, count, 2000):
                await store.abatch(ops[start : start + 2000])

    asyncio.run(fill())


def _cold_search(url: str, **query: Any) -> tuple[int, Counter[str], list[Any]]:
    """Search from a new process; return its rounds, requests and items."""

    async def search() -> tuple[int, Counter[str], list[Any]]:
        async with stashpoint.open_async(url) as stash:
            meter = Rounds(stash)
            found = await AsyncStashpointStore(stash).asearch(NS, **query)
            return meter.rounds, Counter(meter.sent), found

    return asyncio.run(search())


def _catalog(stash: stashpoint.Stash, namespace: tuple[str, ...] = NS) -> Any:
    cas = stash.head_steps(LANGGRAPH_STORE_CATALOG)
    return run_sync(cas.load(catalog_id(namespace)), stash.driver)


@pytest.mark.parametrize("count", [100, 1000])
def test_a_cold_search_is_one_round_once_its_namespace_is_catalogued(count: int) -> None:
    url = f"memory://catalog-one-round-{count}"
    _fill(url, count)
    rounds, sent, found = _cold_search(url, filter={"n": {"$gte": count - 5}}, limit=100)
    assert sorted(i.key for i in found) == [f"k{i:06d}" for i in range(count - 5, count)]
    assert sent["GetObject"] == count + 1 and sent["PutObject"] == 1  # read all; catalogued
    rounds, sent, again = _cold_search(url, filter={"n": {"$gte": count - 5}}, limit=100)
    assert (rounds, sent) == (1, Counter({"ListKeys": 1, "GetObject": 1}))
    assert [(i.key, i.value, i.updated_at) for i in again] == [
        (i.key, i.value, i.updated_at) for i in found
    ]


def test_a_cold_search_of_3500_items_lists_its_pages_at_once() -> None:
    url = "memory://catalog-pages"
    _fill(url, 3500)
    _cold_search(url, limit=1)  # writes the catalog
    rounds, sent, found = _cold_search(url, filter={"n": {"$lt": 3}}, limit=10)
    assert sorted(i.key for i in found) == ["k000000", "k000001", "k000002"]
    # Round 1: the first page and the catalog; round 2: the three other pages at once.
    assert (rounds, sent) == (2, Counter({"ListKeys": 4, "GetObject": 1}))
    # Items written since lengthen pages and are read: still a round for the reads.
    with stashpoint.open(url) as stash:
        store = StashpointStore(stash)
        for i in range(0, 3500, 700):  # one new item after each of five keys
            store.put(NS, f"k{i:06d}a", {"n": -1, "text": "new"})
        store.put(NS, "k000001", {"n": 1, "text": "changed"})
    rounds, sent, found = _cold_search(url, filter={"n": {"$lt": 3}}, limit=10)
    assert sorted((i.key, i.value["text"]) for i in found) == [
        ("k000000", "memory 0"), ("k000000a", "new"), ("k000001", "changed"),
        ("k000002", "memory 2"), ("k000700a", "new"), ("k001400a", "new"),
        ("k002100a", "new"), ("k002800a", "new"),
    ]  # fmt: skip
    assert rounds <= 3 and sent["GetObject"] == 1 + 6


def test_a_directory_bucket_lists_a_catalogued_namespace_past_a_page_by_tokens(
    s3_directory_url: tuple[str, dict[str, Any]], seaweedfs: Any, directory_bucket: str
) -> None:
    """No StartAfter, no order (S3 Express): pages one after another, the catalog still used
    (a StartAfter sent there is refused with a 400)."""
    url, _ = s3_directory_url
    # The items are put straight to SeaweedFS (the proxy's own work is the listing).
    _fill(url.replace(directory_bucket, seaweedfs.endpoint).split("&provider=")[0], 1100)
    _cold_search(url, limit=1)  # writes the catalog
    rounds, sent, found = _cold_search(url, filter={"n": {"$gte": 1095}}, limit=10)
    assert sorted(i.key for i in found) == [f"k{i:06d}" for i in range(1095, 1100)]
    assert (rounds, sent) == (2, Counter({"ListKeys": 2, "GetObject": 1}))


def test_a_copy_is_never_trusted_over_its_item() -> None:
    """Rewritten, deleted and purged items read as themselves, whatever the catalog says."""
    url = "memory://catalog-not-trusted"
    _fill(url, 20)
    _cold_search(url)
    with stashpoint.open(url) as stash:
        store = StashpointStore(stash)
        store.put(NS, "k000001", {"n": 1, "text": "rewritten"})
        store.delete(NS, "k000002")
        stash.admin.purge(prefix="memories.user-1..k000003", namespace="store")
    _, _, found = _cold_search(url, limit=100)
    by_key = {i.key: i.value["text"] for i in found}
    assert by_key["k000001"] == "rewritten"
    assert "k000002" not in by_key and "k000003" not in by_key
    assert len(by_key) == 18


def test_a_purge_of_one_item_erases_it_from_the_catalog_with_the_receipt() -> None:
    url = "memory://catalog-purge"
    with stashpoint.open(url) as stash:
        store = StashpointStore(stash)
        for i in range(12):
            store.put(NS, f"k{i}", {"text": f"s3cr3t-{i}"})
        StashpointStore(stash).search(NS)  # a cold store catalogues the namespace
        assert len(_catalog(stash).payload["items"]) == 12
        assert holding(stash, "s3cr3t-5", "langgraph-store-catalog/")
        receipt = stash.admin.purge(prefix="memories.user-1..k5", namespace="store")
        assert receipt.verified
        assert {str(t) for t in receipt.targets} == {
            "langgraph-store/memories.user-1..k5",
            "langgraph-store-catalog/memories.user-1.",
        }
        assert holding(stash, "s3cr3t-5") == []  # no version of the item or any copy
        assert len(holding(stash, "s3cr3t-4", "langgraph-store-catalog/")) == 0  # all erased
        # The next search reads the items and catalogues them again (a new life).
        found = StashpointStore(stash).search(NS, limit=100)
        assert sorted(i.key for i in found) == sorted(f"k{i}" for i in range(12) if i != 5)
        assert len(_catalog(stash).payload["items"]) == 11


@pytest.mark.parametrize("catalogued_before", [False, True])
def test_a_copy_read_before_a_purge_is_never_saved_after_it(catalogued_before: bool) -> None:
    """A search reads the items, a purge erases one, then the search writes its catalog.

    Its write is conditional on the catalog it read (or its absence); the purge ended the
    catalog after the item (a tombstone even where none was stored): the write is refused
    and the erased value is in no stored version.
    """
    url = f"memory://catalog-race-{catalogued_before}"
    with stashpoint.open(url) as stash:
        store = StashpointStore(stash)
        for i in range(12):
            store.put(NS, f"k{i}", {"text": f"s3cr3t-{i}"})
        if catalogued_before:
            StashpointStore(stash).search(NS)
            store.put(NS, "k5", {"text": "s3cr3t-new"})
            for i in range(CATALOG_MISSES):
                store.put(NS, f"k{i + 20}", {"text": "more"})
    purged: list[Any] = []
    with stashpoint.open(url) as searching, stashpoint.open(url) as other:
        key = searching.layout.key(LANGGRAPH_STORE_CATALOG, catalog_id(NS))

        def hook(request: Any, proceed: Callable[[], Any]) -> Any:
            if isinstance(request, PutObject) and request.key == key and not purged:
                purged.append(other.admin.purge(prefix="memories.user-1..k5", namespace="store"))
            return proceed()

        with searching.intercept(hook):
            found = StashpointStore(searching).search(NS, limit=100)
        assert purged and "k5" in {i.key for i in found}  # read before the purge
        assert holding(other, ("s3cr3t-5", "s3cr3t-new")) == []
        assert StashpointStore(other).get(NS, "k5") is None


def test_a_damaged_or_planted_catalog_is_passed_over_and_rebuilt() -> None:
    url = "memory://catalog-damaged"
    _fill(url, 20)
    with stashpoint.open(url) as stash:
        key = stash.layout.key(LANGGRAPH_STORE_CATALOG, catalog_id(NS))
        too_large = b"x" * (stash.codec.limits.max_compressed_bytes + 1)
        for planted in (b"not zstd", _catalog_of_other_namespace(stash), too_large):
            stash.driver(PutObject(key, planted, None))
            _rounds, sent, found = _cold_search(url, limit=100)
            assert sorted(i.key for i in found) == [f"k{i:06d}" for i in range(20)]
            assert sent["PutObject"] == 1  # rebuilt from the items
            assert len(_catalog(stash).payload["items"]) == 20
        # A copy whose ETag is not the item's is passed over (its item is read).
        catalog = _catalog(stash)
        assert catalog.payload["items"][0]["etag"]


def _catalog_of_other_namespace(stash: stashpoint.Stash) -> bytes:
    """The stored bytes of another namespace's catalog (copied under this one's key)."""
    other = ("memories", "user-2")
    store = StashpointStore(stash)
    for i in range(CATALOG_MISSES):
        store.put(other, f"k{i:06d}", {"n": i, "text": "theirs"})
    StashpointStore(stash).search(other)
    info = stash.driver(GetObject(stash.layout.key(LANGGRAPH_STORE_CATALOG, catalog_id(other))))
    return bytes(info.body)


def test_a_crash_at_every_request_of_a_cataloguing_search_leaves_every_item_readable() -> None:
    url = "memory://catalog-crash"
    _fill(url, 12)
    step = 0
    while True:
        done = True
        for after in (False, True):
            with stashpoint.open(url) as stash, crash_at(stash, step, after):
                try:
                    StashpointStore(stash).search(NS, limit=100)
                except Crash:
                    done = False
            _, _, found = _cold_search(url, limit=100)
            assert sorted(i.key for i in found) == [f"k{i:06d}" for i in range(12)]
            with stashpoint.open(url) as stash:  # the next write goes on
                StashpointStore(stash).put(NS, "k000000", {"n": step, "text": "again"})
        if done:
            break
        step += 1
    assert step >= 3


def test_searches_racing_writers_on_every_backend_see_every_acknowledged_put(
    store_kit: StoreKit,
) -> None:
    """Writers put while cold stores search and rewrite the catalog, three at once (their
    catalog writes race each other): every search sees each item at least at the value
    acknowledged before it started (contention on real servers: the kit's SeaweedFS)."""
    writers, rounds = 3, 6
    acknowledged: dict[str, int] = {}
    lock = threading.Lock()
    failures: list[BaseException] = []

    # Opened here, not in the threads: the kit makes its event loop on first use.
    writer_stores = [store_kit.store() for _ in range(writers)]
    searcher_stores = [[store_kit.store() for _ in range(rounds)] for _ in range(3)]

    def write(worker: int) -> None:
        store = writer_stores[worker]
        try:
            for n in range(rounds * 4):
                key = f"w{worker}-{n % 5}"
                store.put(NS, key, {"n": n})
                with lock:
                    acknowledged[key] = n
        except BaseException as exc:  # reported below
            failures.append(exc)

    def search(searcher: int) -> None:
        try:
            for cold in searcher_stores[searcher]:  # a new store each time: a cold search
                with lock:
                    before = dict(acknowledged)
                found = {i.key: i.value["n"] for i in cold.search(NS, limit=1000)}
                for key, n in before.items():
                    assert found.get(key, -1) >= n, (key, n, found.get(key))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    threads += [threading.Thread(target=search, args=(s,)) for s in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    final = {i.key: i.value["n"] for i in store_kit.store().search(NS, limit=1000)}
    assert final == acknowledged


def test_a_catalog_is_sealed_by_its_items_tenant_and_holds_no_other_tenants_item(
    tmp_path: Any,
) -> None:
    """A rule that names the store's namespace seals its catalogs too (their ids share the
    items' prefix); an item another tenant's key seals is never copied (read one by one)."""
    from stashpoint.encryption import Encryption, KeyRule

    encryption = Encryption(
        (
            KeyRule("secret", "keyring:secret", prefix="memories.user-1..s"),
            KeyRule("acme", "keyring:acme", prefix="memories.", namespaces=("langgraph-store",)),
            KeyRule("default", "keyring:default"),
        ),
        keyring=str(tmp_path / "keyring.json"),
    )
    url = "memory://catalog-tenants"
    with stashpoint.open(url, encryption=encryption) as stash:
        store = StashpointStore(stash)
        for i in range(10):
            store.put(NS, f"k{i}", {"text": f"acme-{i}"})
            store.put(NS, f"s{i}", {"text": f"s3cr3t-{i}"})
        assert len(StashpointStore(stash).search(NS, limit=100)) == 20
        copied = {entry["key"] for entry in _catalog(stash).payload["items"]}
        assert copied == {f"k{i}" for i in range(10)}
        rounds, found = _search_counting(stash)
        assert len(found) == 20 and rounds["GetObject"] == 1 + 10  # the catalog; each s
    with stashpoint.open(url) as raw:  # the stored bytes: the catalog's frame names acme
        info = raw.driver(GetObject(raw.layout.key(LANGGRAPH_STORE_CATALOG, catalog_id(NS))))
        frame = bytes(info.body)
        header = json.loads(frame[8 : 8 + int.from_bytes(frame[4:8], "big")])
        assert header["tenant"] == "acme"
        assert holding(raw, ("acme-1", "s3cr3t-1")) == []  # nothing in clear


def _search_counting(stash: stashpoint.Stash) -> tuple[Counter[str], list[Any]]:
    meter = Meter(stash)
    found = StashpointStore(stash).search(NS, limit=100)
    return meter.requests, found


def _truth(url: str, namespace: tuple[str, ...] = NS) -> dict[str, Any]:
    """Every item of `namespace`, each read by its own GET (no catalog)."""
    from stashpoint.langgraph.store_steps import StoreSteps
    from stashpoint.stores.layout import LANGGRAPH_STORE

    with stashpoint.open(url) as stash:
        steps = StoreSteps(stash.head_steps(LANGGRAPH_STORE))
        found = run_sync(steps.candidates(namespace), stash.driver)
        return {f.item.key: f.item.value for f in found}


def test_fault_proxy_searches_and_catalog_writes_lose_no_acknowledged_put(
    seaweedfs: Any,
) -> None:
    """Writers put and cold stores search (and rewrite the catalog) through dropped
    requests and answers, slowdowns and 409s: a clean search through the catalog returns
    what the items hold, every acknowledged put among it."""
    import uuid

    from botocore.config import Config

    from tests.faultproxy import FaultPlan, FaultProxy

    plan = FaultPlan(
        {"drop_response": 0.08, "drop_request": 0.05, "slowdown": 0.05, "conflict": 0.05}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    prefix = f"t-{uuid.uuid4().hex}"
    acknowledged: dict[str, int] = {}
    lock = threading.Lock()
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)

        def work(who: int) -> None:
            with stashpoint.open(url, client_config=config) as stash:
                for n in range(15):
                    try:
                        StashpointStore(stash).put(NS, f"w{who}-{n % 6}", {"n": n})
                        with lock:
                            acknowledged[f"w{who}-{n % 6}"] = n
                    except stashpoint.StorageUnavailable:
                        pass
                    if n % 3 == 2:
                        with contextlib.suppress(stashpoint.StorageUnavailable):
                            StashpointStore(stash).search(NS, limit=1000)  # a cold store

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
    url = seaweedfs.url(prefix)
    truth = _truth(url)
    with stashpoint.open(url) as stash:
        meter = Meter(stash)
        found = {i.key: i.value for i in StashpointStore(stash).search(NS, limit=1000)}
    assert found == truth
    assert all(truth[key]["n"] >= n for key, n in acknowledged.items())
    assert meter.requests["GetObject"] < 1 + len(truth)  # copies were used
    assert plan.injected["drop_response"] > 0


KILLED_SEARCHER = """
import sys, stashpoint
from stashpoint.langgraph import StashpointStore
with stashpoint.open(sys.argv[1]) as stash:
    n = 0
    while True:
        StashpointStore(stash).put(("memories", "user-1"), f"k{n % 40}", {"n": n, "pad": "x" * 2000})
        print(n, flush=True)
        if n % 9 == 8:
            StashpointStore(stash).search(("memories", "user-1"), limit=1000)  # rewrites
        n += 1
"""


def test_sigkill_mid_search_and_catalog_write_leaves_every_acknowledged_put_readable(
    seaweedfs: Any,
) -> None:
    import uuid

    from tests.kills import kill_after_lines

    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    for round_ in range(4):
        before, after = kill_after_lines(
            KILLED_SEARCHER, [url], 20 + 7 * round_, pause=0.003 * round_
        )
        printed = [int(line) for line in [*before, *after]]
        truth = _truth(url)
        with stashpoint.open(url) as stash:
            found = {i.key: i.value for i in StashpointStore(stash).search(NS, limit=1000)}
        assert found == truth
        last = {f"k{n % 40}": n for n in printed}
        assert all(truth[key]["n"] >= n for key, n in last.items())


def test_reindex_rebuilds_every_catalog_and_drops_those_of_empty_namespaces() -> None:
    url = "memory://catalog-reindex"
    other = ("memories", "user-2")
    with stashpoint.open(url) as stash:
        store = StashpointStore(stash)
        for i in range(3):  # fewer than CATALOG_MISSES: no search would write these
            store.put(NS, f"k{i}", {"n": i})
            store.put(other, f"k{i}", {"n": i})
        assert StashpointStore(stash).reindex(("memories",)) == 2
        assert [e["key"] for e in _catalog(stash, other).payload["items"]] == ["k0", "k1", "k2"]
        for i in range(3):
            store.delete(other, f"k{i}")
        assert StashpointStore(stash).reindex() == 1
        with pytest.raises(stashpoint.CheckpointNotFound):
            _catalog(stash, other)
        rounds, sent, found = _cold_search(url)
        assert (rounds, sent) == (1, Counter({"ListKeys": 1, "GetObject": 1})) and len(found) == 3


def _embed(texts: list[str]) -> list[list[float]]:
    """A deterministic 8-dimension embedding (the store is measured, not a model)."""
    import hashlib

    rows = []
    for text in texts:
        digest = hashlib.sha256(text.encode()).digest()
        rows.append([b / 255 - 0.5 for b in digest[:8]])
    return rows


def test_a_semantic_search_ranks_the_catalogs_vectors_in_one_round() -> None:
    """The catalog holds each item's vectors: a cold `search(query=...)` ranks them with
    no item read, exactly as a search that read every item."""
    url = "memory://catalog-vectors"
    index = {"embed": _embed, "dims": 8, "fields": ["text"]}
    with stashpoint.open(url) as stash:
        store = StashpointStore(stash, index=index)  # type: ignore[arg-type]
        for i in range(40):
            store.put(NS, f"k{i}", {"text": f"memory number {i}"})
        StashpointStore(stash, index=index).search(NS, query="x", limit=1)  # catalogues
        meter = Meter(stash)
        found = StashpointStore(stash, index=index).search(  # type: ignore[arg-type]
            NS, query="memory number 7", limit=5
        )
        assert sorted(meter.sent) == ["GetObject", "ListKeys"]  # one round, no item read
    assert found[0].key == "k7" and found[0].score == pytest.approx(1.0)
    truth = []
    with stashpoint.open(url) as stash:
        from stashpoint.langgraph.store_steps import StoreSteps
        from stashpoint.stores.layout import LANGGRAPH_STORE

        steps = StoreSteps(stash.head_steps(LANGGRAPH_STORE))  # no catalog: every item read
        items = run_sync(steps.candidates(NS), stash.driver)
        query = _embed(["memory number 7"])[0]
        from stashpoint.langgraph.items import cosine_scores

        for one in items:
            [score] = cosine_scores(query, list(one.item.vectors.values()))
            truth.append((score, one.item.key))
    best = sorted(truth, key=lambda pair: (-pair[0], pair[1]))[:5]
    assert [(i.key, pytest.approx(i.score)) for i in found] == [(k, s) for s, k in best]


def test_gc_rebuilds_a_damaged_catalog_as_it_sweeps() -> None:
    from tests.cli.test_cli import cli

    url = "memory://catalog-gc"
    _fill(url, 12)
    with stashpoint.open(url) as stash:
        key = stash.layout.key(LANGGRAPH_STORE_CATALOG, catalog_id(NS))
        stash.driver(PutObject(key, b"damaged", None))
    assert json.loads(cli("gc", "--json", url=url).stdout)["store_items_expired"] == 0
    with stashpoint.open(url) as stash:
        assert len(_catalog(stash).payload["items"]) == 12
    rounds, sent, found = _cold_search(url, limit=100)
    assert (rounds, sent, len(found)) == (1, Counter({"ListKeys": 1, "GetObject": 1}), 12)


def test_a_search_of_a_wider_prefix_reads_each_namespaces_catalog_in_one_round() -> None:
    url = "memory://catalog-wider"
    users = [("memories", f"user-{u}") for u in range(3)]
    for user in users:
        _fill(url, 20, user)
        with stashpoint.open(url) as stash:
            StashpointStore(stash).search(user)  # catalogues it

    async def search() -> tuple[int, list[str], list[Any]]:
        async with stashpoint.open_async(url) as stash:
            meter = Rounds(stash)
            found = await AsyncStashpointStore(stash).asearch(("memories",), limit=100)
            return meter.rounds, list(meter.sent), found

    rounds, sent, found = asyncio.run(search())
    assert len(found) == 60
    # Round 1: the listing (and the prefix's own catalog: none); round 2: three catalogs.
    assert rounds == 2 and Counter(sent) == Counter({"ListKeys": 1, "GetObject": 4})


def test_items_past_a_catalogs_budget_are_read_one_by_one() -> None:
    """A catalog holds at most half of `Limits.max_decompressed_bytes` of copies (about);
    the items past it are read by their own GET, and every search is whole."""
    url = "memory://catalog-budget"
    limits = stashpoint.Limits(max_decompressed_bytes=64 * 1024)  # a budget of 32 KB
    _fill(url, 300)
    with stashpoint.open(url, limits=limits) as stash:
        assert len(StashpointStore(stash).search(NS, limit=1000)) == 300
        copied = len(_catalog(stash).payload["items"])
        assert 50 < copied < 200
        meter = Meter(stash)
        found = StashpointStore(stash).search(NS, limit=1000)
        assert len(found) == 300
        assert meter.requests["GetObject"] == 1 + 300 - copied
        assert meter.requests["PutObject"] == 0  # not rewritten for the items left out
        assert _catalog(stash).payload["left_out"] == 300 - copied
