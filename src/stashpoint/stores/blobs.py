"""Content-addressed blobs: large values stored once under `blobs/{sha256}`.

A value over the size threshold is written as its own object (created with If-None-Match,
so concurrent writers of the same value are harmless) and replaced in its parent by a small
reference. Blobs are self-describing envelopes of kind `stashpoint.blob`, readable with
`zstd -d | jq` like everything else. Unreferenced blobs are removed by `stashpoint gc`
(`stashpoint.maintenance.garbage`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pydantic_core

from stashpoint.codec import Codec, check_json
from stashpoint.envelope import Envelope
from stashpoint.errors import InvalidPayload, StashpointError
from stashpoint.retry import DEFAULT_RETRY, RetryPolicy
from stashpoint.steps import NewWriteId, Now, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.layout import BLOBS, Layout
from stashpoint.stores.objects import Create, GetObject, ObjectInfo, PutObject
from stashpoint.stores.writes import Found

BLOB_KIND = "stashpoint.blob"
"""Envelope kind of a blob."""
REF_KEY = "$stashpoint_blob"
"""The key that marks a JSON object as a blob reference: `{"$stashpoint_blob": sha256}`."""
DEFAULT_THRESHOLD = 64 * 1024
"""Values whose JSON is larger than this many bytes become blobs."""


def is_ref(value: Any) -> bool:
    """Whether `value` is a blob reference."""
    return isinstance(value, dict) and REF_KEY in value and len(value) <= 2


class Blobs:
    """Offload large values to blobs and resolve references back, as protocols."""

    def __init__(
        self,
        layout: Layout,
        codec: Codec,
        threshold: int = DEFAULT_THRESHOLD,
        retry: RetryPolicy = DEFAULT_RETRY,
        tenant: Callable[[str], str | None] = lambda owner: None,
    ) -> None:
        self.layout = layout
        """Where blobs live."""
        self.codec = codec
        """Encodes blob envelopes."""
        self.threshold = threshold
        """Size in bytes of JSON above which a value becomes a blob."""
        self.retry = retry
        """Bounds the resends of one blob (one that cannot be stored fails its save)."""
        self.tenant = tenant
        """The encryption tenant of an owner id (None: no tenant keys): tenants never
        share a blob, so shredding one never takes a value another uses."""

    def offload(
        self, value: Any, where: str = "value", *, owner: str = "", threshold: int | None = None
    ) -> Steps[Any]:
        """Return `value`, or a reference to it once stored as a blob if it is large.

        `owner` is the id that references it (a run): with encryption, its tenant's.
        `threshold` replaces the store's for this value (a fleet map's item chunks).
        """
        # Checked here, before a large value is serialised into a blob, exactly as the run
        # envelope holding it inline would be (attempt values sit 5 levels down).
        check_json(value, self.codec.limits.max_depth, start_depth=5, root=where)
        if value is None or isinstance(value, bool | int | float):
            return value
        try:
            raw = pydantic_core.to_json(value)
        except ValueError:
            # A lone surrogate in a str: valid Python, not UTF-8, so not storable JSON.
            raise InvalidPayload(
                f"{where} cannot be written as UTF-8 JSON (a str holds a lone surrogate)"
            ) from None
        if len(raw) <= (self.threshold if threshold is None else threshold):
            return value
        digest = hashlib.sha256(raw).hexdigest()
        tenant = self.tenant(owner)
        name = digest if tenant is None else f"{digest}~{tenant}"
        key = self.layout.key(BLOBS, name)
        now = yield from ask(Now())
        write_id = yield from ask(NewWriteId())
        blob = Envelope.initial(digest, None, BLOB_KIND, 1, value, at=now, write_id=write_id)
        body = yield from self.codec.encoding(blob)

        def judge(existing: ObjectInfo) -> Steps[Found]:
            stored = self._stored(existing, digest)
            if stored is None:
                return Found.OTHER  # planted under our hash, or torn
            # Another writer's copy may be old enough for a garbage collection under way
            # to delete it: `refresh` writes ours over its ETag, so the collector's delete
            # (conditional on the ETag it judged) fails.
            return Found.OURS if stored.write_id == blob.write_id else Found.SAME
            yield  # a generator, like every judge

        yield from writes.create_named(
            PutObject(key, body, Create()),
            judge,
            self.retry,
            what="blob",
            limit=self.codec.limits.max_compressed_bytes,
            refresh=True,
        )
        return {REF_KEY: name, "bytes": len(raw)}

    def _stored(self, info: ObjectInfo, digest: str) -> Envelope | None:
        """Return the stored blob if it decodes to the value with this hash, else None."""
        try:
            stored = self.codec.decode(info.body or b"", name=digest)
        except StashpointError:
            return None
        if hashlib.sha256(pydantic_core.to_json(stored.payload)).hexdigest() != digest:
            return None
        return stored

    def resolve(self, value: Any) -> Steps[Any]:
        """Return the value a reference points to (checked against its hash), else `value`."""
        if not is_ref(value):
            return value
        name = value[REF_KEY]
        digest = str(name).partition("~")[0]
        key = self.layout.key(BLOBS, name)
        info = yield from ask(GetObject(key, None, self.codec.limits.max_compressed_bytes))
        if info is None or info.body is None:
            raise InvalidPayload(
                f"blob {name} is missing: a reference points at nothing", object_name=key
            )
        resolved = (yield from self.codec.decoding(info.body, name=key)).payload
        if hashlib.sha256(pydantic_core.to_json(resolved)).hexdigest() != digest:
            raise InvalidPayload("blob content does not match its hash", object_name=key)
        return resolved
