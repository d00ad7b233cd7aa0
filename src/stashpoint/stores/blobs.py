"""Content-addressed blobs: large values stored once under `blobs/{sha256}`.

A value over the size threshold is written as its own object (created with If-None-Match,
so concurrent writers of the same value are harmless) and replaced in its parent by a small
reference. Blobs are self-describing envelopes of kind `stashpoint.blob`, readable with
`zstd -d | jq` like everything else. Unreferenced blobs are removed by `stashpoint gc`
(`stashpoint.garbage`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pydantic_core

from stashpoint.codec import Codec, check_json
from stashpoint.envelope import Envelope
from stashpoint.errors import (
    InvalidPayload,
    StashpointError,
    StorageUnavailable,
)
from stashpoint.steps import Steps, ask
from stashpoint.stores.layout import BLOBS, Layout
from stashpoint.stores.objects import (
    Create,
    GetObject,
    Match,
    ObjectInfo,
    PutObject,
    WriteOutcome,
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


class Blobs:
    """Offload large values to blobs and resolve references back, as protocols."""

    def __init__(self, layout: Layout, codec: Codec, threshold: int = DEFAULT_THRESHOLD) -> None:
        self.layout = layout
        """Where blobs live."""
        self.codec = codec
        """Encodes blob envelopes."""
        self.threshold = threshold
        """Size in bytes of JSON above which a value becomes a blob."""

    def offload(self, value: Any, where: str = "value") -> Steps[Any]:
        """Return `value`, or a reference to it once stored as a blob if it is large."""
        # Checked here, before a large value is serialised into a blob, exactly as the run
        # envelope holding it inline would be (attempt values sit 5 levels down).
        check_json(value, self.codec.limits.max_depth, start_depth=5, root=where)
        if value is None or isinstance(value, bool | int | float):
            return value
        raw = pydantic_core.to_json(value)
        if len(raw) <= self.threshold:
            return value
        digest = hashlib.sha256(raw).hexdigest()
        key = self.layout.key(BLOBS, digest)
        body = yield from self.codec.encoding(Envelope.initial(digest, None, BLOB_KIND, 1, value))
        condition: Create | Match = Create()
        for _ in range(4):
            result = yield from ask(PutObject(key, body, condition))
            if result.outcome is WriteOutcome.STORED:
                break
            if result.outcome in (WriteOutcome.CONDITION_CONFLICT, WriteOutcome.NOT_FOUND):
                condition = Create()
                continue
            # Already there (or perhaps, after a timeout): content-addressed, so a blob that
            # holds this value is as good as ours. One that does not (planted under our hash,
            # or torn) is replaced over its own ETag, so no later read fails on it.
            existing = yield from ask(GetObject(key, None, self.codec.limits.max_compressed_bytes))
            if existing is None:
                condition = Create()
                continue
            if self._holds(existing, digest):
                break
            condition = Match(existing.etag)
        else:
            raise StorageUnavailable("could not store blob", object_name=key)
        return {REF_KEY: digest, "bytes": len(raw)}

    def _holds(self, info: ObjectInfo, digest: str) -> bool:
        """Whether a stored blob decodes to the value with this hash."""
        try:
            stored = self.codec.decode(info.body or b"", name=digest).payload
        except StashpointError:
            return False
        return hashlib.sha256(pydantic_core.to_json(stored)).hexdigest() == digest

    def resolve(self, value: Any) -> Steps[Any]:
        """Return the value a reference points to (checked against its hash), else `value`."""
        if not is_ref(value):
            return value
        digest = value[REF_KEY]
        key = self.layout.key(BLOBS, digest)
        info = yield from ask(GetObject(key, None, self.codec.limits.max_compressed_bytes))
        if info is None or info.body is None:
            raise InvalidPayload(
                f"blob {digest} is missing: a reference points at nothing", object_name=key
            )
        resolved = (yield from self.codec.decoding(info.body, name=key)).payload
        if hashlib.sha256(pydantic_core.to_json(resolved)).hexdigest() != digest:
            raise InvalidPayload("blob content does not match its hash", object_name=key)
        return resolved
