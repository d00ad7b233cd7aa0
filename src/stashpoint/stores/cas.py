"""The compare-and-swap logic over object storage, written once and free of I/O.

Every save is a conditional PUT: create with `If-None-Match: *`, update with `If-Match:
<ETag of the revision the writer read>`. When the answer is not definite (a timeout, a reset,
a 5xx, or a 412/404 that may be botocore's own retry tripping over our landed write), the
head is read back and judged by its *lineage*, the `(revision, write_id)` pairs of its last
saves: ours there means success even if others already built on it; the head still at the
expected revision means the write has not landed, so the same bytes are resent under the same
condition (at most one copy can land); anything else is a conflict.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

from stashpoint.cache import Lru
from stashpoint.codec import Codec
from stashpoint.envelope import LINEAGE_DEPTH, MAX_REVISION, CheckpointInfo, Envelope
from stashpoint.errors import (
    ArchivedObject,
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    InvalidArgument,
    InvalidPayload,
    Purged,
    StashpointError,
    StorageUnavailable,
    UnsupportedFormat,
    described,
    whole,
)
from stashpoint.ids import validate_id, validate_prefix, writer_token
from stashpoint.retry import RetryPolicy
from stashpoint.steps import NewWriteId, Now, Parallel, Sleep, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.layout import Layout
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    GetObject,
    HeadObject,
    ListVersions,
    Match,
    ObjectInfo,
    PutObject,
    RestoreObject,
    RestoreReport,
    RestoreState,
    check_restore,
    every_key_page,
)
from stashpoint.stores.writes import Landed, NotLanded, Refused, Rewrite, Verdict, WriteTracker

_SAVING: contextvars.ContextVar[int] = contextvars.ContextVar("stashpoint_saving", default=0)
"""How many saves this thread or task is inside (`writer_token`'s depth)."""

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


class EtagCache:
    """Remembers the ETag of the latest revision seen of each key, so saves skip a HEAD.

    Bounded (least recently used entries go first) and safe to share between threads.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._entries: Lru[str, tuple[int, str]] = Lru(capacity)

    def get(self, key: str, revision: int) -> str | None:
        """Return the ETag of `key` at `revision`, if known."""
        entry = self._entries.get(key)
        return None if entry is None or entry[0] != revision else entry[1]

    def remember(self, key: str, revision: int, etag: str) -> None:
        """Record that `key` at `revision` has `etag` (never moves a key backwards)."""

        def newer(entry: tuple[int, str] | None) -> tuple[int, str]:
            return entry if entry is not None and entry[0] > revision else (revision, etag)

        self._entries.update(key, newer)

    def forget(self, key: str) -> None:
        """Drop what is known of `key`."""
        self._entries.pop(key)


class _Verdict(Enum):
    LANDED = "landed"
    LOST = "lost"
    NOT_LANDED = "not_landed"
    UNKNOWN = "unknown"


K = TypeVar("K")
C = TypeVar("C")
R = TypeVar("R")


def optimistic_update(
    read: Callable[[], Steps[K]],
    change: Callable[[K, bool], Steps[C]],
    write: Callable[[K, C], Steps[R]],
    *,
    retry: RetryPolicy,
    max_attempts: int,
    known: K | None = None,
    forget: Callable[[], None] | None = None,
) -> Steps[R]:
    """Run the one optimistic-update loop (SlateDB's `maybe_apply_update`), for any head.

    `change(head, fresh)` computes what to write after `head` (it may raise to abort);
    `write(head, what)` writes it conditionally on `head`. `known` (a cached head) is tried
    first; when `change` refuses it with a `StashpointError`, it is judged again on a fresh
    `read()`, since a stale copy may be what it objected to (`fresh` says which it got).
    A lost race (`CheckpointConflict` from `write`) calls `forget()`, reads again and
    retries with backoff, `max_attempts` times in all; the last conflict is raised. Any
    other error of `write` is raised as it is: its outcome is the write's to judge.
    """
    head = known
    attempt = 0
    while True:
        attempt += 1
        fresh = head is None
        if head is None:
            head = yield from read()
        try:
            what = yield from change(head, fresh)
        except StashpointError:
            if fresh:
                raise
            head = None
            continue
        try:
            return (yield from write(head, what))
        except CheckpointConflict:
            if forget is not None:
                forget()
            if attempt >= max_attempts:
                raise
            head = None
            yield Sleep(retry.delay(min(attempt, 6)))


def judge_write(
    facts: HeadFacts | None,
    envelope: Envelope,
    expected_revision: int | None,
    sent_etag: str | None,
    refused_for_sure: bool,
) -> _Verdict:
    """Decide what became of a write whose answer was not definite, from a read-back.

    `refused_for_sure`: the server refused every copy we sent (a 412/404 that answers our
    only copy, after attempts that all certainly failed), so it cannot have landed.
    """
    if facts is None:
        # Nothing there: a create has not landed; an update's base was deleted.
        return _Verdict.NOT_LANDED if expected_revision is None else _Verdict.LOST
    if facts.remembers(envelope):
        return _Verdict.LANDED
    if refused_for_sure:
        return _Verdict.LOST
    if facts.revision - envelope.revision >= LINEAGE_DEPTH - 1:
        # So many saves since that our pair would have left the lineage: cannot tell.
        return _Verdict.UNKNOWN
    if expected_revision is not None and facts.revision == expected_revision:
        return _Verdict.NOT_LANDED if facts.etag == sent_etag else _Verdict.LOST
    return _Verdict.LOST


class CompareAndSwap:
    """Load, compare-and-swap, update, delete and list envelopes in one namespace, as steps."""

    def __init__(
        self,
        namespace: str,
        layout: Layout,
        codec: Codec,
        retry: RetryPolicy,
        cache: EtagCache,
        *,
        conditional_delete: bool = True,
    ) -> None:
        self.namespace = namespace
        """The namespace (`checkpoints`, `runs`) these steps work in."""
        self.layout = layout
        """Where the namespace lives."""
        self.codec = codec
        """Encodes and decodes envelopes."""
        self.retry = retry
        """Retry policy for 409s and resends."""
        self.cache = cache
        """ETags of revisions seen, shared by every namespace of the stash."""
        self.conditional_delete = conditional_delete
        """Whether storage honours `If-Match` on a DELETE (`Provider.conditional_delete`).
        Without, a delete reads the head first even when given the ETag seen, so a purge's
        tombstone is never deleted (its key must stay occupied)."""

    def key(self, object_id: str) -> str:
        """Return the object key of a (validated) id."""
        return self.layout.key(self.namespace, validate_id(object_id))

    def _get(self, key: str, version_id: str | None = None) -> GetObject:
        # Larger objects are refused from their size, before their body is downloaded.
        return GetObject(key, version_id, self.codec.limits.max_compressed_bytes)

    def _get_version(self, key: str, object_id: str, version_id: str) -> Steps[ObjectInfo | None]:
        """Read an older revision; one moved to an archive tier names the restore command."""
        try:
            return (yield from ask(self._get(key, version_id)))
        except ArchivedObject as exc:
            raise ArchivedObject(
                f"older revisions of {object_id!r} are in an archive storage class: run "
                f"`stashpoint restore {object_id}` (or `restore()`), wait for it, then read "
                "again",
                object_name=key,
            ) from exc

    def restore(self, object_id: str, days: int, tier: str) -> Steps[RestoreReport]:
        """Ask for every archived stored version of a checkpoint to be restored for `days`."""
        check_restore(days, tier)
        key = self.key(object_id)
        versions = yield from ask(ListVersions(key))
        live = [v for v in versions if not v.is_delete_marker]
        if not live:
            raise CheckpointNotFound("no checkpoint with this id", object_name=object_id)
        states: list[RestoreState] = []
        for start in range(0, len(live), 256):
            batch = live[start : start + 256]
            states += yield from ask(
                Parallel(tuple(RestoreObject(key, days, tier, v.version_id) for v in batch))
            )
        return RestoreReport.of(states)

    def load(self, object_id: str, revision: int | None = None) -> Steps[Envelope]:
        """Return the head envelope, or the given older revision (searched in history).

        An older revision is found even when the head itself cannot be decoded (a corrupt
        head, or one in a newer format): history never depends on the head.
        """
        key = self.key(object_id)
        info = yield from ask(self._get(key, None))
        if info is None:
            raise CheckpointNotFound("no checkpoint with this id", object_name=object_id)
        try:
            envelope: Envelope | None = yield from self.decode(info, key, object_id)
        except StashpointError:
            if revision is None:
                raise
            envelope = None
        if envelope is not None:
            purged = facts_from_envelope(info, envelope).purged_error(object_id)
            if purged is not None:
                raise purged  # erased: no revision of it is read, not even one left behind
            self.cache.remember(key, envelope.revision, info.etag)
            if revision is None or envelope.revision == revision:
                return envelope
            if revision > envelope.revision:
                raise CheckpointNotFound(
                    f"revision {revision} does not exist (head is {envelope.revision})",
                    object_name=object_id,
                )
        versions = yield from ask(ListVersions(key))
        later = None if envelope is None else envelope.revision
        for version in versions:
            if version.is_delete_marker or version.is_latest:
                continue
            old = yield from self._get_version(key, object_id, version.version_id)
            if old is None:
                continue
            candidate = yield from self.decode(old, key, object_id)
            if later is not None and candidate.revision >= later:
                break  # an earlier life of this id (deleted, then created again)
            if candidate.revision == revision:
                return candidate
            if revision is not None and candidate.revision < revision:
                break
            later = candidate.revision
        raise CheckpointNotFound(f"revision {revision} is not in history", object_name=object_id)

    def compare_and_swap(self, envelope: Envelope, expected_revision: int | None) -> Steps[None]:
        """Store `envelope` if the head is at `expected_revision` (None: if there is none)."""
        depth = _SAVING.get()
        _SAVING.set(depth + 1)  # a save made from within this one's requests: another writer
        try:
            yield from self._compare_and_swap(envelope, expected_revision, writer_token(depth))
        finally:
            _SAVING.set(depth)

    def _compare_and_swap(
        self, envelope: Envelope, expected_revision: int | None, writer: str
    ) -> Steps[None]:
        if not isinstance(envelope, Envelope):
            raise InvalidArgument(
                f"compare_and_swap takes an Envelope (Envelope.initial(...) or .next(...)), "
                f"not {described(envelope)}"
            )
        if expected_revision is not None:
            whole(expected_revision, "expected_revision", object_name=envelope.id)
        if expected_revision is not None and envelope.revision != expected_revision + 1:
            raise InvalidPayload(
                f"next revision must be expected_revision + 1 = {expected_revision + 1}, "
                f"got {envelope.revision}",
                object_name=envelope.id,
            )
        key = self.key(envelope.id)
        # The head remembers this writer's last save: a read-back can tell whether this
        # one landed however far the head moves before it is read (`_ask_writers`).
        envelope = envelope.saved_by(writer)
        # A payload over the limits fails here, before any I/O.
        body = yield from self.codec.encoding(envelope)
        condition: Create | Match
        if expected_revision is None:
            condition = Create()
        else:
            etag = self.cache.get(key, expected_revision)
            if etag is None:
                facts = yield from self.read_head(key)
                actual = None if facts is None else facts.revision
                purged = None if facts is None else facts.purged_error(envelope.id)
                if purged is not None:
                    raise purged
                if facts is None or facts.revision != expected_revision:
                    raise CheckpointConflict(
                        envelope.id, expected_revision=expected_revision, actual_revision=actual
                    )
                etag = facts.etag
            condition = Match(etag)
        request = PutObject(key, body, condition, head_metadata(envelope))
        sent_etag = condition.etag if isinstance(condition, Match) else None

        def read_back(tracker: WriteTracker) -> Steps[Verdict]:
            facts = yield from self.read_head(key)
            if facts is not None and facts.purge is not None and not facts.remembers(envelope):
                self.cache.forget(key)
                if facts.purge[1] and expected_revision is None:
                    return Rewrite(Match(facts.etag))  # a reusable id: created again
                purged = facts.purged_error(envelope.id)
                assert purged is not None
                return Refused(
                    purged
                    if not facts.purge[1]
                    else CheckpointConflict(
                        envelope.id,
                        expected_revision=expected_revision,
                        actual_revision=facts.revision,
                    )
                )
            verdict = judge_write(
                facts, envelope, expected_revision, sent_etag, tracker.refused_for_sure
            )
            if verdict is _Verdict.UNKNOWN:
                # The head has moved on too far for its lineage to tell: ask its writers,
                # then the history.
                verdict = yield from self._ask_writers(key, envelope, writer)
            if verdict is _Verdict.UNKNOWN:
                verdict = yield from self._search_history(key, envelope)
            if verdict is _Verdict.LANDED:
                assert facts is not None
                return Landed(facts.etag if facts.revision == envelope.revision else None)
            if verdict is _Verdict.LOST:
                self.cache.forget(key)
                return Refused(
                    CheckpointConflict(
                        envelope.id,
                        expected_revision=expected_revision,
                        actual_revision=None if facts is None else facts.revision,
                    )
                )
            if verdict is _Verdict.NOT_LANDED:
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

        etag = yield from writes.put(
            request,
            read_back,
            self.retry,
            what="save",
            write_id=envelope.write_id,
            name=envelope.id,
            look_in=" in the head's lineage",
        )
        if etag:
            self.cache.remember(key, envelope.revision, etag)

    def update(
        self,
        object_id: str,
        mutate: Callable[[Envelope], Any],
        *,
        max_attempts: int | None = None,
        retry: RetryPolicy | None = None,
        known: Envelope | None = None,
    ) -> Steps[Envelope]:
        """Load the head, compute its next payload with `mutate`, save it; retry on conflict.

        The one optimistic-update loop (SlateDB's `maybe_apply_update`): `mutate` receives
        the current envelope and returns the next payload; it may raise to abort (nothing is
        written). `known` is a head the caller already holds (a cache): it is tried first,
        saving the GET; if `mutate` refuses it with a `StashpointError`, it is judged again
        on a fresh load, since a stale copy may be what it objected to. A lost race reloads
        and retries with backoff (`retry`, else the store's policy), `max_attempts` times in
        all (default: the policy's); the last conflict is raised. Returns the envelope saved.
        """
        retry = retry or self.retry

        def change(envelope: Envelope, fresh: bool) -> Steps[Envelope]:
            now = yield from ask(Now())  # the stash's clock: a fake one reaches the save
            payload = mutate(envelope)
            return envelope.next(payload, at=now, write_id=(yield from ask(NewWriteId())))

        def save(envelope: Envelope, following: Envelope) -> Steps[Envelope]:
            yield from self.compare_and_swap(following, envelope.revision)
            return following

        return (
            yield from optimistic_update(
                lambda: self.load(object_id),
                change,
                save,
                retry=retry,
                max_attempts=max_attempts or retry.max_attempts,
                known=known,
            )
        )

    def read_head(self, key: str, version_id: str | None = None) -> Steps[HeadFacts | None]:
        """Return what the head (or one version) says about itself: one HEAD, a GET if need be."""
        info = yield from ask(HeadObject(key, version_id))
        if info is None:
            return None
        facts = facts_from_metadata(info)
        if facts is not None:
            return facts
        if info.body is None:
            # A head without our metadata (written by another tool): its envelope answers.
            info = yield from ask(self._get(key, version_id))
            if info is None:
                return None
        assert info.body is not None
        envelope = yield from self.codec.decoding(info.body, name=key)
        return facts_from_envelope(info, envelope)

    def _ask_writers(self, key: str, envelope: Envelope, writer: str) -> Steps[_Verdict]:
        """Judge a save by the head's record of its writer's last save (`Envelope.writers`).

        A writer saves one revision at a time, so while this save is being judged no other
        save of its writer can land: the head names this save's write id for the writer
        if, and only if, it landed. Its copies were sent under a condition on a head that
        has moved on, so one that has not landed never will. UNKNOWN when the head no
        longer remembers the writer (more than `WRITERS_DEPTH` others saved since).
        """
        info = yield from ask(self._get(key))
        if info is None or info.body is None:
            return _Verdict.UNKNOWN
        try:
            head = yield from self.codec.decoding(info.body, name=key)
        except StashpointError:
            return _Verdict.UNKNOWN
        last = dict(head.writers).get(writer)
        if last is None:
            missing = head.missing_writer_saved_nothing(envelope.revision)
            return _Verdict.LOST if missing else _Verdict.UNKNOWN
        return _Verdict.LANDED if last == envelope.write_id else _Verdict.LOST

    def _search_history(self, key: str, envelope: Envelope) -> Steps[_Verdict]:
        """Find whether `envelope`'s save landed, from the stored versions (binary search).

        Versions are newest first with falling revisions; one whose lineage window covers
        our revision says whether our pair is there. Without versioning: UNKNOWN.
        """
        try:
            versions = yield from ask(ListVersions(key))
        except StashpointError:
            return _Verdict.UNKNOWN
        live = [v for v in versions if not v.is_delete_marker]
        low, high = 0, len(live) - 1
        while low <= high:
            middle = (low + high) // 2
            facts = yield from self.read_head(key, live[middle].version_id)
            if facts is None:
                return _Verdict.UNKNOWN
            if facts.revision - envelope.revision >= LINEAGE_DEPTH:
                low = middle + 1  # too new: its lineage does not reach back to us
            elif facts.revision < envelope.revision:
                high = middle - 1
            else:
                return _Verdict.LANDED if facts.remembers(envelope) else _Verdict.LOST
        return _Verdict.LOST  # no version holds our revision: it never landed

    def describe(self, object_id: str) -> Steps[CheckpointInfo]:
        """Return what the head says about itself: its metadata (one HEAD), else its body."""
        key = self.key(object_id)
        facts = yield from self.read_head(key)
        if facts is None:
            raise CheckpointNotFound("no checkpoint with this id", object_name=object_id)
        purged = facts.purged_error(object_id)
        if purged is not None:
            raise purged
        if facts.envelope is not None:
            _check_home(facts.envelope, key, object_id)
        return facts.info(object_id)

    def delete(
        self,
        object_id: str,
        expected_revision: int | None = None,
        *,
        seen_etag: str | None = None,
    ) -> Steps[None]:
        """Delete the head; with `expected_revision`, only if the head is still at it.

        `seen_etag` (without `expected_revision`): the ETag of the head the caller last
        read or wrote. Where storage honours `If-Match` on a DELETE, the delete is tried on
        it, in one request, without reading the head first; a head saved or purged since
        fails it, and is read and judged as below.
        """
        key = self.key(object_id)
        etag: str | None = None
        if expected_revision is None and seen_etag is not None and self.conditional_delete:
            etag = seen_etag
        elif expected_revision is None:
            # A purge's tombstone keeps its key occupied (a freed key could be created
            # again by a writer that never saw the purge): deleting it does nothing, and
            # the delete is conditional on the head judged, so a purge's tombstone that
            # lands meanwhile fails it.
            try:
                facts = yield from self.read_head(key)
            except (InvalidPayload, UnsupportedFormat):
                facts = None  # unreadable: deleted as it is (unconditionally)
            if facts is not None and facts.purge is not None:
                return
            etag = None if facts is None else facts.etag
        else:
            etag = self.cache.get(key, expected_revision)
            if etag is None:
                facts = yield from self.read_head(key)
                if facts is not None and facts.purge is not None:
                    raise facts.purged_error(object_id) or CheckpointNotFound(
                        "no checkpoint with this id", object_name=object_id
                    )
                if facts is None or facts.revision != expected_revision:
                    raise CheckpointConflict(
                        object_id,
                        expected_revision=expected_revision,
                        actual_revision=None if facts is None else facts.revision,
                    )
                etag = facts.etag
        self.cache.forget(key)
        judged = etag

        def read_back(tracker: writes.WriteTracker) -> Steps[writes.Verdict]:
            nonlocal judged
            try:
                facts = yield from self.read_head(key)
            except (InvalidPayload, UnsupportedFormat):
                if expected_revision is not None:
                    raise
                judged = None  # unreadable (planted since the head seen): deleted as it is
                return writes.Rewrite(None)
            if facts is None or facts.purge is not None:
                # Gone (ours landed, or another delete did the same), or purged meanwhile:
                # erased already, and its tombstone stays.
                return writes.Landed()
            if judged is not None and facts.etag != judged:
                if expected_revision is not None:
                    return writes.Refused(
                        CheckpointConflict(
                            object_id,
                            expected_revision=expected_revision,
                            actual_revision=facts.revision,
                        )
                    )
                judged = facts.etag  # saved meanwhile: an unconditional delete takes it
                return writes.Rewrite(Match(facts.etag))
            return writes.NotLanded()

        yield from writes.delete(
            DeleteObject(key, etag), read_back, self.retry, what="delete", name=object_id
        )

    def end_for_purge(
        self,
        object_id: str,
        purge_id: str,
        *,
        reusable: bool = False,
        written_before: datetime | None = None,
    ) -> Steps[bool]:
        """Put a purge's tombstone in place of the head; older revisions stay to be swept.

        Once it is there, every load, history and describe raises `Purged`, and every
        save (a stale If-Match, a create) is refused with it; the key stays occupied, so
        nothing a writer that never saw the purge sends can land. A head that cannot be
        decoded is replaced all the same (judged by its ETag alone); an id with no head
        (deleted, its revisions kept) gets the tombstone by a create. An id already purged
        keeps its tombstone. `written_before` (a retention purge): only a head last written
        before it is ended, judged on the head the tombstone replaces (If-Match), so a save
        acknowledged since the purge chose the id is never erased. Returns whether the
        tombstone is in place (False: the head is spared).
        """
        key = self.key(object_id)

        def read() -> Steps[tuple[HeadFacts | None, str | None]]:
            try:
                facts = yield from self.read_head(key)
                return facts, None if facts is None else facts.etag
            except (InvalidPayload, UnsupportedFormat):
                raw = yield from ask(HeadObject(key))  # replaced, judged by its ETag alone
                return None, None if raw is None else raw.etag

        def plan(
            head: tuple[HeadFacts | None, str | None], fresh: bool
        ) -> Steps[tuple[Envelope, str | None] | bool]:
            facts, _ = head
            if facts is not None and facts.purge is not None:
                return True  # purged already: its tombstone stays
            if written_before is not None and (
                facts is None or facts.written_at is None or facts.written_at >= written_before
            ):
                return False  # saved since it was chosen, or of unknown age: never by age
            now = yield from ask(Now())
            tombstone = Envelope(
                id=object_id,
                kind=PURGED_KIND,
                schema_version=1,
                revision=0 if facts is None else min(facts.revision + 1, MAX_REVISION),
                write_id=(yield from ask(NewWriteId())),
                created_at=now,
                updated_at=now,
                payload={"purge_id": purge_id, "reusable": reusable},
            )
            return tombstone, head[1]

        def end(
            head: tuple[HeadFacts | None, str | None],
            planned: tuple[Envelope, str | None] | bool,
        ) -> Steps[bool]:
            if isinstance(planned, bool):
                return planned
            tombstone, found = planned
            body = yield from self.codec.encoding(tombstone)
            condition: Create | Match = Create() if found is None else Match(found)

            def read_back(tracker: WriteTracker) -> Steps[Verdict]:
                now_there = yield from self.read_head(key)
                if now_there is not None and now_there.purge is not None:
                    return Landed(now_there.etag)  # ours, or another purge's: as good
                if (None if now_there is None else now_there.etag) == found:
                    return NotLanded()
                return Refused(
                    CheckpointConflict(
                        object_id,
                        expected_revision=None,
                        actual_revision=None if now_there is None else now_there.revision,
                        message="the head changed under the purge's tombstone",
                    )
                )

            yield from writes.put(
                PutObject(key, body, condition, head_metadata(tombstone)),
                read_back,
                self.retry,
                what="purge tombstone",
                name=object_id,
            )
            return True

        # The one optimistic-update loop: a head saved meanwhile is read and judged again.
        ended = yield from optimistic_update(
            read, plan, end, retry=self.retry, max_attempts=self.retry.max_attempts
        )
        self.cache.forget(key)
        return ended

    def history(self, object_id: str, limit: int | None = None) -> Steps[list[Envelope]]:
        """Return older revisions of a head, newest first (the head itself excluded).

        History is the current incarnation's: an id deleted and created again starts a new
        history at revision 0 (the older one stays in storage, behind the delete marker).
        A deleted id's history is its last incarnation's. The head is never decoded.
        """
        key = self.key(object_id)
        try:
            versions = yield from ask(ListVersions(key))
        except ConfigurationError:
            # No versions kept here (versioning off, a directory bucket): an erased id
            # still says so; any other says why it has no history.
            facts = yield from self.read_head(key)
            purged = None if facts is None else facts.purged_error(object_id)
            if purged is not None:
                raise purged from None
            raise
        # A life's revisions fall by one from its head; a revision that does not fall
        # belongs to an earlier life. (Delete markers alone cannot say: stores list them
        # apart from versions, ordered by a timestamp of one-second resolution.)
        later: int | None = None
        if any(v.is_latest and not v.is_delete_marker for v in versions):
            try:
                facts = yield from self.read_head(key)
            except StashpointError:
                facts = None  # an unreadable head: its revision is unknown
            purged = None if facts is None else facts.purged_error(object_id)
            if purged is not None:
                raise purged  # a purge under way: what it has not erased yet is not read
            later = None if facts is None else facts.revision
        envelopes: list[Envelope] = []
        for version in versions:
            if version.is_delete_marker or version.is_latest:
                continue
            if limit is not None and len(envelopes) >= limit:
                break
            info = yield from self._get_version(key, object_id, version.version_id)
            if info is None:
                continue
            candidate = yield from self.decode(info, key, object_id)
            if later is not None and candidate.revision >= later:
                break
            envelopes.append(candidate)
            later = candidate.revision
        return envelopes

    def list_ids(self, prefix: str = "", page_size: int = 1000) -> Steps[list[str]]:
        """Return the ids in this namespace that start with `prefix`, ascending."""
        validate_prefix(prefix)
        base = self.layout.namespace_prefix(self.namespace)
        pages = yield from every_key_page(base + prefix, page_size=page_size)
        # Sorted here: a directory bucket lists in no particular order.
        return sorted(
            k[len(base) :] for page in pages for k in page.keys if "/" not in k[len(base) :]
        )

    def decode(self, info: ObjectInfo, key: str, object_id: str) -> Steps[Envelope]:
        """Decode the envelope an object read from `key` holds, refused if it is another id's."""
        assert info.body is not None
        envelope = yield from self.codec.decoding(info.body, name=key)
        _check_home(envelope, key, object_id)
        return envelope


def _check_home(envelope: Envelope, key: str, object_id: str) -> None:
    """Refuse an envelope stored under another id's key (copied or misplaced by hand)."""
    if envelope.id != object_id:
        raise InvalidPayload(
            f"object holds envelope {envelope.id!r}, not {object_id!r}", object_name=key
        )
