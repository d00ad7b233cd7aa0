"""`StashpointStore` and `AsyncStashpointStore`: LangGraph's long-term memory on a stash.

LangGraph's other persistence interface, `BaseStore` (memories shared across threads:
`put`, `get`, `delete`, `search`, `list_namespaces`, `batch`), over any stash: memory,
local folder, S3. Each item is one head envelope (`langgraph.items`) saved by the stash's
compare-and-swap engine, so a put is one conditional PUT (`If-None-Match` for a new key,
`If-Match` on the ETag this store last saw for a known one), a lost race is retried on
the fresh head, and an ambiguous write is judged by its write id like every other save.

`StoreSteps` holds the operations as steps (no I/O); the two classes drive them, one
blocking and one with asyncio, and compute embeddings with the application's function
before the steps run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from stashpoint.cache import Lru
from stashpoint.envelope import Envelope
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    InvalidArgument,
    InvalidPayload,
    described,
)
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
from stashpoint.langgraph.loop import on_loop
from stashpoint.steps import Now, Parallel, Steps, ask, run_async, run_sync
from stashpoint.stores.cas import CompareAndSwap, facts_from_envelope
from stashpoint.stores.layout import LANGGRAPH_STORE
from stashpoint.stores.objects import GetObject, ObjectInfo, every_key_page

if TYPE_CHECKING:
    from stashpoint.purge import PurgeReceipt, Selector
    from stashpoint.stash import AsyncStash, Stash

KNOWN_ITEM_WEIGHT = 64 * 1024 * 1024
"""Most bytes (about: values and vectors) of items a store keeps in memory by default
(`cache_bytes=`), so that a search lists the namespace and GETs only the items that
changed since it last read them (the listing's ETags tell), and a put of a known item is
one PUT. About 30,000 items of 1,536-dimension vectors; raise it for larger namespaces."""
READ_WIDTH = 64
"""Items a search reads in one round (at most `PARALLEL_WIDTH` of them in flight at once)."""


class InvalidNamespace(InvalidArgument, InvalidNamespaceError):
    """A namespace LangGraph's rules refuse (also LangGraph's own `InvalidNamespaceError`)."""


def _put_namespace(namespace: Any, *, public: bool = True) -> tuple[str, ...]:
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

    def __init__(self, cas: CompareAndSwap, cache_bytes: int = KNOWN_ITEM_WEIGHT) -> None:
        self.cas = cas
        """The compare-and-swap steps of the store's namespace (`langgraph-store`)."""
        if type(cache_bytes) is not int or cache_bytes < 1:
            raise ConfigurationError(f"cache_bytes is an int >= 1, not {described(cache_bytes)}")
        self.known: Lru[str, Found] = Lru(
            1 << 24, max_weight=cache_bytes, weigh=lambda found: found.weight
        )
        """Items read or saved lately, by id: a search GETs only those whose ETag changed."""

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
        """Return every item under the namespace `prefix`: a listing, then GETs of what changed.

        The listing's ETags say which items this store already holds as they are stored;
        only the others are read (in rounds of `READ_WIDTH`).
        """
        base = self.cas.layout.namespace_prefix(self.cas.namespace)
        pages = yield from every_key_page(base + namespace_prefix_id(prefix))
        held: list[Found] = []
        unread: list[str] = []
        for page in pages:
            etags: Sequence[str | None] = page.etags or [None] * len(page.keys)
            for key, etag in zip(page.keys, etags, strict=True):
                object_id = key[len(base) :]
                known = self.known.get(object_id)
                if known is not None and etag is not None and known.etag == etag:
                    held.append(known)
                elif "/" not in object_id and parse_item_id(object_id) is not None:
                    unread.append(object_id)  # (any other key is not an item's)
        for start in range(0, len(unread), READ_WIDTH):
            found = yield from self.read(unread[start : start + READ_WIDTH])
            held.extend(one for one in found if one is not None)
        return held

    def search(
        self, op: SearchOp, query: Sequence[float] | None, reading: Reading
    ) -> Steps[list[tuple[Found, float | None]]]:
        """Return a search's page of items, with their scores when there is a query."""
        prefix = check_namespace(op.namespace_prefix, what="namespace prefix")
        wanted = check_filter(op.filter)
        limit, offset = _page(op.limit, op.offset)
        found = yield from self.candidates(prefix)
        now = yield from ask(Now())
        found = [
            one
            for one in found
            if not (reading.omit_expired and one.item.expired(now))
            and matches(one.item.value, wanted)
        ]
        ranked: list[tuple[Found, float | None]]
        if query is None:
            found.sort(key=lambda one: (-one.envelope.updated_at.timestamp(), one.item.key))
            ranked = [(one, None) for one in found]
        else:
            ranked = _ranked(found, query)
        page = ranked[offset : offset + limit]
        if reading.refresh:
            refreshed = yield from self._kept([one for one, _ in page], reading)
            page = [
                (new, score)
                for new, (_, score) in zip(refreshed, page, strict=True)
                if new is not None
            ]
        return page

    def namespaces(self, op: ListNamespacesOp) -> Steps[list[tuple[str, ...]]]:
        """Return the namespaces that hold items, matched, cut to depth and paged."""
        conditions = [
            (str(c.match_type), check_namespace(c.path, what="match path"))
            for c in op.match_conditions or ()
        ]
        limit, offset = _page(op.limit, op.offset)
        if op.max_depth is not None and (type(op.max_depth) is not int or op.max_depth < 1):
            raise InvalidArgument(f"max_depth is an int >= 1, not {described(op.max_depth)}")
        ids = yield from self.cas.list_ids(namespace_prefix_id(literal_prefix(conditions)))
        found: set[tuple[str, ...]] = set()
        for object_id in ids:
            parsed = parse_item_id(object_id)
            if parsed is None:
                continue
            namespace = parsed[0]
            if all(namespace_matches(namespace, kind, path) for kind, path in conditions):
                found.add(namespace if op.max_depth is None else namespace[: op.max_depth])
        return sorted(found)[offset : offset + limit]

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
        object_id = item_id(_put_namespace(namespace, public=False), key)
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
        yield from self._save(object_id, lambda _current: item, create=True, blind=True)

    def update(
        self,
        namespace: tuple[str, ...],
        key: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        vectors_of: Callable[[dict[str, Any]], Vectors],
        ttl_minutes: float | None,
    ) -> Steps[Found | None]:
        """Replace an item by `change(current value)` (None: absent), retrying lost races.

        `change` runs again on the fresh value after every lost race, so no concurrent
        update is lost; returning None deletes nothing and writes nothing.
        """
        object_id = item_id(_put_namespace(namespace, public=False), key)
        now = yield from ask(Now())

        def changed(current: StoredItem | None) -> StoredItem | None:
            value = change(None if current is None else current.value)
            if value is None:
                return None
            if not isinstance(value, dict):
                raise InvalidArgument(f"update's change returns a dict, not {described(value)}")
            vectors = {path: vector_of(vector) for path, vector in vectors_of(value).items()}
            return StoredItem(namespace, key, value, vectors, ttl_minutes, expiry(now, ttl_minutes))

        return (yield from self._save(object_id, changed, create=True))

    def _save(
        self,
        object_id: str,
        change: Callable[[StoredItem | None], StoredItem | None],
        *,
        create: bool,
        blind: bool = False,
    ) -> Steps[Found | None]:
        """Save an item: update the head, or create the item where there is none.

        `blind`: `change` ignores the current item (a put), so where this store knows no
        head it tries a create first (one request for a new key); a create that finds the
        key taken updates the head it finds. Otherwise the head is read first, so `change`
        sees the stored value. An update that finds the item deleted meanwhile creates it
        again (when `create`). Both go through the one compare-and-swap engine: a lost
        race is retried on the fresh head, an ambiguous outcome judged by its write id.
        """
        attempts = self.cas.retry.max_attempts
        absent = blind
        for _ in range(attempts):
            known = self.known.get(object_id)
            if known is None and create and absent:
                item = change(None)
                if item is None:
                    return None
                envelope = Envelope.initial(object_id, None, KIND, SCHEMA_VERSION, item.payload())
                try:
                    yield from self.cas.compare_and_swap(envelope, None)
                except CheckpointConflict:
                    pass  # the key holds an item: update that one
                else:
                    return self._remember(object_id, envelope, item)

            def mutate(head: Envelope) -> Any:
                if head.kind != KIND:
                    raise InvalidPayload(
                        f"object is a {head.kind!r}, not a store item", object_name=object_id
                    )
                following = change(stored_item(object_id, head.payload))
                if following is None:
                    raise _Unchanged
                return following.payload()

            try:
                saved = yield from self.cas.update(
                    object_id, mutate, known=None if known is None else known.envelope
                )
            except _Unchanged:
                return None
            except CheckpointNotFound:
                self.known.pop(object_id)
                if not create:
                    return None
                absent = True
                continue  # no item (or deleted meanwhile): create it
            return self._remember(object_id, saved, stored_item(object_id, saved.payload))
        raise CheckpointConflict(object_id, expected_revision=None, actual_revision=None)

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
        self.known.pop(object_id)
        try:
            yield from self.cas.delete(object_id)
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
                by_refresh: dict[bool, list[int]] = {}
                for offset, get in enumerate(gets):
                    by_refresh.setdefault(bool(get.refresh_ttl), []).append(offset)
                for refresh, offsets in by_refresh.items():
                    found = yield from self.gets(
                        [(gets[o].namespace, str(gets[o].key)) for o in offsets],
                        Reading(refresh, omit),
                    )
                    for o, one in zip(offsets, found, strict=True):
                        results[index + o] = None if one is None else one.as_item()
                index = run
                continue
            if isinstance(op, PutOp):
                if op.value is None:
                    yield from self.delete(op.namespace, str(op.key))
                else:
                    yield from self.put(
                        op.namespace,
                        str(op.key),
                        op.value,
                        vectors.get(index, {}),
                        check_ttl(op.ttl),
                    )
            elif isinstance(op, SearchOp):
                page = yield from self.search(
                    op, queries.get(index), Reading(bool(op.refresh_ttl), omit)
                )
                results[index] = [one.as_item(score, scored=True) for one, score in page]
            elif isinstance(op, ListNamespacesOp):
                results[index] = yield from self.namespaces(op)
            else:
                raise InvalidArgument(f"not a store operation: {described(op)}")
            index += 1
        return results


class _Done:
    """An awaitable that is done at once (`await store.setup()` and `store.setup()` both work)."""

    def __await__(self) -> Iterator[None]:
        return iter(())


class _Unchanged(Exception):
    """An update's change returned None: nothing to write."""


def _page(limit: Any, offset: Any) -> tuple[int, int]:
    for name, value in (("limit", limit), ("offset", offset)):
        if type(value) is not int or value < 0:
            raise InvalidArgument(f"{name} is an int >= 0, not {described(value)}")
    return limit, offset


def _ranked(found: Sequence[Found], query: Sequence[float]) -> list[tuple[Found, float | None]]:
    """Rank items by their best vector's cosine similarity; items without vectors last."""
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


class _Config:
    """A store's index and TTL settings, and the work done before its steps run."""

    def __init__(self, index: IndexConfig | None, ttl: TTLConfig | None) -> None:
        self.index = None if index is None else dict(index)
        self.ttl: TTLConfig = dict(ttl or {})  # type: ignore[assignment]
        if ttl is not None:
            check_ttl(self.ttl.get("default_ttl"))
        self.embeddings = None
        self.fields: list[tuple[str, Any]] = []
        if index is not None:
            if "embed" not in index:
                raise ConfigurationError("an index config names its embed function ('embed')")
            self.embeddings = ensure_embeddings(index["embed"])
            dims = index.get("dims")
            if dims is not None and (type(dims) is not int or dims < 1):
                raise ConfigurationError(f"index dims is an int >= 1, not {described(dims)}")
            self.fields = [
                (path, path if path == "$" else tokenize_path(path))
                for path in (index.get("fields") or ["$"])
            ]

    def texts(self, ops: Sequence[Op]) -> list[tuple[int, str, str]]:
        """Return `(op index, vector path, text)` for every field the puts index."""
        if self.embeddings is None:
            return []
        found: list[tuple[int, str, str]] = []
        for position, op in enumerate(ops):
            if not isinstance(op, PutOp) or op.value is None or op.index is False:
                continue
            found += self.texts_of(position, op.value, op.index)
        return found

    def texts_of(
        self, position: int, value: dict[str, Any], index: list[str] | None
    ) -> list[tuple[int, str, str]]:
        """Return `(position, vector path, text)` for the indexed fields of one value."""
        if self.embeddings is None:
            return []
        paths = self.fields if index is None else [(p, tokenize_path(p)) for p in index]
        found: list[tuple[int, str, str]] = []
        for path, tokens in paths:
            texts = get_text_at_path(value, tokens)
            if len(texts) == 1:
                found.append((position, path, texts[0]))
            else:
                found += [(position, f"{path}.{i}", text) for i, text in enumerate(texts)]
        return found

    def checked(self, vectors: Sequence[Sequence[float]], wanted: int) -> list[list[float]]:
        """Return the embedding function's answer, refused if it is not what was asked."""
        dims = None if self.index is None else self.index.get("dims")
        if not isinstance(vectors, Sequence) or len(vectors) != wanted:
            raise ConfigurationError(
                f"the embedding function returned {described(vectors)} for {wanted} texts"
            )
        rows = [list(vector) for vector in vectors]
        for row in rows:
            if dims is not None and len(row) != dims:
                raise ConfigurationError(
                    f"the embedding function returned {len(row)} dimensions; the index says {dims}"
                )
        return rows

    def by_op(
        self, texts: Sequence[tuple[int, str, str]], rows: Sequence[Sequence[float]]
    ) -> dict[int, dict[str, Sequence[float]]]:
        """Group embedded texts by the op they came from."""
        vectors: dict[int, dict[str, Sequence[float]]] = {}
        for (position, path, _), row in zip(texts, rows, strict=True):
            vectors.setdefault(position, {})[path] = row
        return vectors

    def queries(self, ops: Sequence[Op]) -> dict[int, str]:
        """Return the query text of every search that has one (with an index)."""
        if self.embeddings is None:
            return {}
        return {
            position: op.query
            for position, op in enumerate(ops)
            if isinstance(op, SearchOp) and op.query
        }


def _purge_selector(namespace_prefix: Sequence[str], older_than: timedelta | None) -> Selector:
    """Return the purge selector of every item under a namespace prefix."""
    prefix = namespace_prefix_id(check_namespace(namespace_prefix, what="namespace prefix"))
    selector: Selector = {"prefix": prefix, "namespace": LANGGRAPH_STORE}
    if not prefix:
        selector["all_of_namespace"] = True
    if older_than is not None:
        selector["older_than"] = older_than
    return selector


def _listed(ops: Iterable[Op]) -> list[Op]:
    listed = list(ops)
    for op in listed:
        if isinstance(op, PutOp) and op.value is not None:
            _put_namespace(op.namespace, public=False)
    return listed


class StashpointStore(BaseStore):
    """LangGraph's `BaseStore` over a stash: long-term memory in a bucket or folder.

    A `put` is one conditional PUT for a new key or one this store has read or written; a
    `get` is one GET; a `search` lists the namespace prefix and GETs only the items it has
    not seen as they are stored. With `index` (LangGraph's `IndexConfig`: `embed`, `dims`,
    `fields`), puts store their fields' embeddings in the item and `search(query=...)`
    ranks by cosine similarity. With `ttl` (LangGraph's `TTLConfig`), items expire after
    their time to live, reads refresh it, and `sweep_ttl` deletes what has expired; an
    expired item is never returned (`omit_expired` defaults to True here). `cache_bytes`
    bounds the items it keeps in memory (`KNOWN_ITEM_WEIGHT`).
    """

    supports_ttl = True

    def __init__(
        self,
        stash: Stash,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        cache_bytes: int = KNOWN_ITEM_WEIGHT,
    ) -> None:
        self.stash = stash
        """The stash the items live in."""
        self._config = _Config(index, ttl)
        self.index_config = self._config.index
        """The index settings (None: no semantic search)."""
        self.ttl_config: TTLConfig = self._config.ttl
        """The TTL settings."""
        self.embeddings = self._config.embeddings
        """The embedding function, as LangChain `Embeddings` (None without an index)."""
        self._steps = StoreSteps(stash.head_steps(LANGGRAPH_STORE), cache_bytes)
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    @contextmanager
    def from_url(
        cls,
        url: str | None = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        cache_bytes: int = KNOWN_ITEM_WEIGHT,
        **options: Any,
    ) -> Iterator[StashpointStore]:
        """Open a stash from `url` (see `stashpoint.open`) and yield a store; close it after."""
        from stashpoint.stash import open as open_stash

        with open_stash(url, **options) as stash:
            store = cls(stash, index=index, ttl=ttl, cache_bytes=cache_bytes)
            try:
                yield store
            finally:
                store.stop_ttl_sweeper()

    @classmethod
    @contextmanager
    def from_conn_string(cls, url: str | None = None, **options: Any) -> Iterator[StashpointStore]:
        """`from_url` under the name LangGraph's Postgres and SQLite stores use."""
        with cls.from_url(url, **options) as store:
            yield store

    def setup(self) -> None:
        """Do nothing: a stash needs no tables or migrations (kept for SQL stores' code)."""

    @property
    def steps(self) -> StoreSteps:
        """Return the store's operations as steps."""
        return self._steps

    def _run(self, steps: Steps[Any]) -> Any:
        return run_sync(steps, self.stash.driver)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run store operations in order (consecutive gets in one round)."""
        listed = _listed(ops)
        texts = self._config.texts(listed)
        vectors: dict[int, dict[str, Sequence[float]]] = {}
        if texts:
            assert self.embeddings is not None
            rows = self.embeddings.embed_documents([text for _, _, text in texts])
            vectors = self._config.by_op(texts, self._config.checked(rows, len(texts)))
        queries: dict[int, Sequence[float]] = {}
        for position, text in self._config.queries(listed).items():
            assert self.embeddings is not None
            queries[position] = self._config.checked([self.embeddings.embed_query(text)], 1)[0]
        return self._run(self._steps.batch(listed, vectors, queries, self.ttl_config))  # type: ignore[no-any-return]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` on a worker thread."""
        listed = list(ops)
        return await asyncio.to_thread(self.batch, listed)

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        index: Any = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """Store an item (replacing any); see LangGraph's `BaseStore.put`."""
        _put_namespace(namespace)
        super().put(namespace, key, value, index, ttl=ttl)

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        index: Any = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """Store an item (replacing any); see LangGraph's `BaseStore.aput`."""
        _put_namespace(namespace)
        await super().aput(namespace, key, value, index, ttl=ttl)

    def update(
        self,
        namespace: tuple[str, ...],
        key: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> Item | None:
        """Replace an item with `change(current value or None)`; no concurrent update is lost.

        Beyond LangGraph's interface: a read-modify-write (a counter, a profile merged with
        new facts) that retries on the fresh value when another writer saved first, so two
        writers never both start from the same value. `change` may run several times; it
        returns the new value, or None to write nothing. Returns the item saved (None if
        nothing was written).
        """
        _put_namespace(namespace)
        minutes = check_ttl(self.ttl_config.get("default_ttl") if ttl is NOT_PROVIDED else ttl)

        def vectors_of(value: dict[str, Any]) -> Vectors:
            texts = self._config.texts_of(0, value, None)
            if not texts:
                return {}
            assert self.embeddings is not None
            rows = self.embeddings.embed_documents([text for _, _, text in texts])
            return self._config.by_op(texts, self._config.checked(rows, len(texts))).get(0, {})

        found = self._run(self._steps.update(namespace, key, change, vectors_of, minutes))
        return None if found is None else found.as_item()

    def sweep_ttl(self) -> int:
        """Delete every item whose time to live has run out; return how many went."""
        return self._run(self._steps.sweep())  # type: ignore[no-any-return]

    def purge(
        self,
        namespace_prefix: Sequence[str],
        *,
        older_than: timedelta | None = None,
        reusable: bool = True,
    ) -> PurgeReceipt:
        """Erase for good every item under `namespace_prefix`, every stored version of it.

        A user's memories (`("memories", user_id)`) go whole, with a receipt, through the
        stash's purge (`Stash.purge`); with `older_than`, only items last written longer
        ago. Deleting an item (`delete`) hides it from reads but leaves its older versions
        in a versioned bucket; a purge leaves none. The application may store new items
        under the same keys afterwards (a user who asked to be forgotten and goes on
        chatting); `reusable=False` refuses every later write to them (`Purged`).
        """
        return self.stash.purge(reusable=reusable, **_purge_selector(namespace_prefix, older_than))

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep expired items on a daemon thread until `stop_ttl_sweeper` is called.

        Every `sweep_interval_minutes` (default: the TTL config's, else 5); the `from_url`
        block stops it when it ends.
        """
        if self._sweeper is not None:
            return
        minutes = sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5
        check_ttl(minutes)
        self._stop.clear()

        def sweep_until_stopped() -> None:
            while not self._stop.wait(float(minutes) * 60):
                try:
                    self.sweep_ttl()
                except Exception:  # a failed sweep is retried at the next interval
                    continue

        self._sweeper = threading.Thread(
            target=sweep_until_stopped, name="stashpoint-store-sweeper", daemon=True
        )
        self._sweeper.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; return whether it has stopped within `timeout`."""
        sweeper = self._sweeper
        if sweeper is None:
            return True
        self._stop.set()
        sweeper.join(timeout)
        if sweeper.is_alive():
            return False
        self._sweeper = None
        return True


class AsyncStashpointStore(BaseStore):
    """The asyncio twin of `StashpointStore`, over an `AsyncStash`.

    Its blocking methods may be called from other threads while its event loop runs; from
    the loop's own thread they raise (await the `a...` methods there).
    """

    supports_ttl = True

    def __init__(
        self,
        stash: AsyncStash,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        cache_bytes: int = KNOWN_ITEM_WEIGHT,
    ) -> None:
        self.stash = stash
        """The stash the items live in."""
        self._config = _Config(index, ttl)
        self.index_config = self._config.index
        """The index settings (None: no semantic search)."""
        self.ttl_config: TTLConfig = self._config.ttl
        """The TTL settings."""
        self.embeddings = self._config.embeddings
        """The embedding function, as LangChain `Embeddings` (None without an index)."""
        self._steps = StoreSteps(stash.head_steps(LANGGRAPH_STORE), cache_bytes)
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            """The event loop blocking calls are handed to (the one it was made on)."""
        except RuntimeError:
            self.loop = None

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls,
        url: str | None = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        cache_bytes: int = KNOWN_ITEM_WEIGHT,
        **options: Any,
    ) -> AsyncIterator[AsyncStashpointStore]:
        """Open an async stash from `url` and yield a store; close it after."""
        from stashpoint.stash import open_async

        async with open_async(url, **options) as stash:
            yield cls(stash, index=index, ttl=ttl, cache_bytes=cache_bytes)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, url: str | None = None, **options: Any
    ) -> AsyncIterator[AsyncStashpointStore]:
        """`from_url` under the name LangGraph's Postgres and SQLite stores use."""
        async with cls.from_url(url, **options) as store:
            yield store

    def setup(self) -> _Done:
        """Do nothing: a stash needs no tables or migrations (awaitable, or called plainly)."""
        return _Done()

    @property
    def steps(self) -> StoreSteps:
        """Return the store's operations as steps."""
        return self._steps

    async def _arun(self, steps: Steps[Any]) -> Any:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        return await run_async(steps, self.stash.driver)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run store operations in order (consecutive gets in one round)."""
        listed = _listed(ops)
        texts = self._config.texts(listed)
        vectors: dict[int, dict[str, Sequence[float]]] = {}
        if texts:
            assert self.embeddings is not None
            rows = await self.embeddings.aembed_documents([text for _, _, text in texts])
            vectors = self._config.by_op(texts, self._config.checked(rows, len(texts)))
        queries: dict[int, Sequence[float]] = {}
        for position, text in self._config.queries(listed).items():
            assert self.embeddings is not None
            row = await self.embeddings.aembed_query(text)
            queries[position] = self._config.checked([row], 1)[0]
        return await self._arun(self._steps.batch(listed, vectors, queries, self.ttl_config))  # type: ignore[no-any-return]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """`abatch`, from a thread other than the event loop's."""
        listed = list(ops)
        return on_loop(self.loop, lambda: self.abatch(listed), type(self).__name__)  # type: ignore[no-any-return]

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        index: Any = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """Store an item (replacing any); see LangGraph's `BaseStore.aput`."""
        _put_namespace(namespace)
        await super().aput(namespace, key, value, index, ttl=ttl)

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        index: Any = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """Store an item (replacing any), from a thread other than the event loop's."""
        _put_namespace(namespace)
        super().put(namespace, key, value, index, ttl=ttl)

    async def aupdate(
        self,
        namespace: tuple[str, ...],
        key: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> Item | None:
        """`StashpointStore.update`, awaited (embeddings by the index's blocking function)."""
        _put_namespace(namespace)
        minutes = check_ttl(self.ttl_config.get("default_ttl") if ttl is NOT_PROVIDED else ttl)

        def vectors_of(value: dict[str, Any]) -> Vectors:
            texts = self._config.texts_of(0, value, None)
            if not texts:
                return {}
            assert self.embeddings is not None
            rows = self.embeddings.embed_documents([text for _, _, text in texts])
            return self._config.by_op(texts, self._config.checked(rows, len(texts))).get(0, {})

        found = await self._arun(self._steps.update(namespace, key, change, vectors_of, minutes))
        return None if found is None else found.as_item()

    async def asweep_ttl(self) -> int:
        """Delete every item whose time to live has run out; return how many went."""
        return await self._arun(self._steps.sweep())  # type: ignore[no-any-return]

    async def apurge(
        self,
        namespace_prefix: Sequence[str],
        *,
        older_than: timedelta | None = None,
        reusable: bool = True,
    ) -> PurgeReceipt:
        """`StashpointStore.purge`, awaited."""
        return await self.stash.purge(
            reusable=reusable, **_purge_selector(namespace_prefix, older_than)
        )
