"""Content-addressed blobs: large values stored once under `blobs/{sha256}`.

A value over the size threshold is written as its own object (created with If-None-Match,
so concurrent writers of the same value are harmless) and replaced in its parent by a small
reference. Blobs are self-describing envelopes of kind `stashpoint.blob`, readable with
`zstd -d | jq` like everything else. Unreferenced blobs are removed by `stashpoint gc`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic_core

from stashpoint._sansio import Protocol
from stashpoint.codec import Codec
from stashpoint.envelope import Envelope
from stashpoint.errors import (
    ConfigurationError,
    InvalidPayload,
    StashpointError,
    StorageUnavailable,
)
from stashpoint.stores.cas import BLOBS, Layout
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    GetObject,
    HeadObject,
    KeyPage,
    ListKeys,
    ListVersions,
    ObjectInfo,
    PutObject,
    VersionRef,
    WriteOutcome,
    WriteResult,
)

BLOB_KIND = "stashpoint.blob"
"""Envelope kind of a blob."""
REF_KEY = "$stashpoint_blob"
"""The key that marks a JSON object as a blob reference: `{"$stashpoint_blob": sha256}`."""
DEFAULT_THRESHOLD = 64 * 1024
"""Values whose JSON is larger than this many bytes become blobs."""


def is_ref(value: Any) -> bool:
    """Whether `value` is a blob reference."""
    return isinstance(value, dict) and REF_KEY in value and len(value) <= 2


class BlobProtocol:
    """Offload large values to blobs and resolve references back, as protocols."""

    def __init__(self, layout: Layout, codec: Codec, threshold: int = DEFAULT_THRESHOLD) -> None:
        self.layout = layout
        """Where blobs live."""
        self.codec = codec
        """Encodes blob envelopes."""
        self.threshold = threshold
        """Size in bytes of JSON above which a value becomes a blob."""

    def offload(self, value: Any) -> Protocol[Any]:
        """Return `value`, or a reference to it once stored as a blob if it is large."""
        if value is None or isinstance(value, bool | int | float):
            return value
        raw = pydantic_core.to_json(value)
        if len(raw) <= self.threshold:
            return value
        digest = hashlib.sha256(raw).hexdigest()
        key = self.layout.key(BLOBS, digest)
        body = yield from self.codec.encoding(Envelope.initial(digest, None, BLOB_KIND, 1, value))
        for _ in range(3):
            result: WriteResult = yield PutObject(key, body, Create())
            if result.outcome in (WriteOutcome.STORED, WriteOutcome.PRECONDITION_FAILED):
                break  # stored now, or already there: content-addressed, either is fine
            if result.outcome is WriteOutcome.AMBIGUOUS:
                existing: ObjectInfo | None = yield HeadObject(key)
                if existing is not None:
                    break
        else:
            raise StorageUnavailable("could not store blob", object_name=key)
        return {REF_KEY: digest, "bytes": len(raw)}

    def resolve(self, value: Any) -> Protocol[Any]:
        """Return the value a reference points to (checked against its hash), else `value`."""
        if not is_ref(value):
            return value
        digest = value[REF_KEY]
        key = self.layout.key(BLOBS, digest)
        info: ObjectInfo | None = yield GetObject(key)
        if info is None or info.body is None:
            raise StashpointError(f"blob {digest} is missing", object_name=key)
        resolved = (yield from self.codec.decoding(info.body, name=key)).payload
        if hashlib.sha256(pydantic_core.to_json(resolved)).hexdigest() != digest:
            raise InvalidPayload("blob content does not match its hash", object_name=key)
        return resolved


@dataclass(frozen=True)
class GcReport:
    """What a garbage collection found and did."""

    blobs: int
    """Blobs examined."""
    referenced: int
    """Blobs some head references."""
    unreferenced: list[str]
    """Unreferenced blobs old enough to go (deleted unless it was a dry run)."""
    deleted: int
    """Blobs deleted."""
    too_young: int
    """Unreferenced blobs kept because a writer may be about to reference them."""
    unreadable: list[str] = field(default_factory=list)
    """Heads (or revisions) that could not be decoded; while there are any, nothing is
    deleted, since their references are unknown (a corrupt object, or a newer format
    written by a newer stashpoint)."""


def _refs(value: Any, found: set[str]) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if is_ref(item):
                found.add(str(item[REF_KEY]))
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def collect_garbage(
    layout: Layout,
    codec: Codec,
    namespaces: tuple[str, ...],
    *,
    dry_run: bool,
    min_age: timedelta,
    history: bool = False,
) -> Protocol[GcReport]:
    """Delete blobs that no head in `namespaces` references and that are older than `min_age`.

    Only heads count unless `history`: then every older revision of every head is read too,
    and a blob any of them references stays. Blobs younger than `min_age` stay, since a
    writer stores its blobs just before its compare-and-swap references them. If any head
    cannot be decoded, nothing is deleted: its references are unknown.
    """
    blob_prefix = layout.namespace_prefix(BLOBS)
    blobs = yield from _all_keys(blob_prefix)
    referenced: set[str] = set()
    unreadable: list[str] = []
    for namespace in namespaces:
        for key in (yield from _all_keys(layout.namespace_prefix(namespace))):
            versions: list[str | None] = [None]
            if history:
                versions += yield from _older_versions(key)
            for version_id in versions:
                info: ObjectInfo | None = yield GetObject(key, version_id)
                if info is None or info.body is None:
                    continue  # deleted since it was listed
                try:
                    envelope = yield from codec.decoding(info.body, name=key)
                except StashpointError:
                    unreadable.append(key if version_id is None else f"{key}@{version_id}")
                    continue
                _refs(envelope.payload, referenced)
    now = datetime.now(UTC)
    doomed: list[str] = []
    young = 0
    for key in blobs:
        digest = key[len(blob_prefix) :]
        if digest in referenced:
            continue
        head: ObjectInfo | None = yield HeadObject(key)
        if head is None:
            continue
        if head.last_modified is not None and now - head.last_modified < min_age:
            young += 1
            continue
        doomed.append(digest)
    deleted = 0
    if not dry_run and not unreadable:
        for digest in doomed:
            yield DeleteObject(layout.key(BLOBS, digest))
            deleted += 1
    return GcReport(
        len(blobs), len(blobs) - len(doomed) - young, doomed, deleted, young, unreadable
    )


def _older_versions(key: str) -> Protocol[list[str | None]]:
    """Return the version ids of a head's older revisions (none where nothing is versioned)."""
    try:
        refs: list[VersionRef] = yield ListVersions(key)
    except ConfigurationError:
        return []  # a bucket without versioning keeps no older revisions
    return [r.version_id for r in refs if not r.is_latest and not r.is_delete_marker]


def _all_keys(prefix: str) -> Protocol[list[str]]:
    keys: list[str] = []
    token: str | None = None
    while True:
        page: KeyPage = yield ListKeys(prefix, token)
        keys.extend(k for k in page.keys if "/" not in k[len(prefix) :])
        token = page.next_token
        if token is None:
            return keys
