"""The LangGraph store's catalogs as steps: read beside a search's listing, rewritten after it.

`CatalogSteps` works over the catalogs' compare-and-swap namespace
(`langgraph-store-catalog`) with the stash's engine (`stores.cas`); it sends no request
itself. `langgraph.store_steps` asks it for the catalog of a namespace it searches (in the
listing's first round), for the catalogs of a wider prefix's namespaces, and to rewrite
those a search found missing items. What a catalog holds, and how it is judged against the
listing, lives in `langgraph.catalog`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from stashpoint import tracing
from stashpoint.cache import Lru
from stashpoint.envelope import Envelope
from stashpoint.errors import CheckpointConflict, CheckpointNotFound, Purged, StashpointError
from stashpoint.langgraph.catalog import (
    CATALOG_KIND,
    CATALOG_MISSES,
    CATALOG_SCHEMA_VERSION,
    Catalog,
    Copy,
    Damaged,
    catalog_namespace,
    catalog_payload,
    empty,
    read_catalog,
)
from stashpoint.langgraph.items import namespace_prefix_id
from stashpoint.steps import NewWriteId, Now, Parallel, Steps, ask, in_rounds
from stashpoint.stores.cas import CompareAndSwap
from stashpoint.stores.head_facts import facts_from_envelope
from stashpoint.stores.layout import LANGGRAPH_STORE, derived_id
from stashpoint.stores.objects import GetObject, HeadObject, KeyPage, ListKeys, ObjectInfo

READ_WIDTH = 64
"""Objects a search reads in one round (at most `PARALLEL_WIDTH` of them in flight at once)."""

Read = Catalog | Damaged
"""A catalog as a GET found it: readable (empty where none is), or damaged."""


class CatalogSteps:
    """The catalogs' reads and writes as steps, over their compare-and-swap namespace."""

    def __init__(
        self,
        cas: CompareAndSwap,
        cache_bytes: int,
        tenant: Callable[[str], str | None] = lambda object_id: None,
    ) -> None:
        self.cas = cas
        """The compare-and-swap steps of the catalogs' namespace (`langgraph-store-catalog`)."""
        self.tenant = tenant
        """The tenant whose key seals an item or a catalog id (None without encryption):
        an item is copied only into a catalog sealed by its own tenant's key."""
        self.held: Lru[str, Catalog] = Lru(
            1 << 16, max_weight=cache_bytes, weigh=lambda catalog: 256 * len(catalog.ids) + 256
        )
        """Catalogs read or written lately, by id: a search of a namespace whose catalog
        this store holds lists it alone (its copies are checked against the listing)."""

    def _get(self, object_id: str) -> GetObject:
        return GetObject(self.cas.key(object_id), None, self.cas.codec.limits.max_compressed_bytes)

    def with_listing(self, listing: ListKeys, own: str) -> Steps[tuple[KeyPage, Read]]:
        """List a first page, and read the catalog `own` (unless held) in the same round."""
        held = self.held.get(own)
        if held is not None:
            return (yield from ask(listing)), held
        try:
            page, info = yield from ask(Parallel((listing, self._get(own))))
        except StashpointError:  # the catalog could not be read (planted too large, ...)
            return (yield from ask(listing)), Damaged(None)
        return page, (yield from self._of(own, info))

    def read(self, ids: Sequence[str]) -> Steps[dict[str, Read]]:
        """Read catalogs by id, in rounds of `READ_WIDTH` (each damaged one passed over)."""
        return dict((yield from in_rounds(ids, self._read_round, READ_WIDTH)))

    def _read_round(self, ids: Sequence[str]) -> Steps[list[Read]]:
        try:
            infos = yield from ask(Parallel(tuple(self._get(i) for i in ids)))
        except StashpointError:
            return [Damaged(None) for _ in ids]
        read: list[Read] = []
        for object_id, info in zip(ids, infos, strict=True):
            read.append((yield from self._of(object_id, info)))
        return read

    def _of(self, object_id: str, info: ObjectInfo | None) -> Steps[Read]:
        """Return the catalog a GET found (empty where none is, or a purge's tombstone)."""
        namespace = catalog_namespace(object_id)
        if info is None:
            self.held.put(object_id, empty(namespace))  # until a write here finds one
            return empty(namespace)
        key = self.cas.key(object_id)
        try:
            envelope = yield from self.cas.decode(info, key, object_id)
            if facts_from_envelope(info, envelope).purge is not None:
                ended = empty(namespace, tombstone=info.etag)
                self.held.put(object_id, ended)
                return ended
            catalog = read_catalog(object_id, envelope)
        except StashpointError:
            tracing.event("store_catalog_damaged", object_id=object_id)
            return Damaged(info.etag)
        self.cas.cache.remember(key, envelope.revision, info.etag)
        self.held.put(object_id, catalog)
        return catalog

    def refresh(
        self,
        listed: Mapping[str, str | None],
        read: Mapping[str, Read],
        misses: Mapping[str, int],
        copies_of: Callable[[Sequence[str]], Steps[list[Copy]]],
        *,
        rebuild: bool,
    ) -> Steps[int]:
        """Rewrite the catalogs that missed `CATALOG_MISSES` items (`rebuild`: every one).

        `listed`: every item listed (id to ETag); `read`: the catalogs read; `misses`: how
        many items of each catalog's namespace were read one by one; `copies_of(ids)`: the
        items as stored. Only namespaces whose items were all listed here are rewritten; a
        catalog is derived data, so a write that loses a race (another process rewrote it,
        or a purge ended it) is dropped. Returns how many were written.
        """
        members: dict[str, list[str]] = {}
        for object_id in listed:
            owner = derived_id(LANGGRAPH_STORE, object_id)
            if owner is not None:
                members.setdefault(owner, []).append(object_id)
        written = 0
        for owner, ids in members.items():
            catalog = read.get(owner)
            stale = (
                0
                if not isinstance(catalog, Catalog)
                else sum(1 for i in catalog.ids if listed.get(i, "") != catalog.raw[i].get("etag"))
            )
            left_out = catalog.left_out if isinstance(catalog, Catalog) else 0
            due = (
                rebuild
                or isinstance(catalog, Damaged)
                or misses.get(owner, 0) - left_out >= CATALOG_MISSES
                or stale >= CATALOG_MISSES
            )
            if not due or (len(ids) < 2 and not rebuild):
                continue
            if catalog is None:
                catalog = self.held.get(owner) or empty(catalog_namespace(owner))
            mine = [i for i in ids if self.tenant(i) == self.tenant(owner)]
            written += yield from self._save(owner, catalog, (yield from copies_of(mine)))
        return written

    def _save(self, object_id: str, catalog: Read, copies: Sequence[Copy]) -> Steps[int]:
        """Write a catalog over the one read (a create where none is); 1 if it was written."""
        budget = self.cas.codec.limits.max_decompressed_bytes // 2
        namespace = catalog_namespace(object_id)
        payload = catalog_payload(namespace, copies, budget)
        now = yield from ask(Now())
        write_id = yield from ask(NewWriteId())
        try:
            if isinstance(catalog, Damaged) or catalog.envelope is None:
                if isinstance(catalog, Damaged):
                    # Never trusted, never kept: what cannot be read is replaced (if it is
                    # still what was found: one too large to read is judged by its ETag).
                    etag = catalog.etag
                    if etag is None:
                        found = yield from ask(HeadObject(self.cas.key(object_id)))
                        etag = None if found is None else found.etag
                    if etag is not None:
                        yield from self.cas.delete(object_id, seen_etag=etag)
                envelope = Envelope.initial(
                    object_id, None, CATALOG_KIND, CATALOG_SCHEMA_VERSION, payload,
                    at=now, write_id=write_id,
                )  # fmt: skip
                # Only where nothing is, or over the very tombstone read: a purge since
                # (which ended this catalog after erasing an item it copies) refuses it.
                over = catalog.tombstone if isinstance(catalog, Catalog) else None
                yield from self.cas.compare_and_swap(envelope, None, only_over=over, strict=True)
            else:
                envelope = catalog.envelope.next(payload, at=now, write_id=write_id)
                yield from self.cas.compare_and_swap(
                    envelope, catalog.envelope.revision, strict=True
                )
        except (CheckpointConflict, CheckpointNotFound, Purged):
            self.held.pop(object_id)  # another process rewrote it, or a purge ended it
            return 0
        self.held.put(object_id, read_catalog(object_id, envelope))
        return 1

    def drop_empty(self, prefix: Sequence[str], holding: set[str | None]) -> Steps[None]:
        """Delete the catalogs under `prefix` but those of namespaces `holding` items."""
        for object_id in (yield from self.cas.list_ids(namespace_prefix_id(prefix))):
            if object_id not in holding:
                self.held.pop(object_id)
                try:
                    yield from self.cas.delete(object_id)
                except (CheckpointConflict, CheckpointNotFound, Purged):
                    continue


def worth_reading(unread: Sequence[str], read: Mapping[str, Read]) -> list[str]:
    """Return the catalogs not read yet of namespaces with 2 or more items left to read."""
    counts: dict[str, int] = {}
    for object_id in unread:
        owner = derived_id(LANGGRAPH_STORE, object_id)
        if owner is not None and owner not in read:
            counts[owner] = counts.get(owner, 0) + 1
    return [owner for owner, count in counts.items() if count >= 2]
