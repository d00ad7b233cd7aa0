"""Opening a stash: one URL in, a `Stash` (or `AsyncStash`) with its stores out.

Nothing here touches the network: clients are created lazily and reused for the life of
the stash (Lambda cold starts, one long-lived client per process).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import TracebackType, UnionType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, Unpack

from stashpoint._backends.router import AsyncRouter, Hook, Router
from stashpoint.clock import REAL, Clock
from stashpoint.codec import DEFAULT_LIMITS, Codec, Limits
from stashpoint.composition import Backend, EngineFiles, backend_of, split_options
from stashpoint.errors import ConfigurationError, InvalidArgument, described
from stashpoint.progress import OnProgress, silent
from stashpoint.randomness import SYSTEM, Randomness
from stashpoint.retry import DEFAULT_RETRY, RetryPolicy
from stashpoint.steps import Steps, run_async, run_sync
from stashpoint.stores.cas import CompareAndSwap, EtagCache
from stashpoint.stores.layout import (
    CHECKPOINTS,
    LOGS,
    NAMESPACES,
    QUARANTINE,
    Layout,
    Shape,
    of_shape,
)
from stashpoint.stores.providers import Provider
from stashpoint.stores.store import AsyncStore, Store
from stashpoint.twins import Awaiting, Blocking
from stashpoint.url import parse_url, resolve_url, shown

if TYPE_CHECKING:  # runs, index and maintenance load on first use (Lambda cold starts)
    from stashpoint._backends.conformance import Conformance
    from stashpoint.admin import Admin, AsyncAdmin
    from stashpoint.background import BackgroundSealer, TaskBackground, ThreadBackground
    from stashpoint.encryption import Encryption, Sealer
    from stashpoint.logs.log import LogSteps
    from stashpoint.logs.repair import LogRepair
    from stashpoint.logs.store import AsyncLogStore, LogStore
    from stashpoint.maintenance.doctor import Check
    from stashpoint.maintenance.garbage import GcReport
    from stashpoint.maintenance.purge import Purger, PurgeReceipt
    from stashpoint.runs.store import AsyncRunStore, RunStore

_CLOSING_PRUNE_AT = 64
"""`on_close` methods held before the dead ones are dropped (amortised: a stash that makes a
session per request keeps only those alive)."""

StoreT = TypeVar("StoreT", Store, AsyncStore)
LogStoreT = TypeVar("LogStoreT", "LogStore", "AsyncLogStore")
RunsT = TypeVar("RunsT", "RunStore", "AsyncRunStore")
T = TypeVar("T")


@dataclass(frozen=True)
class Options:
    """Settings shared by every backend; backend-specific ones go in `backend`."""

    limits: Limits = DEFAULT_LIMITS
    """Size and depth bounds for envelopes."""
    retry: RetryPolicy = DEFAULT_RETRY
    """Retry policy for conflicts on the wire and resends."""
    compression_level: int = 3
    """zstd level for new envelopes."""
    log_delete_after: timedelta = timedelta(hours=1)
    """Deprecated, without effect: no delay protects anything since clean-up never frees a
    key (`vacate_sealed_entries`). Accepted so that existing callers keep working."""
    clock: Clock = REAL
    """What the stash answers the logic's time requests with: the system's clocks, or a
    `stashpoint.clock.FakeClock` in tests of leases, waits and retries."""
    randomness: Randomness = SYSTEM
    """What the stash answers the logic's id requests with: the operating system's, or a
    `stashpoint.randomness.SeededRandomness` in tests that want the same ids every run."""
    vacate_sealed_entries: bool = False
    """Replace each sealed log entry by a small marker once its segment is stored (its key
    stays occupied), so a log's bytes at rest are about its segments'. Costs one more PUT
    per version (S3 charges PUTs, not DELETEs); off, entries stay whole beside their
    segments (twice the bytes of the hot prefix, no extra request)."""
    log_read_cache_bytes: int = 16 * 1024 * 1024
    """Stored bytes of log entries a process keeps, per log namespace, after reading them:
    a later read takes one from memory while the listing names the same object (its ETag),
    so a writer that lost a race reads only the versions written since. 0 keeps none, and
    reads take no entry from memory (a process short of memory: every read GETs every entry
    it needs)."""
    encryption: Encryption | None = None
    """Client-side encryption of every stored object (`stashpoint.encryption`): key rules
    per tenant, a local keyring or AWS KMS. None: objects are stored as zstd JSON (use the
    bucket's SSE for encryption at rest); also the `encryption=PATH` URL option."""
    erasure_key: bytes | str | None = None
    """The secret purge receipts are sealed with, so maintenance obeys only receipts the
    erasing identity wrote (`stashpoint.maintenance.receipt_seal`): at least 32 bytes or
    characters, or `file:PATH`; default: `STASHPOINT_ERASURE_KEY`, else a key of the stash's
    own for a local folder or `memory://`, else none (S3: `gc` then obeys no receipt)."""
    backend: dict[str, Any] = field(default_factory=dict)
    """Backend options (S3: `client_config`, `sse`, `kms_key_id`, `storage_class`,
    `endpoint_url`...; index: `index_endpoint_url`, `index_client_config`; `ttl_days`,
    `blob_threshold`, `nested_prefix`)."""

    def __post_init__(self) -> None:
        """Validate every setting once: `open` and `Stash(url, Options(...))` agree."""
        _check_int(self.compression_level, "compression_level", "an int from -7 to 22", -7, 22)
        for field_name, kind, what in _OPTION_TYPES:
            if not isinstance(getattr(self, field_name), kind):
                raise ConfigurationError(f"{field_name} must be {what}")
        if self.log_delete_after < timedelta(0):
            raise ConfigurationError("log_delete_after must be a timedelta >= 0")
        _check_int(self.log_read_cache_bytes, "log_read_cache_bytes", "an int >= 0", 0, None)
        if self.encryption is not None:
            from stashpoint.encryption import Encryption

            if not isinstance(self.encryption, Encryption):
                raise ConfigurationError("encryption must be a stashpoint.encryption.Encryption")


_OPTION_TYPES: tuple[tuple[str, type | UnionType, str], ...] = (
    ("limits", Limits, "a stashpoint.Limits"),
    ("retry", RetryPolicy, "a stashpoint.RetryPolicy"),
    ("log_delete_after", timedelta, "a timedelta >= 0"),
    ("clock", Clock, "a stashpoint.clock.Clock"),
    ("randomness", Randomness, "a stashpoint.randomness.Randomness"),
    ("vacate_sealed_entries", bool, "a bool"),
    ("backend", dict, "a dict of backend options"),
    ("erasure_key", bytes | str | None, "bytes, a str, or 'file:PATH'"),
)
"""Each option of one type: its name, the type, and what the error says it must be."""


def _check_int(value: object, name: str, what: str, low: int, high: int | None) -> None:
    """Refuse an option that is not an int from `low` to `high` (None: no upper bound)."""
    if type(value) is not int or value < low or (high is not None and value > high):
        raise ConfigurationError(f"{name} must be {what}, not {described(value)}")


class Interception:
    """A hook in a stash's request path (`Stash.intercept`); `remove()` takes it out."""

    def __init__(self, router: Router | AsyncRouter, hook: Hook) -> None:
        self._router = router
        self._hook = hook
        router.hooks = (*router.hooks, hook)

    def remove(self) -> None:
        """Take the hook out (idempotent)."""
        self._router.hooks = tuple(h for h in self._router.hooks if h is not self._hook)

    def __enter__(self) -> Interception:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class _Parts:
    """What a stash is made of, built once from its URL and options."""

    def __init__(self, url: str | None, options: Options) -> None:
        self.url = resolve_url(url)
        parsed = parse_url(self.url)
        object_options, own = split_options(parsed, options.backend)
        self.backend = backend_of(parsed, object_options, own)
        self.codec = Codec(options.limits, level=options.compression_level)
        self.retry = options.retry
        self.vacate_sealed = options.vacate_sealed_entries
        self.log_read_cache_bytes = options.log_read_cache_bytes
        self.sealer = self._sealer(options.encryption, own.get("encryption"))
        self.erasure_key_option = options.erasure_key
        if self.sealer is not None:
            self.backend = self._encrypted(
                self.backend, self.sealer, options.clock, options.randomness
            )
        self.cache = EtagCache()
        ttl_days = _number(own.get("ttl_days"), "ttl_days", float)
        self.ttl_seconds = None if ttl_days is None else int(ttl_days * 86400)
        threshold = _number(own.get("blob_threshold"), "blob_threshold", int)
        self.blob_threshold = None if threshold is None else int(threshold)

    def _sealer(self, encryption: Encryption | None, path: Any) -> Sealer | None:
        """Return the encryption's logic: from `Options.encryption`, else the URL's file."""
        if encryption is None and path in (None, ""):
            import os

            path = os.environ.get("STASHPOINT_ENCRYPTION") or None
        if encryption is None and path is None:
            return None
        from stashpoint.encryption import Encryption, Sealer

        if encryption is None:
            if not isinstance(path, str | Path):
                raise ConfigurationError("the encryption option must be a file path")
            encryption = Encryption.from_file(path)
        elif path not in (None, ""):
            raise ConfigurationError("give encryption once: as an option or in the URL")
        return Sealer(encryption, self.backend.layout, self.codec, self.retry)

    @staticmethod
    def _encrypted(
        backend: Backend, sealer: Sealer, clock: Clock, randomness: Randomness
    ) -> Backend:
        """Return the backend with its object transports wrapped to seal and open."""
        from stashpoint._backends.encrypting import (
            AsyncEncryptingTransport,
            EncryptingTransport,
            KeyServices,
        )

        keys = KeyServices(sealer)
        return dataclasses.replace(
            backend,
            objects=lambda: EncryptingTransport(backend.objects(), sealer, keys, clock, randomness),
            async_objects=lambda: AsyncEncryptingTransport(
                backend.async_objects(), sealer, keys, clock, randomness
            ),
        )

    @property
    def blob_tenant(self) -> Callable[[str], str | None]:
        """The tenant whose key seals a run's blobs (None without encryption)."""
        from stashpoint.stores.layout import RUN_LOGS

        return self.tenant_of(RUN_LOGS)

    def tenant_of(self, namespace: str) -> Callable[[str], str | None]:
        """Return the tenant whose key seals an id of `namespace` (None without encryption)."""
        sealer = self.sealer
        if sealer is None:
            return lambda object_id: None
        return lambda object_id: sealer.encryption.rule_for(namespace, object_id).tenant

    def cas(self, namespace: str) -> CompareAndSwap:
        return CompareAndSwap(
            namespace,
            self.backend.layout,
            self.codec,
            self.retry,
            self.cache,
            conditional_delete=self.backend.provider.conditional_delete,
            seeks=self.backend.provider.seeks,
            any_delimiter=self.backend.provider.any_delimiter,
        )

    def logs(self, namespace: str) -> LogSteps:
        from stashpoint.logs.format import LogKeys
        from stashpoint.logs.log import LogSteps

        settings = NAMESPACES[namespace]
        if settings.shape is not Shape.LOGS:
            raise ValueError(f"{namespace!r} is not a log namespace")
        keys = LogKeys(self.backend.layout, namespace)
        return LogSteps(
            keys,
            self.codec,
            self.retry,
            full_state_every=settings.full_state_every,
            life_field=settings.life_field,
            vacate_sealed=self.vacate_sealed,
            overhead=None if self.sealer is None else self.sealer.overhead,
            seeks=self.backend.provider.seeks,
            read_cache_bytes=self.log_read_cache_bytes,
        )

    def gc(
        self,
        dry_run: bool,
        min_age: timedelta,
        history: bool,
        on_progress: OnProgress,
        pack: bool = False,
    ) -> Steps[GcReport]:
        """Finish the purges a crash left open (idle past `min_age`), then collect."""
        import dataclasses

        purger = self.purger()
        finished: list[PurgeReceipt] = []
        swept = 0
        if dry_run:
            still_open = yield from purger.open_purges()
        else:
            finished, still_open, swept = yield from purger.maintain(min_age)
        report = yield from self.collect(dry_run, min_age, history, on_progress, pack)
        return dataclasses.replace(
            report,
            purges_resumed=len(finished),
            open_purges=still_open,
            purge_leftovers=swept,
            unreadable_receipts=purger.unreadable_receipts,
            unsealed_receipts=purger.unsealed_receipts,
        )

    def collect(
        self,
        dry_run: bool,
        min_age: timedelta,
        history: bool,
        on_progress: OnProgress,
        pack: bool = False,
    ) -> Steps[GcReport]:
        from stashpoint.maintenance.garbage import collect_garbage

        return collect_garbage(
            self.backend.layout,
            self.codec,
            tuple(n.name for n in of_shape(Shape.HEADS) if n.references_blobs),
            dry_run=dry_run,
            min_age=min_age,
            history=history,
            logs=tuple(self.logs(namespace.name) for namespace in of_shape(Shape.LOGS)),
            blob_logs=tuple(n.name for n in of_shape(Shape.LOGS) if n.references_blobs),
            on_progress=on_progress,
            pack=pack and not dry_run,
        )

    def purger(self, blob_min_age: timedelta = timedelta(hours=1)) -> Purger:
        from stashpoint.maintenance.purge import Purger

        def garbage() -> Steps[GcReport]:
            return self.collect(True, blob_min_age, False, silent)

        return Purger(
            self.backend.layout,
            self.codec,
            self.logs,
            self.cas,
            garbage,
            has_index=self.backend.index is not None,
            encryption=None if self.sealer is None else self.sealer.encryption,
            erasure_key=self.erasure_key(),
            beyond_reach=self.backend.provider.beyond_purge,
        )

    def erasure_key(self) -> bytes | None:
        """Return the erasure key receipts are sealed with: the option's, else the stash's."""
        from stashpoint.maintenance import receipt_seal

        key = receipt_seal.resolve(self.erasure_key_option)
        if key is None and self.backend.erasure_key is not None:
            key = self.backend.erasure_key()
        return key

    def actor(self) -> str:
        """Who the caller is, for receipts: the cloud identity, else `user@host`."""
        import getpass
        import socket

        identity = self.backend.identity()
        if identity:
            return identity
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "unknown"
        return f"{user}@{socket.gethostname()}"

    def repair_log(self, namespace: str, log_id: str, dry_run: bool) -> Steps[LogRepair]:
        from stashpoint.logs.repair import repair_log

        logs = self.logs(_log_namespace(namespace))
        quarantine = self.backend.layout.namespace_prefix(QUARANTINE)
        return repair_log(logs, log_id, quarantine_prefix=quarantine, dry_run=dry_run)

    def doctor(self) -> Steps[list[Check]]:
        from stashpoint.maintenance.doctor import diagnose

        encryption = None if self.sealer is None else self.sealer.encryption
        return diagnose(
            self.backend.layout,
            self.backend.index is not None,
            encryption,
            self.backend.provider,
            erasure_key=self.seals_receipts(),
        )

    def conformance(self) -> Callable[[], Conformance] | None:
        """Return the S3 conformance kit's run (None: not an S3 stash)."""
        return self.backend.conformance

    def seals_receipts(self) -> bool:
        """Whether purges here seal their receipts (a key set, or the stash's own)."""
        from stashpoint.maintenance import receipt_seal

        own = self.backend.erasure_key is not None
        return own or receipt_seal.resolve(self.erasure_key_option) is not None

    def runs(self, store_type: type[RunsT], execute: Callable[[Any], Any]) -> RunsT:
        from stashpoint.runs.index import RunIndex
        from stashpoint.stores.blobs import DEFAULT_THRESHOLD, Blobs
        from stashpoint.stores.layout import FLEET, RUN_LOGS

        index = (
            None
            if self.backend.index is None
            else RunIndex(self.ttl_seconds, plain_errors=self.sealer is None)
        )
        threshold = DEFAULT_THRESHOLD if self.blob_threshold is None else self.blob_threshold
        blobs = Blobs(self.backend.layout, self.codec, threshold, self.retry, self.blob_tenant)
        return store_type(self.logs(RUN_LOGS), blobs, index, execute, fleet_logs=self.logs(FLEET))


class _StashApi(Generic[StoreT, LogStoreT]):
    """What a stash is and does, defined once; see `Stash`."""

    _store_type: type[StoreT]

    def _log_store(self, steps: LogSteps) -> LogStoreT:
        raise NotImplementedError

    def __init__(self, url: str | None = None, options: Options | None = None) -> None:
        options = options or Options()
        parts = _Parts(url, options)
        self._clock = options.clock
        self._randomness = options.randomness
        self.url = parts.url
        """The URL this stash was opened with."""
        self._parts = parts
        self._transport = self._connect(parts.backend)
        self._closing: list[weakref.WeakMethod[Any]] = []
        self._closing_limit = _CLOSING_PRUNE_AT
        self.driver = self._transport.execute
        """Runs this object's requests: what its operations' steps are driven with."""
        self.checkpoints: StoreT = self._store_type(parts.cas(CHECKPOINTS), self.driver, parts.logs)
        """Checkpoint envelopes: load, compare_and_swap, update, delete, history, list_ids,
        describe."""

    def _connect(self, backend: Backend) -> Any:
        raise NotImplementedError

    @property
    def layout(self) -> Layout:
        """Where this stash's objects live (its prefix and the namespace registry's keys)."""
        return self._parts.backend.layout

    @property
    def codec(self) -> Codec:
        """How this stash encodes and decodes documents, within its `Limits`."""
        return self._parts.codec

    @property
    def retry(self) -> RetryPolicy:
        """How this stash spaces out the resends and retries of its requests."""
        return self._parts.retry

    @property
    def provider(self) -> Provider:
        """The object store's capabilities in use (`stores.providers`; `provider=` in the URL)."""
        return self._parts.backend.provider

    def engine_files(self) -> EngineFiles:
        """Return where engines other than stashpoint (pyiceberg, DuckDB) read the objects.

        A local folder's `file://` URI or the bucket's, with the file-I/O properties
        (endpoint, credentials) of an S3 stash. Raises `ConfigurationError` for `memory://`.
        """
        files = self._parts.backend.engine_files
        if files is None:
            raise ConfigurationError(
                f"a {parse_url(self.url).scheme}:// stash's objects are not files other "
                "engines can read: use local:// or s3://"
            )
        return files()

    @property
    def indexed(self) -> bool:
        """Whether this stash has an index (SQLite on the embedded default, DynamoDB on S3)."""
        return self._parts.backend.index is not None

    def log_steps(self, namespace: str) -> LogSteps:
        """Return the log steps of one log namespace, with this stash's settings.

        For logic that composes the logs' steps with its own (the LangGraph saver);
        `logs_in` gives the same logs as ready-to-call operations.
        """
        return self._parts.logs(_log_namespace(namespace))

    def head_steps(self, namespace: str) -> CompareAndSwap:
        """Return the compare-and-swap steps of one head namespace, with this stash's settings.

        For logic that keeps its own kind of heads (the LangGraph store's items); `checkpoints`
        gives the same engine over the checkpoint namespace as ready-to-call operations.
        """
        settings = NAMESPACES.get(namespace)
        if settings is None or settings.shape is not Shape.HEADS:
            raise ConfigurationError(f"{namespace!r} is not a head namespace of the layout")
        return self._parts.cas(namespace)

    def tenant_of(self, namespace: str) -> Callable[[str], str | None]:
        """Return the function naming the tenant whose key seals an id of `namespace`.

        None from it without client-side encryption. For logic that copies objects of one
        id into another's (the LangGraph store's catalogs), so no tenant's data is sealed
        under another tenant's key.
        """
        return self._parts.tenant_of(namespace)

    def seal_later(self, logs: LogSteps) -> BackgroundSealer:
        """Have appends through `logs` seal after their calls, not inside them.

        For parts that append on a caller's path (the OpenAI Agents and Strands sessions),
        with the log steps they append through (`log_steps`): the append that completes a
        range of 64 versions no longer seals it before it returns (a segment PUT and 64
        vacating writes: on Lambda a turn's worth of requests); the returned sealer's
        `poke`, called after each call, seals it on a background thread of this stash (an
        `AsyncStash`: a task of its loop). Closing the stash waits for it (while the part
        lives), and `gc` seals what a process that never came back left.
        """
        from stashpoint.background import BackgroundSealer

        runner = self._sealing(logs)
        logs.seal_on_append = False
        self.on_close(runner.flush)
        return BackgroundSealer(lambda: len(logs.due_seals) > 0, runner)

    def _sealing(self, logs: LogSteps) -> ThreadBackground | TaskBackground:
        raise NotImplementedError

    def on_close(self, finish: Callable[[], Any]) -> None:
        """Have the bound method `finish` called when the stash closes, before its clients go.

        For parts that do work after their calls returned (the LangGraph saver's seals): the
        stash waits for it rather than close under it. On `AsyncStash`, `finish` is a
        coroutine method, awaited. Held weakly: a part that is gone is not called.
        """
        if not inspect.ismethod(finish):
            raise InvalidArgument(f"on_close takes a bound method, not {described(finish)}")
        if len(self._closing) >= self._closing_limit:
            # A long-lived stash gives a session per request: forget the parts that are gone
            # (the limit doubles with those alive, so pruning stays amortised O(1)).
            self._closing = [ref for ref in self._closing if ref() is not None]
            self._closing_limit = max(_CLOSING_PRUNE_AT, 2 * len(self._closing))
        self._closing.append(weakref.WeakMethod(finish))

    def _finishers(self) -> list[Callable[[], Any]]:
        """Take the live `on_close` methods, in the order they were given."""
        taken, self._closing = self._closing, []
        return [method for ref in taken if (method := ref()) is not None]

    def logs_in(self, namespace: str) -> LogStoreT:
        """Return the logs of one log namespace of the layout (`agents`, `run-logs`, ...).

        `logs` is the application's own namespace; the others hold what agents, runs,
        conversations and LangGraph threads keep, for tools that inspect or repair them.
        """
        return self._log_store(self.log_steps(namespace))

    def intercept(self, hook: Hook) -> Interception:
        """Pass every request this stash sends through `hook` until it is removed.

        `hook(request, proceed)` returns what `proceed()` returns (or raises): count
        requests, time them, add metrics, or inject failures in tests. On an `AsyncStash`,
        `proceed()` is awaitable and the hook a coroutine function. Requests are the
        library's own vocabulary (`stashpoint.stores.objects`, `stashpoint.index.requests`):
        they carry keys and bodies, so a hook that logs must not log bodies. The first
        hook added sees a request first. Returns an `Interception`: use it as a context
        manager, or call `remove()`.
        """
        return Interception(self._transport, hook)

    @property
    def encryption(self) -> Encryption | None:
        """The client-side encryption settings (None: objects are stored plain)."""
        return None if self._parts.sealer is None else self._parts.sealer.encryption

    def __repr__(self) -> str:
        return f"{type(self).__name__}({shown(self.url)})"


class Stash(Blocking, _StashApi[Store, "LogStore"]):
    """An open stash: checkpoints and runs, sharing one client. Close it (or use `with`)."""

    _store_type = Store

    def _log_store(self, steps: LogSteps) -> LogStore:
        from stashpoint.logs.store import LogStore

        return LogStore(steps, self.driver)

    def _connect(self, backend: Backend) -> Router:
        return Router(backend.objects(), backend.index, self._clock, self._randomness)

    @functools.cached_property
    def runs(self) -> RunStore:
        """Graph runs: create_run, record_attempt, ..., list_runs, reindex."""
        from stashpoint.runs.store import RunStore

        return self._parts.runs(RunStore, self.driver)

    @functools.cached_property
    def logs(self) -> LogStore:
        """Append-only logs: append, head, entries, records, tail, seal, delete, list_ids."""
        from stashpoint.logs.store import LogStore

        return LogStore(self._parts.logs(LOGS), self.driver)

    @functools.cached_property
    def admin(self) -> Admin:
        """Maintenance: purge and its receipts, legal holds, gc, repair, doctor, keys."""
        from stashpoint.admin import Admin

        return Admin(self._parts, self.driver)

    def _sealing(self, logs: LogSteps) -> ThreadBackground:
        from stashpoint.background import ThreadBackground

        def seal() -> None:
            run_sync(logs.seal_due(), self.driver)

        return ThreadBackground(seal)

    def close(self) -> None:
        """Finish what parts left for after their calls (`on_close`); release clients and files."""
        try:
            for finish in self._finishers():
                finish()
        finally:
            self._transport.close()

    def __enter__(self) -> Stash:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncStash(Awaiting, _StashApi[AsyncStore, "AsyncLogStore"]):
    """The asyncio twin of `Stash`; `async with` closes its clients."""

    _store_type = AsyncStore

    def _log_store(self, steps: LogSteps) -> AsyncLogStore:
        from stashpoint.logs.store import AsyncLogStore

        return AsyncLogStore(steps, self.driver)

    def _connect(self, backend: Backend) -> AsyncRouter:
        return AsyncRouter(
            backend.async_objects(), backend.async_index, self._clock, self._randomness
        )

    @functools.cached_property
    def runs(self) -> AsyncRunStore:
        """Graph runs: create_run, record_attempt, ..., list_runs, reindex."""
        from stashpoint.runs.store import AsyncRunStore

        return self._parts.runs(AsyncRunStore, self.driver)

    @functools.cached_property
    def logs(self) -> AsyncLogStore:
        """Append-only logs: append, head, entries, records, tail, seal, delete, list_ids."""
        from stashpoint.logs.store import AsyncLogStore

        return AsyncLogStore(self._parts.logs(LOGS), self.driver)

    @functools.cached_property
    def admin(self) -> AsyncAdmin:
        """Maintenance: purge and its receipts, legal holds, gc, repair, doctor, keys."""
        from stashpoint.admin import AsyncAdmin

        return AsyncAdmin(self._parts, self.driver)

    def _sealing(self, logs: LogSteps) -> TaskBackground:
        from stashpoint.background import TaskBackground

        async def seal() -> None:
            await run_async(logs.seal_due(), self.driver)

        return TaskBackground(seal)

    async def close(self) -> None:
        """Finish what parts left for after their calls (`on_close`); release clients and files."""
        try:
            for finish in self._finishers():
                await finish()
        finally:
            await self._transport.close()

    async def __aenter__(self) -> AsyncStash:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _log_namespace(namespace: object) -> str:
    """Return `namespace` if it is a log namespace of the layout, else say which are."""
    logs = [n.name for n in of_shape(Shape.LOGS)]
    if namespace not in logs:
        shown_name = (
            repr(namespace)
            if isinstance(namespace, str) and namespace in NAMESPACES
            else described(namespace)
        )
        raise InvalidArgument(
            f"namespace must be a log namespace ({', '.join(logs)}), not {shown_name}"
        )
    assert isinstance(namespace, str)
    return namespace


def _number(value: object, name: str, kind: type[int] | type[float]) -> float | None:
    """Return an option given as a number or a URL string, or say plainly it is not one."""
    if value is None:
        return None
    try:
        number = kind(value)  # type: ignore[arg-type,call-overload]  # as int()/float() take
    except (TypeError, ValueError):
        number = -1
    if isinstance(value, bool) or number <= 0:
        raise ConfigurationError(f"{name} must be a positive number, not {described(value)}")
    return number


class OpenOptions(TypedDict, total=False):
    """The keyword options of `open` and `open_async`; backend ones may be URL parameters.

    The fields of `Options` first, then the backends' (an option a backend does not know
    is a `ConfigurationError` naming it).
    """

    limits: Limits
    """Size and depth bounds for envelopes."""
    retry: RetryPolicy
    """Retry policy for conflicts on the wire and resends."""
    compression_level: int
    """zstd level for new envelopes (-7 to 22)."""
    log_delete_after: timedelta
    """Deprecated, without effect."""
    vacate_sealed_entries: bool
    """Replace sealed log entries by small markers (`Options.vacate_sealed_entries`)."""
    log_read_cache_bytes: int
    """Bytes of log entries kept after reads, per namespace (`Options.log_read_cache_bytes`)."""
    encryption: Encryption | str
    """Client-side encryption: an `Encryption`, or the path of its JSON settings file."""
    clock: Clock
    """The clock leases, waits and retries read (a `FakeClock` in tests)."""
    randomness: Randomness
    """Where the stash's ids come from (a `SeededRandomness` in tests)."""
    erasure_key: bytes | str
    """The secret purge receipts are sealed with (`Options.erasure_key`)."""
    endpoint_url: str
    """S3: the endpoint of an S3-compatible store."""
    region_name: str
    """S3: the bucket's region."""
    profile_name: str
    """S3 and DynamoDB: the AWS profile to make clients from."""
    session: Any
    """S3 and DynamoDB: a `boto3.Session` to make clients from (blocking stashes)."""
    client: Any
    """S3: a ready boto3 S3 client, used as given and never closed (blocking stashes)."""
    client_config: Any
    """S3: a `botocore.config.Config` or a dict of its fields (timeouts, retries, pool)."""
    addressing_style: Literal["auto", "virtual", "path"]
    """S3: how buckets are addressed."""
    sse: Literal["AES256", "aws:kms"]
    """S3: server-side encryption."""
    kms_key_id: str
    """S3: the KMS key of SSE-KMS (implies `sse="aws:kms"`)."""
    storage_class: str
    """S3: the storage class of new objects (for example `STANDARD_IA`)."""
    retention: str
    """S3: Object Lock retentions per namespace, `sealed:GOVERNANCE:400,blobs:COMPLIANCE:2555`
    (`stashpoint.stores.retention`; the bucket must have Object Lock)."""
    extra_put: Mapping[str, Any]
    """S3: further PutObject parameters, passed through unchanged."""
    provider: str
    """S3: the object store's profile (`aws`, `s3express`, `r2`, `minio`, `ceph`,
    `tigris`, `seaweedfs`; default: `s3express` for a directory bucket, else `aws`): what
    it can do (`stores.providers`, `docs/providers.md`)."""
    index: str
    """The run index: `dynamodb://TABLE`, `sqlite://PATH` or `none`."""
    index_endpoint_url: str
    """DynamoDB: the endpoint (DynamoDB Local)."""
    index_region_name: str
    """DynamoDB: the table's region."""
    index_client_config: Any
    """DynamoDB: a `botocore.config.Config` or a dict of its fields."""
    index_client: Any
    """DynamoDB: a ready boto3 DynamoDB client, used as given (blocking stashes)."""
    ttl_days: int
    """Days index items of finished runs live (DynamoDB TTL)."""
    blob_threshold: int
    """Bytes of JSON above which a run value is stored as a blob."""
    nested_prefix: Literal["allow"]
    """Open an S3 prefix with a segment named after a namespace."""
    fsync: bool | str
    """Local: fsync files and folders (default true)."""


async def awaited(stash: Stash | AsyncStash, steps: Steps[T]) -> T:
    """Drive `steps` from a coroutine, with either kind of stash.

    On the loop for an `AsyncStash`, on a worker thread for a blocking `Stash` (the
    framework adapters whose interfaces are async).
    """
    if isinstance(stash, AsyncStash):
        return await run_async(steps, stash.driver)
    import asyncio  # here: blocking users never need it

    return await asyncio.to_thread(run_sync, steps, stash.driver)


def open(url: str | None = None, **options: Unpack[OpenOptions]) -> Stash:
    """Open the stash at `url` (else `$STASHPOINT_URL`, else `local://./.stashpoint`).

    Keyword options are those of `OpenOptions`: the fields of `Options`, then the
    backends'.
    """
    return Stash(url, _options(dict(options)))


def open_async(url: str | None = None, **options: Unpack[OpenOptions]) -> AsyncStash:
    """Open the stash at `url` for asyncio use; see `open`."""
    return AsyncStash(url, _options(dict(options)))


def _options(options: dict[str, Any]) -> Options:
    names: tuple[str, ...] = (
        "limits",
        "retry",
        "compression_level",
        "log_delete_after",
        "vacate_sealed_entries",
        "log_read_cache_bytes",
        "clock",
        "randomness",
        "erasure_key",
    )
    if not isinstance(options.get("encryption", ""), str | Path):
        names = (*names, "encryption")
    known = {k: options.pop(k) for k in names if k in options}
    return Options(**known, backend=options)
