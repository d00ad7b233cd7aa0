"""Opening a stash: one URL in, a `Stash` (or `AsyncStash`) with its stores out.

Nothing here touches the network: clients are created lazily and reused for the life of
the stash (Lambda cold starts, one long-lived client per process).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from stashpoint.codec import DEFAULT_LIMITS, Codec, Limits
from stashpoint.errors import ConfigurationError
from stashpoint.retry import DEFAULT_RETRY, RetryPolicy
from stashpoint.stores.cas import CHECKPOINTS, CasProtocol, EtagCache, Layout
from stashpoint.stores.local import LocalTransport
from stashpoint.stores.memory import MemoryTransport
from stashpoint.stores.objects import AsyncObjectTransport, ObjectTransport
from stashpoint.stores.store import AsyncStore, Store
from stashpoint.stores.threaded import ThreadedAsyncTransport
from stashpoint.url import StashUrl, parse_url, resolve_url

_shared_memory: dict[str, MemoryTransport] = {}
_shared_memory_lock = threading.Lock()


@dataclass(frozen=True)
class Options:
    """Settings shared by every backend; backend-specific ones go in `backend`."""

    limits: Limits = DEFAULT_LIMITS
    """Size and depth bounds for envelopes."""
    retry: RetryPolicy = DEFAULT_RETRY
    """Retry policy for conflicts on the wire and resends."""
    compression_level: int = 3
    """zstd level for new envelopes."""
    backend: dict[str, Any] = field(default_factory=dict)
    """Backend options (for S3: `client_config`, `sse`, `kms_key_id`, `storage_class`...)."""


@dataclass(frozen=True)
class _Backend:
    layout: Layout
    sync_transport: Callable[[], ObjectTransport]
    async_transport: Callable[[], AsyncObjectTransport]


def _memory_transport(name: str) -> MemoryTransport:
    if not name:
        return MemoryTransport()
    with _shared_memory_lock:
        return _shared_memory.setdefault(name, MemoryTransport())


def _backend(parsed: StashUrl, options: Options) -> _Backend:
    if parsed.scheme == "memory":
        transport = _memory_transport(parsed.location)
        return _Backend(
            Layout(),
            lambda: transport,
            lambda: ThreadedAsyncTransport(transport, offload=False),
        )
    if parsed.scheme == "local":
        root = Path(parsed.location).expanduser()
        fsync = parsed.params.get("fsync", "true").lower() not in ("0", "false", "no")
        return _Backend(
            Layout(),
            lambda: LocalTransport(root, fsync=fsync),
            lambda: ThreadedAsyncTransport(LocalTransport(root, fsync=fsync)),
        )
    if parsed.scheme == "s3":
        import stashpoint.stores.s3 as s3  # boto3 loads only for S3 stashes

        settings = s3.S3Settings.from_options(parsed.location, parsed.params, options.backend)
        return _Backend(
            Layout(parsed.prefix),
            lambda: s3.S3Transport(settings),
            lambda: s3.AsyncS3Transport(settings),
        )
    raise ConfigurationError(f"unsupported scheme {parsed.scheme!r}")


class _Parts:
    """What a stash is made of, built once from its URL and options."""

    def __init__(self, url: str | None, options: Options) -> None:
        self.url = resolve_url(url)
        parsed = parse_url(self.url)
        self.backend = _backend(parsed, options)
        self.codec = Codec(options.limits, level=options.compression_level)
        self.retry = options.retry
        self.cache = EtagCache()

    def cas(self, namespace: str) -> CasProtocol:
        return CasProtocol(namespace, self.backend.layout, self.codec, self.retry, self.cache)


class Stash:
    """An open stash: its checkpoint store, sharing one client. Close it (or use `with`)."""

    def __init__(self, url: str | None = None, options: Options | None = None) -> None:
        parts = _Parts(url, options or Options())
        self.url = parts.url
        """The URL this stash was opened with."""
        self._transport = parts.backend.sync_transport()
        self.checkpoints = Store(parts.cas(CHECKPOINTS), self._transport)
        """Checkpoint envelopes: load, compare_and_swap, delete, history, list_ids."""

    def close(self) -> None:
        """Release clients and files."""
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

    def __repr__(self) -> str:
        return f"Stash({self.url!r})"


class AsyncStash:
    """The asyncio twin of `Stash`; `async with` closes its clients."""

    def __init__(self, url: str | None = None, options: Options | None = None) -> None:
        parts = _Parts(url, options or Options())
        self.url = parts.url
        """The URL this stash was opened with."""
        self._transport = parts.backend.async_transport()
        self.checkpoints = AsyncStore(parts.cas(CHECKPOINTS), self._transport)
        """Checkpoint envelopes: the `Store` methods, awaitable."""

    async def close(self) -> None:
        """Release clients and files."""
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

    def __repr__(self) -> str:
        return f"AsyncStash({self.url!r})"


def open(url: str | None = None, **options: Any) -> Stash:
    """Open the stash at `url` (else `$STASHPOINT_URL`, else `local://./.stashpoint`).

    Keyword options are the fields of `Options`; anything else goes to the backend.
    """
    return Stash(url, _options(options))


def open_async(url: str | None = None, **options: Any) -> AsyncStash:
    """Open the stash at `url` for asyncio use; see `open`."""
    return AsyncStash(url, _options(options))


def _options(options: dict[str, Any]) -> Options:
    known = {k: options.pop(k) for k in ("limits", "retry", "compression_level") if k in options}
    return Options(**known, backend=options)
