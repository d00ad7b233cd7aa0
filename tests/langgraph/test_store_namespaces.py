"""The store's `list_namespaces`: a key per namespace where storage rolls keys up by `..`.

Issue 52, item 4. An item's id is its namespace's labels, `..`, and its key (labels and
keys escaped, so `..` occurs nowhere else); where storage honours any delimiter
(`Provider.any_delimiter`), a listing by `..` names each namespace once, so a namespace
of 1,050 items costs no more than one of 1. Elsewhere (a directory bucket), or where
storage refuses or bends the delimiter, every key is listed, with the same answer.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from langgraph.store.base import PutOp

import stashpoint
from stashpoint.codec import Codec
from stashpoint.langgraph import AsyncStashpointStore, StashpointStore
from stashpoint.langgraph.items import item_id
from stashpoint.langgraph.store_steps import StoreSteps
from stashpoint.retry import RetryPolicy
from stashpoint.stores.cas import CompareAndSwap, EtagCache
from stashpoint.stores.layout import LANGGRAPH_STORE, Layout
from stashpoint.stores.objects import Create, KeyPage, ListKeys, PutObject
from tests.langgraph.conftest import STORE_BACKENDS
from tests.meter import Meter
from tests.scripted import Script

CROWDED = ("memories", "user-1")
SPREAD = [("memories", "user-2", "deep"), ("memories", "user 3"), ("notes",), ("notes", "a:b é")]


def _fill(url: str, options: dict[str, Any]) -> None:
    async def fill() -> None:
        async with stashpoint.open_async(url, **options) as stash:
            store = AsyncStashpointStore(stash)
            ops = [PutOp(CROWDED, f"k{i:05d}", {"n": i}) for i in range(1050)]
            ops += [PutOp(ns, f"k.{n}", {"n": n}) for n, ns in enumerate(SPREAD)]
            for start in range(0, len(ops), 600):
                await store.abatch(ops[start : start + 600])

    asyncio.run(fill())


@pytest.mark.parametrize("backend", STORE_BACKENDS)
def test_namespaces_are_listed_a_key_each_where_storage_rolls_keys_up(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url, options = request.getfixturevalue(backend)
    if backend == "s3_directory_url":  # put straight to SeaweedFS: the proxy's work is listing
        direct = url.replace(
            request.getfixturevalue("directory_bucket"),
            request.getfixturevalue("seaweedfs").endpoint,
        )
        _fill(direct.split("&provider=")[0], options)
    else:
        _fill(url, options)
    with stashpoint.open(url, **options) as stash:
        # Planted beside the items: a key below a "folder", and one that names no item.
        base = stash.layout.namespace_prefix(LANGGRAPH_STORE)
        for planted in ("sub/x..y", "junk"):
            stash.driver(PutObject(base + planted, b"{}", Create(), content_encoding=None))
        meter = Meter(stash)
        store = StashpointStore(stash)
        every = store.list_namespaces(limit=100)
        assert every == sorted([CROWDED, *SPREAD])
        lists = meter.requests["ListKeys"]
        assert meter.requests == Counter({"ListKeys": lists})
        if stash.provider.any_delimiter:
            assert lists == 1  # a key per namespace (SeaweedFS, memory, a local folder)
        else:
            assert lists == 2  # every item's key: 1,055 keys, two pages
        assert store.list_namespaces(prefix=("memories",), max_depth=2) == [
            ("memories", "user 3"), ("memories", "user-1"), ("memories", "user-2"),
        ]  # fmt: skip
        assert store.list_namespaces(prefix=("notes",)) == [("notes",), ("notes", "a:b é")]
        assert store.list_namespaces(suffix=("deep",)) == [("memories", "user-2", "deep")]
        assert store.list_namespaces(prefix=("memories", "*"), limit=1, offset=1) == [CROWDED]


def _steps() -> StoreSteps:
    retry = RetryPolicy(max_attempts=2, base_delay=0, max_delay=0)
    return StoreSteps(
        CompareAndSwap(LANGGRAPH_STORE, Layout(), Codec(), retry, EtagCache(), any_delimiter=True)
    )


def _key(namespace: tuple[str, ...], key: str = "k") -> str:
    return Layout().key(LANGGRAPH_STORE, item_id(namespace, key))


def test_a_delimiter_storage_bends_or_refuses_falls_back_to_every_key() -> None:
    """Prefixes that do not end with `..` (storage took one character), or a refusal: the
    namespaces come from every item's key, never from what the rolled listing said."""
    from langgraph.store.base import ListNamespacesOp

    from stashpoint.errors import StorageUnavailable

    base = Layout().namespace_prefix(LANGGRAPH_STORE)
    every = KeyPage([_key(("a",)), _key(("a", "b"))], None)
    for first in (KeyPage([], None, prefixes=[base + "a."]), StorageUnavailable("400")):
        script = Script([(ListKeys, first), (ListKeys, every)])
        found = script.run(_steps().namespaces(ListNamespacesOp(limit=10)))
        assert found == [("a",), ("a", "b")]
        assert [r.delimiter for r in script.requests] == ["..", None]


def test_a_namespace_named_only_by_a_repeated_prefix_is_listed_once() -> None:
    """SeaweedFS names a prefix that ended a page again on the next: one namespace."""
    from langgraph.store.base import ListNamespacesOp

    base = Layout().namespace_prefix(LANGGRAPH_STORE)
    script = Script(
        [
            (ListKeys, KeyPage([], "t1", prefixes=[base + "a..", base + "a.b.."])),
            (ListKeys, KeyPage([], None, prefixes=[base + "a.b..", base + "c.."])),
        ]
    )
    found = script.run(_steps().namespaces(ListNamespacesOp(limit=10)))
    assert found == [("a",), ("a", "b"), ("c",)]
