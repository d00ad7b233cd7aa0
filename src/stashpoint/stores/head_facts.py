"""What a head's object says of itself, and what became of a save judged by it.

A head is stored with its revision, write id, lineage (the `(revision, write_id)` pairs of
its last saves), kind and purge mark in its object metadata (`head_metadata`), so a HEAD
reads them without the body (`facts_from_metadata`). A save whose answer was not definite
is judged from them (`judge_write`): ours in the lineage is landed, the head still at the
expected revision with the ETag we sent is not landed, anything else lost.

Pure: no requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from stashpoint.envelope import LINEAGE_DEPTH, CheckpointInfo, Envelope
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    Purged,
    StorageUnavailable,
)
from stashpoint.stores.objects import Match, ObjectInfo
from stashpoint.stores.writes import Landed, NotLanded, Refused, Rewrite, Verdict, WriteTracker

META_KIND = "stashpoint-kind"
"""Object metadata: the envelope's kind."""
META_REVISION = "stashpoint-revision"
"""Object metadata: the envelope's revision."""
META_WRITE_ID = "stashpoint-write-id"
"""Object metadata: the write id of the save that wrote this revision."""
META_RUN_ID = "stashpoint-run-id"
"""Object metadata: the envelope's run id (absent when it has none)."""
META_LINEAGE = "stashpoint-lineage"
"""Object metadata: write ids of the preceding revisions, newest first, joined by '.'."""
META_PURGE = "stashpoint-purge"
"""Object metadata of a purge's tombstone: the purge id (`;reusable` when the id may be
created again)."""
PURGED_KIND = "stashpoint.purged"
"""Kind of the envelope a purge leaves in place of a head: it holds the purge id alone."""


def purge_mark(envelope: Envelope) -> tuple[str, bool] | None:
    """Return (purge id, reusable) of a purge's tombstone, None for any other envelope."""
    if envelope.kind != PURGED_KIND or not isinstance(envelope.payload, dict):
        return None
    purge_id = envelope.payload.get("purge_id")
    if not isinstance(purge_id, str):
        return None
    return purge_id, envelope.payload.get("reusable") is True


def head_metadata(envelope: Envelope) -> dict[str, str]:
    """Return the object metadata that lets one HEAD say which revision a head is."""
    metadata = {
        META_KIND: envelope.kind,
        META_REVISION: str(envelope.revision),
        META_WRITE_ID: envelope.write_id,
        META_LINEAGE: ".".join(envelope.lineage),
    }
    if envelope.run_id is not None:
        metadata[META_RUN_ID] = envelope.run_id
    mark = purge_mark(envelope)
    if mark is not None:
        metadata[META_PURGE] = mark[0] + (";reusable" if mark[1] else "")
    return metadata


@dataclass(frozen=True, slots=True)
class HeadFacts:
    """What a read of a head says about it, from its metadata or its envelope."""

    etag: str
    """The head's ETag."""
    revision: int
    """The head's revision."""
    pairs: frozenset[tuple[int, str]]
    """The `(revision, write_id)` pairs the head remembers, its own included."""
    kind: str
    """The envelope's kind."""
    run_id: str | None
    """The envelope's run id."""
    stored_bytes: int | None = None
    """Size of the stored object, where the read says."""
    written_at: datetime | None = None
    """When the object was written, where the storage says."""
    envelope: Envelope | None = None
    """The decoded envelope, when the read returned the body."""
    purge: tuple[str, bool] | None = None
    """(purge id, reusable) when the head is a purge's tombstone."""

    def purged_error(self, object_id: str) -> CheckpointNotFound | None:
        """Return what reading (or writing) a tombstone raises; None for a live head.

        A purge that let the id be reused reads as a plain deletion.
        """
        if self.purge is None:
            return None
        if self.purge[1]:
            return CheckpointNotFound("no checkpoint with this id", object_name=object_id)
        return Purged(object_id, purge_id=self.purge[0])

    def info(self, object_id: str) -> CheckpointInfo:
        """Return these facts as the public `CheckpointInfo` of `object_id`."""
        written_at = self.written_at
        if written_at is None and self.envelope is not None:
            written_at = self.envelope.updated_at
        return CheckpointInfo(
            id=object_id,
            kind=self.kind,
            revision=self.revision,
            run_id=self.run_id,
            stored_bytes=self.stored_bytes,
            updated_at=written_at,
        )

    def remembers(self, envelope: Envelope) -> bool:
        """Whether `envelope`'s save is this head or one of its remembered ancestors."""
        return (envelope.revision, envelope.write_id) in self.pairs


def facts_from_metadata(info: ObjectInfo) -> HeadFacts | None:
    """Return the facts in a head's metadata, or None if it carries none (or bad ones)."""
    metadata = info.metadata or {}
    try:
        revision = int(metadata[META_REVISION])
        write_id = metadata[META_WRITE_ID]
        kind = metadata[META_KIND]
    except (KeyError, ValueError):
        return None
    lineage = [w for w in metadata.get(META_LINEAGE, "").split(".") if w]
    pairs = {(revision, write_id)}
    pairs.update((revision - 1 - i, w) for i, w in enumerate(lineage))
    purge = None
    if kind == PURGED_KIND:
        purge_id, _, reuse = metadata.get(META_PURGE, "unknown").partition(";")
        purge = (purge_id, reuse == "reusable")
    return HeadFacts(
        etag=info.etag,
        revision=revision,
        pairs=frozenset(pairs),
        kind=kind,
        run_id=metadata.get(META_RUN_ID) or None,
        stored_bytes=info.size,
        written_at=info.last_modified,
        purge=purge,
    )


def facts_from_envelope(info: ObjectInfo, envelope: Envelope) -> HeadFacts:
    """Return the facts of a head whose envelope was read."""
    return HeadFacts(
        etag=info.etag,
        revision=envelope.revision,
        pairs=frozenset(envelope.lineage_pairs()),
        kind=envelope.kind,
        run_id=envelope.run_id,
        stored_bytes=info.size if info.size is not None else len(info.body or b""),
        written_at=info.last_modified,
        envelope=envelope,
        purge=purge_mark(envelope),
    )


class Judgement(Enum):
    """What a read-back says became of a save whose answer was not definite."""

    LANDED = "landed"
    LOST = "lost"
    NOT_LANDED = "not_landed"
    UNKNOWN = "unknown"


def judge_write(
    facts: HeadFacts | None,
    envelope: Envelope,
    expected_revision: int | None,
    sent_etag: str | None,
    refused_for_sure: bool,
) -> Judgement:
    """Decide what became of a write whose answer was not definite, from a read-back.

    `refused_for_sure`: the server refused every copy we sent (a 412/404 that answers our
    only copy, after attempts that all certainly failed), so it cannot have landed.
    """
    if facts is None:
        # Nothing there: a create has not landed; an update's base was deleted.
        return Judgement.NOT_LANDED if expected_revision is None else Judgement.LOST
    if facts.remembers(envelope):
        return Judgement.LANDED
    if refused_for_sure:
        return Judgement.LOST
    if facts.revision - envelope.revision >= LINEAGE_DEPTH - 1:
        # So many saves since that our pair would have left the lineage: cannot tell.
        return Judgement.UNKNOWN
    if expected_revision is not None and facts.revision == expected_revision:
        return Judgement.NOT_LANDED if facts.etag == sent_etag else Judgement.LOST
    return Judgement.LOST


def purged_meanwhile(
    facts: HeadFacts, envelope: Envelope, expected_revision: int | None
) -> Verdict:
    """Judge a save that found its head purged, not by this write.

    A reusable id is created again; else the save is refused (`Purged`, or a conflict
    for a reusable one).
    """
    assert facts.purge is not None
    if facts.purge[1] and expected_revision is None:
        return Rewrite(Match(facts.etag))
    purged = facts.purged_error(envelope.id)
    assert purged is not None
    if not facts.purge[1]:
        return Refused(purged)
    return Refused(
        CheckpointConflict(
            envelope.id, expected_revision=expected_revision, actual_revision=facts.revision
        )
    )


def save_verdict(
    verdict: Judgement,
    facts: HeadFacts | None,
    envelope: Envelope,
    expected_revision: int | None,
    tracker: WriteTracker,
) -> Verdict:
    """Turn a save's judgement into what the write engine does next."""
    if verdict is Judgement.LANDED:
        assert facts is not None
        return Landed(facts.etag if facts.revision == envelope.revision else None)
    if verdict is Judgement.LOST:
        return Refused(
            CheckpointConflict(
                envelope.id,
                expected_revision=expected_revision,
                actual_revision=None if facts is None else facts.revision,
            )
        )
    if verdict is Judgement.NOT_LANDED:
        return NotLanded()
    return Refused(
        StorageUnavailable(
            f"save outcome unknown after {tracker.attempt} attempts: the head moved "
            f"on too far to tell; look for write id {envelope.write_id} in the "
            "head's history",
            object_name=envelope.id,
            write_id=envelope.write_id,
        )
    )


def raise_purged(facts: HeadFacts | None, object_id: str) -> None:
    """Raise `Purged` when the head read says its id was erased."""
    purged = None if facts is None else facts.purged_error(object_id)
    if purged is not None:
        raise purged
