"""Values kept under names of their own: created only if absent, judged by their content.

What an adapter keeps beside a framework's own state when the framework holds only a small
reference (a Lambda checkpoint's pointer, a Temporal payload's claim): each value one
self-describing document (`{"format": ..., ...}`, zstd JSON) under
`{namespace}/{owner}/.../{sha256}`. The name carries the content's hash, so a value is
never overwritten: the object is created with If-None-Match through the one write engine
(`writes.create_named`), and one found there is judged by its content (a copy holding the
same content is as good as ours; anything else is refused). A read is checked against the
hash its reference names. An owner's values are erased together (every stored version).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stashpoint.codec import Codec
from stashpoint.errors import InvalidPayload, StashpointError, StorageUnavailable
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.layout import Layout
from stashpoint.stores.objects import (
    Create,
    GetObject,
    ObjectInfo,
    PutObject,
    delete_every_version,
)
from stashpoint.stores.writes import Found

Holds = Callable[[dict[str, Any]], bool]
"""Whether a stored document holds the content its name promises (its hash matches)."""


class NamedValues:
    """One namespace of named values, as steps (free of I/O)."""

    def __init__(
        self,
        layout: Layout,
        codec: Codec,
        namespace: str,
        format_name: str,
        retry: RetryPolicy,
    ) -> None:
        self.layout = layout
        """Where the values live."""
        self.codec = codec
        """Encodes and decodes their documents (compression, encryption, limits)."""
        self.namespace = namespace
        """Their namespace of the layout."""
        self.format_name = format_name
        """Their documents' format (version 1)."""
        self.retry = retry
        """Bounds the resends of one value's create."""

    def key(self, name: str) -> str:
        """Return the object key of a value's name."""
        if ".." in name.split("/") or name.startswith("/"):
            raise InvalidPayload("a value's name is malformed")
        return self.layout.key(self.namespace, name)

    def store(self, name: str, document: dict[str, Any], holds: Holds, *, what: str) -> Steps[None]:
        """Create the value `name` from `document` (its first field `format` is set here).

        A value already there is this one if `holds` judges its document so (a resend, or
        another writer of the same content); otherwise the create is refused.
        """
        body = yield from self.codec.document_encoding(
            {"format": f"{self.format_name}/1", **document}, name=what
        )
        object_key = self.key(name)

        def judge(existing: ObjectInfo) -> Steps[Found]:
            stored = yield from self._document(existing, object_key)
            return Found.SAME if stored is not None and holds(stored) else Found.OTHER

        yield from writes.create_named(
            PutObject(object_key, body, Create()),
            judge,
            self.retry,
            what=what,
            limit=self.codec.limits.max_compressed_bytes,
            refresh=False,
        )

    def fetch(self, name: str, holds: Holds, *, what: str) -> Steps[dict[str, Any]]:
        """Return the value's document, checked by `holds` (`InvalidPayload` if it is not)."""
        object_key = self.key(name)
        info = yield from ask(GetObject(object_key, None, self.codec.limits.max_compressed_bytes))
        if info is None or info.body is None:
            raise InvalidPayload(
                f"a reference points at a {what} that is missing", object_name=object_key
            )
        # Decoded without judging: a shredded tenant's value is `Shredded`, a damaged one
        # `InvalidPayload`, never read as something else.
        document = yield from self.codec.document_decoding(
            info.body, name=object_key, format_name=self.format_name, format_version=1
        )
        if not isinstance(document, dict) or not holds(document):
            raise InvalidPayload(
                f"a {what} does not hold what its reference names", object_name=object_key
            )
        return document

    def erase(self, prefix: str) -> Steps[int]:
        """Delete every stored version of the values named `prefix...`; return how many."""
        found, failures = yield from delete_every_version(self.key(prefix))
        if failures:
            raise StorageUnavailable(
                f"storage did not delete {len(failures)} version(s) ({failures[0].code}); "
                "erasing again deletes what is left",
                object_name=failures[0].key,
            )
        return found

    def _document(self, info: ObjectInfo, object_key: str) -> Steps[dict[str, Any] | None]:
        try:
            document = yield from self.codec.document_decoding(
                info.body or b"", name=object_key, format_name=self.format_name, format_version=1
            )
        except StashpointError:
            return None
        return document if isinstance(document, dict) else None
