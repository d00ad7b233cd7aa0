"""Append-only logs over object storage, as steps: append, read, seal, vacate.

**Append.** Version `v` is created with `If-None-Match: *`, so of two writers extending
`v - 1` exactly one succeeds; the other gets `CheckpointConflict` carrying the winner's
version. Each append sends its records and the small state (O(delta) bytes) in one PUT,
through the one conditional-write engine (`stores.writes`): an answer that is not definite
(timeout, reset, 5xx, a 412 that may answer botocore's own retry of our landed write) is
settled by reading version `v` back: our `write_id` there (in the entry, or in the marker
that vacated it) means success, another means conflict, nothing means not landed, so the
same bytes are sent again under the same condition (at most one copy can land).

**Seal.** When version `64k + 64` is appended, versions `64k .. 64k + 63` are copied into
one immutable sealed segment (created with `If-None-Match: *`; the range is fixed by the
format, so concurrent sealers write the same key with the same bytes). An object already
at the segment's key is judged by its content: the entries are the truth, so a segment
that holds other records (or none that decode) is replaced over its ETag. Ranges an
interrupted sealer left behind are found by the next seal (from the complete listing of
segments) and by `gc`.

**Vacate.** Once its segment is stored, each sealed entry is replaced by a small `vacated`
marker, conditional on the entry's ETag; rebases and deletions vacate every entry below
them the same way (and delete the segments there, which nothing needs). A key is never
freed: a writer whose head is stale, however stale and whatever the clocks say, finds the
key occupied and loses its append; nothing acknowledged lands where no reader looks.
Readers that meet a sealed version's marker read its segment (listing again).

**Lives.** `delete` appends a last version that ends the log and vacates everything below
it; appending to the log again starts a new life after it, whose versions continue the
numbering and whose records start at 0. Readers never read below the current life's base.

**Where each part lives.** `LogSteps` is built in layers, one idea a module, each importing
only those below it: `bounds` (every bound), `head` (a head and what ended it), `listing`
(what a listing says and the reads planned from it), `reading` (`LogReader`), `tidying`
(`LogTidier`: vacated markers, lives), `sealing` (`LogSealer`: segments and packs), and
this module, the append itself and the versions that end a log (a deletion, a purge).
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime
from typing import Any

from stashpoint import tracing
from stashpoint.codec import declared_size
from stashpoint.envelope import MAX_REVISION
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    InvalidArgument,
    InvalidPayload,
    LimitExceeded,
    Purged,
    StashpointError,
    UnsupportedFormat,
)
from stashpoint.logs.bounds import (
    DUE_SEALS_PER_LOG,
    PURGE_ATTEMPTS,
    READ_CACHE_BYTES,
    WRITTEN_BODY,
    logger,
)
from stashpoint.logs.format import (
    SEGMENT_SPAN,
    LogEntry,
    LogKeys,
    check_log_id,
    entry_document,
    make_patch,
)
from stashpoint.logs.head import (
    NO_SNAPSHOT,
    PURGED,
    REUSABLE,
    LogHead,
    ended_error,
    purge_of,
)
from stashpoint.logs.listing import (
    Item,
    LogListing,
    lost_race,
)
from stashpoint.logs.sealing import (
    LogSealer,
    PackReport,
)
from stashpoint.steps import NewWriteId, Now, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.cas import optimistic_update
from stashpoint.stores.objects import (
    Create,
    ObjectInfo,
    PutObject,
)
from stashpoint.stores.writes import (
    Landed,
    NotLanded,
    Refused,
    Verdict,
    WriteTracker,
)

__all__ = [
    "PURGED",
    "READ_CACHE_BYTES",
    "REUSABLE",
    "Item",
    "LogHead",
    "LogKeys",
    "LogListing",
    "LogSteps",
    "PackReport",
    "ended_error",
    "purge_of",
]


class LogSteps(LogSealer):
    """The append-only logs of one namespace, as steps (see the module docstring)."""

    def append(
        self,
        log_id: str,
        records: list[Any],
        *,
        after: LogHead | None,
        state: Any = None,
        kind: str | None = None,
        schema_version: int | None = None,
        extra: dict[str, Any] | None = None,
        handed_over: bool = False,
        retried: bool = False,
    ) -> Steps[LogHead]:
        """Append `records` (and the new `state`) after `after`; None creates the log.

        Exactly one of two appends after the same head succeeds; the other raises
        `CheckpointConflict` with the winner's version. Creating a log that was deleted
        starts its new life after the deletion. Returns the new head. `handed_over`: the
        caller never changes `state` after the call (a document made for it), so the head
        keeps it without a copy. `retried`: the caller reads the head again after a lost
        race (the update loop of `logs.state`), so the conflict is raised without the
        listing that names the winner (a round trip less per lost race; the read that
        follows also finds a purge).
        """
        log_id = check_log_id(log_id)
        if not isinstance(records, list):
            raise InvalidArgument("records must be a list", object_name=log_id)
        if after is not None and (not isinstance(after, LogHead) or after.log_id != log_id):
            raise InvalidArgument(f"after must be a head of log {log_id!r}", object_name=log_id)
        try:
            return (
                yield from self._append(
                    log_id, records, after, state, kind, schema_version, extra,
                    handed_over=handed_over, retried=retried,
                )
            )  # fmt: skip
        except CheckpointConflict:
            if after is not None:
                raise
            # A create that found the log: one that was deleted is created again after the
            # version that ended it.
            top = yield from self.top(log_id)
            if not top.ended:
                raise
            if top.refuses_writes:
                raise ended_error(log_id, top) from None
        return (
            yield from self._append(
                log_id, records, top, state, kind, schema_version, extra,
                handed_over=handed_over, retried=retried,
            )
        )  # fmt: skip

    def _append(
        self,
        log_id: str,
        records: list[Any],
        after: LogHead | None,
        state: Any,
        kind: str | None,
        schema_version: int | None,
        extra: dict[str, Any] | None,
        *,
        ends: bool = False,
        handed_over: bool = False,
        retried: bool = False,
    ) -> Steps[LogHead]:
        version = _next_version(log_id, after)
        # A new life starts at a create, and after the version that ended the old one.
        inherited = None if after is None or after.ended else after
        change = self._patch(inherited, version, state, ends=ends)
        now = yield from ask(Now())
        entry = LogEntry(
            log_id=log_id,
            version=version,
            records=records,
            state=state,
            write_id=(yield from ask(NewWriteId())),
            written_at=now,
            extra=extra or {},
            patch=change[0] if change else None,
            unset=change[1] if change else (),
            prev=None if after is None else after.write_id,
            ended=ends,
            **_carried(inherited, version, kind, schema_version),
        )
        key = self.keys.entry(log_id, version)
        etag = yield from self._create(log_id, key, entry, retried=retried)
        head = LogHead.of(entry, handed_over=handed_over, etag=etag)
        self._learn_top(log_id, version)
        if version >= SEGMENT_SPAN and version % SEGMENT_SPAN == 0:
            yield from self._segment_complete(log_id, version, entry.base)
        return head

    def _patch(
        self, inherited: LogHead | None, version: int, state: Any, *, ends: bool
    ) -> tuple[Any, Any] | None:
        """Return the patch (and unset paths) a version stores instead of its whole state.

        None: the whole state (a new life, every `full_state_every` versions, an unknown
        snapshot); an ending version stores no patch: nothing of the state it ends.
        """
        if inherited is None or inherited.snapshot is NO_SNAPSHOT or ends:
            return None
        if version % self.full_state_every == 0:
            return None
        return make_patch(inherited.snapshot, state)

    def _segment_complete(self, log_id: str, version: int, base: int) -> Steps[None]:
        """Seal the segment `version` completes, or leave it due (`seal_on_append` off)."""
        if self.seal_on_append:
            yield from self._seal_below(log_id, version, base)
        else:
            # Not on the caller's path: its owner seals later (`seal_due`), else gc.
            self.due_seals.update(log_id, functools.partial(_due, version, base))

    def seal_due(self) -> Steps[int]:
        """Seal what appends left due (`seal_on_append` off); return how many logs.

        Each due log is sealed below the version that completed its range, as the append
        would have. A failure is logged and left to the next seal or to `gc`: the entries
        are whole, and no reader depends on a seal having happened.
        """
        due = self.due_seals.take_all()
        for log_id, (versions, base) in due:
            for version in versions:
                yield from self._seal_below(log_id, version, base)
        return len(due)

    def _seal_below(self, log_id: str, version: int, base: int) -> Steps[None]:
        """Seal below `version` of the life starting at `base`; a failure is said, not raised.

        The append that completed the range is durable already: a failed seal is redone by
        the next seal or by gc.
        """
        try:
            yield from self.seal(log_id, below=version, base=base)
        except StashpointError as exc:
            tracing.event("seal_failed", kind=exc.kind.value)
            logger.warning(
                "stashpoint: sealing log %s below version %d failed (%s); the next seal "
                "or `stashpoint gc` does it",
                log_id,
                version,
                exc.kind.value,
            )

    def _create(
        self, log_id: str, key: str, entry: LogEntry, *, retried: bool = False
    ) -> Steps[str | None]:
        """Create the entry object; settle an unclear answer by reading the version back.

        `retried`: a lost race is raised without naming the winner (`append`).
        """
        body = yield from self.codec.document_encoding(entry_document(entry), name=key)

        def lost() -> Steps[Verdict]:
            if retried:
                return Refused(lost_race(log_id, entry.version, None))
            return Refused((yield from self._conflict(log_id, entry.version)))

        def read_back(tracker: WriteTracker) -> Steps[Verdict]:
            if tracker.refused_for_sure:
                return (yield from lost())
            try:
                found = yield from self.read_version(log_id, entry.version)
            except (InvalidPayload, UnsupportedFormat):
                # Ours always decodes: whatever is there is another writer's (or planted).
                return (yield from lost())
            if found is None:
                return NotLanded()
            if found.write_id == entry.write_id:
                return Landed()  # ours, perhaps sealed and vacated since
            return (yield from lost())

        etag = yield from writes.put(
            PutObject(key, body, Create()),
            read_back,
            self.retry,
            what="append",
            write_id=entry.write_id,
            look_in=f" at version {entry.version}",
        )
        # Bounded by the decoded size: a compressible entry is small on the wire only.
        if etag is not None and max(len(body), declared_size(body)) <= WRITTEN_BODY:
            self._written.put(key, ObjectInfo(etag=etag, body=body))
        return etag

    def _conflict(self, log_id: str, version: int) -> Steps[StashpointError]:
        """Return the conflict of a lost append at `version`, naming the winner's head.

        A log a purge ended answers `Purged` instead: the writer is told it was erased.
        """
        try:
            listing = yield from self.listing(log_id)
            top = listing.top
            if top is not None and top >= version:
                newest = yield from self.read_version(log_id, top)
                if isinstance(newest, LogEntry) and newest.ended:
                    ended = ended_error(log_id, newest)
                    if isinstance(ended, Purged):
                        return ended
        except StashpointError:
            top = None
        return lost_race(log_id, version, top)

    def delete(self, log_id: str) -> Steps[int]:
        """End a log: append a last version that deletes it, vacate everything below.

        Returns how many objects were vacated or deleted. A late writer (any head it may
        hold) loses its append; creating the log again starts a new life after it.
        """
        log_id = check_log_id(log_id)

        def read() -> Steps[LogHead | None]:
            try:
                return (yield from self.top(log_id))
            except CheckpointNotFound:
                return None

        def change(head: LogHead | None, fresh: bool) -> Steps[LogHead | None]:
            return head  # the version that ends it follows the top, whatever it holds
            yield  # a generator, like every change

        def end(head: LogHead | None, top: LogHead | None) -> Steps[LogHead | None]:
            if top is None or top.ended:
                return top  # no log, or ended already
            return (
                yield from self._append(
                    log_id, [], top, None, top.kind, top.schema_version, None, ends=True
                )
            )

        # The one optimistic-update loop: a lost race reads the top again and ends after it.
        ended = yield from optimistic_update(
            read, change, end, retry=self.retry, max_attempts=self.retry.max_attempts
        )
        if ended is None:
            return 0
        return (yield from self.vacate_below(log_id, ended.version, reason="deleted"))

    def end_for_purge(
        self,
        log_id: str,
        purge_id: str,
        *,
        reusable: bool = False,
        written_before: datetime | None = None,
    ) -> Steps[LogHead | None]:
        """Append the version that ends a log for a purge: its tombstone; return it.

        Once there, every read of the log raises `Purged` and every append is refused
        (unless `reusable`: then a create starts a new life, as after a deletion). A log
        already ended by a purge keeps that tombstone. None: there is no log. A top that
        cannot be read (damaged, or planted) is ended all the same, after its version:
        a purge never depends on what it erases being readable. `written_before` (a
        retention purge): only a log last written before it is ended, judged on the top the
        tombstone follows (create-only, so an append since loses it the race and is judged
        again); a spared log's top is returned as it is (no `purge_id`).
        """
        log_id = check_log_id(log_id)
        extra = {PURGED: purge_id, REUSABLE: reusable}
        ahead = [0]  # versions the next tombstone skips: doubled after every lost race

        def read() -> Steps[LogHead | None]:
            try:
                return (yield from self.top(log_id))
            except CheckpointNotFound:
                return None
            except (InvalidPayload, UnsupportedFormat):
                top = yield from self._listed_top(log_id)
                if top is None:
                    return None
                now = yield from ask(Now())
                return LogHead(
                    log_id, top, 0, None, "stashpoint.log", 1, "unreadable", now,
                    ended=written_before is None,
                )  # fmt: skip

        def plan(head: LogHead | None, fresh: bool) -> Steps[LogHead | None]:
            """Return the head the tombstone follows; None: none is written."""
            if head is None or head.purge_id is not None:
                return None  # no log, or a purge's tombstone already
            if head.kind == "stashpoint.log" and head.write_id == "unreadable":
                if written_before is not None:
                    return None  # of unknown age: never purged by age (spared)
                return head
            if written_before is not None and (head.ended or head.written_at >= written_before):
                return None  # written since the purge chose it (or deleted): spared
            # Writers that keep appending could win every race for the next version: after
            # a lost one the tombstone goes further ahead (an ending version needs no
            # predecessor), and the versions it skipped are occupied by markers after it.
            if not ahead[0]:
                return head
            return dataclasses.replace(head, version=head.version + ahead[0], ended=True)
            yield  # a generator, like every change

        def end(head: LogHead | None, after: LogHead | None) -> Steps[LogHead | None]:
            if after is None:
                return head
            try:
                return (
                    yield from self._append(
                        log_id, [], after, None, after.kind, after.schema_version, extra,
                        ends=True,
                    )
                )  # fmt: skip
            except CheckpointConflict:
                ahead[0] = max(1, 2 * ahead[0])
                raise

        heads: list[LogHead | None] = []

        def read_noting() -> Steps[LogHead | None]:
            head = yield from read()
            heads.append(head)
            return head

        # The one optimistic-update loop: a lost race reads the top again.
        tombstone = yield from optimistic_update(
            read_noting, plan, end, retry=self.retry, max_attempts=PURGE_ATTEMPTS
        )
        head = heads[-1] if heads else None
        if tombstone is None or head is None or tombstone is head:
            return tombstone  # no log, already purged, or spared: nothing written here
        skipped = range(head.version + 1, tombstone.version)
        if skipped:
            yield from self._vacate(
                log_id, [(v, None) for v in skipped], reason="purged", by=tombstone.version
            )
        self._forget_bodies(log_id)
        return tombstone


def _next_version(log_id: str, after: LogHead | None) -> int:
    """Return the version an append after `after` writes; refuse a log that refuses writes."""
    if after is not None and after.refuses_writes:
        raise ended_error(log_id, after)
    version = 0 if after is None else after.version + 1
    if version > MAX_REVISION:
        raise LimitExceeded("log version overflow", object_name=log_id)
    return version


def _carried(
    inherited: LogHead | None, version: int, kind: str | None, schema_version: int | None
) -> dict[str, Any]:
    """Return what a new entry carries on from its life's head (None: a new life)."""
    if inherited is None:
        return {
            "first_record": 0,
            "kind": kind or "stashpoint.log",
            "schema_version": 1 if schema_version is None else schema_version,
            "base": version,
        }
    return {
        "first_record": inherited.next_record,
        "kind": kind or inherited.kind,
        "schema_version": inherited.schema_version if schema_version is None else schema_version,
        "base": inherited.base,
    }


def _due(
    version: int, base: int, known: tuple[tuple[int, ...], int] | None
) -> tuple[tuple[int, ...], int]:
    """Add `version` to a log's due seals, those of the life from `base`.

    A new life's replace the old one's (ended).
    """
    if known is None or known[1] != base:
        return (version,), base
    return (*known[0], version)[-DUE_SEALS_PER_LOG:], base
