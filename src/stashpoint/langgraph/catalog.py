"""A namespace's catalog: a derived copy of its items that a search reads in one GET.

A cold `search` used to list a namespace and GET every item (100 items: 100 GETs in 8-14
rounds). The catalog of a namespace is one head (`langgraph-store-catalog/{ns id}`, kind
`langgraph.catalog`) holding, for each of its items, the ETag the item had when copied,
its envelope's bookkeeping and its payload (value, vectors, time to live). A search lists
the items and GETs the catalog in the same round, uses each copy whose ETag the listing
shows for its item, and GETs only the others. So the copy is never trusted over the item:
an item written since, deleted, purged or planted differently reads as itself.

It is derived data (`stores.layout.Namespace.derived_from`): a search that had to read many
items rewrites it (`CATALOG_MISSES`), `store.reindex()` and `gc` rebuild it, a damaged one is
passed over and rebuilt, a purge of an item erases its namespace's catalog after the item
(every version; a reusable tombstone), and an item sealed by another tenant's key than
the catalog's is never copied into it. A catalog holds at most `budget` bytes of items
(half the stash's `Limits.max_decompressed_bytes`); items past it are read one by one.

Ids sort the way a listing does, so the catalog also tells where its namespace's listing
pages will start (`partition_starts`): the pages are listed at once, not one after another.

This module holds what needs no I/O: the catalog's id, its payload's form, and reading it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stashpoint.envelope import Envelope
from stashpoint.errors import InvalidPayload
from stashpoint.langgraph.items import (
    KIND,
    SCHEMA_VERSION,
    StoredItem,
    item_id,
    namespace_prefix_id,
    parse_item_id,
)
from stashpoint.langgraph.items import stored_item as checked_item

CATALOG_KIND = "langgraph.catalog"
"""The envelope kind of a catalog."""
CATALOG_SCHEMA_VERSION = 1
"""The payload schema of a catalog."""
CATALOG_MISSES = 8
"""Items of a namespace a search reads one by one (not copied in its catalog as they are
stored) before it rewrites the catalog, in one more request after its answer is known."""


def catalog_id(namespace: Sequence[str]) -> str:
    """Return the id of the catalog of the items of `namespace` (its labels' id prefix)."""
    return namespace_prefix_id(namespace)


@dataclass(frozen=True, slots=True)
class Copy:
    """One item as its catalog holds it: the ETag it had, its envelope, its payload."""

    etag: str
    """The item object's ETag when it was copied: the copy stands for it only while a
    listing shows this ETag."""
    envelope: Envelope
    """The item's envelope as stored (revision, write id, times; its lineage is not kept,
    so a copy is read, never written over)."""
    item: StoredItem
    """The item."""


@dataclass(frozen=True, slots=True)
class Catalog:
    """A namespace's catalog as read: its copies by item id, and the head that holds them."""

    namespace: tuple[str, ...]
    """The namespace whose items it copies."""
    envelope: Envelope | None
    """Its head (None: there is none, or a purge's reusable tombstone is there)."""
    raw: dict[str, dict[str, Any]]
    """The stored copies by item id, decoded on use (`copy`)."""
    ids: list[str]
    """The ids copied, in listing order."""
    tombstone: str | None = None
    """The ETag of the purge's tombstone found in its place (None: none): a new catalog
    is written over that one alone, never over a later purge's."""
    left_out: int = 0
    """Items its writer left out for its budget (read one by one: not a reason to
    rewrite it)."""

    def current(self, object_id: str, etag: str) -> bool:
        """Whether it copies `object_id` as a listing shows it (`etag`), its value an object."""
        raw = self.raw.get(object_id)
        return raw is not None and raw.get("etag") == etag and isinstance(raw.get("value"), dict)

    def copy(self, object_id: str, etag: str | None) -> Copy | None:
        """Return the copy of an item if it is the one a listing shows (`etag`), else None.

        A copy that does not read as an item of this namespace is never used.
        """
        raw = self.raw.get(object_id)
        if raw is None or etag is None or raw.get("etag") != etag:
            return None
        try:
            return _copy(self.namespace, object_id, raw)
        except (InvalidPayload, TypeError, ValueError, KeyError):
            return None

    def partition_starts(self, page: int) -> list[str]:
        """Return the ids after which each listing page of `page` ids past the first starts."""
        return [self.ids[k - 1] for k in range(page, len(self.ids), page)]


@dataclass(frozen=True, slots=True)
class Damaged:
    """A catalog that could not be read (damaged, planted, too large): passed over, rebuilt."""

    etag: str | None
    """The ETag of the object found (None: not known), so it is replaced only if unchanged."""


def catalog_namespace(object_id: str) -> tuple[str, ...]:
    """Return the namespace a catalog id names (`InvalidPayload` if it names none)."""
    parsed = parse_item_id(object_id + ".k")
    if parsed is None:
        raise InvalidPayload("not a store catalog's id", object_name=object_id)
    return parsed[0]


def empty(namespace: Sequence[str], tombstone: str | None = None) -> Catalog:
    """Return the catalog of a namespace that has none stored (or a purge's `tombstone`)."""
    return Catalog(tuple(namespace), None, {}, [], tombstone)


def read_catalog(object_id: str, envelope: Envelope) -> Catalog:
    """Return the catalog a head holds; `InvalidPayload` if it is not one (or not this id's)."""
    payload = envelope.payload
    if envelope.kind != CATALOG_KIND or not isinstance(payload, dict):
        raise InvalidPayload("object is not a store catalog", object_name=object_id)
    namespace, items = payload.get("namespace"), payload.get("items")
    if (
        not isinstance(namespace, list)
        or not all(isinstance(label, str) for label in namespace)
        or not isinstance(items, list)
        or catalog_id(namespace) != object_id
    ):
        raise InvalidPayload("store catalog is malformed", object_name=object_id)
    labels = tuple(namespace)
    raw: dict[str, dict[str, Any]] = {}
    for entry in items:
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise InvalidPayload("store catalog entry is malformed", object_name=object_id)
        try:
            raw[item_id(labels, entry["key"])] = entry
        except Exception:
            raise InvalidPayload(
                "store catalog entry is malformed", object_name=object_id
            ) from None
    left_out = payload.get("left_out", 0)
    if type(left_out) is not int or left_out < 0:
        raise InvalidPayload("store catalog is malformed", object_name=object_id)
    return Catalog(labels, envelope, raw, sorted(raw), left_out=left_out)


def _copy(namespace: tuple[str, ...], object_id: str, raw: dict[str, Any]) -> Copy:
    """Return a stored copy as the item and envelope it stands for (checked as an item)."""
    payload: dict[str, Any] = {
        "namespace": list(namespace),
        "key": raw["key"],
        "value": raw["value"],
    }
    for name in ("vectors", "ttl_minutes", "expires_at"):
        if name in raw:
            payload[name] = raw[name]
    item = checked_item(object_id, payload, named=True)  # its id was made from its key
    envelope = Envelope(
        id=object_id,
        kind=KIND,
        schema_version=SCHEMA_VERSION,
        revision=raw["revision"],
        write_id=raw["write_id"],
        created_at=datetime.fromisoformat(raw["created_at"]),
        updated_at=datetime.fromisoformat(raw["updated_at"]),
        payload=payload,
    )
    return Copy(raw["etag"], envelope, item)


def entry(copy: Copy) -> dict[str, Any]:
    """Return the stored form of one copy (`zstd -d | jq` reads it as the item's fields)."""
    document: dict[str, Any] = {
        "key": copy.item.key,
        "etag": copy.etag,
        "revision": copy.envelope.revision,
        "write_id": copy.envelope.write_id,
        "created_at": copy.envelope.created_at.isoformat(),
        "updated_at": copy.envelope.updated_at.isoformat(),
    }
    payload = copy.item.payload()
    del payload["namespace"], payload["key"]
    document.update(payload)
    return document


def stored_size(item: StoredItem) -> int:
    """About how many bytes of JSON a copy of `item` takes in its catalog (before zstd)."""
    floats = sum(len(vector) for vector in item.vectors.values())
    return 200 + 2 * len(item.key) + len(repr(item.value)) + 22 * floats


def catalog_payload(
    namespace: Sequence[str], copies: Iterable[Copy], budget: int
) -> dict[str, Any]:
    """Return a catalog's payload: the copies, by id, up to `budget` bytes of JSON (about).

    Items past the budget are left out (a search reads them one by one).
    """
    chosen: list[tuple[str, dict[str, Any]]] = []
    spent = left_out = 0
    for copy in copies:
        size = stored_size(copy.item)
        if spent + size > budget:
            left_out += 1
            continue
        spent += size
        chosen.append((item_id(namespace, copy.item.key), entry(copy)))
    chosen.sort(key=lambda pair: pair[0])
    stored: dict[str, Any] = {
        "namespace": list(namespace),
        "items": [document for _, document in chosen],
    }
    if left_out:
        stored["left_out"] = left_out  # so searches do not rewrite it for those alone
    return stored
