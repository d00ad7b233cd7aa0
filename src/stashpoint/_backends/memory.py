"""In-process object storage with S3's conditional-write and versioning semantics.

For tests and short-lived tools: nothing survives the process.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from stashpoint._backends.without_extras import EXTRAS, answer_without_extras
from stashpoint.errors import LimitExceeded
from stashpoint.stores.objects import (
    Create,
    DeleteFailure,
    DeleteKeys,
    DeleteObject,
    DeleteVersions,
    GetObject,
    HeadObject,
    KeyPage,
    ListKeys,
    ListVersionPage,
    ListVersions,
    Match,
    ObjectInfo,
    ObjectRequest,
    PutObject,
    StoredVersion,
    VersionPage,
    VersionRef,
    WriteOutcome,
    WriteResult,
    delimited,
)


@dataclass
class _Version:
    version_id: str
    body: bytes | None  # None marks a deletion
    etag: str
    metadata: dict[str, str] = field(default_factory=dict)
    written_at: datetime = field(default_factory=lambda: datetime.now(UTC))


class MemoryTransport:
    """Executes object requests against dictionaries, under one lock."""

    def __init__(self) -> None:
        self._objects: dict[str, list[_Version]] = {}
        self._keys: list[str] = []  # the keys of `_objects`, sorted: listings bisect it
        self._lock = threading.Lock()
        self._counter = itertools.count(1)

    def execute(self, request: ObjectRequest) -> Any:
        """Execute one object request and return its result."""
        if isinstance(request, EXTRAS):
            return answer_without_extras(request, "a stash in memory")
        handler = self._HANDLERS.get(type(request))
        if handler is None:
            raise TypeError(f"memory storage cannot execute {request!r}")
        with self._lock:
            return handler(self, request)

    def _get_object(self, request: GetObject) -> ObjectInfo | None:
        found = self._get(request.key, request.version_id, with_body=True)
        size = 0 if found is None or found.body is None else len(found.body)
        if request.max_bytes is not None and size > request.max_bytes:
            raise LimitExceeded(
                f"object is {size} bytes, over the limit of {request.max_bytes}",
                object_name=request.key,
            )
        return found

    def _head_object(self, request: HeadObject) -> ObjectInfo | None:
        return self._get(request.key, request.version_id, with_body=False)

    def _delete_object(self, request: DeleteObject) -> WriteResult:
        if request.version_id is None:
            return self._delete(request.key, request.etag)
        self._remove_version(request.key, request.version_id, drop_empty=False)
        return WriteResult(WriteOutcome.STORED)

    def _list_versions(self, request: ListVersions) -> list[VersionRef]:
        return [
            VersionRef(v.version_id, i == 0, v.body is None)
            for i, v in enumerate(reversed(self._objects.get(request.key, [])))
        ]

    def _list_version_page(self, request: ListVersionPage) -> VersionPage:
        return self._version_page(request.prefix, request.marker, request.page_size)

    def _delete_versions(self, request: DeleteVersions) -> list[DeleteFailure]:
        for key, version_id in request.targets:
            self._remove_version(key, version_id, drop_empty=True)
        return []

    def _delete_keys(self, request: DeleteKeys) -> list[DeleteFailure]:
        for key in request.keys:
            self._delete(key, None)
        return []

    def _list_keys(self, request: ListKeys) -> KeyPage:
        prefixes: list[str] = []
        if request.delimiter:
            page, prefixes, token = delimited(
                self._live_keys(request.prefix, request.after),
                request.prefix,
                request.delimiter,
                request.page_size,
            )
        else:
            page, more = self._key_page(request.prefix, request.after, request.page_size)
            token = page[-1] if more else None
        latest = [self._objects[k][-1] for k in page]
        return KeyPage(
            page,
            token,
            [v.written_at for v in latest],
            [len(v.body or b"") for v in latest],
            [v.etag for v in latest],
            prefixes,
        )

    def close(self) -> None:
        """Nothing to release."""

    def _version_page(
        self, prefix: str, marker: tuple[str, str] | None, page_size: int
    ) -> VersionPage:
        listed = [
            StoredVersion(
                key,
                v.version_id,
                i == 0,
                v.body is None,
                len(v.body or b""),
                v.etag or None,
                v.written_at,
            )
            for key in sorted(k for k in self._objects if k.startswith(prefix))
            for i, v in enumerate(reversed(self._objects[key]))
        ]
        return _page_after(listed, marker, page_size)

    def _remove_version(self, key: str, version_id: str, *, drop_empty: bool) -> None:
        """Remove one stored version of `key`; with `drop_empty`, the key once none is left."""
        if key not in self._objects:
            return
        self._objects[key] = [v for v in self._objects[key] if v.version_id != version_id]
        if drop_empty and not self._objects[key]:
            del self._objects[key]
            del self._keys[bisect.bisect_left(self._keys, key)]

    def _key_page(self, prefix: str, after: str, page_size: int) -> tuple[list[str], bool]:
        """Return the live keys under `prefix` after `after` (at most a page), and if more."""
        page: list[str] = []
        for key in self._live_keys(prefix, after):
            if len(page) == page_size:
                return page, True
            page.append(key)
        return page, False

    def _live_keys(self, prefix: str, after: str) -> Iterator[str]:
        """Yield the live keys under `prefix` after `after`, in order."""
        start = max(bisect.bisect_right(self._keys, after), bisect.bisect_left(self._keys, prefix))
        for key in itertools.islice(self._keys, start, None):
            if not key.startswith(prefix):
                return  # sorted: no key further on has the prefix
            versions = self._objects[key]
            if versions and versions[-1].body is not None:
                yield key  # else deleted (a delete marker, or every version removed)

    def _current(self, key: str) -> _Version | None:
        versions = self._objects.get(key)
        if not versions or versions[-1].body is None:
            return None
        return versions[-1]

    def _get(self, key: str, version_id: str | None, *, with_body: bool) -> ObjectInfo | None:
        if version_id is None:
            version = self._current(key)
        else:
            version = next(
                (v for v in self._objects.get(key, []) if v.version_id == version_id), None
            )
        if version is None or version.body is None:
            return None
        return ObjectInfo(
            etag=version.etag,
            metadata=dict(version.metadata),
            body=version.body if with_body else None,
            version_id=version.version_id,
            last_modified=version.written_at,
            size=len(version.body),
        )

    def _put(self, request: PutObject) -> WriteResult:
        current = self._current(request.key)
        if isinstance(request.condition, Create) and current is not None:
            return WriteResult(
                WriteOutcome.PRECONDITION_FAILED, detail="object exists", retried=False
            )
        if isinstance(request.condition, Match):
            if current is None:
                return WriteResult(
                    WriteOutcome.NOT_FOUND, detail="no object to match", retried=False
                )
            if current.etag != request.condition.etag:
                return WriteResult(
                    WriteOutcome.PRECONDITION_FAILED, detail="etag differs", retried=False
                )
        etag = hashlib.md5(request.body, usedforsecurity=False).hexdigest()
        version = _Version(str(next(self._counter)), request.body, etag, dict(request.metadata))
        if request.key not in self._objects:
            bisect.insort(self._keys, request.key)
            self._objects[request.key] = []
        self._objects[request.key].append(version)
        return WriteResult(WriteOutcome.STORED, etag=etag)

    def _delete(self, key: str, etag: str | None) -> WriteResult:
        current = self._current(key)
        if current is None:
            return WriteResult(WriteOutcome.NOT_FOUND if etag else WriteOutcome.STORED)
        if etag is not None and current.etag != etag:
            return WriteResult(
                WriteOutcome.PRECONDITION_FAILED, detail="etag differs", retried=False
            )
        self._objects[key].append(_Version(str(next(self._counter)), None, ""))
        return WriteResult(WriteOutcome.STORED)

    _HANDLERS: ClassVar[dict[type[Any], Callable[[Any, Any], Any]]] = {
        GetObject: _get_object,
        HeadObject: _head_object,
        PutObject: _put,
        DeleteObject: _delete_object,
        ListVersions: _list_versions,
        ListVersionPage: _list_version_page,
        DeleteVersions: _delete_versions,
        DeleteKeys: _delete_keys,
        ListKeys: _list_keys,
    }
    """How the memory transport executes each request it can (under its lock)."""


def _page_after(
    listed: list[StoredVersion], marker: tuple[str, str] | None, page_size: int
) -> VersionPage:
    """Return the page of `listed` after `marker` (the last version of the page before).

    A marker no longer listed (its version was deleted since) resumes at the next key.
    """
    if marker is not None:
        at = next((i for i, v in enumerate(listed) if (v.key, v.version_id) == marker), None)
        listed = [v for v in listed if v.key > marker[0]] if at is None else listed[at + 1 :]
    page = listed[:page_size]
    more = len(listed) > page_size
    return VersionPage(page, (page[-1].key, page[-1].version_id) if more else None)
