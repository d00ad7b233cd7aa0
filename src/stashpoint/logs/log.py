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
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from stashpoint import tracing
from stashpoint.cache import Lru
from stashpoint.codec import Codec, declared_size
from stashpoint.envelope import MAX_REVISION
from stashpoint.errors import (
    ArchivedObject,
    CheckpointConflict,
    CheckpointNotFound,
    InvalidArgument,
    InvalidId,
    InvalidPayload,
    LimitExceeded,
    Purged,
    StashpointError,
    StorageUnavailable,
    UnsupportedFormat,
    described,
)
from stashpoint.ids import new_write_id, validate_prefix
from stashpoint.logs.format import (
    FULL_STATE_EVERY,
    LOG_FORMAT_NAME,
    LOG_FORMAT_VERSION,
    PACK_SPAN,
    SEGMENT_SPAN,
    UNKNOWN_STATE,
    LogEntry,
    LogKeys,
    Vacated,
    check_chain,
    check_log_id,
    entries_from_segment,
    entry_document,
    entry_from_document,
    is_vacated,
    make_patch,
    pack_start,
    parse_entry_name,
    parse_segment_name,
    resolve,
    segment_document,
    segment_start,
    state_base,
    vacated_document,
    vacated_from_document,
)
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Now, Parallel, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.cas import optimistic_update
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    GetObject,
    KeyPage,
    ListKeys,
    Match,
    ObjectInfo,
    PutObject,
    RestoreObject,
    RestoreReport,
    RestoreState,
    check_restore,
    delete_keys,
)
from stashpoint.stores.writes import (
    Found,
    Landed,
    NotLanded,
    Refused,
    Rewrite,
    Verdict,
    WriteTracker,
)

T = TypeVar("T")

_log = logging.getLogger("stashpoint")

_READ_WINDOW = 16
"""Objects fetched at once when reading a log backwards or in order."""
SEAL_LEVEL = 9
"""zstd level of sealed segments: 7% smaller than level 3 on transcripts at ~3 ms a seal."""
PACK_LEVEL = 19
"""zstd level of packs: written once for years by gc, never on a save's path."""
_FETCH_BATCH = 256
"""Objects requested in one `Parallel` (the driver keeps 16 in flight); bounds memory."""
_TAIL_GUESS = 256
"""Most versions a tail read fetches in its first round, before it knows record counts."""
_RELISTS = 3
"""Fresh listings tried when listed objects change under a reader (a seal vacated them)."""
_KNOWN_TOPS = 4096
"""Logs whose latest version a `LogSteps` remembers as a listing hint (bounded memory)."""
_MARKER_MARGIN = 24
"""Bytes a marker may take beyond the widest one measured (zstd varies on random ids);
the smallest entry of any log id is about 55 bytes larger than its widest marker."""
_SEALS_PER_APPEND = 2
"""Unsealed ranges one append seals at most (the newest); `gc` seals every one."""
_PURGE_ATTEMPTS = 32
"""Tombstones a purge tries to append before it gives up on writers that keep racing it."""

_WRITTEN_ENTRIES = 4096
"""Entries this process wrote that a `LogSteps` keeps for the seal of their range."""

_WRITTEN_BODY = 16 * 1024
"""Largest entry (its JSON, decoded) kept for a seal (a bigger one is read back then)."""

_SEALED_BYTES = 16 * 1024 * 1024
"""Stored bytes of the segments this process sealed that a `LogSteps` keeps for its reads."""

_READ_ENTRIES = 4096
"""Entries this process read that a `LogSteps` keeps, to skip their GETs while the listing
names the same object (its ETag)."""

READ_CACHE_BYTES = 16 * 1024 * 1024
"""Stored bytes of those entries kept by default (`Options.log_read_cache_bytes`)."""


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
    snapshot: Any = field(default=_NO_SNAPSHOT, compare=False, repr=False)
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


@dataclass(frozen=True, slots=True)
class _Source:
    """One object holding versions `first .. last` of a log."""

    key: str
    first: int
    last: int
    sealed: bool
    etag: str | None = None
    """The object's ETag as the listing gave it (an entry's, where storage says)."""


@dataclass(slots=True)
class LogListing:
    """Which objects of one log exist: its entries (or their markers) and its segments."""

    log_id: str
    """The log."""
    entries: dict[int, str] = field(default_factory=dict)
    """Entry keys by version (a vacated entry's key too: keys are never freed)."""
    sizes: dict[int, int] = field(default_factory=dict)
    """Each listed entry's stored size, where the storage says (markers are tiny)."""
    etags: dict[int, str] = field(default_factory=dict)
    """Each listed entry's ETag, where the listing says (S3, memory)."""
    segments: dict[int, str] = field(default_factory=dict)
    """Segment keys by first version."""
    packs: dict[int, str] = field(default_factory=dict)
    """Pack keys by first version (`PACK_SPAN` versions each, written by `pack`)."""

    @property
    def top(self) -> int | None:
        """The latest version, None for a log with no object."""
        tops = [max(self.entries, default=-1)]
        tops.extend(first + SEGMENT_SPAN - 1 for first in self.segments)
        tops.extend(first + PACK_SPAN - 1 for first in self.packs)
        top = max(tops)
        return None if top < 0 else top

    def sealed(self, first: int) -> bool:
        """Whether the segment range starting at `first` is held by its segment or a pack."""
        return first in self.segments or pack_start(first) in self.packs

    def sealed_objects(self) -> list[_Source]:
        """Return every pack and every segment no pack covers, oldest first."""
        found = [_Source(k, first, first + PACK_SPAN - 1, True) for first, k in self.packs.items()]
        found += [
            _Source(key, first, first + SEGMENT_SPAN - 1, True)
            for first, key in self.segments.items()
            if pack_start(first) not in self.packs
        ]
        return sorted(found, key=lambda source: source.first)

    def sources(self, start: int, stop: int) -> list[_Source]:
        """Return the objects holding versions `start .. stop`, in order; refuse a gap.

        A pack is read rather than the segments it replaced (they are being deleted).
        """
        sources: list[_Source] = []
        version = start
        while version <= stop:
            first = segment_start(version)
            packed = pack_start(version)
            if packed in self.packs:
                sources.append(_Source(self.packs[packed], packed, packed + PACK_SPAN - 1, True))
                version = packed + PACK_SPAN
            elif first in self.segments:
                sources.append(_Source(self.segments[first], first, first + SEGMENT_SPAN - 1, True))
                version = first + SEGMENT_SPAN
            elif version in self.entries:
                key = self.entries[version]
                sources.append(_Source(key, version, version, False, self.etags.get(version)))
                version += 1
            else:
                raise _Gap(version, self.above(version))
        return sources

    def above(self, version: int) -> str | None:
        """Return the key of the lowest listed object above `version`, None if none is."""
        keys = [(v, key) for v, key in self.entries.items() if v > version]
        keys += [(first, key) for first, key in self.segments.items() if first > version]
        keys += [(first, key) for first, key in self.packs.items() if first > version]
        return min(keys)[1] if keys else None

    def whole(self, version: int, ceiling: int) -> bool:
        """Whether the listed object of `version` may be an entry rather than a marker.

        `ceiling`: the most bytes a marker of this log takes (`LogSteps.marker_ceiling`);
        an object of unknown size may be anything.
        """
        size = self.sizes.get(version)
        return size is None or size > ceiling


@dataclass(frozen=True, slots=True)
class PackReport:
    """What packing one log did (`LogSteps.pack`)."""

    log_id: str
    """The log."""
    packed: int
    """Packs written or found whole (ranges of `PACK_SPAN` versions)."""
    vacated: int
    """Entries replaced by markers because a pack or a segment holds them."""
    segments_deleted: int
    """Segments deleted because a pack holds them write for write."""
    too_large: tuple[int, ...] = ()
    """First versions of ranges left in segments: their pack would exceed the codec's
    limits, so a reader could not read it."""


class _Gap(Exception):
    """A version no listed object holds (may be a listing race; checked again in full)."""

    def __init__(self, version: int, above: str | None) -> None:
        super().__init__(version)
        self.version = version
        self.above = above
        """The key of the lowest listed object above the gap."""


class _Vanished(Exception):
    """A listed object changed under a reader (a seal vacated it): list again."""


Item = LogEntry | Vacated
"""What a log object holds: entries, or the marker of a vacated one."""


class LogSteps:
    """The append-only logs of one namespace, as steps (see the module docstring)."""

    def __init__(
        self,
        keys: LogKeys,
        codec: Codec,
        retry: RetryPolicy,
        *,
        full_state_every: int = FULL_STATE_EVERY,
        vacate_sealed: bool = False,
        overhead: Callable[[str], int] | None = None,
        life_field: str | None = None,
        seeks: bool = True,
        read_cache_bytes: int = READ_CACHE_BYTES,
    ) -> None:
        self.keys = keys
        """Where the logs' objects live."""
        self.codec = codec
        """Encodes and decodes entries and segments."""
        self.retry = retry
        """Retry policy for 409s and resends."""
        self.full_state_every = full_state_every
        """Versions that are a multiple of this store their whole state (1: every version,
        for a small state read from the newest entry alone; all writers and readers of a
        namespace must agree)."""
        self.vacate_sealed = vacate_sealed
        """Whether sealed entries are replaced by markers once their segment is stored."""
        self.overhead = overhead or (lambda key: 0)
        """The most bytes storage adds to an object under a key beyond its encoding (the
        frame of client-side encryption), so listed sizes still tell markers apart."""
        self.life_field = life_field
        """The state field naming the first version of the owner's current life, for
        owners that start lives in their state (`Namespace.life_field`): nothing below it
        is read, so `tidy` vacates it and seals and packs start there."""
        self.seeks = seeks
        """Whether listings come back in order and may start after a key (`StartAfter`):
        then a listing skips what it does not need; without, every page is read
        (`stores.providers.Provider.seeks`)."""
        self._tops: Lru[str, int] = Lru(_KNOWN_TOPS)
        # Entries this process wrote, by key: their stored bodies and ETags, as a GET would
        # return them. Entries are immutable, so a seal of their range, or a read of them,
        # needs no GET (an append costs one PUT, seals included). Bodies, not the entries:
        # an entry's state and records are the caller's objects, which it may change after
        # the append (the head's state, changed in place for the next append, is the
        # natural pattern), and a seal must store what was appended.
        self._written: Lru[str, ObjectInfo] = Lru(_WRITTEN_ENTRIES)
        # Segments this process sealed, by key: what it wrote, which holds exactly the
        # entries (a segment found there is judged by them before it counts as sealed), so
        # its reads of the range need no GET, packed or not. Never segments it only read: a
        # damaged or planted one is replaced by the next sealer, and a reader must see that.
        self._sealed: Lru[str, ObjectInfo] = Lru(
            _KNOWN_TOPS, max_weight=_SEALED_BYTES, weigh=lambda info: len(info.body or b"")
        )
        # Entries this process read, by key, as stored. A read below a log's top takes one
        # from here (or from `_written`) only while its listing names the same object (its
        # ETag): an entry vacated, repaired or planted since has another ETag and is read
        # again, as is every entry of storage whose listing gives no ETag. A writer that
        # lost a race reads the head again with one GET per version written since, not one
        # per version since the last whole state.
        self._read_entries: Lru[str, ObjectInfo] | None = None
        if read_cache_bytes > 0:
            self._read_entries = Lru(
                _READ_ENTRIES, max_weight=read_cache_bytes, weigh=lambda i: len(i.body or b"")
            )

    # -- reading ---------------------------------------------------------------------------

    def listing(
        self, log_id: str, *, ordered: bool = False, complete: bool = False
    ) -> Steps[LogListing]:
        """List a log's entries and segments (in parallel; `ordered`: entries first).

        Keys are never freed, so every version ever written is listed (a vacated one by
        its marker). When there are more entries than one page, the listing resumes after
        the last sealed version (unless `complete`): the markers of sealed versions are
        not needed to read.
        """
        log_id = check_log_id(log_id)
        entries_prefix = self.keys.entries_prefix(log_id)
        segments_prefix = self.keys.segments_prefix(log_id)
        hint = None if ordered or complete else self._tops.get(log_id)
        if ordered:
            entry_pages = yield from self._all_pages(entries_prefix, None)
            segment_pages = yield from self._all_pages(segments_prefix, None)
        elif not self.seeks:
            # Unordered pages, no StartAfter: every page of both, the first two at once.
            first = yield from ask(Parallel((ListKeys(entries_prefix), ListKeys(segments_prefix))))
            entry_pages = yield from self._all_pages(entries_prefix, first[0])
            segment_pages = yield from self._all_pages(segments_prefix, first[1])
        else:
            # A log this process read or wrote lists from a segment before its last known
            # top: on S3 a 1,000-key page costs ten times a short one, and the sealed
            # versions before it are read from their segments. A version this skips that
            # a read needs is a gap, and gaps are listed again in full.
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
                last_sealed = max(
                    parse_segment_name(key[len(segments_prefix) :], key)[1] for key in sealed_keys
                )
                skip_to = self.keys.entry(log_id, last_sealed)
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
                first_version, last = parse_segment_name(key[len(segments_prefix) :], key)
                if last - first_version + 1 == PACK_SPAN:
                    listing.packs[first_version] = key
                else:
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
        self, log_id: str, plan: Callable[[LogListing], list[_Source]], complete: bool
    ) -> Steps[tuple[LogListing, list[_Source]]]:
        """List the log and plan a read; a gap is checked again with a complete listing."""
        listing = yield from self.listing(log_id, ordered=complete)
        try:
            return listing, plan(listing)
        except _Gap:
            if complete:
                raise
        listing = yield from self.listing(log_id, ordered=True)
        return listing, plan(listing)

    def _gap_error(self, log_id: str, gap: _Gap) -> InvalidPayload:
        """Return the error of a gap no complete listing fills, naming the object above it."""
        advice = ""
        if gap.above is not None:
            advice = (
                f", below {gap.above}: if the objects from there up were planted or left by "
                f"another tool, `stashpoint repair {self.keys.namespace} {log_id}` moves "
                f"them to quarantine; if version {gap.version} was lost, restore it from "
                "the bucket's versions"
            )
        return InvalidPayload(
            f"log {log_id!r} has no entry or sealed segment for version {gap.version}{advice}",
            object_name=gap.above or self.keys.entry(log_id, gap.version),
        )

    def _fetch(self, log_id: str, sources: list[_Source]) -> Steps[list[Item]]:
        """Read `sources` in parallel (`_FETCH_BATCH` at a time); return what they hold."""
        items: list[Item] = []
        for _, decoded in (yield from self._fetch_objects(log_id, sources)):
            items.extend(decoded)
        return items

    def _fetch_objects(
        self, log_id: str, sources: list[_Source], *, kept: bool = False
    ) -> Steps[list[tuple[ObjectInfo, list[Item]]]]:
        """Read `sources` in parallel; return each object with what it holds, in order.

        With `kept`, entries this process appended and has not sealed are not read again:
        their bodies are kept (`_written`; entries never change, a sealed range is read
        from its segment). Without, an entry below the newest asked for is taken from
        memory only while its listing names the object kept (`_verified`). Reads that find
        a log's top never take it so: the top comes from the bucket, where a purge's
        tombstone or a damaged object shows.
        """
        newest = max((source.last for source in sources), default=-1)
        known = [
            self._kept(source) if kept else self._verified(source, newest) for source in sources
        ]
        unknown = [s for s, info in zip(sources, known, strict=True) if info is None]
        got: list[ObjectInfo | None] = []
        for start in range(0, len(unknown), _FETCH_BATCH):
            window = unknown[start : start + _FETCH_BATCH]
            got.extend((yield from self._gets(log_id, [self._get(s.key) for s in window])))
        answers = iter(got)
        fetched: list[tuple[ObjectInfo, list[Item]]] = []
        for source, body in zip(sources, known, strict=True):
            info = body if body is not None else next(answers)
            if info is None:
                raise _Vanished(source.key)
            decoded = yield from self._decode(log_id, source, info)
            if body is None:
                self._remember_read(source, info)
            fetched.append((info, decoded))
        return fetched

    def _verified(self, source: _Source, newest: int) -> ObjectInfo | None:
        """Return the stored body of entry `source` if this process holds the object listed.

        Only below `newest`, the highest version the read asks for: the top of a log comes
        from the bucket, where a purge's tombstone or a damaged object shows first.
        """
        read = self._read_entries
        if read is None or source.sealed or source.etag is None or source.last >= newest:
            return None
        for kept in (read, self._written):
            info = kept.get(source.key)
            if info is not None and info.etag == source.etag:
                return info
        return None

    def _remember_read(self, source: _Source, info: ObjectInfo) -> None:
        """Keep an entry read (and decoded) from storage, by its ETag, for later reads."""
        if self._read_entries is not None and not source.sealed and info.etag and info.body:
            self._read_entries.put(source.key, ObjectInfo(etag=info.etag, body=info.body))

    def _forget_bodies(self, log_id: str) -> None:
        """Drop every stored body of `log_id` this process keeps (its payload is purged)."""
        prefixes = (self.keys.entries_prefix(log_id), self.keys.segments_prefix(log_id))
        for kept in (self._read_entries, self._written, self._sealed):
            if kept is not None:
                kept.forget_where(lambda key: key.startswith(prefixes))

    def _kept(self, source: _Source) -> ObjectInfo | None:
        """Return the body this process stored as `source`, if it keeps it.

        An entry it appended (until sealed), or a segment it sealed.
        """
        return (self._sealed if source.sealed else self._written).get(source.key)

    def _gets(self, log_id: str, requests: Sequence[GetObject]) -> Steps[list[ObjectInfo | None]]:
        """Send GETs at once; an archived segment among them says how to restore it."""
        try:
            return (yield from ask(Parallel(tuple(requests))))
        except ArchivedObject as exc:
            raise ArchivedObject(
                f"log {log_id!r} has sealed segments in an archive storage class: run "
                f"`stashpoint restore {log_id}` (or `restore()`), wait for it, then read "
                "again",
                object_name=exc.object_name,
            ) from exc

    def _decode(self, log_id: str, source: _Source, info: ObjectInfo) -> Steps[list[Item]]:
        assert info.body is not None
        document = yield from self.codec.document_decoding(
            info.body,
            name=source.key,
            format_name=LOG_FORMAT_NAME,
            format_version=LOG_FORMAT_VERSION,
        )
        if source.sealed:
            return list(
                entries_from_segment(
                    document, log_id=log_id, first=source.first, last=source.last, name=source.key
                )
            )
        item: Item
        if is_vacated(document):
            item = vacated_from_document(document, log_id=log_id, name=source.key)
        else:
            item = entry_from_document(document, log_id=log_id, name=source.key)
        if item.version != source.first:
            raise InvalidPayload(
                f"object holds version {item.version}, its key says {source.first}",
                object_name=source.key,
            )
        return [item]

    def _get(self, key: str) -> GetObject:
        return GetObject(key, None, self.codec.limits.max_compressed_bytes)

    def _current(
        self, log_id: str, items: Sequence[Item], base: int | None = None, *, ended: bool = False
    ) -> list[LogEntry]:
        """Return the entries of the current life among `items` (oldest first).

        The life's base is the newest item's unless given. A vacated version left in it
        was sealed since the listing (its segment holds it): `_Vanished`, so the read
        lists again. Any other marker there is not this library's doing: refused. A log
        whose newest version ended it is `CheckpointNotFound`; with `ended`, that version
        alone is returned.
        """
        if not items:
            return []
        newest = items[-1]
        if base is None:
            if isinstance(newest, Vacated):
                raise InvalidPayload(
                    f"the newest version of log {log_id!r} is a vacated marker: vacating "
                    "never reaches the top",
                    object_name=self.keys.entry(log_id, newest.version),
                )
            if newest.ended:
                if not ended:
                    raise ended_error(log_id, newest)
                return [newest]
            base = newest.base
        entries: list[LogEntry] = []
        for item in items:
            if item.version < base:
                continue
            if isinstance(item, Vacated):
                if item.reason == "sealed":
                    raise _Vanished(self.keys.entry(log_id, item.version))
                raise InvalidPayload(
                    f"version {item.version} of log {log_id!r} is vacated ({item.reason}) but "
                    f"the log's life starts at {base}",
                    object_name=self.keys.entry(log_id, item.version),
                )
            entries.append(item)
        return entries

    def _relisting(self, log_id: str, read: Callable[[bool], Steps[T]]) -> Steps[T]:
        """Run `read(complete)`; list again, completely, when objects changed under it.

        Up to `_RELISTS` times; a gap that persists in a complete listing is a missing
        object.
        """
        for attempt in range(1, _RELISTS + 1):
            try:
                return (yield from read(attempt > 1))
            except _Vanished as gone:
                if attempt == _RELISTS:
                    raise StorageUnavailable(
                        "log objects keep changing while being read", object_name=str(gone)
                    ) from None
            except _Gap as gap:
                if attempt == _RELISTS:
                    raise self._gap_error(log_id, gap) from None
        raise AssertionError("unreachable")

    def _read(
        self, log_id: str, plan: Callable[[LogListing], list[_Source]]
    ) -> Steps[tuple[LogListing, list[LogEntry]]]:
        """Plan and read the current life, listing again when objects change under us."""

        def read(complete: bool) -> Steps[tuple[LogListing, list[LogEntry]]]:
            listing, sources = yield from self._planned(log_id, plan, complete)
            entries = self._current(log_id, (yield from self._fetch(log_id, sources)))
            name = self.keys.entries_prefix(log_id)
            check_chain(entries, name)
            return listing, resolve(entries, UNKNOWN_STATE, name)

        return (yield from self._relisting(log_id, read))

    def head(self, log_id: str) -> Steps[LogHead]:
        """Return the latest version of a log (a listing and one GET).

        A deleted log (its latest version ended it) is `CheckpointNotFound`.
        """
        head = yield from self.top(log_id)
        if head.ended:
            raise ended_error(log_id, head)
        return head

    def top(self, log_id: str) -> Steps[LogHead]:
        """Return the latest version of a log, even one that ended it (a deletion)."""
        head, _, _ = yield from self.head_with(log_id, lambda _: ())
        return head

    def head_with(
        self,
        log_id: str,
        wanted: Callable[[LogHead], Iterable[int]],
        beside: Callable[[LogHead], Sequence[GetObject]] | None = None,
    ) -> Steps[tuple[LogHead, dict[int, LogEntry], list[ObjectInfo | None]]]:
        """Return the head, the versions `wanted(head)` names, by version, and `beside`'s.

        One listing, the newest objects, then every wanted version in one parallel round
        (a sealed segment read once for all the versions it holds), with the objects
        `beside(head)` asks for (a caller's objects the head names) in the same round.
        States of the wanted entries may be left as stored (a patch): they are read for
        their records.
        """

        def read(
            complete: bool,
        ) -> Steps[tuple[LogHead, dict[int, LogEntry], list[ObjectInfo | None]]]:
            listing, sources = yield from self._planned(log_id, self._top_plan(log_id), complete)
            name = self.keys.entries_prefix(log_id)
            newest = self._current(log_id, (yield from self._fetch(log_id, sources)), ended=True)
            check_chain(newest, name)
            newest = resolve(newest, UNKNOWN_STATE, name)
            head = LogHead.of(newest[-1])
            found = {entry.version: entry for entry in newest}
            missing = sorted(
                {v for v in wanted(head) if v not in found and head.base <= v <= head.version}
            )
            plan: dict[str, _Source] = {}
            for version in missing:
                source = listing.sources(version, version)[0]
                plan.setdefault(source.key, source)
            older: list[Item] = []
            sources = []
            for source in plan.values():
                kept = self._kept(source) or self._verified(source, head.version)
                if kept is None:
                    sources.append(source)
                else:
                    older.extend((yield from self._decode(log_id, source, kept)))
            extra = [] if beside is None else list(beside(head))
            infos: list[ObjectInfo | None] = []
            if sources or extra:
                infos = yield from self._gets(
                    log_id, [*(self._get(source.key) for source in sources), *extra]
                )
            for source, info in zip(sources, infos, strict=False):
                if info is None:
                    raise _Vanished(source.key)
                older.extend((yield from self._decode(log_id, source, info)))
                self._remember_read(source, info)
            for entry in self._current(log_id, older, head.base):
                found.setdefault(entry.version, entry)
            return head, found, infos[len(sources) :]

        return (yield from self._relisting(log_id, read))

    def read_after(self, after: LogHead) -> Steps[LogHead | None]:
        """Read the version another writer appended after `after`, in one round, no listing.

        For a writer that lost the race to append after `after`: GETs the two versions
        after it at once. A live entry right after `after` that follows it (its write id,
        its records) with nothing after it is the head; a patch is applied to `after`'s
        state as stored. Keys are never freed, so nothing after it means it is the latest.
        None when the log went further, the version is not a live entry of the same log
        (an end, a purge's tombstone, a marker), or it does not follow `after`: the caller
        reads with a listing, which says what happened. A lost race thus costs the loser
        one round before it plans again, not two (a listing, then the newest entry).
        """
        log_id = after.log_id
        version = after.version + 1
        source = _Source(self.keys.entry(log_id, version), version, version, False)
        infos = yield from self._gets(
            log_id, [self._get(source.key), self._get(self.keys.entry(log_id, version + 1))]
        )
        found, beyond = infos
        if found is None or beyond is not None or not found.body:
            return None  # not written (the race was lost to something else), or went on
        items = yield from self._decode(log_id, source, found)
        entry = items[0] if items else None
        if (
            not isinstance(entry, LogEntry)
            or entry.ended
            or after.ended
            or (entry.prev is not None and entry.prev != after.write_id)
            or (not entry.starts_life and entry.first_record != after.next_record)
            or (entry.patch is not None and after.snapshot is _NO_SNAPSHOT)
        ):
            return None
        self._remember_read(source, found)
        name = self.keys.entries_prefix(log_id)
        try:
            before = UNKNOWN_STATE if entry.patch is None else after.snapshot
            (resolved,) = resolve(
                [entry], before, name, kind_before=(after.kind, after.schema_version)
            )
        except InvalidPayload:
            return None  # the listing's read judges it, with its whole chain
        self._learn_top(log_id, version)
        return LogHead.of(resolved)

    def read_at_top(
        self,
        log_id: str,
        top: int,
        wanted: Iterable[int],
        beside: Sequence[GetObject] = (),
    ) -> Steps[tuple[LogHead, dict[int, LogEntry], list[ObjectInfo | None]] | None]:
        """Read a log believed to end at version `top`, in one round and without a listing.

        GETs the key after `top`, version `top`, the `wanted` versions (those sealed at
        `top` from their segments) and the `beside` objects at once; versions this process
        appended and has not sealed yet are not read again (entries never change). Keys are
        never freed, so a live entry at `top` with nothing after it is the head. Returns
        what `head_with` does, or None when `top` is not the head any more or a wanted
        version is not where it was (sealed since, packed, vacated): the caller reads with
        a listing instead.
        """
        cut = segment_start(top)
        plan: dict[str, _Source] = {}
        items: list[Item] = []
        held: set[str] = set()  # segments this process sealed, read from memory
        for version in sorted({top, *wanted}):
            if version > top or version < 0:
                continue
            entry_source = _Source(self.keys.entry(log_id, version), version, version, False)
            kept = self._kept(entry_source)
            if kept is not None:
                items.extend((yield from self._decode(log_id, entry_source, kept)))
                continue
            if version < cut:
                first = segment_start(version)
                source = _Source(
                    self.keys.segment(log_id, first), first, first + SEGMENT_SPAN - 1, True
                )
                sealed = self._kept(source)
                if sealed is not None:
                    if source.key not in held:
                        held.add(source.key)
                        items.extend((yield from self._decode(log_id, source, sealed)))
                    continue
            else:
                source = _Source(self.keys.entry(log_id, version), version, version, False)
            plan.setdefault(source.key, source)
        sources = list(plan.values())
        infos = yield from self._gets(
            log_id,
            [
                self._get(self.keys.entry(log_id, top + 1)),
                *(self._get(source.key) for source in sources),
                *beside,
            ],
        )
        if infos[0] is not None:
            return None  # the log went on
        for source, info in zip(sources, infos[1:], strict=False):
            if info is None:
                return None
            items.extend((yield from self._decode(log_id, source, info)))
        newest = next((item for item in items if item.version == top), None)
        if not isinstance(newest, LogEntry) or newest.ended:
            return None
        head = LogHead.of(newest)
        found = {
            item.version: item
            for item in items
            if isinstance(item, LogEntry) and head.base <= item.version <= top
        }
        return head, found, infos[1 + len(sources) :]

    def entries(
        self,
        log_id: str,
        start: int = 0,
        stop: int | None = None,
        *,
        listed: LogListing | None = None,
    ) -> Steps[list[LogEntry]]:
        """Return versions `start .. stop` (default: to the latest) of the current life.

        `listed`: a listing of the log made earlier (`listing`), read from instead of
        listing again: a reader of a long log a window at a time lists it once, and reads
        the log as it stood then. An object gone since (a sealed entry vacated) is listed
        again, completely, for that read.
        """
        if (
            type(start) is not int
            or start < 0
            or (stop is not None and (type(stop) is not int or stop < start))
        ):
            raise InvalidArgument(f"bad version range {start!r}..{stop!r}", object_name=log_id)

        def plan(listing: LogListing) -> list[_Source]:
            top = listing.top
            if top is None:
                raise CheckpointNotFound("no log with this id", object_name=log_id)
            last = top if stop is None else stop
            if last > top:
                raise CheckpointNotFound(
                    f"version {last} does not exist (latest is {top})", object_name=log_id
                )
            if start > last:  # nothing at or after `start` yet: the top says if it lives
                return listing.sources(top, top)
            sources = listing.sources(self._base(start), last)
            if last < top:
                # The top is read too: it says where the current life starts.
                sources += listing.sources(top, top)
            return sources

        def read(complete: bool) -> Steps[list[LogEntry]]:
            if listed is not None and not complete:
                listing, sources = listed, plan(listed)  # a gap: `_relisting` lists again
            else:
                listing, sources = yield from self._planned(log_id, plan, complete)
            items = yield from self._fetch(log_id, sources)
            newest = items[-1]
            base = None
            if isinstance(newest, LogEntry):
                if newest.ended:
                    raise ended_error(log_id, newest)
                base = newest.base
            last = listing.top if stop is None else stop
            if last is not None and start > last:
                return []
            entries = self._current(
                log_id, [item for item in items if last is None or item.version <= last], base
            )
            name = self.keys.entries_prefix(log_id)
            check_chain(entries, name)
            return resolve(entries, UNKNOWN_STATE, name)

        entries = yield from self._relisting(log_id, read)
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
        if type(records) is not int or records < 0:
            raise InvalidArgument("records must be an int >= 0", object_name=log_id)

        def read(complete: bool) -> Steps[tuple[LogHead, list[LogEntry]]]:
            # Versions rarely hold no record: fetching as many versions as records wanted
            # usually finishes a tail in this first round.
            wanted = min(records, _TAIL_GUESS)
            listing, top_sources = yield from self._planned(
                log_id, self._top_plan(log_id, wanted), complete
            )
            name = self.keys.entries_prefix(log_id)
            newest = self._current(log_id, (yield from self._fetch(log_id, top_sources)))
            check_chain(newest, name)
            newest = resolve(newest, UNKNOWN_STATE, name)
            head = LogHead.of(newest[-1])
            if head.ended:
                raise ended_error(log_id, head)
            floor = max(0, head.next_record - records)
            if since is not None:
                floor = max(floor, since(head))
            collected = newest
            if floor == 0 and collected[0].version > head.base:
                # Everything is wanted: every older object in one parallel round.
                older = yield from self._fetch(
                    log_id, listing.sources(head.base, collected[0].version - 1)
                )
                collected = self._current(log_id, older, head.base) + collected
            while collected[0].version > head.base and collected[0].first_record > floor:
                # A gap here comes from a listing older than a seal: read again.
                window = _backwards(listing, collected[0].version - 1, head.base)
                older = yield from self._fetch(log_id, window)
                collected = self._current(log_id, older, head.base) + collected
            check_chain(collected, name)
            keep = [e for e in collected if e.next_record > floor or e is collected[-1]]
            return head, keep

        return (yield from self._relisting(log_id, read))

    def read_version(self, log_id: str, version: int) -> Steps[Item | None]:
        """Return version `version` from its entry, its marker, or its sealed segment.

        None if no object holds it.
        """
        key = self.keys.entry(log_id, version)
        info = yield from ask(self._get(key))
        if info is not None:
            items = yield from self._decode(log_id, _Source(key, version, version, False), info)
            return items[0]
        segment, pack = segment_start(version), pack_start(version)
        for source in (
            _Source(self.keys.segment(log_id, segment), segment, segment + SEGMENT_SPAN - 1, True),
            _Source(self.keys.pack(log_id, pack), pack, pack + PACK_SPAN - 1, True),
        ):
            info = yield from ask(self._get(source.key))
            if info is not None:
                items = yield from self._decode(log_id, source, info)
                return items[version - source.first]
        return None

    def read_versions(self, wanted: Sequence[tuple[str, int]]) -> Steps[list[Item | None]]:
        """Return each `(log_id, version)` as `read_version` does, the entries GET at once.

        Versions whose entry is not there (sealed away, or never written) are then read
        one by one from their segments; None where no object holds one.
        """
        items: list[Item | None] = []
        for start in range(0, len(wanted), _FETCH_BATCH):
            window = wanted[start : start + _FETCH_BATCH]
            sources = [_Source(self.keys.entry(i, v), v, v, False) for i, v in window]
            infos = yield from ask(Parallel(tuple(self._get(s.key) for s in sources)))
            for (log_id, version), source, info in zip(window, sources, infos, strict=True):
                if info is None:
                    items.append((yield from self.read_version(log_id, version)))
                else:
                    items.append((yield from self._decode(log_id, source, info))[0])
        return items

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
        if after is not None and after.refuses_writes:
            raise ended_error(log_id, after)
        version = 0 if after is None else after.version + 1
        if version > MAX_REVISION:
            raise LimitExceeded("log version overflow", object_name=log_id)
        # A new life starts at a create, and after the version that ended the old one.
        new_life = after is None or after.ended
        inherited = None if new_life else after
        change = None
        if (
            inherited is not None
            and inherited.snapshot is not _NO_SNAPSHOT
            and version % self.full_state_every
            and not ends  # an ending version stores no patch: nothing of the state it ends
        ):
            change = make_patch(inherited.snapshot, state)
        now = yield from ask(Now())
        entry = LogEntry(
            log_id=log_id,
            version=version,
            first_record=0 if inherited is None else inherited.next_record,
            records=records,
            state=state,
            kind=kind or (inherited.kind if inherited is not None else "stashpoint.log"),
            schema_version=schema_version
            if schema_version is not None
            else (inherited.schema_version if inherited is not None else 1),
            write_id=new_write_id(),
            written_at=now,
            extra=extra or {},
            patch=None if change is None else change[0],
            unset=() if change is None else change[1],
            prev=None if after is None else after.write_id,
            base=version if inherited is None else inherited.base,
            ended=ends,
        )
        key = self.keys.entry(log_id, version)
        etag = yield from self._create(log_id, key, entry, retried=retried)
        head = LogHead.of(entry, handed_over=handed_over, etag=etag)
        self._learn_top(log_id, version)
        if version >= SEGMENT_SPAN and version % SEGMENT_SPAN == 0:
            # The append is durable already; a failed seal is redone by the next seal or
            # by gc, and said here.
            try:
                yield from self.seal(log_id, below=version, base=entry.base)
            except StashpointError as exc:
                tracing.event("seal_failed", kind=exc.kind.value)
                _log.warning(
                    "stashpoint: sealing log %s below version %d failed (%s); the next seal "
                    "or `stashpoint gc` does it",
                    log_id,
                    version,
                    exc.kind.value,
                )
        return head

    def _base(self, version: int) -> int:
        return state_base(version, self.full_state_every)

    def _top_plan(self, log_id: str, versions: int = 0) -> Callable[[LogListing], list[_Source]]:
        return lambda listing: _top_sources(listing, log_id, self._base, versions)

    def _create(
        self, log_id: str, key: str, entry: LogEntry, *, retried: bool = False
    ) -> Steps[str | None]:
        """Create the entry object; settle an unclear answer by reading the version back.

        `retried`: a lost race is raised without naming the winner (`append`).
        """
        body = yield from self.codec.document_encoding(entry_document(entry), name=key)

        def lost() -> Steps[Verdict]:
            if retried:
                return Refused(_lost(log_id, entry.version, None))
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
        if etag is not None and max(len(body), declared_size(body)) <= _WRITTEN_BODY:
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
        return _lost(log_id, version, top)

    def seal(self, log_id: str, *, below: int | None = None, base: int | None = None) -> Steps[int]:
        """Seal the complete ranges of the current life below `below`; return how many.

        Ranges end below version `below` (default: the latest); each sealed range's
        entries are then vacated. Idempotent and safe to run concurrently: segment ranges
        and bytes are fixed by the entries, and segments are created with
        `If-None-Match: *` (an object already there is judged by its content).

        With `below` (the seal an append makes; `base` is the new entry's), the recent
        entries are listed and at most the two newest unsealed ranges sealed, so an append
        costs a bounded number of requests; a range further back is found from the
        complete listing of segments. Without, everything is listed and every unsealed
        range sealed (`gc`), and entries a seal left whole are vacated.
        """
        listing = yield from self.listing(log_id, complete=below is None)
        top = listing.top
        if top is None:
            return 0
        if base is None:
            base = self.life_of((yield from self.top(log_id)))
        limit = top if below is None else min(below, top + 1)
        first_range = -(-base // SEGMENT_SPAN) * SEGMENT_SPAN  # ranges wholly in this life
        missing = [
            first
            for first in range(first_range, limit - SEGMENT_SPAN + 1, SEGMENT_SPAN)
            if not listing.sealed(first)
        ]
        if below is not None:
            missing = missing[-_SEALS_PER_APPEND:]
            newest = limit - limit % SEGMENT_SPAN - SEGMENT_SPAN
            packed = pack_start(newest) in listing.packs
            if newest >= first_range and newest not in missing and not packed:
                # The range this append completed is sealed even if an object already
                # sits at its segment's key: that object is judged by its content (a
                # damaged or foreign one is replaced), never trusted for being there.
                missing.append(newest)
        written = 0
        for first in missing:
            if self.seeks and not all(
                v in listing.entries for v in range(first, first + SEGMENT_SPAN)
            ):
                # A hinted listing starts after it: list the range itself.
                after = self.keys.entry(log_id, first - 1) if first else None
                page = yield from ask(
                    ListKeys(self.keys.entries_prefix(log_id), None, SEGMENT_SPAN, after)
                )
                _add_entries(listing, page, self.keys.entries_prefix(log_id))
            if (yield from self._write_segment(log_id, listing, first)):
                written += 1
        if below is None and self.vacate_sealed:
            yield from self._vacate_sealed(log_id, listing)
        return written

    def _write_segment(self, log_id: str, listing: LogListing, first: int) -> Steps[bool]:
        """Seal one range and vacate its entries; False if it cannot be sealed (now)."""
        versions = range(first, first + SEGMENT_SPAN)
        if not all(v in listing.entries for v in versions):
            return False  # a gap: the reader's error to report, not a seal to make
        sources = [_Source(listing.entries[v], v, v, False) for v in versions]
        try:
            # Entries this process wrote come from their kept bodies (`_fetch_objects`).
            fetched = yield from self._fetch_objects(log_id, sources, kept=True)
        except _Vanished:
            return False
        if any(isinstance(item, Vacated) for _, items in fetched for item in items):
            return False  # sealed by another sealer meanwhile, or below a base
        entries = [item for _, items in fetched for item in items if isinstance(item, LogEntry)]
        key = self.keys.segment(log_id, first)
        check_chain(entries, key)
        entries = resolve(entries, UNKNOWN_STATE, key)
        level = max(self.codec.level, SEAL_LEVEL)
        document = segment_document(log_id, entries)
        body = yield from self.codec.document_encoding(document, name=key, level=level)
        ours = [entry.write_id for entry in entries]

        def judge(info: ObjectInfo) -> Steps[Found]:
            source = _Source(key, first, first + SEGMENT_SPAN - 1, True)
            try:
                held = yield from self._decode(log_id, source, info)
            except StashpointError:
                held = []
            # Damaged, or holding other records than the entries (which are the truth while
            # they exist): replaced over its own ETag, before any entry is vacated.
            return Found.OURS if [item.write_id for item in held] == ours else Found.OTHER

        etag = yield from writes.create_named(
            PutObject(key, body, Create()),
            judge,
            self.retry,
            what="seal",
            limit=self.codec.limits.max_compressed_bytes,
            refresh=False,
        )
        self._sealed.put(key, ObjectInfo(etag=etag or "", body=body))
        listing.segments[first] = key
        for source in sources:
            self._written.pop(source.key)  # sealed: never needed again
        if not self.vacate_sealed:
            return True
        yield from self._vacate(
            log_id,
            [(entry, info.etag) for entry, (info, _) in zip(entries, fetched, strict=True)],
            reason="sealed",
            by=first,
        )
        return True

    def pack(self, log_id: str) -> Steps[PackReport]:
        """Pack the log's old sealed ranges into objects of `PACK_SPAN` versions.

        For archives: a range of the current life that the log has gone a segment past
        (so no append seals in it any more) becomes one pack holding its sixteen
        segments' entries, created with `If-None-Match: *` (an object already at its key is
        judged by its content, like a segment). Then every entry a pack or a segment holds
        write for write is vacated (keys stay occupied: markers), whatever
        `vacate_sealed` says, and each segment a pack holds write for write is deleted
        (a segment re-created later by a late sealer holds the same entries; readers read
        the pack, and the next `pack` deletes it). Idempotent; resumes from any crash.
        """
        yield from self.seal(log_id)
        listing = yield from self.listing(log_id, ordered=True)
        top = listing.top
        if top is None:
            raise CheckpointNotFound("no log with this id", object_name=log_id)
        head = yield from self.top(log_id)
        packed = deleted = 0
        too_large: list[int] = []
        first_pack = -(-self.life_of(head) // PACK_SPAN) * PACK_SPAN  # wholly in this life
        verified: dict[int, list[str]] = {}
        if not head.ended:
            for first in range(first_pack, top - PACK_SPAN - SEGMENT_SPAN + 2, PACK_SPAN):
                try:
                    held = yield from self.pack_range(log_id, listing, first)
                except LimitExceeded:
                    too_large.append(first)  # beyond what a reader accepts: segments stay
                    continue
                except _Vanished:
                    continue  # another packer is deleting its segments: it packed the range
                if held is not None:
                    verified[first] = held
                    packed += 1
        vacated = yield from self._vacate_sealed(log_id, listing)
        for first, write_ids in verified.items():
            segments = [
                (start, listing.segments[start])
                for start in range(first, first + PACK_SPAN, SEGMENT_SPAN)
                if start in listing.segments
            ]
            for start, key in segments:
                try:
                    fetched = yield from self._fetch_objects(
                        log_id, [_Source(key, start, start + SEGMENT_SPAN - 1, True)]
                    )
                except _Vanished:
                    continue  # deleted by another packer meanwhile
                info, items = fetched[0]
                offset = start - first
                if [item.write_id for item in items] == write_ids[offset : offset + SEGMENT_SPAN]:
                    gone = yield from writes.delete(
                        DeleteObject(key, info.etag),
                        writes.judged_read_back(key, info.etag),
                        self.retry,
                        what="packed segment delete",
                    )
                    deleted += gone
        return PackReport(log_id, packed, vacated, deleted, tuple(too_large))

    def pack_range(self, log_id: str, listing: LogListing, first: int) -> Steps[list[str] | None]:
        """Write (or judge) the pack of `first .. first + PACK_SPAN - 1`; return its write ids.

        From the range's sixteen segments when all are listed; from the pack itself when
        some segments are gone (a pack that crashed while deleting them). None: nothing to
        pack (no segment left, or a range that cannot be sealed).
        """
        starts = range(first, first + PACK_SPAN, SEGMENT_SPAN)
        key = self.keys.pack(log_id, first)
        source = _Source(key, first, first + PACK_SPAN - 1, True)
        if not all(start in listing.segments for start in starts):
            if first not in listing.packs or not any(s in listing.segments for s in starts):
                return None
            items = yield from self._fetch(log_id, [source])
            return [item.write_id for item in items]
        segments = [_Source(listing.segments[s], s, s + SEGMENT_SPAN - 1, True) for s in starts]
        entries = [item for item in (yield from self._fetch(log_id, segments))]
        held = [entry for entry in entries if isinstance(entry, LogEntry)]
        check_chain(held, key)  # sixteen segments of one copy of the log
        document = segment_document(log_id, held)
        level = max(self.codec.level, PACK_LEVEL)
        body = yield from self.codec.document_encoding(document, name=key, level=level)
        if len(body) > self.codec.limits.max_compressed_bytes:
            raise LimitExceeded("a pack would exceed max_compressed_bytes", object_name=key)
        ours = [entry.write_id for entry in held]

        def judge(info: ObjectInfo) -> Steps[Found]:
            try:
                found = yield from self._decode(log_id, source, info)
            except StashpointError:
                found = []
            return Found.OURS if [item.write_id for item in found] == ours else Found.OTHER

        yield from writes.create_named(
            PutObject(key, body, Create()),
            judge,
            self.retry,
            what="pack",
            limit=self.codec.limits.max_compressed_bytes,
            refresh=False,
        )
        listing.packs[first] = key
        return ours

    def life_of(self, head: LogHead) -> int:
        """Return the first version readers of this log read.

        The log's life's base, or the owner's own life's (`life_field`) when its state
        names a later one.
        """
        state = head.state
        life = state.get(self.life_field) if self.life_field and isinstance(state, dict) else None
        if type(life) is int and head.base < life <= head.version:
            return life
        return head.base

    def tidy(self, log_id: str) -> Steps[int]:
        """Vacate what lies below the owner's current life (`life_field`); return how many.

        A LangGraph thread's deletion or rebase starts a new life in its state and leaves
        the entries below it whole (one PUT, not one per version); readers never read
        there, and `gc` calls this to vacate them (keys stay occupied) and delete the
        segments and packs there. Nothing to do for logs whose lives are the log's own.
        """
        try:
            head = yield from self.top(log_id)
        except CheckpointNotFound:
            return 0
        life = self.life_of(head)
        if head.ended or life <= head.base:
            return 0
        return (yield from self.vacate_below(log_id, life, reason="rebased"))

    def _vacate(
        self,
        log_id: str,
        targets: Sequence[tuple[LogEntry | int, str | None]],
        *,
        reason: str,
        by: int,
    ) -> Steps[list[str | None]]:
        """Write a vacated marker over each `(entry or version, ETag)`; return their ETags.

        Each marker is conditional on the ETag judged, so nothing but that entry is ever
        replaced; a key found empty is occupied again.
        """
        requests: list[tuple[PutObject, writes.ReadBack]] = []
        for target, etag in targets:
            version = target if isinstance(target, int) else target.version
            write_id = "unknown" if isinstance(target, int) else target.write_id
            key = self.keys.entry(log_id, version)
            marker = Vacated(log_id, version, write_id, reason, by)
            body = yield from self.codec.document_encoding(vacated_document(marker), name=key)
            condition = Create() if etag is None else Match(etag)
            requests.append(
                (PutObject(key, body, condition), self._vacate_read_back(log_id, key, etag))
            )
        return (yield from writes.put_all(requests, self.retry, what="vacate"))

    def _vacate_read_back(self, log_id: str, key: str, etag: str | None) -> writes.ReadBack:
        def read_back(tracker: WriteTracker) -> Steps[Verdict]:
            info = yield from ask(self._get(key))
            if info is None:
                return Rewrite(Create())  # freed by someone else: occupied again
            if info.etag == etag:
                return NotLanded()  # still the entry judged
            return Landed()  # a marker, or whatever else: the key is occupied either way

        return read_back

    def marker_ceiling(self, log_id: str) -> Steps[int]:
        """Return the most bytes a vacated marker of `log_id` takes once stored.

        An entry always takes more (it carries a write time, record position, kind and
        state besides), so a listing's sizes tell markers from entries without reading
        them; the margin absorbs zstd's variation on the random write ids.
        """
        widest = Vacated(log_id, MAX_REVISION, new_write_id(), "rebased", MAX_REVISION)
        body = yield from self.codec.document_encoding(vacated_document(widest), name=log_id)
        return len(body) + _MARKER_MARGIN + self.overhead(self.keys.entry(log_id, MAX_REVISION))

    def _vacate_sealed(self, log_id: str, listing: LogListing) -> Steps[int]:
        """Vacate the entries that sealed objects (packs, segments) still hold whole."""
        vacated = 0
        ceiling = yield from self.marker_ceiling(log_id)
        for source in listing.sealed_objects():
            first = source.first
            left = [
                v
                for v in range(first, source.last + 1)
                if v in listing.entries and listing.whole(v, ceiling)
            ]
            if not left:
                continue
            segment = source.key
            try:
                sealed = yield from self._fetch(log_id, [source])
                fetched = yield from self._fetch_objects(
                    log_id, [_Source(listing.entries[v], v, v, False) for v in left]
                )
            except (_Vanished, InvalidPayload, UnsupportedFormat) as exc:
                # A segment that cannot vouch for its entries: they stay whole.
                _log.warning(
                    "stashpoint: segment %s cannot vouch for its entries (%s); they stay",
                    segment,
                    type(exc).__name__,
                )
                continue
            targets = []
            for info, items in fetched:
                item = items[0]
                held = sealed[item.version - first]
                # Only an entry the segment holds, write for write, is vacated.
                if isinstance(item, LogEntry) and held.write_id == item.write_id:
                    targets.append((item, info.etag))
            vacated += len((yield from self._vacate(log_id, targets, reason="sealed", by=first)))
        return vacated

    def vacate_below(self, log_id: str, version: int, *, reason: str) -> Steps[int]:
        """Vacate every entry below `version` and delete the segments there; return how many.

        For a log whose writer started a new life at `version` (a rebase, a deletion):
        readers never read below it. Entries become markers (keys stay occupied, so a
        stale writer loses its append); segments below, which nothing needs, are deleted.
        """
        listing = yield from self.listing(log_id, ordered=True)
        ceiling = yield from self.marker_ceiling(log_id)
        doomed = [v for v in listing.entries if v < version and listing.whole(v, ceiling)]
        targets: list[tuple[LogEntry | int, str]] = []
        unknown = [v for v in doomed if v not in listing.etags]
        known = [v for v in doomed if v in listing.etags]
        targets += [(v, listing.etags[v]) for v in known]
        for start in range(0, len(unknown), _FETCH_BATCH):
            batch = unknown[start : start + _FETCH_BATCH]
            keys = [self.keys.entry(log_id, v) for v in batch]
            infos = yield from ask(Parallel(tuple(self._get(k) for k in keys)))
            for v, info in zip(batch, infos, strict=True):
                if info is not None:
                    targets.append((v, info.etag))
        vacated = len((yield from self._vacate(log_id, targets, reason=reason, by=version)))
        segments = [k for first, k in listing.segments.items() if first + SEGMENT_SPAN <= version]
        segments += [k for first, k in listing.packs.items() if first + PACK_SPAN <= version]
        yield from delete_keys(segments)
        return vacated + len(segments)

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
            read_noting, plan, end, retry=self.retry, max_attempts=_PURGE_ATTEMPTS
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

    def _listed_top(self, log_id: str) -> Steps[int | None]:
        """Return the highest version any object of the log is named for, read or not.

        For a log that cannot be read (a damaged top, an object planted under its
        prefix): names that are no version are passed over, nothing is decoded.
        """
        top: int | None = None
        for prefix in (self.keys.entries_prefix(log_id), self.keys.segments_prefix(log_id)):
            for page in (yield from self._all_pages(prefix, None)):
                for key in page.keys:
                    name = key[len(prefix) :]
                    try:
                        if prefix.startswith(self.keys.entries_prefix(log_id)):
                            version = parse_entry_name(name, key)
                        else:
                            version = parse_segment_name(name, key)[1]
                    except StashpointError:
                        continue
                    top = version if top is None else max(top, version)
        return top

    def vacate(
        self, log_id: str, targets: Sequence[tuple[int, str | None]], *, reason: str, by: int
    ) -> Steps[list[str | None]]:
        """Write a vacated marker over each `(version, ETag)` judged; return their ETags.

        Each marker is conditional on the ETag, so nothing but the object judged is ever
        replaced; a key found empty is occupied again (keys are never freed). An ETag of
        None creates the marker where no object is (a gap).
        """
        return (yield from self._vacate(log_id, list(targets), reason=reason, by=by))

    def holds_marker(self, log_id: str, version: int, info: ObjectInfo) -> Steps[bool]:
        """Whether `info` (read from version `version`'s key) is a vacated marker of it."""
        source = _Source(self.keys.entry(log_id, version), version, version, False)
        try:
            items = yield from self._decode(log_id, source, info)
        except StashpointError:
            return False
        return len(items) == 1 and isinstance(items[0], Vacated)

    def restore(self, log_id: str, days: int, tier: str) -> Steps[RestoreReport]:
        """Ask for every archived sealed segment of a log to be restored for `days`.

        Entries are never archived (lifecycle rules match the sealed prefix only). Asking
        again reports progress: a restore under way or done is not requested twice.
        """
        check_restore(days, tier)
        listing = yield from self.listing(log_id)
        if listing.top is None:
            raise CheckpointNotFound("no log with this id", object_name=log_id)
        keys = sorted([*listing.segments.values(), *listing.packs.values()])
        states: list[RestoreState] = []
        for start in range(0, len(keys), _FETCH_BATCH):
            batch = keys[start : start + _FETCH_BATCH]
            states += yield from ask(Parallel(tuple(RestoreObject(k, days, tier) for k in batch)))
        return RestoreReport.of(states)

    def list_page(
        self, prefix: str, limit: int, cursor: str | None
    ) -> Steps[tuple[list[str], str | None]]:
        """Return up to `limit` log ids after `cursor` starting with `prefix`; and a cursor.

        The cursor names the next page (None at the end). Skips past each log's entries
        with `start_after`, so a page costs about one LIST however long the logs are.
        """
        validate_prefix(prefix)
        if type(limit) is not int or limit < 1:
            raise InvalidArgument(
                f"limit must be an int >= 1, not {type(limit).__name__} {limit!r}"[:120]
            )
        base = self.keys.ids_prefix()
        if not self.seeks:
            # No StartAfter, no order: every id under the prefix, paged here.
            start = None if cursor is None else _cursor_id(cursor)
            every = [i for i in (yield from self.list_ids(prefix)) if start is None or i > start]
            return every[:limit], (every[limit - 1] if len(every) > limit else None)
        after = None if cursor is None else f"{base}{_cursor_id(cursor)}/~"
        ids, ended = yield from self._ids_after(prefix, after, limit)
        if ended:
            return ids[:limit], (ids[limit - 1] if len(ids) > limit else None)
        return ids[:limit], ids[limit - 1]

    def _ids_after(
        self, prefix: str, after: str | None, limit: int | None
    ) -> Steps[tuple[list[str], bool]]:
        """Return the log ids after the key `after`, and whether the listing ended.

        At least `limit` ids unless it ended. Storage that lists in order only: each page
        starts after the last log it named (`start_after` past the rest of that log's
        entries), so a log costs one LIST at most however long it is. A page whose last
        key names no log (an object planted without a `/`) is passed by that key, so such
        objects never bring a page back.
        """
        base = self.keys.ids_prefix()
        ids: list[str] = []
        while limit is None or len(ids) < limit:
            page = yield from ask(ListKeys(base + prefix, start_after=after))
            for key in page.keys:
                log_id, slash, _ = key[len(base) :].partition("/")
                if slash and (not ids or ids[-1] != log_id):
                    ids.append(log_id)
            if not page.keys or page.next_token is None:
                return ids, True
            skip = f"{base}{ids[-1]}/~" if ids else page.keys[-1]
            after = max(skip, page.keys[-1])  # the rest of the last log's entries: skipped
        return ids, False

    def list_ids(self, prefix: str = "") -> Steps[list[str]]:
        """Return the ids of logs with entries in this namespace that start with `prefix`."""
        validate_prefix(prefix)
        if self.seeks:
            return (yield from self._ids_after(prefix, None, None))[0]
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
                # In order, an id's keys are listed together; unordered, they may not be.
                return ids if self.seeks else sorted(set(ids))


def _add_entries(listing: LogListing, page: KeyPage, entries_prefix: str) -> None:
    """Add the entries a page of keys lists (with their sizes and ETags) to `listing`."""
    for index, key in enumerate(page.keys):
        name = key[len(entries_prefix) :]
        if "/" in name:
            continue  # another log's entries never sit below ours; not ours to judge
        version = parse_entry_name(name, key)
        listing.entries[version] = key
        if page.sizes is not None:
            listing.sizes[version] = page.sizes[index]
        if page.etags is not None and page.etags[index]:
            listing.etags[version] = page.etags[index]


def _lost(log_id: str, version: int, top: int | None) -> CheckpointConflict:
    """Return the conflict of an append that lost the race for `version`.

    `top`: the latest version, when a listing said.
    """
    return CheckpointConflict(
        log_id,
        expected_revision=None if version == 0 else version - 1,
        actual_revision=top if top is not None else version,
        message=f"append lost: version {version} of log {log_id!r} was written by another "
        f"writer (latest is {top if top is not None else f'at least {version}'})",
    )


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


def _backwards(listing: LogListing, below: int, base: int) -> list[_Source]:
    """Plan the (up to `_READ_WINDOW`) objects ending at version `below`, oldest first."""
    sources: list[_Source] = []
    version = below
    while version >= base and len(sources) < _READ_WINDOW:
        source = listing.sources(version, version)[0]
        sources.append(source)
        version = source.first - 1
    sources.reverse()
    return sources


def _cursor_id(cursor: str) -> str:
    """Return the log id a listing's cursor names, or refuse one no listing gave."""
    try:
        return check_log_id(cursor)
    except InvalidId:
        raise InvalidArgument(
            f"{described(cursor)} is not a cursor of this listing (pass the one a page returned)"
        ) from None
