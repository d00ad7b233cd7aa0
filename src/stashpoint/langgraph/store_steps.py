"""The LangGraph store's operations as steps: reading, searching, saving and sweeping items.

`StoreSteps` works over one compare-and-swap namespace (`langgraph-store`) with the stash's
engine (`stores.cas`); it sends no request itself. `langgraph.store` drives it (blocking or
asyncio) and computes embeddings before it runs. What an item is lives in `items`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from stashpoint import tracing
from stashpoint.cache import Lru
from stashpoint.envelope import Envelope
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    InvalidArgument,
    InvalidPayload,
    Purged,
    StashpointError,
    described,
)
from stashpoint.langgraph.catalog import Catalog, Copy, Damaged, catalog_id
from stashpoint.langgraph.items import (
    KIND,
    SCHEMA_VERSION,
    StoredItem,
    check_filter,
    check_namespace,
    check_ttl,
    cosine_scores,
    expiry,
    item_id,
    literal_prefix,
    matches,
    namespace_matches,
    namespace_prefix_id,
    parse_item_id,
    stored_item,
    vector_of,
)
from stashpoint.langgraph.store_catalogs import READ_WIDTH, CatalogSteps, worth_reading
from stashpoint.steps import NewWriteId, Now, Parallel, Steps, ask, in_rounds
from stashpoint.stores.cas import CompareAndSwap, optimistic_update
from stashpoint.stores.head_facts import facts_from_envelope
from stashpoint.stores.layout import LANGGRAPH_STORE, derived_id
from stashpoint.stores.objects import (
    LIST_PAGE,
    GetObject,
    KeyPage,
    ListKeys,
    ObjectInfo,
    every_key_page,
)

KNOWN_ITEM_WEIGHT = 64 * 1024 * 1024
"""Most bytes (about: values and vectors) of items a store keeps in memory by default
(`cache_bytes=`), so that a search lists the namespace and GETs only the items that
changed since it last read them (the listing's ETags tell), and a put of a known item is
one PUT. About 30,000 items of 1,536-dimension vectors; raise it for larger namespaces."""
UPDATE_ATTEMPTS = 64
"""Lost races a `put` or an `update` retries before it raises `CheckpointConflict`, with
the retry policy's back-off (capped at its `max_delay`): one key is what many writers race
on, so they get more than a single save's attempts (16 writers updating one key on
SeaweedFS, or 8 putting it 3 times each, used up the policy's 8 now and then)."""
PAGE_STRIDE = LIST_PAGE * 9 // 10
"""Items of a catalog between the starts of the listing pages a search sends at once: a
page holds `LIST_PAGE` keys, so up to a tenth more items written since the catalog still
fit its page, and the listing needs no round more."""


class InvalidNamespace(InvalidArgument, InvalidNamespaceError):
    """A namespace LangGraph's rules refuse (also LangGraph's own `InvalidNamespaceError`)."""


def check_put_namespace(namespace: Any, *, public: bool = True) -> tuple[str, ...]:
    """Return the namespace of an item to store, refused by LangGraph's rules if bad.

    `public`: also refuse a first label `langgraph`, which LangGraph keeps for itself (its
    own code stores there through `batch`, so the steps allow it).
    """
    try:
        labels = check_namespace(namespace)
    except InvalidArgument as exc:
        raise InvalidNamespace(str(exc)) from None
    if not labels:
        raise InvalidNamespace("a namespace has at least one label")
    if public and labels[0] == "langgraph":
        raise InvalidNamespace("a namespace's first label cannot be 'langgraph'")
    return labels


@dataclass(frozen=True, slots=True)
class Found:
    """An item as read or saved: its payload, the envelope it is in, and that one's ETag."""

    item: StoredItem
    """The item."""
    envelope: Envelope
    """Its head envelope (created and updated times, revision)."""
    etag: str
    """The stored object's ETag (what a listing shows when it has not changed)."""
    weight: int
    """About how many bytes it holds in memory (what the cache of known items counts)."""

    def as_item(self, score: float | None = None, *, scored: bool = False) -> Item:
        """Return the LangGraph `Item` (a `SearchItem` when `scored`)."""
        if scored:
            return SearchItem(
                namespace=self.item.namespace,
                key=self.item.key,
                value=self.item.value,
                created_at=self.envelope.created_at,
                updated_at=self.envelope.updated_at,
                score=score,
            )
        return Item(
            value=self.item.value,
            key=self.item.key,
            namespace=self.item.namespace,
            created_at=self.envelope.created_at,
            updated_at=self.envelope.updated_at,
        )


def _weight(item: StoredItem) -> int:
    return 512 + len(repr(item.value)) + 8 * sum(len(v) for v in item.vectors.values())


Vectors = Mapping[str, Sequence[float]]
"""The embeddings of one item's indexed fields, by path."""


@dataclass(frozen=True, slots=True)
class Reading:
    """How a read treats time to live: refresh what it returns, hide what has expired."""

    refresh: bool
    """Push the expiry of each returned item out (once per refresh slack)."""
    omit_expired: bool
    """Return no item whose time to live has run out (even before a sweep deletes it)."""


class StoreSteps:
    """The store's operations as steps, over one compare-and-swap namespace."""

    def __init__(
        self,
        cas: CompareAndSwap,
        cache_bytes: int = KNOWN_ITEM_WEIGHT,
        *,
        catalogs: CompareAndSwap | None = None,
        tenant: Callable[[str], str | None] = lambda object_id: None,
    ) -> None:
        self.cas = cas
        """The compare-and-swap steps of the store's namespace (`langgraph-store`)."""
        if type(cache_bytes) is not int or cache_bytes < 1:
            raise ConfigurationError(f"cache_bytes is an int >= 1, not {described(cache_bytes)}")
        self.known: Lru[str, Found] = Lru(
            1 << 24, max_weight=cache_bytes, weigh=lambda found: found.weight
        )
        """Items read or saved lately, by id: a search GETs only those whose ETag changed."""
        self.catalogs = None if catalogs is None else CatalogSteps(catalogs, cache_bytes, tenant)
        """The steps of the namespaces' catalogs (`langgraph.catalog`); None: a search
        reads every item it does not hold, one by one."""

    # -- reading ----------------------------------------------------------------------------

    def _found(self, object_id: str, info: ObjectInfo | None) -> Steps[Found | None]:
        """Decode one read item; None if absent or a purge's tombstone."""
        key = self.cas.key(object_id)
        if info is None:
            self.known.pop(object_id)
            return None
        known = self.known.get(object_id)
        if known is not None and known.etag == info.etag:
            return known
        envelope = yield from self.cas.decode(info, key, object_id)
        if facts_from_envelope(info, envelope).purge is not None:
            self.known.pop(object_id)
            return None  # erased: its tombstone holds the key, no item
        if envelope.kind != KIND:
            raise InvalidPayload(
                f"object is a {envelope.kind!r}, not a store item", object_name=object_id
            )
        item = stored_item(object_id, envelope.payload)
        found = Found(item, envelope, info.etag, _weight(item))
        self.cas.cache.remember(key, envelope.revision, info.etag)
        self.known.put(object_id, found)
        return found

    def read(self, object_ids: Sequence[str]) -> Steps[list[Found | None]]:
        """Read items by id, all in one round."""
        limit = self.cas.codec.limits.max_compressed_bytes
        requests = tuple(GetObject(self.cas.key(i), None, limit) for i in object_ids)
        infos: list[Any] = []
        if len(requests) == 1:
            infos = [(yield from ask(requests[0]))]
        elif requests:
            infos = yield from ask(Parallel(requests))
        found: list[Found | None] = []
        for object_id, info in zip(object_ids, infos, strict=True):
            found.append((yield from self._found(object_id, info)))
        return found

    def gets(
        self, wanted: Sequence[tuple[tuple[str, ...], str]], reading: Reading
    ) -> Steps[list[Found | None]]:
        """Return the items `(namespace, key)` names (None where there is none), one round."""
        ids = [item_id(check_namespace(namespace), key) for namespace, key in wanted]
        found = yield from self.read(ids)
        return (yield from self._kept(found, reading))

    def _kept(self, found: Sequence[Found | None], reading: Reading) -> Steps[list[Found | None]]:
        now = yield from ask(Now())
        kept: list[Found | None] = []
        for one in found:
            if one is not None and reading.omit_expired and one.item.expired(now):
                one = None
            if one is not None and reading.refresh and one.item.needs_refresh(now):
                one = yield from self._refresh(one, now)
            kept.append(one)
        return kept

    def _refresh(self, found: Found, now: datetime) -> Steps[Found | None]:
        """Push an item's expiry out from `now` (on the fresh head if it moved meanwhile)."""
        object_id = item_id(found.item.namespace, found.item.key)

        def refreshed(current: StoredItem | None) -> StoredItem | None:
            if current is None:
                return None  # deleted meanwhile: a read does not bring it back
            return current.refreshed(now) if current.ttl_minutes is not None else current

        saved = yield from self._save(object_id, refreshed, create=False)
        return found if saved is None else saved

    def candidates(self, prefix: Sequence[str]) -> Steps[list[Found]]:
        """Return every item under the namespace `prefix` (see `_gathered`)."""
        gathered = yield from self._gathered(prefix, rebuild=False)
        return (yield from self._materialized(gathered, gathered.ids))

    def _materialized(self, gathered: _Gathered, ids: Sequence[str]) -> Steps[list[Found]]:
        """Return the items `ids` names: held, or decoded from their copies.

        A copy that does not read as an item is passed over: its item is read (one round).
        """
        out: dict[str, Found] = {}
        unread: list[str] = []
        for object_id in ids:
            one = gathered.found.get(object_id)
            if one is None:
                one = self._from_copy(object_id, gathered)
            if one is None:
                unread.append(object_id)
            else:
                out[object_id] = one
        for object_id, read in (yield from in_rounds(unread, self.read, READ_WIDTH)):
            if read is not None:
                out[object_id] = read
        return [out[i] for i in ids if i in out]

    def _from_copy(self, object_id: str, gathered: _Gathered) -> Found | None:
        """Return an item from the copy the listing showed current (None if it is bad)."""
        catalog, etag = gathered.copied.get(object_id, (None, None))
        if catalog is None or etag is None:
            return None
        copy = catalog.copy(object_id, etag)
        if copy is None:
            return None
        # The listing shows the copy's ETag: the item is stored as copied.
        self.cas.cache.remember(self.cas.key(object_id), copy.envelope.revision, etag)
        return Found(copy.item, copy.envelope, etag, _weight(copy.item))

    def _gathered(self, prefix: Sequence[str], *, rebuild: bool) -> Steps[_Gathered]:
        """Return every item under the namespace `prefix` (held, or a current copy's id).

        The listing's ETags say which items this store already holds as they are stored,
        and which its namespace's catalog copies as they are stored; only the others are
        read (in rounds of `READ_WIDTH`). The catalog of `prefix` itself is read with the
        listing's first page, and where it holds more items than a page, the other pages
        are listed at once from where it says they start. A namespace whose catalog
        missed `CATALOG_MISSES` items is rewritten afterwards (`rebuild`: every one is).
        """
        base = self.cas.layout.namespace_prefix(self.cas.namespace)
        listing = ListKeys(base + namespace_prefix_id(prefix))
        read: dict[str, Catalog | Damaged] = {}
        starts: list[str] = []
        if prefix and self.catalogs is not None:
            own = catalog_id(prefix)
            first, catalog = yield from self.catalogs.with_listing(listing, own)
            read[own] = catalog
            if isinstance(catalog, Catalog) and self.cas.seeks:
                starts = [base + s for s in catalog.partition_starts(PAGE_STRIDE)]
        else:
            first = yield from ask(listing)
        pages = yield from every_key_page(listing.prefix, first=first, starts=starts)
        listed: dict[str, str | None] = {}
        for page in pages:
            etags: Sequence[str | None] = page.etags or [None] * len(page.keys)
            for key, etag in zip(page.keys, etags, strict=True):
                object_id = key[len(base) :]
                if "/" not in object_id and parse_item_id(object_id) is not None:
                    listed[object_id] = etag
        # A listing without ETags (a local folder) cannot tell a copy is current.
        catalogs = self.catalogs
        catalogued = catalogs is not None and any(e is not None for e in listed.values())
        found: dict[str, Found] = {}
        copied: dict[str, tuple[Catalog, str]] = {}
        unread = self._sort_listed(listed, read, found, copied)
        if catalogs is not None and catalogued:
            more = worth_reading(unread, read)
            if more:
                read.update((yield from catalogs.read(more)))
                again = {i: listed[i] for i in unread}
                unread = self._sort_listed(again, read, found, copied)
        misses: dict[str, int] = {}
        for object_id, one in (yield from in_rounds(unread, self.read, READ_WIDTH)):
            if one is not None:
                found[object_id] = one
                owner = derived_id(LANGGRAPH_STORE, object_id)
                misses[owner or ""] = misses.get(owner or "", 0) + 1
        gathered = _Gathered([i for i in listed if i in found or i in copied], found, copied)
        if catalogs is not None and catalogued:

            def copies_of(ids: Sequence[str]) -> Steps[list[Copy]]:
                items = yield from self._materialized(gathered, ids)
                return [Copy(one.etag, one.envelope, one.item) for one in items if one.etag]

            try:
                gathered.written = yield from catalogs.refresh(
                    listed, read, misses, copies_of, rebuild=rebuild
                )
            except StashpointError as exc:
                if rebuild:
                    raise
                # A search's answer stands: its catalog is rewritten by a later one.
                tracing.event("store_catalog_unwritten", kind=exc.kind.value)
        return gathered

    def _sort_listed(
        self,
        listed: Mapping[str, str | None],
        read: Mapping[str, Catalog | Damaged],
        found: dict[str, Found],
        copied: dict[str, tuple[Catalog, str]],
    ) -> list[str]:
        """Sort listed items: held as stored (`found`) or copied as stored (`copied`).

        Copies are decoded when used. Return the other ids (to read one by one).
        """
        unread: list[str] = []
        for object_id, etag in listed.items():
            known = self.known.get(object_id)
            if known is not None and etag is not None and known.etag == etag:
                found[object_id] = known
                continue
            owner = derived_id(LANGGRAPH_STORE, object_id)
            catalog = read.get(owner) if owner is not None else None
            if (
                isinstance(catalog, Catalog)
                and etag is not None
                and catalog.current(object_id, etag)
            ):
                copied[object_id] = (catalog, etag)
            else:
                unread.append(object_id)
        return unread

    def reindex(self, prefix: Sequence[str] = ()) -> Steps[int]:
        """Rebuild the catalog of every namespace under `prefix` from its items.

        Returns how many were written. A catalog whose namespace holds no item any more
        is deleted.
        """
        labels = check_namespace(prefix, what="namespace prefix")
        if self.catalogs is None:
            return 0
        gathered = yield from self._gathered(labels, rebuild=True)
        holding = {derived_id(LANGGRAPH_STORE, object_id) for object_id in gathered.ids}
        yield from self.catalogs.drop_empty(labels, holding)
        return gathered.written

    def search(
        self, op: SearchOp, query: Sequence[float] | None, reading: Reading
    ) -> Steps[list[tuple[Found, float | None]]]:
        """Return a search's page of items, with their scores when there is a query."""
        prefix = check_namespace(op.namespace_prefix, what="namespace prefix")
        wanted = check_filter(op.filter)
        limit, offset = _page(op.limit, op.offset)
        gathered = yield from self._gathered(prefix, rebuild=False)
        now = yield from ask(Now())
        # A copy's value is filtered as stored: only the items that match are decoded.
        ids = [
            i
            for i in gathered.ids
            if i in gathered.found or matches(gathered.copied[i][0].raw[i]["value"], wanted)
        ]
        found = [
            one
            for one in (yield from self._materialized(gathered, ids))
            if not (reading.omit_expired and one.item.expired(now))
            and matches(one.item.value, wanted)
        ]
        page = _ranked(found, query)[offset : offset + limit]
        if reading.refresh:
            refreshed = yield from self._kept([one for one, _ in page], reading)
            page = [
                (new, score)
                for new, (_, score) in zip(refreshed, page, strict=True)
                if new is not None
            ]
        return page

    def namespaces(self, op: ListNamespacesOp) -> Steps[list[tuple[str, ...]]]:
        """Return the namespaces that hold items, matched, cut to depth and paged.

        Where storage rolls keys up by any delimiter, a listing by `..` (what separates an
        item's namespace from its key) names each namespace once: a page per 1,000
        namespaces, however many items they hold. Elsewhere, or where storage refused or
        bent it, every item's key is listed.
        """
        conditions = [
            (str(c.match_type), check_namespace(c.path, what="match path"))
            for c in op.match_conditions or ()
        ]
        limit, offset = _page(op.limit, op.offset)
        depth = _max_depth(op.max_depth)
        listed = yield from self._namespaces_under(literal_prefix(conditions))
        found = {
            namespace[:depth]
            for namespace in listed
            if all(namespace_matches(namespace, kind, path) for kind, path in conditions)
        }
        return sorted(found)[offset : offset + limit]

    def _namespaces_under(self, prefix: tuple[str, ...]) -> Steps[set[tuple[str, ...]]]:
        """Return every namespace under `prefix` that holds an item (or its tombstone)."""
        if self.cas.any_delimiter:
            base = self.cas.layout.namespace_prefix(self.cas.namespace)
            try:
                pages = yield from every_key_page(
                    base + namespace_prefix_id(prefix), delimiter=NAMESPACE_END
                )
            except StashpointError as exc:
                tracing.event("store_namespaces_unrolled", kind=exc.kind.value)
            else:
                rolled = _rolled_namespaces(pages, base)
                if rolled is not None:
                    return rolled
        ids = yield from self.cas.list_ids(namespace_prefix_id(prefix))
        return {parsed[0] for parsed in map(parse_item_id, ids) if parsed is not None}

    # -- writing ----------------------------------------------------------------------------

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        vectors: Vectors,
        ttl_minutes: float | None,
    ) -> Steps[None]:
        """Store `value` as the item `key` (replacing any), with its vectors and TTL."""
        object_id = item_id(check_put_namespace(namespace, public=False), key)
        if not isinstance(value, dict):
            raise InvalidArgument(f"a store value is a dict, not {described(value)}")
        now = yield from ask(Now())
        item = StoredItem(
            namespace,
            key,
            value,
            {path: vector_of(vector) for path, vector in vectors.items()},
            ttl_minutes,
            expiry(now, ttl_minutes),
        )
        # A lost race only means another write landed first: a put retries as an update
        # does (the winners hold the head and need one PUT, a loser two requests).
        yield from self._save(
            object_id,
            lambda _current: item,
            create=True,
            blind=True,
            max_attempts=UPDATE_ATTEMPTS,
        )

    def update(
        self,
        namespace: tuple[str, ...],
        key: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        vectors_of: Callable[[dict[str, Any]], Vectors],
        ttl_minutes: float | None,
        max_attempts: int | None = None,
    ) -> Steps[Found | None]:
        """Replace an item by `change(current value)` (None: absent), retrying lost races.

        `change` runs again on the fresh value after every lost race, so no concurrent
        update is lost; returning None deletes nothing and writes nothing. After
        `max_attempts` lost races (default `UPDATE_ATTEMPTS`) the last `CheckpointConflict`
        is raised.
        """
        object_id = item_id(check_put_namespace(namespace, public=False), key)
        now = yield from ask(Now())

        def changed(current: StoredItem | None) -> StoredItem | None:
            value = change(None if current is None else current.value)
            if value is None:
                return None
            if not isinstance(value, dict):
                raise InvalidArgument(f"update's change returns a dict, not {described(value)}")
            vectors = {path: vector_of(vector) for path, vector in vectors_of(value).items()}
            return StoredItem(namespace, key, value, vectors, ttl_minutes, expiry(now, ttl_minutes))

        attempts = UPDATE_ATTEMPTS if max_attempts is None else max_attempts
        return (yield from self._save(object_id, changed, create=True, max_attempts=attempts))

    def _save(
        self,
        object_id: str,
        change: Callable[[StoredItem | None], StoredItem | None],
        *,
        create: bool,
        blind: bool = False,
        max_attempts: int | None = None,
    ) -> Steps[Found | None]:
        """Save an item: update the head, or create the item where there is none.

        `blind`: `change` ignores the current item (a put), so where this store knows no
        head it tries a create first (one request for a new key); a create that finds the
        key taken updates the head it finds. Otherwise the head is read first, so `change`
        sees the stored value. An update that finds the item deleted meanwhile creates it
        again (when `create`). Both go through the one compare-and-swap engine: a lost
        race is retried on the fresh head, an ambiguous outcome judged by its write id.
        `max_attempts`: lost races before the last conflict is raised (default: the
        stash's retry policy).
        """
        attempts = max_attempts or self.cas.retry.max_attempts

        def read() -> Steps[Envelope | None]:
            try:
                return (yield from self.cas.load(object_id))
            except Purged:
                raise  # erased: never created again unnoticed
            except CheckpointNotFound:
                return None  # no item (or deleted meanwhile): it is created

        def plan(head: Envelope | None, fresh: bool) -> Steps[Envelope | None]:
            """Return the envelope to save after `head` (None: nothing to write)."""
            absent = head is None or head is _ASSUMED_ABSENT
            if head is not None and not absent and head.kind != KIND:
                raise InvalidPayload(
                    f"object is a {head.kind!r}, not a store item", object_name=object_id
                )
            current = None if absent or head is None else stored_item(object_id, head.payload)
            following = change(current)
            if following is None or (absent and not create):
                return None
            now = yield from ask(Now())  # the stash's clock
            write_id = yield from ask(NewWriteId())
            if absent or head is None:
                return Envelope.initial(
                    object_id,
                    None,
                    KIND,
                    SCHEMA_VERSION,
                    following.payload(),
                    at=now,
                    write_id=write_id,
                )
            return head.next(following.payload(), at=now, write_id=write_id)

        def save(head: Envelope | None, envelope: Envelope | None) -> Steps[Envelope | None]:
            if envelope is None:
                return None
            absent = head is None or head is _ASSUMED_ABSENT
            try:
                yield from self.cas.compare_and_swap(
                    envelope, None if absent or head is None else head.revision
                )
            except Purged:
                raise
            except CheckpointNotFound:
                # Deleted meanwhile: read again (and create it, when `create`).
                raise CheckpointConflict(
                    object_id, expected_revision=envelope.revision - 1, actual_revision=None
                ) from None
            return envelope

        known = self.known.get(object_id)
        # A put with no head known tries a create first (one request for a new key); a
        # create that finds the key taken reads the head and updates it. The one
        # optimistic-update loop runs both, as it runs every head's update.
        start = (
            known.envelope if known is not None else (_ASSUMED_ABSENT if blind and create else None)
        )
        saved = yield from optimistic_update(
            read,
            plan,
            save,
            retry=self.cas.retry,
            max_attempts=attempts,
            known=start,
            forget=lambda: self._forget(object_id),
        )
        if saved is None:
            return None
        return self._remember(object_id, saved, stored_item(object_id, saved.payload))

    def _forget(self, object_id: str) -> None:
        self.known.pop(object_id)

    def _remember(self, object_id: str, envelope: Envelope, item: StoredItem) -> Found:
        key = self.cas.key(object_id)
        etag = self.cas.cache.get(key, envelope.revision)
        found = Found(item, envelope, etag or "", _weight(item))
        if etag is None:
            self.known.pop(object_id)
        else:
            self.known.put(object_id, found)
        return found

    def delete(self, namespace: tuple[str, ...], key: str) -> Steps[None]:
        """Delete an item (nothing happens if there is none)."""
        object_id = item_id(check_namespace(namespace), key)
        known = self.known.pop(object_id)
        try:
            # One DELETE for an item this store read or wrote (If-Match on its ETag).
            yield from self.cas.delete(object_id, seen_etag=None if known is None else known.etag)
        except CheckpointNotFound:
            return

    def sweep(self, *, dry_run: bool = False) -> Steps[int]:
        """Delete every item whose time to live has run out; return how many.

        Each delete is conditional on the revision judged expired: an item refreshed or
        rewritten meanwhile stays. An item is one object, so it goes whole. `dry_run`:
        count them only.
        """
        found = yield from self.candidates(())
        now = yield from ask(Now())
        swept = 0
        for one in found:
            if not one.item.expired(now):
                continue
            if dry_run:
                swept += 1
                continue
            object_id = item_id(one.item.namespace, one.item.key)
            self.known.pop(object_id)
            try:
                yield from self.cas.delete(object_id, one.envelope.revision)
            except (CheckpointConflict, CheckpointNotFound):
                continue  # refreshed, rewritten or deleted meanwhile
            swept += 1
        return swept

    # -- a batch ----------------------------------------------------------------------------

    def batch(
        self,
        ops: Sequence[Op],
        vectors: Mapping[int, Vectors],
        queries: Mapping[int, Sequence[float]],
        ttl: TTLConfig,
    ) -> Steps[list[Result]]:
        """Run LangGraph store operations in order; consecutive gets share one round.

        `vectors[i]` are the embeddings of put `i`'s fields, `queries[i]` the embedding of
        search `i`'s query (computed by the caller, outside the steps).
        """
        results: list[Result] = [None] * len(ops)
        omit = bool(ttl.get("omit_expired", True))
        index = 0
        while index < len(ops):
            op = ops[index]
            if isinstance(op, GetOp):
                run = index
                while run < len(ops) and isinstance(ops[run], GetOp):
                    run += 1
                gets: list[GetOp] = [ops[i] for i in range(index, run)]  # type: ignore[misc]
                results[index:run] = yield from self._gets_of(gets, omit)
                index = run
                continue
            results[index] = yield from self._one(
                op, vectors.get(index, {}), queries.get(index), omit
            )
            index += 1
        return results

    def _gets_of(self, gets: list[GetOp], omit: bool) -> Steps[list[Result]]:
        """Run consecutive gets in one round (one per TTL refresh setting); their items."""
        results: list[Result] = [None] * len(gets)
        by_refresh: dict[bool, list[int]] = {}
        for offset, get in enumerate(gets):
            by_refresh.setdefault(bool(get.refresh_ttl), []).append(offset)
        for refresh, offsets in by_refresh.items():
            found = yield from self.gets(
                [(gets[o].namespace, str(gets[o].key)) for o in offsets], Reading(refresh, omit)
            )
            for o, one in zip(offsets, found, strict=True):
                results[o] = None if one is None else one.as_item()
        return results

    def _one(
        self, op: Op, vectors: Vectors, query: Sequence[float] | None, omit: bool
    ) -> Steps[Result]:
        """Run one put, search or namespace listing; its result (None for a put)."""
        if isinstance(op, PutOp):
            if op.value is None:
                yield from self.delete(op.namespace, str(op.key))
            else:
                yield from self.put(op.namespace, str(op.key), op.value, vectors, check_ttl(op.ttl))
            return None
        if isinstance(op, SearchOp):
            page = yield from self.search(op, query, Reading(bool(op.refresh_ttl), omit))
            return [one.as_item(score, scored=True) for one, score in page]
        if isinstance(op, ListNamespacesOp):
            return (yield from self.namespaces(op))
        raise InvalidArgument(f"not a store operation: {described(op)}")


@dataclass(slots=True)
class _Gathered:
    """Every item under a prefix: held ones, and ids whose listed ETag a catalog's copy has."""

    ids: list[str]
    """The items' ids, in listing order."""
    found: dict[str, Found]
    """Items held as stored (read now, or known to this store), by id."""
    copied: dict[str, tuple[Catalog, str]]
    """Items a catalog copies as they are stored (decoded when used), by id: the catalog
    and the ETag listed."""
    written: int = 0
    """How many catalogs were rewritten."""


NAMESPACE_END = ".."
"""What ends a namespace in an item's id (`memories.user-1..key`): labels are escaped, so
it occurs nowhere else."""


def _rolled_namespaces(pages: Sequence[KeyPage], base: str) -> set[tuple[str, ...]] | None:
    """Return the namespaces a listing rolled up by `NAMESPACE_END` names.

    With those of the keys it kept; None where it rolled up something else (storage bent
    the delimiter).
    """
    found: set[tuple[str, ...]] = set()
    for page in pages:
        for rolled in page.prefixes:
            object_id = rolled[len(base) :]
            if not rolled.startswith(base) or not object_id.endswith(NAMESPACE_END):
                return None
            parsed = parse_item_id(object_id + "k") if "/" not in object_id else None
            if parsed is not None:
                found.add(parsed[0])
        for key in page.keys:  # an item of the prefix's own namespace, or none
            parsed = parse_item_id(key[len(base) :]) if "/" not in key[len(base) :] else None
            if parsed is not None:
                found.add(parsed[0])
    return found


_ASSUMED_ABSENT: Any = object()
"""The head a blind put assumes where this store knows none: it tries a create first."""


def _newest_first(found: Sequence[Found]) -> list[tuple[Found, float | None]]:
    """Return items newest first (then by key), with no score."""
    newest = sorted(found, key=lambda one: (-one.envelope.updated_at.timestamp(), one.item.key))
    return [(one, None) for one in newest]


def _max_depth(max_depth: Any) -> int | None:
    """Return a namespace listing's depth, checked (None: whole namespaces)."""
    if max_depth is not None and (type(max_depth) is not int or max_depth < 1):
        raise InvalidArgument(f"max_depth is an int >= 1, not {described(max_depth)}")
    return max_depth


def _page(limit: Any, offset: Any) -> tuple[int, int]:
    for name, value in (("limit", limit), ("offset", offset)):
        if type(value) is not int or value < 0:
            raise InvalidArgument(f"{name} is an int >= 0, not {described(value)}")
    return limit, offset


def _ranked(
    found: Sequence[Found], query: Sequence[float] | None
) -> list[tuple[Found, float | None]]:
    """Rank items by their best vector's cosine similarity; items without vectors last.

    Without a query: newest first (then by key), with no score.
    """
    if query is None:
        return _newest_first(found)
    flat: list[Sequence[float]] = []
    owners: list[int] = []
    for position, one in enumerate(found):
        for vector in one.item.vectors.values():
            flat.append(vector)
            owners.append(position)
    best: dict[int, float] = {}
    for owner, score in zip(owners, cosine_scores(query, flat), strict=True):
        if owner not in best or score > best[owner]:
            best[owner] = score
    scored: list[tuple[Found, float | None]] = [
        (found[p], s) for p, s in sorted(best.items(), key=lambda pair: (-pair[1], pair[0]))
    ]
    scored += [(one, None) for p, one in enumerate(found) if p not in best]
    return scored
