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
from datetime import datetime
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
    StashpointError,
    UnsupportedFormat,
    described,
    whole,
)
from stashpoint.ids import validate_id, validate_prefix, writer_token
from stashpoint.retry import RetryPolicy
from stashpoint.steps import NewWriteId, Now, Parallel, Sleep, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.head_facts import (
    PURGED_KIND,
    HeadFacts,
    Judgement,
    facts_from_envelope,
    facts_from_metadata,
    head_metadata,
    judge_write,
    purged_meanwhile,
    raise_purged,
    save_verdict,
)
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
    VersionRef,
    check_restore,
    every_key_page,
)
from stashpoint.stores.writes import Landed, NotLanded, Refused, Verdict, WriteTracker

_SAVING: contextvars.ContextVar[int] = contextvars.ContextVar("stashpoint_saving", default=0)
"""How many saves this thread or task is inside (`writer_token`'s depth)."""


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
        seeks: bool = True,
        any_delimiter: bool = False,
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
        self.seeks = seeks
        """Whether storage lists in order and from a key (`Provider.seeks`): without, a
        listing walks its pages with continuation tokens only (a directory bucket)."""
        self.any_delimiter = any_delimiter
        """Whether listings roll keys up by any delimiter (`Provider.any_delimiter`)."""

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
        return (yield from self._older(key, object_id, revision, envelope))

    def _older(
        self, key: str, object_id: str, revision: int | None, head: Envelope | None
    ) -> Steps[Envelope]:
        """Return revision `revision` from the key's older versions, newest first.

        Below `head` (when it could be read); the search stops at an earlier life of the id.
        """
        versions = yield from ask(ListVersions(key))
        later = None if head is None else head.revision

        def enough(read: list[Envelope]) -> bool:
            return revision is not None and bool(read) and read[-1].revision <= revision

        older = yield from self._this_life(key, object_id, versions, later, enough)
        if older and older[-1].revision == revision:
            return older[-1]
        raise CheckpointNotFound(f"revision {revision} is not in history", object_name=object_id)

    def compare_and_swap(
        self,
        envelope: Envelope,
        expected_revision: int | None,
        *,
        only_over: str | None = None,
        strict: bool = False,
    ) -> Steps[None]:
        """Store `envelope` if the head is at `expected_revision` (None: if there is none).

        A create (`expected_revision` None) over a reusable purge's tombstone starts the
        id's new life, unless `strict`: then it lands only where nothing is stored, or,
        with `only_over`, only over the tombstone of that ETag (the one its writer read).
        For derived heads (a store's catalog): a copy of what a purge erased, read before
        the purge, is never written after its tombstone.
        """
        depth = _SAVING.get()
        _SAVING.set(depth + 1)  # a save made from within this one's requests: another writer
        try:
            yield from self._compare_and_swap(
                envelope, expected_revision, writer_token(depth), only_over, strict
            )
        finally:
            _SAVING.set(depth)

    def _compare_and_swap(
        self,
        envelope: Envelope,
        expected_revision: int | None,
        writer: str,
        only_over: str | None,
        strict: bool,
    ) -> Steps[None]:
        _check_save(envelope, expected_revision)
        key = self.key(envelope.id)
        # The head remembers this writer's last save: a read-back can tell whether this
        # one landed however far the head moves before it is read (`_ask_writers`).
        envelope = envelope.saved_by(writer)
        # A payload over the limits fails here, before any I/O.
        body = yield from self.codec.encoding(envelope)
        condition = (
            Match(only_over)
            if only_over is not None and expected_revision is None
            else (yield from self._condition(key, envelope.id, expected_revision))
        )
        request = PutObject(key, body, condition, head_metadata(envelope))
        sent_etag = condition.etag if isinstance(condition, Match) else None
        read_back = self._save_read_back(
            key, envelope, expected_revision, sent_etag, writer, strict=strict
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

    def _condition(
        self, key: str, object_id: str, expected_revision: int | None
    ) -> Steps[Create | Match]:
        """Return a save's condition: a create, or If-Match on the expected revision's ETag.

        The ETag is remembered, else read with the head (which must be at that revision).
        """
        if expected_revision is None:
            return Create()
        return Match((yield from self._etag_at(key, object_id, expected_revision)))

    def _etag_at(self, key: str, object_id: str, revision: int) -> Steps[str]:
        """Return the ETag of the head at `revision`: remembered, else read with the head.

        A head at another revision is a `CheckpointConflict`; a purged one says so.
        """
        etag = self.cache.get(key, revision)
        if etag is not None:
            return etag
        facts = yield from self.read_head(key)
        raise_purged(facts, object_id)
        if facts is None or facts.revision != revision:
            raise CheckpointConflict(
                object_id,
                expected_revision=revision,
                actual_revision=None if facts is None else facts.revision,
            )
        return facts.etag

    def _save_read_back(
        self,
        key: str,
        envelope: Envelope,
        expected_revision: int | None,
        sent_etag: str | None,
        writer: str,
        *,
        strict: bool = False,
    ) -> writes.ReadBack:
        """Return how a save whose answer is unclear is judged from the head read again."""

        def read_back(tracker: WriteTracker) -> Steps[Verdict]:
            facts = yield from self.read_head(key)
            if facts is not None and facts.purge is not None and not facts.remembers(envelope):
                self.cache.forget(key)
                if strict:  # never over a tombstone its writer did not read
                    return Refused(
                        CheckpointConflict(
                            envelope.id,
                            expected_revision=expected_revision,
                            actual_revision=facts.revision,
                            message="a purge ended the head since it was read",
                        )
                    )
                return purged_meanwhile(facts, envelope, expected_revision)
            verdict = judge_write(
                facts, envelope, expected_revision, sent_etag, tracker.refused_for_sure
            )
            if verdict is Judgement.UNKNOWN:
                # The head has moved on too far for its lineage to tell: ask its writers,
                # then the history.
                verdict = yield from self._ask_writers(key, envelope, writer)
            if verdict is Judgement.UNKNOWN:
                verdict = yield from self._search_history(key, envelope)
            if verdict is Judgement.LOST:
                self.cache.forget(key)
            return save_verdict(verdict, facts, envelope, expected_revision, tracker)

        return read_back

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

    def _ask_writers(self, key: str, envelope: Envelope, writer: str) -> Steps[Judgement]:
        """Judge a save by the head's record of its writer's last save (`Envelope.writers`).

        A writer saves one revision at a time, so while this save is being judged no other
        save of its writer can land: the head names this save's write id for the writer
        if, and only if, it landed. Its copies were sent under a condition on a head that
        has moved on, so one that has not landed never will. UNKNOWN when the head no
        longer remembers the writer (more than `WRITERS_DEPTH` others saved since).
        """
        info = yield from ask(self._get(key))
        if info is None or info.body is None:
            return Judgement.UNKNOWN
        try:
            head = yield from self.codec.decoding(info.body, name=key)
        except StashpointError:
            return Judgement.UNKNOWN
        last = dict(head.writers).get(writer)
        if last is None:
            missing = head.missing_writer_saved_nothing(envelope.revision)
            return Judgement.LOST if missing else Judgement.UNKNOWN
        return Judgement.LANDED if last == envelope.write_id else Judgement.LOST

    def _search_history(self, key: str, envelope: Envelope) -> Steps[Judgement]:
        """Find whether `envelope`'s save landed, from the stored versions (binary search).

        Versions are newest first with falling revisions; one whose lineage window covers
        our revision says whether our pair is there. Without versioning: UNKNOWN.
        """
        try:
            versions = yield from ask(ListVersions(key))
        except StashpointError:
            return Judgement.UNKNOWN
        live = [v for v in versions if not v.is_delete_marker]
        low, high = 0, len(live) - 1
        while low <= high:
            middle = (low + high) // 2
            facts = yield from self.read_head(key, live[middle].version_id)
            if facts is None:
                return Judgement.UNKNOWN
            if facts.revision - envelope.revision >= LINEAGE_DEPTH:
                low = middle + 1  # too new: its lineage does not reach back to us
            elif facts.revision < envelope.revision:
                high = middle - 1
            else:
                return Judgement.LANDED if facts.remembers(envelope) else Judgement.LOST
        return Judgement.LOST  # no version holds our revision: it never landed

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
        tombstone, etag = yield from self._delete_etag(key, object_id, expected_revision, seen_etag)
        if tombstone:
            return
        self.cache.forget(key)
        yield from writes.delete(
            DeleteObject(key, etag),
            self._delete_read_back(key, object_id, expected_revision, etag),
            self.retry,
            what="delete",
            name=object_id,
        )

    def _delete_etag(
        self, key: str, object_id: str, expected_revision: int | None, seen_etag: str | None
    ) -> Steps[tuple[bool, str | None]]:
        """Return whether the head is a purge's tombstone (left as it is), and an ETag.

        The ETag a delete is conditional on (None: unconditional, an unreadable head).
        """
        if expected_revision is None and seen_etag is not None and self.conditional_delete:
            return False, seen_etag
        if expected_revision is None:
            # A purge's tombstone keeps its key occupied (a freed key could be created
            # again by a writer that never saw the purge): deleting it does nothing, and
            # the delete is conditional on the head judged, so a purge's tombstone that
            # lands meanwhile fails it.
            try:
                facts = yield from self.read_head(key)
            except (InvalidPayload, UnsupportedFormat):
                return False, None  # unreadable: deleted as it is (unconditionally)
            if facts is not None and facts.purge is not None:
                return True, None
            return False, None if facts is None else facts.etag
        return False, (yield from self._etag_at(key, object_id, expected_revision))

    def _delete_read_back(
        self, key: str, object_id: str, expected_revision: int | None, etag: str | None
    ) -> writes.ReadBack:
        """Return how a delete whose answer is unclear is judged from the head read again."""
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
            if judged is None or facts.etag == judged:
                return writes.NotLanded()
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

        return read_back

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
        versions, later = yield from self._history_versions(key, object_id)
        return (
            yield from self._this_life(
                key,
                object_id,
                versions,
                later,
                lambda read: limit is not None and len(read) >= limit,
            )
        )

    def _history_versions(
        self, key: str, object_id: str
    ) -> Steps[tuple[list[VersionRef], int | None]]:
        """Return a head's stored versions, and its current revision when it can be read.

        A life's revisions fall by one from its head; a revision that does not fall
        belongs to an earlier life. (Delete markers alone cannot say: stores list them
        apart from versions, ordered by a timestamp of one-second resolution.) An erased
        id says so (`Purged`), with versioning or without.
        """
        try:
            versions = yield from ask(ListVersions(key))
        except ConfigurationError:
            # No versions kept here (versioning off, a directory bucket): an erased id
            # still says so; any other says why it has no history.
            raise_purged((yield from self.read_head(key)), object_id)
            raise
        if not any(v.is_latest and not v.is_delete_marker for v in versions):
            return versions, None
        try:
            facts = yield from self.read_head(key)
        except StashpointError:
            return versions, None  # an unreadable head: its revision is unknown
        # A purge under way: what it has not erased yet is not read.
        raise_purged(facts, object_id)
        return versions, None if facts is None else facts.revision

    def _this_life(
        self,
        key: str,
        object_id: str,
        versions: list[VersionRef],
        later: int | None,
        enough: Callable[[list[Envelope]], bool],
    ) -> Steps[list[Envelope]]:
        """Read a key's older versions, newest first, while they are of this life.

        Each must fall below `later` (the revision above it, when known): one that does
        not is an earlier life's (the id deleted, then created again), where the walk
        stops, as it does once `enough(read so far)` says so.
        """
        envelopes: list[Envelope] = []
        for version in versions:
            if version.is_delete_marker or version.is_latest:
                continue
            if enough(envelopes):
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


def _check_save(envelope: object, expected_revision: int | None) -> None:
    """Refuse what is not an envelope, or one that does not follow `expected_revision`."""
    if not isinstance(envelope, Envelope):
        raise InvalidArgument(
            f"compare_and_swap takes an Envelope (Envelope.initial(...) or .next(...)), "
            f"not {described(envelope)}"
        )
    if expected_revision is None:
        return
    whole(expected_revision, "expected_revision", object_name=envelope.id)
    if envelope.revision != expected_revision + 1:
        raise InvalidPayload(
            f"next revision must be expected_revision + 1 = {expected_revision + 1}, "
            f"got {envelope.revision}",
            object_name=envelope.id,
        )


def _check_home(envelope: Envelope, key: str, object_id: str) -> None:
    """Refuse an envelope stored under another id's key (copied or misplaced by hand)."""
    if envelope.id != object_id:
        raise InvalidPayload(
            f"object holds envelope {envelope.id!r}, not {object_id!r}", object_name=key
        )
