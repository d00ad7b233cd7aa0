"""Append-only logs over object storage, as steps: append, read, seal, clean up.

**Append.** Version `v` is created with `If-None-Match: *`, so of two writers extending
`v - 1` exactly one succeeds; the other gets `CheckpointConflict` carrying the winner's
version. Each append sends its records and the small state (O(delta) bytes) in one PUT.
An answer that is not definite (timeout, reset, 5xx, a 412 that may answer botocore's own
retry of our landed write) is settled by reading version `v` back: our `write_id` there
means success, another means conflict, nothing means not landed, so the same bytes are
sent again under the same condition (at most one copy can land).

**Seal.** When version `64k + 64` is appended, versions `64k .. 64k + 63` are copied into
one immutable sealed segment (also created with `If-None-Match: *`; the range is fixed by
the format, so concurrent sealers write the same key with the same bytes). Each record is
thus written twice in all: once in its entry, once in its segment.

**Clean up.** An entry covered by a segment is deleted once it is older than
`delete_after` (one hour by default). Readers that listed it before the delete find it gone
and list again; a gap that survives a fresh, ordered listing is corruption and a typed
error, never a shorter log. Deleting an entry frees its key, so a writer that learned
version `v - 1` long ago (a zombie) could create a phantom `v` inside a sealed range: an
append whose knowledge is older than half of `delete_after` therefore checks, after its
PUT, that no segment covers `v` (for everyone else no request is added).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from stashpoint.cache import Lru
from stashpoint.codec import Codec
from stashpoint.envelope import MAX_REVISION, utc_now
from stashpoint.errors import (
    ArchivedObject,
    CheckpointConflict,
    CheckpointNotFound,
    InvalidPayload,
    LimitExceeded,
    StashpointError,
    StorageUnavailable,
    UnsupportedFormat,
)
from stashpoint.ids import new_write_id
from stashpoint.logs.format import (
    FULL_STATE_EVERY,
    LOG_FORMAT_NAME,
    LOG_FORMAT_VERSION,
    SEGMENT_SPAN,
    UNKNOWN_STATE,
    LogEntry,
    LogKeys,
    check_chain,
    check_log_id,
    entries_from_segment,
    entry_document,
    entry_from_document,
    make_patch,
    parse_entry_name,
    parse_segment_name,
    resolve,
    segment_document,
    segment_start,
    state_base,
)
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Parallel, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    GetObject,
    KeyPage,
    ListKeys,
    ObjectInfo,
    PutObject,
    RestoreObject,
    RestoreReport,
    RestoreState,
    WriteOutcome,
    check_restore,
)
from stashpoint.stores.writes import Landed, NotLanded, Refused, Verdict, WriteTracker

T = TypeVar("T")

DEFAULT_DELETE_AFTER = timedelta(hours=1)
"""How long a sealed entry stays readable before clean-up deletes it."""
_READ_WINDOW = 16
"""Objects fetched at once when reading a log backwards or in order."""
SEAL_LEVEL = 9
"""zstd level of sealed segments: 7% smaller than level 3 on transcripts at ~3 ms a seal."""
_FETCH_BATCH = 256
"""Objects requested in one `Parallel` (the driver keeps 16 in flight); bounds memory."""
_TAIL_GUESS = 256
"""Most versions a tail read fetches in its first round, before it knows record counts."""
_RELISTS = 3
"""Fresh listings tried when listed objects vanish under a reader (clean-up ran)."""
_KNOWN_TOPS = 4096
"""Logs whose latest version a `LogSteps` remembers as a listing hint (bounded memory)."""


_NO_SNAPSHOT: Any = object()
"""A head made by hand carries no snapshot: the append after it stores the whole state."""


@dataclass(frozen=True, slots=True)
class LogHead:
    """The latest version of a log as one reader or writer knows it; append after it."""

    log_id: str
    """The log."""
    version: int
    """Its latest version."""
    next_record: int
    """Number of records in the log (the position the next record takes)."""
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
    learned_at: float = field(default_factory=time.time, compare=False)
    """When this head was learned (Unix time): knowledge older than half of the clean-up
    delay costs one check on the next append."""
    snapshot: Any = field(default=_NO_SNAPSHOT, compare=False, repr=False)
    """A private copy of `state` as stored, which the next append patches against: the
    caller may change `state` in place before passing this head as `after`."""

    @classmethod
    def of(cls, entry: LogEntry) -> LogHead:
        """Return the head whose latest version is `entry`."""
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
            snapshot=copy.deepcopy(entry.state),
        )


@dataclass(frozen=True, slots=True)
class _Source:
    """One object holding versions `first .. last` of a log."""

    key: str
    first: int
    last: int
    sealed: bool


@dataclass(slots=True)
class LogListing:
    """Which objects of one log exist: its entries and its sealed segments."""

    log_id: str
    """The log."""
    entries: dict[int, str] = field(default_factory=dict)
    """Entry keys by version."""
    entry_modified: dict[int, datetime] = field(default_factory=dict)
    """When each entry was written, where the storage says."""
    segments: dict[int, str] = field(default_factory=dict)
    """Segment keys by first version."""

    @property
    def top(self) -> int | None:
        """The latest version, None for a log with no object."""
        tops = [max(self.entries, default=-1)]
        tops.extend(first + SEGMENT_SPAN - 1 for first in self.segments)
        top = max(tops)
        return None if top < 0 else top

    def sources(self, start: int, stop: int) -> list[_Source]:
        """Return the objects holding versions `start .. stop`, in order; refuse a gap."""
        sources: list[_Source] = []
        version = start
        while version <= stop:
            first = segment_start(version)
            if first in self.segments:
                sources.append(_Source(self.segments[first], first, first + SEGMENT_SPAN - 1, True))
                version = first + SEGMENT_SPAN
            elif version in self.entries:
                sources.append(_Source(self.entries[version], version, version, False))
                version += 1
            else:
                raise _Gap(version)
        return sources

    def sealed_entries(self) -> list[int]:
        """Return the versions whose entry exists although a segment already holds it."""
        return [v for v in self.entries if segment_start(v) in self.segments]


class _Gap(Exception):
    """A version no listed object holds (may be a listing race; checked again in order)."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


class _Vanished(Exception):
    """A listed object was gone when read (clean-up deleted it): list again."""


class LogSteps:
    """The append-only logs of one namespace, as steps (see the module docstring)."""

    def __init__(
        self,
        keys: LogKeys,
        codec: Codec,
        retry: RetryPolicy,
        *,
        delete_after: timedelta = DEFAULT_DELETE_AFTER,
        full_state_every: int = FULL_STATE_EVERY,
    ) -> None:
        self.keys = keys
        """Where the logs' objects live."""
        self.codec = codec
        """Encodes and decodes entries and segments."""
        self.retry = retry
        """Retry policy for 409s and resends."""
        self.delete_after = delete_after
        """How long a sealed entry stays before clean-up deletes it."""
        self._tops: Lru[str, int] = Lru(_KNOWN_TOPS)
        self.full_state_every = full_state_every
        """Versions that are a multiple of this store their whole state (1: every version,
        for a small state read from the newest entry alone; all writers and readers of a
        namespace must agree)."""

    # -- reading ---------------------------------------------------------------------------

    def listing(
        self, log_id: str, *, ordered: bool = False, complete: bool = False
    ) -> Steps[LogListing]:
        """List a log's entries and segments (in parallel; `ordered`: entries first).

        Entries listed before segments can show no false gap: an entry is deleted only
        after the segment holding it was written. When there are more entries than one
        page, the listing resumes after the last sealed version (unless `complete`): sealed
        entries waiting for clean-up are not needed to read, and a fast writer can leave
        thousands within the clean-up delay.
        """
        log_id = check_log_id(log_id)
        entries_prefix = self.keys.entries_prefix(log_id)
        segments_prefix = self.keys.segments_prefix(log_id)
        hint = None if ordered or complete else self._tops.get(log_id)
        if ordered:
            entry_pages = yield from self._all_pages(entries_prefix, None)
            segment_pages = yield from self._all_pages(segments_prefix, None)
        else:
            # A log this process read or wrote lists from a segment before its last known
            # top: on S3 a 1,000-key page costs ten times a short one, and the sealed
            # entries before it (deleted an hour after sealing) are never read. A version
            # this skips that a read needs is a gap, and gaps are listed again in full.
            start = None
            if hint is not None and hint >= 2 * SEGMENT_SPAN:
                start = self.keys.entry(log_id, segment_start(hint) - SEGMENT_SPAN - 1)
            first = yield from ask(
                Parallel((ListKeys(entries_prefix, start_after=start), ListKeys(segments_prefix)))
            )
            segment_pages = yield from self._all_pages(segments_prefix, first[1])
            entry_pages = [first[0]]
            sealed_keys = [k for page in segment_pages for k in page.keys]
            if first[0].next_token is not None and first[0].keys and sealed_keys and not complete:
                last_sealed, _ = parse_segment_name(max(sealed_keys)[len(segments_prefix) :], "")
                skip_to = self.keys.entry(log_id, last_sealed + SEGMENT_SPAN - 1)
                if skip_to > first[0].keys[-1]:
                    after = yield from ask(ListKeys(entries_prefix, start_after=skip_to))
                    entry_pages = [first[0], *(yield from self._all_pages(entries_prefix, after))]
            if len(entry_pages) == 1:
                entry_pages = yield from self._all_pages(entries_prefix, first[0])
        listing = LogListing(log_id)
        for page in entry_pages:
            _add_entries(listing, page, entries_prefix)
        for page in segment_pages:
            for key in page.keys:
                first_version, _ = parse_segment_name(key[len(segments_prefix) :], key)
                listing.segments[first_version] = key
        if listing.top is not None:
            self._tops.put(log_id, listing.top)  # what storage says, even if lower
        return listing

    def _learn_top(self, log_id: str, top: int) -> None:
        """Remember a version this process appended as a listing hint (never lowers it)."""
        self._tops.update(log_id, lambda known: top if known is None else max(known, top))

    def _all_pages(self, prefix: str, first: KeyPage | None) -> Steps[list[KeyPage]]:
        page = first if first is not None else (yield from ask(ListKeys(prefix)))
        pages = [page]
        while page.next_token is not None:
            page = yield from ask(ListKeys(prefix, page.next_token))
            pages.append(page)
        return pages

    def _planned(
        self, log_id: str, plan: Callable[[LogListing], list[_Source]]
    ) -> Steps[tuple[LogListing, list[_Source]]]:
        """List the log and plan a read; a gap is checked again with an ordered listing."""
        listing = yield from self.listing(log_id)
        try:
            return listing, plan(listing)
        except _Gap:
            listing = yield from self.listing(log_id, ordered=True)
        try:
            return listing, plan(listing)
        except _Gap as gap:
            raise self._gap_error(log_id, gap.version) from None

    def _gap_error(self, log_id: str, version: int) -> InvalidPayload:
        return InvalidPayload(
            f"log {log_id!r} has no entry or sealed segment for version {version}: "
            "an object is missing; the log cannot be read past it",
            object_name=self.keys.entry(log_id, version),
        )

    def _fetch(self, log_id: str, sources: list[_Source]) -> Steps[list[LogEntry]]:
        """Read `sources` in parallel (`_FETCH_BATCH` at a time) and return their entries."""
        entries: list[LogEntry] = []
        for start in range(0, len(sources), _FETCH_BATCH):
            window = sources[start : start + _FETCH_BATCH]
            try:
                infos = yield from ask(Parallel(tuple(self._get(s.key) for s in window)))
            except ArchivedObject as exc:
                raise ArchivedObject(
                    f"log {log_id!r} has sealed segments in an archive storage class: run "
                    f"`stashpoint restore {log_id}` (or `restore()`), wait for it, then read "
                    "again",
                    object_name=exc.object_name,
                ) from exc
            for source, info in zip(window, infos, strict=True):
                if info is None:
                    raise _Vanished(source.key)
                decoded = yield from self._decode(log_id, source, info)
                entries.extend(decoded)
        return entries

    def _decode(self, log_id: str, source: _Source, info: ObjectInfo) -> Steps[list[LogEntry]]:
        assert info.body is not None
        document = yield from self.codec.document_decoding(
            info.body,
            name=source.key,
            format_name=LOG_FORMAT_NAME,
            format_version=LOG_FORMAT_VERSION,
        )
        if source.sealed:
            return entries_from_segment(
                document, log_id=log_id, first=source.first, last=source.last, name=source.key
            )
        entry = entry_from_document(document, log_id=log_id, name=source.key)
        if entry.version != source.first:
            raise InvalidPayload(
                f"entry holds version {entry.version}, its key says {source.first}",
                object_name=source.key,
            )
        return [entry]

    def _get(self, key: str) -> GetObject:
        return GetObject(key, None, self.codec.limits.max_compressed_bytes)

    def _relisting(self, log_id: str, read: Callable[[], Steps[T]]) -> Steps[T]:
        """Run `read`; list again when clean-up deleted a listed object under it.

        Up to `_RELISTS` times; a gap that persists is a missing object.
        """
        for attempt in range(1, _RELISTS + 1):
            try:
                return (yield from read())
            except _Vanished as gone:
                if attempt == _RELISTS:
                    raise StorageUnavailable(
                        "log objects keep vanishing while being read", object_name=str(gone)
                    ) from None
            except _Gap as gap:
                if attempt == _RELISTS:
                    raise self._gap_error(log_id, gap.version) from None
        raise AssertionError("unreachable")

    def _read(
        self, log_id: str, plan: Callable[[LogListing], list[_Source]]
    ) -> Steps[tuple[LogListing, list[LogEntry]]]:
        """Plan and read, listing again when clean-up deletes a listed entry under us."""

        def read() -> Steps[tuple[LogListing, list[LogEntry]]]:
            listing, sources = yield from self._planned(log_id, plan)
            entries = yield from self._fetch(log_id, sources)
            name = self.keys.entries_prefix(log_id)
            check_chain(entries, name)
            return listing, resolve(entries, UNKNOWN_STATE, name)

        return (yield from self._relisting(log_id, read))

    def head(self, log_id: str) -> Steps[LogHead]:
        """Return the latest version of a log (a listing and one GET)."""
        head, _ = yield from self.head_with(log_id, lambda _: ())
        return head

    def head_with(
        self, log_id: str, wanted: Callable[[LogHead], Iterable[int]]
    ) -> Steps[tuple[LogHead, dict[int, LogEntry]]]:
        """Return the head and the versions `wanted(head)` names, by version.

        One listing, the newest objects, then every wanted version in one parallel round
        (a sealed segment read once for all the versions it holds). States of the wanted
        entries may be left as stored (a patch): they are read for their records.
        """

        def read() -> Steps[tuple[LogHead, dict[int, LogEntry]]]:
            listing, sources = yield from self._planned(log_id, self._top_plan(log_id))
            name = self.keys.entries_prefix(log_id)
            newest = yield from self._fetch(log_id, sources)
            check_chain(newest, name)
            newest = resolve(newest, UNKNOWN_STATE, name)
            head = LogHead.of(newest[-1])
            found = {entry.version: entry for entry in newest}
            missing = sorted({v for v in wanted(head) if v not in found and 0 <= v <= head.version})
            plan: dict[str, _Source] = {}
            for version in missing:
                source = listing.sources(version, version)[0]
                plan.setdefault(source.key, source)
            for entry in (yield from self._fetch(log_id, list(plan.values()))):
                found.setdefault(entry.version, entry)
            return head, found

        return (yield from self._relisting(log_id, read))

    def entries(
        self, log_id: str, start: int = 0, stop: int | None = None
    ) -> Steps[list[LogEntry]]:
        """Return versions `start .. stop` (default: to the latest), in order."""
        if start < 0 or (stop is not None and stop < start):
            raise InvalidPayload(f"bad version range {start}..{stop}", object_name=log_id)

        def plan(listing: LogListing) -> list[_Source]:
            top = listing.top
            if top is None:
                raise CheckpointNotFound("no log with this id", object_name=log_id)
            last = top if stop is None else stop
            if last > top:
                raise CheckpointNotFound(
                    f"version {last} does not exist (latest is {top})", object_name=log_id
                )
            return listing.sources(self._base(start), last) if start <= last else []

        _, entries = yield from self._read(log_id, plan)
        return [e for e in entries if e.version >= start and (stop is None or e.version <= stop)]

    def tail(
        self, log_id: str, records: int, *, since: Callable[[LogHead], int] | None = None
    ) -> Steps[tuple[LogHead, list[LogEntry]]]:
        """Return the head and the newest entries holding at least `records` records.

        The states of entries older than the head's state base may be left as stored
        (a patch, `state` None): a tail is read for its records. Objects are read newest
        first, `_READ_WINDOW` at a time in parallel (a listing and, for a recent tail, one
        round of GETs). `since(head)` is the first record position
        wanted at all (an agent's current transcript start): nothing before it is read.
        """
        if records < 0:
            raise InvalidPayload("records must be >= 0", object_name=log_id)

        def read() -> Steps[tuple[LogHead, list[LogEntry]]]:
            # Versions rarely hold no record: fetching as many versions as records wanted
            # usually finishes a tail in this first round.
            wanted = min(records, _TAIL_GUESS)
            listing, top_sources = yield from self._planned(log_id, self._top_plan(log_id, wanted))
            name = self.keys.entries_prefix(log_id)
            newest = yield from self._fetch(log_id, top_sources)
            check_chain(newest, name)
            newest = resolve(newest, UNKNOWN_STATE, name)
            head = LogHead.of(newest[-1])
            floor = max(0, head.next_record - records)
            if since is not None:
                floor = max(floor, since(head))
            collected = newest
            if floor == 0 and collected[0].version > 0:
                # Everything is wanted: every older object in one parallel round.
                older = yield from self._fetch(log_id, listing.sources(0, collected[0].version - 1))
                collected = older + collected
            while collected[0].version > 0 and collected[0].first_record > floor:
                # A gap here comes from a listing older than a clean-up: read again.
                window = _backwards(listing, collected[0].version - 1, log_id)
                older = yield from self._fetch(log_id, window)
                collected = older + collected
            check_chain(collected, name)
            keep = [e for e in collected if e.next_record > floor or e is collected[-1]]
            return head, keep

        return (yield from self._relisting(log_id, read))

    def read_version(self, log_id: str, version: int) -> Steps[LogEntry | None]:
        """Return version `version` from its entry or its segment; None if neither exists."""
        info = yield from ask(self._get(self.keys.entry(log_id, version)))
        if info is not None:
            entries = yield from self._decode(
                log_id, _Source(self.keys.entry(log_id, version), version, version, False), info
            )
            return entries[0]
        first = segment_start(version)
        key = self.keys.segment(log_id, first)
        info = yield from ask(self._get(key))
        if info is None:
            return None
        source = _Source(key, first, first + SEGMENT_SPAN - 1, True)
        entries = yield from self._decode(log_id, source, info)
        return entries[version - first]

    # -- writing ---------------------------------------------------------------------------

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
    ) -> Steps[LogHead]:
        """Append `records` (and the new `state`) after `after`; None creates the log.

        Exactly one of two appends after the same head succeeds; the other raises
        `CheckpointConflict` with the winner's version. Returns the new head.
        """
        log_id = check_log_id(log_id)
        if not isinstance(records, list):
            raise InvalidPayload("records must be a list", object_name=log_id)
        if after is not None and after.log_id != log_id:
            raise InvalidPayload(f"head belongs to log {after.log_id!r}", object_name=log_id)
        version = 0 if after is None else after.version + 1
        if version > MAX_REVISION:
            raise LimitExceeded("log version overflow", object_name=log_id)
        change = None
        patchable = after is not None and after.snapshot is not _NO_SNAPSHOT
        if after is not None and patchable and version % self.full_state_every:
            change = make_patch(after.snapshot, state)
        entry = LogEntry(
            log_id=log_id,
            version=version,
            first_record=0 if after is None else after.next_record,
            records=records,
            state=state,
            kind=kind or (after.kind if after is not None else "stashpoint.log"),
            schema_version=schema_version
            if schema_version is not None
            else (after.schema_version if after is not None else 1),
            write_id=new_write_id(),
            written_at=utc_now(),
            extra=extra or {},
            patch=None if change is None else change[0],
            unset=() if change is None else change[1],
        )
        key = self.keys.entry(log_id, version)
        etag = yield from self._create(log_id, key, entry)
        if after is not None and time.time() - after.learned_at > self._trust_seconds:
            yield from self._refuse_phantom(log_id, entry, key, etag)
        head = LogHead.of(entry)
        self._learn_top(log_id, version)
        if version and version % SEGMENT_SPAN == 0:
            # The append is durable already; a failed seal is redone by the next one or gc.
            with contextlib.suppress(StashpointError):
                yield from self.seal(log_id, below=version)
        return head

    def _base(self, version: int) -> int:
        return state_base(version, self.full_state_every)

    def _top_plan(self, log_id: str, versions: int = 0) -> Callable[[LogListing], list[_Source]]:
        return lambda listing: _top_sources(listing, log_id, self._base, versions)

    @property
    def _trust_seconds(self) -> float:
        return self.delete_after.total_seconds() / 2

    def _create(self, log_id: str, key: str, entry: LogEntry) -> Steps[str | None]:
        """Create the entry object; settle an unclear answer by reading the version back."""
        body = yield from self.codec.document_encoding(entry_document(entry), name=key)

        def read_back(tracker: WriteTracker) -> Steps[Verdict]:
            if tracker.refused_for_sure:
                return Refused((yield from self._conflict(log_id, entry.version)))
            try:
                found = yield from self.read_version(log_id, entry.version)
            except (InvalidPayload, UnsupportedFormat):
                # Ours always decodes: whatever is there is another writer's (or planted).
                return Refused((yield from self._conflict(log_id, entry.version)))
            if found is None:
                return NotLanded()
            if found.write_id == entry.write_id:
                return Landed()
            return Refused((yield from self._conflict(log_id, entry.version)))

        return (
            yield from writes.put(
                PutObject(key, body, Create()),
                read_back,
                self.retry,
                what="append",
                write_id=entry.write_id,
                look_in=f" at version {entry.version}",
            )
        )

    def _conflict(self, log_id: str, version: int) -> Steps[CheckpointConflict]:
        """Return the conflict of a lost append at `version`, naming the winner's head."""
        try:
            listing = yield from self.listing(log_id)
            top = listing.top
        except StashpointError:
            top = None
        return CheckpointConflict(
            log_id,
            expected_revision=None if version == 0 else version - 1,
            actual_revision=top if top is not None else version,
            message=f"append lost: version {version} of log {log_id!r} was written by another "
            f"writer (latest is {top if top is not None else f'at least {version}'})",
        )

    def _refuse_phantom(
        self, log_id: str, entry: LogEntry, key: str, etag: str | None
    ) -> Steps[None]:
        """Undo an append that landed in a sealed range whose entry had been cleaned up."""
        first = segment_start(entry.version)
        segment = self.keys.segment(log_id, first)
        info = yield from ask(self._get(segment))
        if info is None:
            return
        source = _Source(segment, first, first + SEGMENT_SPAN - 1, True)
        sealed = yield from self._decode(log_id, source, info)
        if sealed[entry.version - first].write_id == entry.write_id:
            return  # sealed with our entry in it: we were first after all
        yield from ask(DeleteObject(key, etag))
        raise (yield from self._conflict(log_id, entry.version))

    def seal(self, log_id: str, *, below: int | None = None) -> Steps[int]:
        """Seal complete segment ranges below `below`; delete old sealed entries.

        Ranges end below version `below` (default: the latest); sealed entries older than
        `delete_after` are deleted. Returns how many segments were written. Idempotent and
        safe to run concurrently: segment ranges and bytes are fixed by the entries, and
        segments are created with `If-None-Match: *`.

        With `below` (the seal an append makes), only the recent entries are listed, and
        clean-up looks at the oldest page of entries: a constant number of requests
        however many entries await their delay (a fast writer leaves thousands). A range
        left unsealed further back (a sealer that died) is sealed by `gc` (no `below`),
        which lists everything.
        """
        recent = below is not None
        listing = yield from self.listing(log_id, complete=not recent)
        top = listing.top
        if top is None:
            return 0
        limit = top if below is None else min(below, top + 1)
        written = 0
        first = 0
        while first + SEGMENT_SPAN <= limit:
            if first not in listing.segments:
                versions = range(first, first + SEGMENT_SPAN)
                if all(v in listing.entries for v in versions):
                    yield from self._write_segment(log_id, listing, first)
                    written += 1
            first += SEGMENT_SPAN
        if recent:
            # The oldest entries are the ones old enough to go; the segments listed (and
            # just written) say which are sealed.
            entries_prefix = self.keys.entries_prefix(log_id)
            oldest = LogListing(log_id, segments=listing.segments)
            _add_entries(oldest, (yield from ask(ListKeys(entries_prefix))), entries_prefix)
            yield from self._clean(oldest)
            return written
        if written:
            listing = yield from self.listing(log_id, ordered=True, complete=True)
        yield from self._clean(listing)
        return written

    def _write_segment(self, log_id: str, listing: LogListing, first: int) -> Steps[None]:
        sources = [
            _Source(listing.entries[v], v, v, False) for v in range(first, first + SEGMENT_SPAN)
        ]
        try:
            entries = yield from self._fetch(log_id, sources)
        except _Vanished:
            return  # another sealer finished and cleaned up first
        key = self.keys.segment(log_id, first)
        check_chain(entries, key)
        entries = resolve(entries, UNKNOWN_STATE, key)
        level = max(self.codec.level, SEAL_LEVEL)
        document = segment_document(log_id, entries)
        body = yield from self.codec.document_encoding(document, name=key, level=level)
        result = yield from ask(PutObject(key, body, Create()))
        if result.outcome not in (WriteOutcome.STORED, WriteOutcome.PRECONDITION_FAILED):
            raise StorageUnavailable(
                f"segment not sealed ({result.detail or result.outcome.value})", object_name=key
            )
        listing.segments[first] = key

    def _clean(self, listing: LogListing) -> Steps[int]:
        """Delete sealed entries older than `delete_after`; return how many."""
        cutoff = datetime.now(UTC) - self.delete_after
        doomed = [
            listing.entries[v]
            for v in listing.sealed_entries()
            if v in listing.entry_modified and listing.entry_modified[v] <= cutoff
        ]
        if doomed:
            yield from ask(Parallel(tuple(DeleteObject(k) for k in doomed)))
        return len(doomed)

    def restore(self, log_id: str, days: int, tier: str) -> Steps[RestoreReport]:
        """Ask for every archived sealed segment of a log to be restored for `days`.

        Entries are never archived (lifecycle rules match the sealed prefix only). Asking
        again reports progress: a restore under way or done is not requested twice.
        """
        check_restore(days, tier)
        listing = yield from self.listing(log_id)
        if listing.top is None:
            raise CheckpointNotFound("no log with this id", object_name=log_id)
        keys = sorted(listing.segments.values())
        states: list[RestoreState] = []
        for start in range(0, len(keys), _FETCH_BATCH):
            batch = keys[start : start + _FETCH_BATCH]
            states += yield from ask(Parallel(tuple(RestoreObject(k, days, tier) for k in batch)))
        return RestoreReport.of(states)

    def delete(self, log_id: str) -> Steps[int]:
        """Delete every object of a log (entries first, then segments); return how many."""
        listing = yield from self.listing(log_id, ordered=True)
        keys = [*listing.entries.values(), *listing.segments.values()]
        for start in range(0, len(keys), 256):
            yield from ask(Parallel(tuple(DeleteObject(k) for k in keys[start : start + 256])))
        return len(keys)

    def drop_below(self, log_id: str, version: int) -> Steps[int]:
        """Delete every object that holds only versions below `version`; return how many.

        For a log whose writer rewrote everything it still needs at `version` (a LangGraph
        thread's tombstone or rebase): readers start there, so older objects are garbage.
        """
        listing = yield from self.listing(log_id, ordered=True, complete=True)
        keys = [k for v, k in listing.entries.items() if v < version]
        keys += [k for first, k in listing.segments.items() if first + SEGMENT_SPAN <= version]
        for start in range(0, len(keys), 256):
            yield from ask(Parallel(tuple(DeleteObject(k) for k in keys[start : start + 256])))
        return len(keys)

    def list_page(
        self, prefix: str, limit: int, cursor: str | None
    ) -> Steps[tuple[list[str], str | None]]:
        """Return up to `limit` log ids after `cursor` starting with `prefix`; and a cursor.

        The cursor names the next page (None at the end). Skips past each log's entries
        with `start_after`, so a page costs about one LIST however long the logs are.
        """
        base = self.keys.ids_prefix()
        ids: list[str] = []
        after = None if cursor is None else f"{base}{check_log_id(cursor)}/~"
        while len(ids) < limit:
            page = yield from ask(ListKeys(base + prefix, start_after=after))
            for key in page.keys:
                log_id, slash, _ = key[len(base) :].partition("/")
                if slash and (not ids or ids[-1] != log_id):
                    ids.append(log_id)
            if not page.keys or page.next_token is None:
                return ids[:limit], (ids[limit - 1] if len(ids) > limit else None)
            after = f"{base}{ids[-1]}/~"  # the rest of the last log's entries: skipped
        return ids[:limit], ids[limit - 1]

    def list_ids(self, prefix: str = "") -> Steps[list[str]]:
        """Return the ids of logs with entries in this namespace that start with `prefix`."""
        base = self.keys.ids_prefix()
        ids: list[str] = []
        token: str | None = None
        while True:
            page = yield from ask(ListKeys(base + prefix, token))
            for key in page.keys:
                log_id, slash, _ = key[len(base) :].partition("/")
                if slash and (not ids or ids[-1] != log_id):
                    ids.append(log_id)
            token = page.next_token
            if token is None:
                return ids


def _add_entries(listing: LogListing, page: KeyPage, entries_prefix: str) -> None:
    """Add the entries a page of keys lists (with when each was written) to `listing`."""
    for index, key in enumerate(page.keys):
        name = key[len(entries_prefix) :]
        if "/" in name:
            continue  # another log's entries never sit below ours; not ours to judge
        version = parse_entry_name(name, key)
        listing.entries[version] = key
        if page.modified is not None:
            listing.entry_modified[version] = page.modified[index]


def _top_sources(
    listing: LogListing, log_id: str, base: Callable[[int], int], versions: int = 0
) -> list[_Source]:
    """Plan the newest objects for one round of GETs.

    From the head's state base (or, for a tail, at least `versions` versions back) to the
    head.
    """
    top = listing.top
    if top is None:
        raise CheckpointNotFound("no log with this id", object_name=log_id)
    # A read starts at a version that stores its whole state, so the patches fold.
    return listing.sources(base(max(0, min(top, top - versions + 1))), top)


def _backwards(listing: LogListing, below: int, log_id: str) -> list[_Source]:
    """Plan the (up to `_READ_WINDOW`) objects ending at version `below`, oldest first."""
    sources: list[_Source] = []
    version = below
    while version >= 0 and len(sources) < _READ_WINDOW:
        source = listing.sources(version, version)[0]
        sources.append(source)
        version = source.first - 1
    sources.reverse()
    return sources
