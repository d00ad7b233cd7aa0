"""`StashpointStore` and `AsyncStashpointStore`: LangGraph's long-term memory on a stash.

LangGraph's other persistence interface, `BaseStore` (memories shared across threads:
`put`, `get`, `delete`, `search`, `list_namespaces`, `batch`), over any stash: memory,
local folder, S3. Each item is one head envelope (`langgraph.items`) saved by the stash's
compare-and-swap engine, so a put is one conditional PUT (`If-None-Match` for a new key,
`If-Match` on the ETag this store last saw for a known one), a lost race is retried on
the fresh head, and an ambiguous write is judged by its write id like every other save.

`StoreSteps` (`langgraph.store_steps`) holds the operations as steps (no I/O); the two
classes here drive them, one blocking and one with asyncio, and compute embeddings with
the application's function before the steps run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    IndexConfig,
    Item,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from stashpoint.errors import ConfigurationError, InvalidArgument, described
from stashpoint.langgraph.items import check_namespace, check_ttl, namespace_prefix_id
from stashpoint.langgraph.loop import on_loop
from stashpoint.langgraph.store_steps import (
    KNOWN_ITEM_WEIGHT,
    Found,
    InvalidNamespace,
    StoreSteps,
    Vectors,
    check_put_namespace,
)
from stashpoint.steps import Steps, run_async, run_sync
from stashpoint.stores.layout import LANGGRAPH_STORE, LANGGRAPH_STORE_CATALOG

__all__ = ["AsyncStashpointStore", "InvalidNamespace", "StashpointStore"]

if TYPE_CHECKING:
    from stashpoint.maintenance.purge import PurgeReceipt, Selector
    from stashpoint.stash import AsyncStash, Stash


class _Done:
    """An awaitable that is done at once (`await store.setup()` and `store.setup()` both work)."""

    def __await__(self) -> Iterator[None]:
        return iter(())


class _Config:
    """A store's index and TTL settings, and the work done before its steps run."""

    def __init__(self, index: IndexConfig | None, ttl: TTLConfig | None) -> None:
        for name, given in (("index", index), ("ttl", ttl)):
            if given is not None and not isinstance(given, Mapping):
                raise ConfigurationError(
                    f"{name} is a dict (LangGraph's config), not {described(given)}"
                )
        self.index = None if index is None else dict(index)
        self.ttl: TTLConfig = dict(ttl or {})  # type: ignore[assignment]
        if ttl is not None:
            try:
                check_ttl(self.ttl.get("default_ttl"))
            except InvalidArgument as exc:
                raise ConfigurationError(f"ttl default_ttl: {exc}") from None
        self.embeddings = None
        self.fields: list[tuple[str, Any]] = []
        if index is not None:
            self.embeddings, self.fields = _index_parts(index)

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


@dataclass(frozen=True, slots=True)
class _Plan:
    """A batch, checked, with what must be embedded before its steps run (found once)."""

    ops: list[Op]
    texts: list[tuple[int, str, str]]
    """`(op index, vector path, text)` of every field its puts index."""
    queries: dict[int, str]
    """The query text of each search that has one, by op index."""

    def documents(self) -> list[str]:
        """Return the texts to embed as documents, in order."""
        return [text for _, _, text in self.texts]


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
            check_put_namespace(op.namespace, public=False)
    return listed


class _StoreApi(BaseStore):
    """What both store classes are, defined once: settings, steps, embeddings, validation."""

    supports_ttl = True

    def __init__(
        self,
        stash: Stash | AsyncStash,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        cache_bytes: int = KNOWN_ITEM_WEIGHT,
    ) -> None:
        self._config = _Config(index, ttl)
        self.index_config = self._config.index
        """The index settings (None: no semantic search)."""
        self.ttl_config: TTLConfig = self._config.ttl
        """The TTL settings."""
        self.embeddings = self._config.embeddings
        """The embedding function, as LangChain `Embeddings` (None without an index)."""
        self._steps = StoreSteps(
            stash.head_steps(LANGGRAPH_STORE),
            cache_bytes,
            catalogs=stash.head_steps(LANGGRAPH_STORE_CATALOG),
            tenant=stash.tenant_of(LANGGRAPH_STORE),
        )

    @property
    def steps(self) -> StoreSteps:
        """Return the store's operations as steps."""
        return self._steps

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
        check_put_namespace(namespace)
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
        check_put_namespace(namespace)
        await super().aput(namespace, key, value, index, ttl=ttl)

    def _batch_steps(
        self, plan: _Plan, rows: Sequence[Sequence[float]], queries: Sequence[Sequence[float]]
    ) -> Steps[list[Result]]:
        """Return the steps of a batch, given the embeddings of its texts and queries."""
        vectors = self._config.by_op(plan.texts, self._config.checked(rows, len(plan.texts)))
        embedded = self._config.checked(queries, len(plan.queries))
        by_query = dict(zip(plan.queries, embedded, strict=True))
        return self._steps.batch(plan.ops, vectors, by_query, self.ttl_config)

    def _update_steps(
        self,
        namespace: tuple[str, ...],
        key: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        ttl: float | NotProvided | None,
        max_attempts: int | None,
    ) -> Steps[Found | None]:
        """Return the steps of `update` (its embeddings by the index's blocking function)."""
        if max_attempts is not None and (type(max_attempts) is not int or max_attempts < 1):
            raise InvalidArgument(f"max_attempts is an int >= 1, not {described(max_attempts)}")
        check_put_namespace(namespace)
        minutes = check_ttl(self.ttl_config.get("default_ttl") if ttl is NOT_PROVIDED else ttl)

        def vectors_of(value: dict[str, Any]) -> Vectors:
            texts = self._config.texts_of(0, value, None)
            if not texts:
                return {}
            assert self.embeddings is not None
            rows = self.embeddings.embed_documents([text for _, _, text in texts])
            return self._config.by_op(texts, self._config.checked(rows, len(texts))).get(0, {})

        return self._steps.update(namespace, key, change, vectors_of, minutes, max_attempts)

    def _to_embed(self, ops: Iterable[Op]) -> _Plan:
        """Return a batch's ops (checked) with the texts its puts index and its queries."""
        listed = _listed(ops)
        return _Plan(listed, self._config.texts(listed), self._config.queries(listed))


class StashpointStore(_StoreApi):
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

    def __init__(
        self,
        stash: Stash,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        cache_bytes: int = KNOWN_ITEM_WEIGHT,
    ) -> None:
        super().__init__(stash, index=index, ttl=ttl, cache_bytes=cache_bytes)
        self.stash = stash
        """The stash the items live in."""
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

    def _run(self, steps: Steps[Any]) -> Any:
        return run_sync(steps, self.stash.driver)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run store operations in order (consecutive gets in one round)."""
        plan = self._to_embed(ops)
        embed, texts = self.embeddings, plan.documents()
        rows = embed.embed_documents(texts) if texts and embed is not None else []
        asked = [embed.embed_query(q) for q in plan.queries.values()] if embed else []
        return self._run(self._batch_steps(plan, rows, asked))  # type: ignore[no-any-return]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` on a worker thread."""
        listed = list(ops)
        return await asyncio.to_thread(self.batch, listed)

    def update(
        self,
        namespace: tuple[str, ...],
        key: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
        max_attempts: int | None = None,
    ) -> Item | None:
        """Replace an item with `change(current value or None)`; no concurrent update is lost.

        Beyond LangGraph's interface: a read-modify-write (a counter, a profile merged with
        new facts) that retries on the fresh value when another writer saved first, so two
        writers never both start from the same value. `change` may run several times; it
        returns the new value, or None to write nothing. Returns the item saved (None if
        nothing was written). After `max_attempts` lost races (default
        `store_steps.UPDATE_ATTEMPTS`, 64) the last `CheckpointConflict` is raised.
        """
        found = self._run(self._update_steps(namespace, key, change, ttl, max_attempts))
        return None if found is None else found.as_item()

    def sweep_ttl(self) -> int:
        """Delete every item whose time to live has run out; return how many went."""
        return self._run(self._steps.sweep())  # type: ignore[no-any-return]

    def reindex(self, namespace_prefix: Sequence[str] = ()) -> int:
        """Rebuild the catalog of every namespace under `namespace_prefix` from its items.

        Catalogs are derived copies a cold search reads instead of one GET per item
        (`docs/langgraph-store.md`); searches keep them current on their own. Returns how
        many were written; a catalog of a namespace with no item left is deleted.
        """
        return self._run(self._steps.reindex(namespace_prefix))  # type: ignore[no-any-return]

    def purge(
        self,
        namespace_prefix: Sequence[str],
        *,
        older_than: timedelta | None = None,
        reusable: bool = True,
    ) -> PurgeReceipt:
        """Erase for good every item under `namespace_prefix`, every stored version of it.

        A user's memories (`("memories", user_id)`) go whole, with a receipt, through the
        stash's purge (`Admin.purge`); with `older_than`, only items last written longer
        ago. Deleting an item (`delete`) hides it from reads but leaves its older versions
        in a versioned bucket; a purge leaves none. The application may store new items
        under the same keys afterwards (a user who asked to be forgotten and goes on
        chatting); `reusable=False` refuses every later write to them (`Purged`).
        """
        return self.stash.admin.purge(
            reusable=reusable, **_purge_selector(namespace_prefix, older_than)
        )

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


class AsyncStashpointStore(_StoreApi):
    """The asyncio twin of `StashpointStore`, over an `AsyncStash`.

    Its blocking methods may be called from other threads while its event loop runs; from
    the loop's own thread they raise (await the `a...` methods there).
    """

    def __init__(
        self,
        stash: AsyncStash,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        cache_bytes: int = KNOWN_ITEM_WEIGHT,
    ) -> None:
        super().__init__(stash, index=index, ttl=ttl, cache_bytes=cache_bytes)
        self.stash = stash
        """The stash the items live in."""
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

    async def _arun(self, steps: Steps[Any]) -> Any:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        return await run_async(steps, self.stash.driver)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run store operations in order (consecutive gets in one round)."""
        plan = self._to_embed(ops)
        embed, texts = self.embeddings, plan.documents()
        rows = await embed.aembed_documents(texts) if texts and embed is not None else []
        asked = [await embed.aembed_query(q) for q in plan.queries.values()] if embed else []
        return await self._arun(self._batch_steps(plan, rows, asked))  # type: ignore[no-any-return]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """`abatch`, from a thread other than the event loop's."""
        listed = list(ops)
        return on_loop(self.loop, lambda: self.abatch(listed), type(self).__name__)  # type: ignore[no-any-return]

    async def aupdate(
        self,
        namespace: tuple[str, ...],
        key: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
        max_attempts: int | None = None,
    ) -> Item | None:
        """`StashpointStore.update`, awaited (embeddings by the index's blocking function)."""
        found = await self._arun(self._update_steps(namespace, key, change, ttl, max_attempts))
        return None if found is None else found.as_item()

    async def asweep_ttl(self) -> int:
        """Delete every item whose time to live has run out; return how many went."""
        return await self._arun(self._steps.sweep())  # type: ignore[no-any-return]

    async def areindex(self, namespace_prefix: Sequence[str] = ()) -> int:
        """`StashpointStore.reindex`, awaited."""
        return await self._arun(self._steps.reindex(namespace_prefix))  # type: ignore[no-any-return]

    async def apurge(
        self,
        namespace_prefix: Sequence[str],
        *,
        older_than: timedelta | None = None,
        reusable: bool = True,
    ) -> PurgeReceipt:
        """`StashpointStore.purge`, awaited."""
        return await self.stash.admin.purge(
            reusable=reusable, **_purge_selector(namespace_prefix, older_than)
        )


def _index_parts(index: IndexConfig) -> tuple[Any, list[tuple[str, Any]]]:
    """Return an index config's embeddings and its fields (each path, tokenized)."""
    if "embed" not in index:
        raise ConfigurationError("an index config names its embed function ('embed')")
    try:
        embeddings = ensure_embeddings(index["embed"])
    except (ImportError, TypeError, ValueError) as exc:
        # A provider string needs LangChain's `init_embeddings` (and its package).
        raise ConfigurationError(f"index embed cannot be used: {exc}") from None
    dims = index.get("dims")
    if dims is not None and (type(dims) is not int or dims < 1):
        raise ConfigurationError(f"index dims is an int >= 1, not {described(dims)}")
    return embeddings, _fields(index.get("fields") or ["$"])


def _fields(fields: Any) -> list[tuple[str, Any]]:
    """Return an index config's fields, each path with its tokens (`$`: the whole value)."""
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise ConfigurationError(f"index fields is a list of str, not {described(fields)}")
    try:
        return [(path, path if path == "$" else tokenize_path(path)) for path in fields]
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"index fields cannot be read: {exc}") from None
