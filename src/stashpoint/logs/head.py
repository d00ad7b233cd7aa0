"""A log's head as one reader or writer knows it, and what the version that ended it says.

A deletion ends a log's life; a purge's tombstone ends it for good (`Purged`), or, with
`reusable`, lets a create start a new life after it (docs/purge.md, the lives rule).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from stashpoint.errors import (
    CheckpointNotFound,
    Purged,
)
from stashpoint.logs.format import (
    LogEntry,
)

NO_SNAPSHOT: Any = object()
"""A head made by hand carries no snapshot: the append after it stores the whole state."""


@dataclass(frozen=True, slots=True)
class LogHead:
    """The latest version of a log as one reader or writer knows it; append after it."""

    log_id: str
    """The log."""
    version: int
    """Its latest version."""
    next_record: int
    """Number of records in the log's current life (the position the next record takes)."""
    state: Any
    """The state stored with the latest version."""
    kind: str
    """What the log holds."""
    schema_version: int
    """Schema version of its state and records."""
    write_id: str
    """Write id of the latest version."""
    written_at: datetime
    """When the latest version was written (writer's clock)."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """Fields the latest entry carries beside the format's (an agent log's `run_id`)."""
    base: int = 0
    """First version of the log's current life (0 unless it was deleted or rebased)."""
    ended: bool = False
    """Whether the latest version ended the log (it was deleted)."""
    snapshot: Any = field(default=NO_SNAPSHOT, compare=False, repr=False)
    """A private copy of `state` as stored, which the next append patches against: the
    caller may change `state` in place before passing this head as `after`."""
    etag: str | None = field(default=None, compare=False)
    """The latest version's ETag, when this process wrote it and storage said (a listing
    showing the same ETag for the version shows that very object)."""

    @property
    def purge_id(self) -> str | None:
        """The purge whose tombstone this version is (None: not a purge's)."""
        return purge_of(self.ended, self.extra)

    @property
    def refuses_writes(self) -> bool:
        """Whether this version is a purge's tombstone that refuses every later write."""
        return self.purge_id is not None and not self.extra.get(REUSABLE)

    @classmethod
    def of(cls, entry: LogEntry, *, handed_over: bool = False, etag: str | None = None) -> LogHead:
        """Return the head whose latest version is `entry` (stored with `etag`, if known).

        `handed_over`: nobody changes `entry.state` after this, so it is its own snapshot
        (no copy); otherwise the snapshot is a deep copy.
        """
        return cls(
            log_id=entry.log_id,
            version=entry.version,
            next_record=entry.next_record,
            state=entry.state,
            kind=entry.kind,
            schema_version=entry.schema_version,
            write_id=entry.write_id,
            written_at=entry.written_at,
            extra=entry.extra,
            base=entry.base,
            ended=entry.ended,
            snapshot=entry.state if handed_over else copy.deepcopy(entry.state),
            etag=etag,
        )


PURGED = "purged"
"""Extra field of the version that ends a log for a purge: the purge's id."""
REUSABLE = "reusable"
"""Extra field of a purge's tombstone: whether the id may start a new life after it."""


def purge_of(ended: bool, extra: dict[str, Any]) -> str | None:
    """Return the purge id an ending version carries, None if it is not a purge's."""
    purge_id = extra.get(PURGED) if ended else None
    return purge_id if isinstance(purge_id, str) else None


def ended_error(log_id: str, ended: LogEntry | LogHead) -> CheckpointNotFound:
    """Return what reading a log whose latest version ended it raises.

    A purge's tombstone (unless the purge let the id be reused) is `Purged`; a deletion
    is a plain not-found.
    """
    purge_id = purge_of(ended.ended, ended.extra)
    if purge_id is not None and not ended.extra.get(REUSABLE):
        return Purged(log_id, purge_id=purge_id)
    return CheckpointNotFound("the log was deleted", object_name=log_id)
