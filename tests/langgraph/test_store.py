"""The LangGraph store's contract, on every backend and both drivers (issue 27 #4).

Items are heads saved by the one compare-and-swap engine: a put is one request, a lost race
is retried on the fresh head (no update lost under 16 writers), a planted object is refused
with a typed error, an item expires whole on the stash's clock.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from langgraph.store.base import InvalidNamespaceError

import stashpoint
from stashpoint.clock import FakeClock
from stashpoint.langgraph import StashpointStore
from stashpoint.langgraph.items import item_id
from stashpoint.steps import run_sync
from stashpoint.stores.layout import LANGGRAPH_STORE
from stashpoint.stores.objects import DeleteObject, GetObject, PutObject
from tests.crashes import Crash, crash_at
from tests.langgraph.conftest import StoreKit
from tests.meter import Meter
from tests.purging import holding

NS = ("memories", "user-1")


def _raw(kit: StoreKit) -> stashpoint.Stash:
    """A blocking stash on the kit's storage, for looking at and planting objects."""
    return stashpoint.open(kit.url, **kit.options)


def _head(kit: StoreKit, namespace: tuple[str, ...], key: str) -> stashpoint.Envelope:
    """The item's head envelope, read by the engine that saves it."""
    with _raw(kit) as stash:
        cas = stash.head_steps(LANGGRAPH_STORE)
        return run_sync(cas.load(item_id(namespace, key)), stash.driver)


def _key(stash: stashpoint.Stash, namespace: tuple[str, ...], key: str) -> str:
    return stash.layout.key(LANGGRAPH_STORE, item_id(namespace, key))


def test_put_get_replace_and_delete(store_kit: StoreKit) -> None:
    store = store_kit.store()
    assert store.get(NS, "prefs") is None
    store.put(NS, "prefs", {"theme": "dark"})
    first = store.get(NS, "prefs")
    assert first is not None and first.value == {"theme": "dark"} and first.namespace == NS
    store.put(NS, "prefs", {"theme": "light"})
    second = store.get(NS, "prefs")
    assert second is not None and second.value == {"theme": "light"}
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at
    store.delete(NS, "prefs")
    assert store.get(NS, "prefs") is None
    store.delete(NS, "prefs")  # deleting what is not there does nothing
    store.put(NS, "prefs", {"theme": "again"})  # a deleted key takes a new item
    again = store.get(NS, "prefs")
    assert again is not None and again.value == {"theme": "again"}


def test_another_process_reads_and_replaces_what_one_wrote(store_kit: StoreKit) -> None:
    one, two = store_kit.store(), store_kit.store()
    one.put(NS, "k", {"n": 1})
    assert two.get(NS, "k").value == {"n": 1}
    two.put(NS, "k", {"n": 2})
    one.put(NS, "k", {"n": 3})  # one's known head is stale: its put lands on the fresh one
    assert two.get(NS, "k").value == {"n": 3}
    assert [i.key for i in one.search(NS)] == ["k"]
    two.delete(NS, "k")
    assert one.search(NS) == [] and one.get(NS, "k") is None


def test_a_delete_from_a_stale_known_item_deletes_the_item_saved_since(
    store_kit: StoreKit,
) -> None:
    """The ETag a store knows is only where its delete starts: an item another process
    saved since fails it, is read, and is deleted (a delete removes what is there)."""
    one, two = store_kit.store(), store_kit.store()
    one.put(NS, "k", {"n": 1})
    two.put(NS, "k", {"n": 2})  # two read nothing: its put is a lost create, then a save
    one.delete(NS, "k")
    assert one.get(NS, "k") is None and two.get(NS, "k") is None


def test_a_delete_from_a_known_item_never_frees_a_purged_key(store_kit: StoreKit) -> None:
    """A purge's tombstone lands after the store read the item: the one-request delete
    fails on it and leaves it, so a later put is still refused (`reusable=False`)."""
    one = store_kit.store()
    one.put(NS, "k", {"n": 1})
    with _raw(store_kit) as raw:  # another process purges the user's memories
        StashpointStore(raw).purge(NS, reusable=False)
    one.delete(NS, "k")  # does nothing: the item is erased, its tombstone stays
    with pytest.raises(stashpoint.Purged):
        one.put(NS, "k", {"n": 2})
    assert one.get(NS, "k") is None


def test_a_delete_from_a_known_item_clears_an_object_planted_since(store_kit: StoreKit) -> None:
    one = store_kit.store()
    one.put(NS, "k", {"n": 1})
    with _raw(store_kit) as raw:
        key = _key(raw, NS, "k")
        raw.driver(DeleteObject(key))
        raw.driver(PutObject(key, b"planted", None, content_encoding=None))
    one.delete(NS, "k")  # its ETag fails; the object cannot be read, so it goes as it is
    with _raw(store_kit) as raw:
        assert raw.driver(GetObject(key)) is None


def test_keys_and_labels_of_any_text_round_trip(store_kit: StoreKit) -> None:
    store = store_kit.store()
    namespaces = [("a b", "ü/ñ", "x:y"), ("a b",), ("日本", "x*y?"), ("a_b-c",)]
    keys = ["", "a.b", "..", "key with spaces/and slashes", "ключ"]
    for namespace in namespaces:
        for key in keys:
            store.put(namespace, key, {"ns": list(namespace), "key": key})
    for namespace in namespaces:
        found = {(i.namespace, i.key) for i in store.search(namespace, limit=100)}
        assert found >= {(namespace, key) for key in keys}  # and what is nested below it
        assert all(ns[: len(namespace)] == namespace for ns, _ in found)
        for key in keys:
            assert store.get(namespace, key).value == {"ns": list(namespace), "key": key}
    assert set(store.list_namespaces(limit=100)) == set(namespaces)


def test_bad_input_is_refused_with_typed_errors(store_kit: StoreKit) -> None:
    store = store_kit.store()
    for namespace in [(), ("a.b",), ("",), ("langgraph", "x"), (1,)]:
        with pytest.raises(stashpoint.InvalidArgument) as caught:
            store.put(namespace, "k", {"v": 1})
        assert isinstance(caught.value, InvalidNamespaceError)  # what LangGraph code catches
    with pytest.raises(stashpoint.InvalidArgument, match="dict"):
        store.put(NS, "k", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(stashpoint.InvalidArgument, match="operator"):
        store.search(NS, filter={"n": {"$regex": ".*"}})
    with pytest.raises(stashpoint.InvalidArgument, match="characters"):
        store.put(NS, "k" * 300, {"v": 1})
    with pytest.raises(stashpoint.InvalidArgument, match="ttl"):
        store.put(NS, "k", {"v": 1}, ttl=-1)
    with pytest.raises(stashpoint.InvalidArgument, match="limit"):
        store.search(NS, limit=-1)
    assert store.search(("memories",)) == []  # nothing was stored by any of them


def test_bad_settings_are_refused_with_typed_errors(memory_url: tuple[str, Any]) -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    with stashpoint.open(memory_url[0]) as stash:
        for settings in [
            {"index": "not a dict"},
            {"index": {"dims": 2}},  # no embed function
            {"index": {"embed": "openai:text-embedding-3-small"}},  # LangChain not installed
            {"index": {"embed": embed, "dims": 0}},
            {"index": {"embed": embed, "fields": "text"}},
            {"ttl": {"default_ttl": -5}},
            {"ttl": 10},
            {"cache_bytes": 0},
        ]:
            with pytest.raises(stashpoint.ConfigurationError):
                StashpointStore(stash, **settings)
        wrong = StashpointStore(stash, index={"embed": embed, "dims": 3})
        with pytest.raises(stashpoint.ConfigurationError, match="dimensions"):
            wrong.put(NS, "k", {"text": "hello"})  # what the function returns is checked
        assert wrong.get(NS, "k") is None  # and nothing was stored


def test_filters_compare_like_langgraph_stores(store_kit: StoreKit) -> None:
    store = store_kit.store()
    store.put(NS, "a", {"n": 1, "tag": "x", "flag": True, "user": {"age-group": "adult"}})
    store.put(NS, "b", {"n": 5, "tag": "y", "flag": 1, "tags": ["p", "q"]})
    store.put(NS, "c", {"n": "5", "tag": "x"})

    def keys(**filter: Any) -> set[str]:
        return {i.key for i in store.search(NS, filter=filter)}

    assert keys(tag="x") == {"a", "c"}
    assert keys(n={"$gt": 1}) == {"b"}  # a string is not a number
    assert keys(n={"$gte": 1, "$lt": 5}) == {"a"}
    assert keys(n={"$ne": 1}) == {"b", "c"}
    assert keys(flag=True) == {"a"}  # true is not 1
    assert keys(tags=["p", "q"]) == {"b"}
    assert keys(**{"user.age-group": "adult"}) == {"a"}
    assert keys(missing={"$ne": 1}) == {"a", "b", "c"}
    assert keys(n={"$lt": float("inf")}) == {"a", "b"}
    assert keys(n={"$eq": float("nan")}) == set()


def test_requests_per_operation(store_kit: StoreKit) -> None:
    """put 1, get 1, a known item's put 1, a warm search one listing (issue 27's goals)."""
    if store_kit.driver == "async":
        pytest.skip("counted on the blocking driver (the steps are the same)")
    store = store_kit.store()
    meter = Meter(store.stash)
    store.put(NS, "k0", {"n": 0})
    assert meter.sent == ["PutObject"]
    meter.reset()
    store.put(NS, "k0", {"n": 1})
    assert meter.sent == ["PutObject"]
    meter.reset()
    for n in range(1, 20):
        store.put(NS, f"k{n}", {"n": n})
    assert meter.requests["PutObject"] == 19 and sum(meter.requests.values()) == 19
    cold = store_kit.store()
    meter = Meter(cold.stash)
    assert cold.get(NS, "k0").value == {"n": 1}
    assert meter.sent == ["GetObject"]
    meter.reset()
    cold.put(NS, "k0", {"n": 2})  # read first: one PUT, no read
    assert meter.sent == ["PutObject"]
    meter = Meter(store.stash)
    found = store.search(NS, filter={"n": {"$gte": 10}}, limit=20)
    assert len(found) == 10
    listings = meter.requests["ListKeys"]
    assert listings == 1
    if "local" not in store_kit.url:  # a folder's listing has no ETags: its GETs are local
        # k0, which the other store changed, and the namespace's catalog (none yet: 20
        # items were read here, fewer than CATALOG_MISSES by a GET each), in the
        # listing's round; the next search lists alone.
        assert meter.requests["GetObject"] == 2
        meter.reset()
        store.search(NS, limit=20)
        assert meter.sent == ["ListKeys"]
    meter.reset()
    store.delete(NS, "k5")  # an item this store read: one DELETE, If-Match on its ETag
    assert meter.sent == ["DeleteObject"] and store.get(NS, "k5") is None


def test_no_update_is_lost_under_sixteen_writers(store_kit: StoreKit) -> None:
    """16 writers increment one counter through `update`: every increment is counted once."""
    writers, rounds = 16, 4 if "s3" in store_kit.url else 8
    stores = [store_kit.store() for _ in range(writers)]
    failures: list[BaseException] = []
    barrier = threading.Barrier(writers)

    def work(store: Any) -> None:
        try:
            barrier.wait(timeout=60)
            for _ in range(rounds):
                store_kit.update(store, NS, "counter", lambda v: {"n": (v or {"n": 0})["n"] + 1})
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures, failures
    assert stores[0].get(NS, "counter").value == {"n": writers * rounds}
    loaded = _head(store_kit, NS, "counter")
    assert loaded.revision == writers * rounds - 1  # one revision per increment, none twice


def test_concurrent_puts_of_one_key_each_land_once(store_kit: StoreKit) -> None:
    """Replacing puts race on one key: every one is a revision, the last one is the value."""
    if store_kit.driver == "async":
        pytest.skip("the race is the engine's; the update test runs it on both drivers")
    writers = 8
    stores = [store_kit.store() for _ in range(writers)]
    barrier = threading.Barrier(writers)
    failures: list[BaseException] = []

    def work(position: int) -> None:
        try:
            barrier.wait(timeout=60)
            for n in range(3):
                stores[position].put(NS, "shared", {"by": position, "n": n})
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(p,)) for p in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures, failures
    head = _head(store_kit, NS, "shared")
    assert head.revision == writers * 3 - 1
    assert head.payload["value"]["n"] == 2  # some writer's last put is the last revision


def test_an_update_that_returns_none_writes_nothing(store_kit: StoreKit) -> None:
    store = store_kit.store()
    assert store_kit.update(store, NS, "absent", lambda v: None) is None
    assert store.get(NS, "absent") is None
    store.put(NS, "k", {"n": 1})
    assert store_kit.update(store, NS, "k", lambda v: None) is None
    assert store.get(NS, "k").value == {"n": 1}


# -- time to live, on the stash's clock -----------------------------------------------------


def _clocked(kit: StoreKit, clock: FakeClock, **settings: Any) -> Any:
    kit.options = {**kit.options, "clock": clock}
    return kit.store(**settings)


def test_an_item_expires_after_its_ttl_unless_read(store_kit: StoreKit) -> None:
    clock = FakeClock()
    store = _clocked(store_kit, clock, ttl={"default_ttl": 10})
    store.put(NS, "short", {"v": 1})
    store.put(NS, "forever", {"v": 2}, ttl=None)
    clock.advance(9 * 60)
    assert store.get(NS, "short", refresh_ttl=False) is not None
    clock.advance(2 * 60)  # 11 minutes after the put, never refreshed: gone from reads
    assert store.get(NS, "short", refresh_ttl=False) is None
    assert [i.key for i in store.search(NS)] == ["forever"]
    assert store_kit.sweep(store) == 1
    with _raw(store_kit) as stash:
        assert stash.driver(GetObject(_key(stash, NS, "short"))) is None  # whole item gone
    assert store.get(NS, "forever").value == {"v": 2}


def test_reads_refresh_the_ttl_once_per_slack(store_kit: StoreKit) -> None:
    clock = FakeClock()
    store = _clocked(store_kit, clock, ttl={"default_ttl": 10})
    store.put(NS, "k", {"v": 1})
    meter = Meter(store.stash) if store_kit.driver == "sync" else None
    for _ in range(8):  # reads within the slack (a minute here) rewrite nothing
        clock.advance(5)
        assert store.get(NS, "k") is not None
    if meter is not None:
        assert meter.requests["PutObject"] == 0
    for _ in range(4):  # read every 8 minutes: each read pushes the expiry out
        clock.advance(8 * 60)
        assert store.get(NS, "k") is not None
        assert [i.key for i in store.search(NS)] == ["k"]
    if meter is not None:
        assert 4 <= meter.requests["PutObject"] <= 8
    clock.advance(12 * 60)
    assert store.get(NS, "k") is None and store_kit.sweep(store) == 1


def test_a_sweep_keeps_an_item_refreshed_meanwhile(store_kit: StoreKit) -> None:
    """The sweep's delete is conditional on the revision it judged expired."""
    if store_kit.driver == "async":
        pytest.skip("the hook is on the blocking stash")
    clock = FakeClock()
    store = _clocked(store_kit, clock, ttl={"default_ttl": 1})
    other = _clocked(store_kit, clock, ttl={"default_ttl": 1})
    store.put(NS, "k", {"v": 1})
    clock.advance(5 * 60)
    written: list[bool] = []

    def hook(request: Any, proceed: Any) -> Any:
        if isinstance(request, DeleteObject) and not written:
            written.append(True)
            other.put(NS, "k", {"v": 2})  # lands between the sweep's judgement and delete
        return proceed()

    with store.stash.intercept(hook):
        assert store_kit.sweep(store) == 0
    assert written and other.get(NS, "k").value == {"v": 2}


def test_omit_expired_false_keeps_langgraphs_lenient_reads(store_kit: StoreKit) -> None:
    clock = FakeClock()
    store = _clocked(store_kit, clock, ttl={"default_ttl": 1, "omit_expired": False})
    store.put(NS, "k", {"v": 1})
    clock.advance(10 * 60)
    assert store.get(NS, "k", refresh_ttl=False) is not None  # until a sweep deletes it
    assert store_kit.sweep(store) == 1 and store.get(NS, "k") is None


# -- what is planted in the bucket ----------------------------------------------------------


def test_planted_objects_are_refused_and_change_nothing(store_kit: StoreKit) -> None:
    if store_kit.driver == "async":
        pytest.skip("planting goes through the blocking stash")
    store = store_kit.store()
    store.put(NS, "real", {"v": "mine"})
    with _raw(store_kit) as stash:
        real = stash.driver(GetObject(_key(stash, NS, "real")))
        # A real item copied under another key, bytes that are not zstd, another kind.
        stash.driver(PutObject(_key(stash, NS, "copied"), real.body, None))
        stash.driver(PutObject(_key(stash, NS, "garbage"), b"\x28\xb5\x2f\xfd garbage", None))
        stash.checkpoints.compare_and_swap(
            stashpoint.Envelope.initial("x", None, "other.kind", 1, {"v": 1}), None
        )
        plain = stash.driver(GetObject(stash.layout.key("checkpoints", "x")))
        other = ("memories", "user-2")
        stash.driver(PutObject(_key(stash, other, "kind"), plain.body, None))
    fresh = store_kit.store()
    for key in ("copied", "garbage"):
        with pytest.raises(stashpoint.StashpointError) as caught:
            fresh.get(NS, key)
        assert caught.value.kind in ("invalid_payload", "unsupported_format")
    with pytest.raises(stashpoint.InvalidPayload):
        fresh.get(("memories", "user-2"), "kind")
    with pytest.raises(stashpoint.StashpointError):
        fresh.search(NS)
    assert fresh.get(NS, "real").value == {"v": "mine"}  # the real one reads as it was
    with pytest.raises(stashpoint.InvalidPayload):  # never written over unread (a newer
        fresh.put(NS, "copied", {"v": "replaced"})  # release's item would be lost so)
    fresh.delete(NS, "copied")  # an operator's delete clears it; then the key is free
    fresh.put(NS, "copied", {"v": "replaced"})
    assert fresh.get(NS, "copied").value == {"v": "replaced"}


# -- crashes and purges ---------------------------------------------------------------------


def test_a_crash_at_every_request_of_a_replacing_put_loses_nothing(
    store_kit: StoreKit,
) -> None:
    """Die before or after each request of a cold process's put over an existing item."""
    if store_kit.driver == "async":
        pytest.skip("the crash hook is on the blocking stash")
    store_kit.store().put(NS, "k", {"n": 0})
    step = 0
    while True:
        done = True
        for after in (False, True):
            store = store_kit.store()
            before = store_kit.store().get(NS, "k").value["n"]
            with crash_at(store.stash, step, after) as calls:
                try:
                    store.put(NS, "k", {"n": before + 1})
                except Crash:
                    done = False
            value = store_kit.store().get(NS, "k").value["n"]
            assert value in (before, before + 1), calls  # the old value or the new, whole
            store_kit.store().put(NS, "k", {"n": value})  # and a new process goes on
        if done:
            break
        step += 1
    assert step >= 1


def test_purge_erases_one_users_items_whole(store_kit: StoreKit) -> None:
    if store_kit.driver == "async":
        pytest.skip("purge is the stash's; its drivers are tested with it")
    store = store_kit.store()
    other = ("memories", "user-2")
    for n in range(3):
        store.put(NS, f"m{n}", {"secret": f"s{n}"})
        store.put(other, f"m{n}", {"secret": f"t{n}"})
    receipt = store.purge(NS)
    assert receipt.status == "complete"
    assert store.search(NS) == [] and store_kit.store().get(NS, "m0") is None
    assert len(store.search(other)) == 3
    store.put(NS, "m0", {"after": "purge"})  # the user's new memories are stored again
    assert store.get(NS, "m0").value == {"after": "purge"}


def test_items_are_sealed_by_the_stash_encryption(
    local_encrypted_url: tuple[str, dict[str, Any]],
) -> None:
    """The store's items go through the stash's one write path: sealed like every object."""
    url, options = local_encrypted_url
    with stashpoint.open(url, **options) as stash:
        store = StashpointStore(stash)
        store.put(NS, "k", {"secret": "s3cr3t-memory"})
        store.update(NS, "k", lambda v: {**(v or {}), "more": "s3cr3t-update"})
    with stashpoint.open(url) as raw:  # no keys: the stored bytes as they are
        assert holding(raw, ("s3cr3t-memory", "s3cr3t-update")) == []  # no version in clear
        assert holding(raw, "langgraph.item", "langgraph-store/") == []  # not even its kind
    with stashpoint.open(url, **options) as stash:
        assert StashpointStore(stash).get(NS, "k").value == {
            "secret": "s3cr3t-memory",
            "more": "s3cr3t-update",
        }
    with stashpoint.open(url) as without_keys, pytest.raises(stashpoint.StashpointError):
        StashpointStore(without_keys).get(NS, "k")  # a typed error, never the bytes
