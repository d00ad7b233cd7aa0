"""Strands' `Storage` over a stash: each key a head written by compare-and-swap."""

from __future__ import annotations

import base64
import builtins
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

from strands.storage.storage import _NAMESPACED, StorageSearchResult
from strands.types.exceptions import StorageError

from stashpoint.envelope import Envelope
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    InvalidArgument,
    InvalidId,
    InvalidPayload,
    Purged,
    described,
)
from stashpoint.steps import NewWriteId, Now, Steps, ask
from stashpoint.stores.cas import CompareAndSwap
from stashpoint.stores.layout import STRANDS_STORAGE

if TYPE_CHECKING:
    from stashpoint.stash import AsyncStash, Stash


T = TypeVar("T")

STORAGE_KIND = "stashpoint.strands-storage"
"""The `Storage` heads' kind."""
SCHEMA_VERSION = 1
"""The heads' schema version."""


class InvalidKey(InvalidId, StorageError):
    """A `Storage` key Strands' own backends refuse (empty, a `..` segment, a backslash)."""


class StorageConflict(CheckpointConflict, StorageError):
    """A key changed since this `StashStorage` last read or wrote it: nothing was written.

    A Strands `StorageError` as well. Read the key again to see what the other writer left.
    """


_PLAIN = re.compile(r"[A-Za-z0-9._-]")
_SLASHES = re.compile(r"/+")


def normalized_key(key: str, *, prefix: bool = False) -> str:
    """Return `key` as Strands' path-based backends keep it (`InvalidKey` if they refuse it).

    Runs of `/` collapse; a key loses its leading and trailing `/` (a prefix keeps its
    trailing one); a backslash, a `..` segment or an empty key is refused.
    """
    if not isinstance(key, str):
        raise InvalidKey(f"a storage key must be a str, not {described(key)}")
    if "\\" in key:
        raise InvalidKey("a storage key must not hold a backslash")
    collapsed = _SLASHES.sub("/", key)
    shown = collapsed.lstrip("/") if prefix else collapsed.strip("/")
    if ".." in shown.split("/"):
        raise InvalidKey("a storage key must not hold a '..' path segment")
    if not shown and not prefix:
        raise InvalidKey("a storage key must not be empty")
    return shown


def storage_id(key: str) -> str:
    """Return the head id of a Storage key (every byte outside `[A-Za-z0-9._-]` as `:hh`).

    One-to-one, and a prefix of a key is a prefix of its id, so a listing by prefix is
    one listing of ids.
    """
    if not isinstance(key, str):
        raise InvalidArgument(f"a storage key must be a str, not {described(key)}")
    return "".join(
        c if _PLAIN.fullmatch(c) else "".join(f":{b:02x}" for b in c.encode()) for c in key
    )


def storage_key(object_id: str) -> str:
    """Return the Storage key a head id stands for (the inverse of `storage_id`)."""
    out = bytearray()
    i = 0
    while i < len(object_id):
        if object_id[i] == ":":
            out.append(int(object_id[i + 1 : i + 3], 16))
            i += 3
        else:
            out += object_id[i].encode()
            i += 1
    return out.decode()


def _payload(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}  # JSON snapshots: kept readable, compressed well
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _bytes(envelope: Envelope) -> bytes:
    payload = envelope.payload
    if envelope.kind != STORAGE_KIND or not isinstance(payload, Mapping):
        raise InvalidPayload("not a Strands storage value", object_name=envelope.id)
    if isinstance(text := payload.get("text"), str):
        return text.encode("utf-8")
    if isinstance(coded := payload.get("base64"), str):
        try:
            return base64.b64decode(coded, validate=True)
        except ValueError:  # binascii.Error: not base64
            raise InvalidPayload("not a Strands storage value", object_name=envelope.id) from None
    raise InvalidPayload("not a Strands storage value", object_name=envelope.id)


class StorageSteps:
    """`StashStorage`'s operations as steps over one head namespace (free of I/O)."""

    def __init__(self, cas: CompareAndSwap) -> None:
        self.cas = cas
        """The compare-and-swap engine of the `strands-storage` namespace."""
        self.known: dict[str, Envelope | None] = {}
        """Each key's head as this storage last read or wrote it (None: absent)."""

    def read(self, key: str) -> Steps[bytes | None]:
        """Return the key's bytes (None: absent) and remember its revision."""
        object_id = storage_id(key)
        try:
            envelope = yield from self.cas.load(object_id)
        except Purged:
            raise
        except CheckpointNotFound:
            self.known[object_id] = None
            return None
        data = _bytes(envelope)
        self.known[object_id] = envelope
        return data

    def write(self, key: str, data: bytes) -> Steps[None]:
        """Store `data` over the revision last seen (a key never seen: only if absent or equal)."""
        if not isinstance(data, bytes | bytearray):
            raise InvalidArgument(f"data must be bytes, not {described(data)}")
        object_id = storage_id(key)
        payload = _payload(bytes(data))
        now = yield from ask(Now())
        write_id = yield from ask(NewWriteId())
        seen = self.known.get(object_id)
        if seen is not None:
            envelope = seen.next(payload, at=now, write_id=write_id)
            expected: int | None = seen.revision
        else:
            envelope = Envelope.initial(
                object_id, None, STORAGE_KIND, SCHEMA_VERSION, payload, at=now, write_id=write_id
            )
            expected = None
        try:
            yield from self.cas.compare_and_swap(envelope, expected)
        except Purged:
            raise
        except (CheckpointConflict, CheckpointNotFound):
            self.known.pop(object_id, None)
            if seen is None:
                # A key this storage knew as absent or never read, found taken: a create that
                # finds the same bytes is this write (a resent create, or the same snapshot).
                try:
                    stored = yield from self.cas.load(object_id)
                except CheckpointNotFound:
                    stored = None
                if stored is not None and _bytes(stored) == bytes(data):
                    self.known[object_id] = stored
                    return
            raise StorageConflict(
                object_id,
                expected_revision=expected,
                message=f"{object_id} was written by another writer since this one saw it",
            ) from None
        self.known[object_id] = envelope

    def delete(self, key: str) -> Steps[None]:
        """Delete the key (conditional on the revision last seen; absent: nothing happens)."""
        object_id = storage_id(key)
        seen = self.known.pop(object_id, None)
        try:
            yield from self.cas.delete(object_id, None if seen is None else seen.revision)
        except CheckpointNotFound:
            pass
        except CheckpointConflict:
            raise StorageConflict(
                object_id,
                expected_revision=None if seen is None else seen.revision,
                message=f"{object_id} was written by another writer since this one saw it",
            ) from None
        self.known[object_id] = None

    def list(self, prefix: str) -> Steps[builtins.list[str]]:
        """Return the keys starting with `prefix`, sorted."""
        ids = yield from self.cas.list_ids(storage_id(prefix) if prefix else "")
        return sorted(storage_key(i) for i in ids)


class StashStorage:
    """Strands' `Storage` protocol over a stash (for `SnapshotSessionManager` and the rest).

    `StashStorage(stash)` takes a `Stash` (its calls run on a worker thread) or an
    `AsyncStash` (awaited on the loop). Each key is a head written by compare-and-swap;
    its bytes round-trip unchanged (UTF-8 text is kept as text, anything else base64).
    Keys are normalized as Strands' own backends normalize them. `namespace(prefix)` is
    a view under `prefix/` sharing what this storage has seen.
    """

    def __init__(
        self, stash: Stash | AsyncStash, *, prefix: str = "", steps: StorageSteps | None = None
    ) -> None:
        from stashpoint.stash import AsyncStash, Stash

        if not isinstance(stash, Stash | AsyncStash):
            raise InvalidArgument(f"stash must be an opened stash, not {described(stash)}")
        if steps is not None and not isinstance(steps, StorageSteps):
            raise InvalidArgument(f"steps must be a StorageSteps, not {described(steps)}")
        self.stash = stash
        """Where the values are kept."""
        self.steps = steps or StorageSteps(stash.head_steps(STRANDS_STORAGE))
        """The operations as steps (shared by the views of one storage)."""
        scope = normalized_key(prefix, prefix=True).rstrip("/")
        self.prefix = f"{scope}/" if scope else ""
        """What every key of this view starts with (`namespace`)."""
        if self.prefix:
            self._namespaced = _NAMESPACED  # Strands' marker: a view already scoped

    def namespace(self, prefix: str) -> StashStorage:
        """Return a view of this storage under `prefix/` (Strands' namespacing)."""
        return StashStorage(self.stash, prefix=f"{self.prefix}{prefix}", steps=self.steps)

    async def _run(self, steps: Steps[T]) -> T:
        from stashpoint.stash import awaited

        return await awaited(self.stash, steps)

    def _key(self, key: str) -> str:
        return normalized_key(f"{self.prefix}{normalized_key(key)}")

    async def write(self, key: str, data: bytes) -> None:
        """Store `data` under `key` (`StorageConflict` if another writer changed it since)."""
        await self._run(self.steps.write(self._key(key), data))

    async def read(self, key: str) -> bytes | None:
        """Return the bytes under `key`, None if there are none."""
        return await self._run(self.steps.read(self._key(key)))

    async def delete(self, key: str) -> None:
        """Delete `key` (nothing happens if it is absent)."""
        await self._run(self.steps.delete(self._key(key)))

    async def list(self, query: str = "") -> builtins.list[str]:
        """Return the keys starting with `query`, sorted (relative to this view)."""
        if not isinstance(query, str):
            raise InvalidArgument(f"query must be a str prefix, not {described(query)}")
        wanted = self.prefix + normalized_key(query, prefix=True)
        keys = await self._run(self.steps.list(wanted))
        return [k[len(self.prefix) :] for k in keys]

    async def search(self, query: str) -> builtins.list[StorageSearchResult]:
        """Search the values by keywords (Strands' own keyword strategy over this storage)."""
        from strands.storage.search.keyword import KeywordSearchStrategy

        return await KeywordSearchStrategy().search(self, query)
