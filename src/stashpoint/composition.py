"""The composition root: a stash URL and its options, made into backends.

`backend_of` turns a parsed URL (`memory://`, `local://`, `s3://`) and its object-store
options into a `Backend`: the transports of the object store and the index (made lazily,
so opening a stash sends nothing), the store's provider profile, the caller's identity for
receipts, and a stash's own erasure key where it can keep one. `stash` builds the logic
over it. Read `stash` next.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stashpoint._backends.local import LocalTransport, nested_stash
from stashpoint._backends.memory import MemoryTransport
from stashpoint._backends.threaded import ThreadedAsyncTransport
from stashpoint.errors import ConfigurationError
from stashpoint.stores.layout import (
    NAMESPACES,
    Layout,
    check_prefix,
)
from stashpoint.stores.providers import PROVIDERS, Provider, provider_named
from stashpoint.url import StashUrl, unknown_options

if TYPE_CHECKING:
    from stashpoint._backends.sqlite import SqliteIndexTransport

_shared_memory: dict[str, tuple[MemoryTransport, Any]] = {}
_shared_memory_lock = threading.Lock()

_INDEX_OPTIONS = ("index_endpoint_url", "index_region_name", "index_client_config", "index_client")
_STASH_OPTIONS = ("ttl_days", "blob_threshold", "nested_prefix")

Factory = Callable[[], Any]


@dataclass(frozen=True)
class Backend:
    """The backends a stash URL names: the object store, the index, and their profile."""

    provider: Provider
    layout: Layout
    objects: Factory
    async_objects: Factory
    index: Factory | None
    async_index: Factory | None
    identity: Callable[[], str | None] = lambda: None
    """The caller's cloud identity for receipts (None: name the local user)."""
    conformance: Callable[[], Any] | None = None
    """Runs the conformance kit on the bucket (S3 only)."""
    erasure_key: Callable[[], bytes | None] | None = None
    """The stash's own erasure key, where it can keep one (a local folder, `memory://`)."""
    engine_files: Callable[[], EngineFiles] | None = None
    """Where engines other than stashpoint read this stash's objects (None: nowhere, as
    for `memory://`)."""


@dataclass(frozen=True)
class EngineFiles:
    """Where engines other than stashpoint (pyiceberg, DuckDB, Athena) find a stash's objects."""

    root: str
    """The URI a key is appended to, after a `/`: `file:///folder` or `s3://bucket`."""
    properties: Mapping[str, str] = dataclasses.field(repr=False)
    """File-I/O properties for pyiceberg and Arrow (`s3.endpoint`, credentials...): never
    logged or reported."""

    def uri(self, key: str) -> str:
        """Return the URI of the object `key`."""
        return f"{self.root}/{key}"


def split_options(
    parsed: StashUrl, backend_options: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split URL parameters and keyword options into (object-store, stash/index) settings."""
    merged: dict[str, Any] = {**parsed.params, **backend_options}
    own = {
        k: merged.pop(k)
        for k in (*_INDEX_OPTIONS, *_STASH_OPTIONS, "index", "encryption", "provider")
        if k in merged
    }
    if "session" in merged:
        own["session"] = merged["session"]  # one boto3 session for S3 and the index
    return merged, own


def _index_factories(
    spec: str | None, default_sqlite: str | None, own: Mapping[str, Any]
) -> tuple[Factory | None, Factory | None]:
    if spec in (None, ""):
        spec = "none" if default_sqlite is None else f"sqlite://{default_sqlite}"
    if spec == "none":
        return None, None
    if spec.startswith("sqlite://"):
        path = spec.removeprefix("sqlite://")
        if not path:
            raise ConfigurationError("sqlite:// index needs a file path")

        def sqlite() -> SqliteIndexTransport:
            from stashpoint._backends.sqlite import SqliteIndexTransport

            return SqliteIndexTransport(Path(path).expanduser() if path != ":memory:" else path)

        return sqlite, lambda: ThreadedAsyncTransport(sqlite())
    if spec.startswith("dynamodb://"):
        table = spec.removeprefix("dynamodb://").strip("/")
        if not table:
            raise ConfigurationError("dynamodb:// index needs a table name")
        import stashpoint._backends.dynamodb as ddb  # boto3 loads only for DynamoDB indexes
        from stashpoint._backends.aws import as_config

        config = ddb.DEFAULT_CLIENT_CONFIG
        user_config = as_config(own.get("index_client_config"), "index_client_config")
        if user_config is not None:
            config = config.merge(user_config)
        settings = ddb.DynamoDBSettings(
            table=table,
            client_config=config,
            default_retries=ddb.DEFAULT_RETRIES,
            endpoint_url=own.get("index_endpoint_url"),
            region_name=own.get("index_region_name"),
            session=own.get("session"),
            client=own.get("index_client"),
        )
        return (
            lambda: ddb.dynamodb_transport(settings),
            lambda: ddb.async_dynamodb_transport(settings),
        )
    raise ConfigurationError(f"unknown index {spec!r}: use dynamodb://TABLE, sqlite://PATH or none")


class Kept:
    """A transport of a named memory stash, shared by its openers: `close` leaves it open."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport

    def execute(self, request: Any) -> Any:
        """Execute on the shared transport."""
        return self._transport.execute(request)

    def close(self) -> None:
        """Nothing: the named stash lives as long as the process."""


def backend_of(parsed: StashUrl, object_options: dict[str, Any], own: dict[str, Any]) -> Backend:
    """Return the backends `parsed` names, with its object-store and stash options."""
    if own.get("nested_prefix") not in (None, "allow"):
        raise ConfigurationError("nested_prefix must be 'allow' when given")
    if parsed.scheme != "s3" and own.get("provider") not in (None, "", parsed.scheme):
        raise ConfigurationError(f"provider= names an S3 provider; this stash is {parsed.scheme}")
    if parsed.scheme == "memory":
        from stashpoint._backends.sqlite import SqliteIndexTransport

        if object_options:
            raise unknown_options("memory", set(object_options), set())

        objects: Any
        memory_index: Any
        if parsed.location:
            with _shared_memory_lock:
                shared = _shared_memory.setdefault(
                    parsed.location, (MemoryTransport(), SqliteIndexTransport(":memory:"))
                )
            # Every opener of a named memory stash shares its transports: closing one
            # opener must not close them under the others (a closed SQLite connection in
            # use by another thread crashes the process).
            objects, memory_index = Kept(shared[0]), Kept(shared[1])
        else:
            objects, memory_index = MemoryTransport(), SqliteIndexTransport(":memory:")
        has_index = own.get("index") != "none"
        from stashpoint.maintenance import receipt_seal

        name = parsed.location
        return Backend(
            PROVIDERS["memory"],
            Layout(),
            lambda: objects,
            lambda: ThreadedAsyncTransport(objects, offload=False),
            (lambda: memory_index) if has_index else None,
            (lambda: ThreadedAsyncTransport(memory_index)) if has_index else None,
            erasure_key=lambda: receipt_seal.process_key(name),
        )
    if parsed.scheme == "local":
        root = Path(parsed.location).expanduser()
        if own.get("nested_prefix") != "allow" and (neighbour := nested_stash(root)):
            raise ConfigurationError(
                f"the folder {neighbour} is a stash that shares keys with this one: a stash "
                f"may not live in a namespace folder of another ({', '.join(NAMESPACES)})",
                object_name=root.name,
            )
        fsync = str(object_options.pop("fsync", "true")).lower() not in ("0", "false", "no")
        if object_options:
            raise unknown_options("local", set(object_options), {"fsync"})
        index, async_index = _index_factories(own.get("index"), str(root / "index.sqlite3"), own)
        from stashpoint.maintenance import receipt_seal

        return Backend(
            PROVIDERS["local"],
            Layout(),
            lambda: LocalTransport(root, fsync=fsync),
            lambda: ThreadedAsyncTransport(LocalTransport(root, fsync=fsync)),
            index,
            async_index,
            erasure_key=lambda: receipt_seal.folder_key(root),
            engine_files=lambda: EngineFiles(root.resolve().as_uri(), {}),
        )
    if parsed.scheme == "s3":
        import stashpoint._backends.s3 as s3  # boto3 loads only for S3 stashes
        from stashpoint._backends.aws import caller_identity
        from stashpoint.stores.retention import parse_rules

        layout = Layout(check_prefix(parsed.prefix, nested=own.get("nested_prefix") == "allow"))
        retention = parse_rules(object_options.pop("retention", None), layout)
        settings = s3.S3Settings.from_options(parsed.location, {}, object_options)
        provider = provider_named(own.get("provider"), parsed.location)
        if retention and not provider.object_lock:
            raise ConfigurationError(
                f"retention= needs S3 Object Lock, which {provider.name} does not have "
                f"({provider.description}): set the store's own lock on the bucket instead "
                "(R2: a bucket lock rule for the prefix), and open without retention="
            )
        settings = dataclasses.replace(
            settings, retention=retention, versioning=provider.versioning
        )
        index, async_index = _index_factories(own.get("index"), None, own)
        return Backend(
            provider,
            layout,
            lambda: s3.s3_transport(settings),
            lambda: s3.async_s3_transport(settings),
            index,
            async_index,
            lambda: caller_identity(settings),
            lambda: s3.conformance(settings, layout.prefix, provider),
            engine_files=lambda: EngineFiles(*s3.engine_files(settings)),
        )
    raise ConfigurationError(f"unsupported scheme {parsed.scheme!r}")
