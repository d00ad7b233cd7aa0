"""Sealing a log: complete ranges of 64 versions copied into one immutable segment.

Created with `If-None-Match: *`; the range is fixed by the format, so concurrent sealers
write the same key with the same bytes. An object already at the segment's key is judged by
its content. `pack` copies sixteen old segments into one archive object of 1,024 versions.
"""

from __future__ import annotations

from dataclasses import dataclass

from stashpoint.errors import (
    CheckpointNotFound,
    LimitExceeded,
    StashpointError,
)
from stashpoint.logs.bounds import (
    FETCH_BATCH,
    PACK_LEVEL,
    SEAL_LEVEL,
    SEALS_PER_APPEND,
)
from stashpoint.logs.format import (
    PACK_SPAN,
    SEGMENT_SPAN,
    UNKNOWN_STATE,
    LogEntry,
    Vacated,
    check_chain,
    pack_start,
    resolve,
    segment_document,
)
from stashpoint.logs.listing import (
    Item,
    LogListing,
    Source,
    Vanished,
    add_entries,
)
from stashpoint.logs.tidying import (
    LogTidier,
)
from stashpoint.steps import Parallel, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    ListKeys,
    ObjectInfo,
    PutObject,
    RestoreObject,
    RestoreReport,
    RestoreState,
    check_restore,
)
from stashpoint.stores.writes import (
    Found,
)


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


class LogSealer(LogTidier):
    """Tidying, plus sealing complete ranges into segments and packing old ones."""

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
        written = 0
        for first in _unsealed(listing, base, limit, appending=below is not None):
            yield from self._list_range(log_id, listing, first)
            if (yield from self._write_segment(log_id, listing, first)):
                written += 1
        if below is None and self.vacate_sealed:
            yield from self._vacate_sealed(log_id, listing)
        return written

    def _list_range(self, log_id: str, listing: LogListing, first: int) -> Steps[None]:
        """List a range's entries when a hinted listing started after some of them."""
        if not self.seeks or all(v in listing.entries for v in range(first, first + SEGMENT_SPAN)):
            return
        after = self.keys.entry(log_id, first - 1) if first else None
        page = yield from ask(ListKeys(self.keys.entries_prefix(log_id), None, SEGMENT_SPAN, after))
        add_entries(listing, page, self.keys.entries_prefix(log_id))

    def _write_segment(self, log_id: str, listing: LogListing, first: int) -> Steps[bool]:
        """Seal one range and vacate its entries; False if it cannot be sealed (now)."""
        versions = range(first, first + SEGMENT_SPAN)
        if not all(v in listing.entries for v in versions):
            return False  # a gap: the reader's error to report, not a seal to make
        sources = [Source(listing.entries[v], v, v, False) for v in versions]
        read = yield from self._whole_entries(log_id, sources)
        if read is None:
            return False
        fetched, entries = read
        key = self.keys.segment(log_id, first)
        check_chain(entries, key)
        entries = resolve(entries, UNKNOWN_STATE, key)
        level = max(self.codec.level, SEAL_LEVEL)
        document = segment_document(log_id, entries)
        body = yield from self.codec.document_encoding(document, name=key, level=level)
        ours = [entry.write_id for entry in entries]
        # Damaged, or holding other records than the entries (which are the truth while
        # they exist): replaced over its own ETag, before any entry is vacated.
        judge = self._holds(log_id, Source(key, first, first + SEGMENT_SPAN - 1, True), ours)
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

    def _whole_entries(
        self, log_id: str, sources: list[Source]
    ) -> Steps[tuple[list[tuple[ObjectInfo, list[Item]]], list[LogEntry]] | None]:
        """Read a range's entries: what each object was, and the entries.

        None when one is gone or vacated: sealed by another sealer meanwhile, or below a
        base.
        """
        try:
            # Entries this process wrote come from their kept bodies (`_fetch_objects`).
            fetched = yield from self._fetch_objects(log_id, sources, kept=True)
        except Vanished:
            return None
        items = [item for _, held in fetched for item in held]
        if any(isinstance(item, Vacated) for item in items):
            return None
        return fetched, [item for item in items if isinstance(item, LogEntry)]

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
        first_pack = -(-self.life_of(head) // PACK_SPAN) * PACK_SPAN  # wholly in this life
        verified: dict[int, list[str]] = {}
        too_large: list[int] = []
        if not head.ended:
            for first in range(first_pack, top - PACK_SPAN - SEGMENT_SPAN + 2, PACK_SPAN):
                try:
                    held = yield from self.pack_range(log_id, listing, first)
                except LimitExceeded:
                    too_large.append(first)  # beyond what a reader accepts: segments stay
                    continue
                except Vanished:
                    continue  # another packer is deleting its segments: it packed the range
                if held is not None:
                    verified[first] = held
        vacated = yield from self._vacate_sealed(log_id, listing)
        deleted = 0
        for first, write_ids in verified.items():
            deleted += yield from self._delete_packed(log_id, listing, first, write_ids)
        return PackReport(log_id, len(verified), vacated, deleted, tuple(too_large))

    def _delete_packed(
        self, log_id: str, listing: LogListing, first: int, write_ids: list[str]
    ) -> Steps[int]:
        """Delete the segments of the pack from `first` that it holds write for write."""
        deleted = 0
        for start in range(first, first + PACK_SPAN, SEGMENT_SPAN):
            key = listing.segments.get(start)
            if key is None:
                continue
            try:
                fetched = yield from self._fetch_objects(
                    log_id, [Source(key, start, start + SEGMENT_SPAN - 1, True)]
                )
            except Vanished:
                continue  # deleted by another packer meanwhile
            info, items = fetched[0]
            offset = start - first
            if [item.write_id for item in items] == write_ids[offset : offset + SEGMENT_SPAN]:
                deleted += yield from writes.delete(
                    DeleteObject(key, info.etag),
                    writes.judged_read_back(key, info.etag),
                    self.retry,
                    what="packed segment delete",
                )
        return deleted

    def _holds(self, log_id: str, source: Source, ours: list[str]) -> writes.Judge:
        """Return the judge of an object found at a segment's (or pack's) key.

        Ours when it holds exactly our entries (their write ids); anything else (damaged,
        foreign) is another's.
        """

        def judge(info: ObjectInfo) -> Steps[Found]:
            try:
                held = yield from self._decode(log_id, source, info)
            except StashpointError:
                held = []
            return Found.OURS if [item.write_id for item in held] == ours else Found.OTHER

        return judge

    def _packed_ids(
        self, log_id: str, listing: LogListing, source: Source
    ) -> Steps[list[str] | None]:
        """Return the write ids a pack holds, when some of its segments are gone.

        A pack that crashed while deleting them; None: nothing to pack.
        """
        starts = range(source.first, source.first + PACK_SPAN, SEGMENT_SPAN)
        if source.first not in listing.packs or not any(s in listing.segments for s in starts):
            return None
        items = yield from self._fetch(log_id, [source])
        return [item.write_id for item in items]

    def pack_range(self, log_id: str, listing: LogListing, first: int) -> Steps[list[str] | None]:
        """Write (or judge) the pack of `first .. first + PACK_SPAN - 1`; return its write ids.

        From the range's sixteen segments when all are listed; from the pack itself when
        some segments are gone (a pack that crashed while deleting them). None: nothing to
        pack (no segment left, or a range that cannot be sealed).
        """
        starts = range(first, first + PACK_SPAN, SEGMENT_SPAN)
        key = self.keys.pack(log_id, first)
        source = Source(key, first, first + PACK_SPAN - 1, True)
        if not all(start in listing.segments for start in starts):
            return (yield from self._packed_ids(log_id, listing, source))
        segments = [Source(listing.segments[s], s, s + SEGMENT_SPAN - 1, True) for s in starts]
        entries = [item for item in (yield from self._fetch(log_id, segments))]
        held = [entry for entry in entries if isinstance(entry, LogEntry)]
        check_chain(held, key)  # sixteen segments of one copy of the log
        document = segment_document(log_id, held)
        level = max(self.codec.level, PACK_LEVEL)
        body = yield from self.codec.document_encoding(document, name=key, level=level)
        if len(body) > self.codec.limits.max_compressed_bytes:
            raise LimitExceeded("a pack would exceed max_compressed_bytes", object_name=key)
        ours = [entry.write_id for entry in held]
        yield from writes.create_named(
            PutObject(key, body, Create()),
            self._holds(log_id, source, ours),
            self.retry,
            what="pack",
            limit=self.codec.limits.max_compressed_bytes,
            refresh=False,
        )
        listing.packs[first] = key
        return ours

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
        for start in range(0, len(keys), FETCH_BATCH):
            batch = keys[start : start + FETCH_BATCH]
            states += yield from ask(Parallel(tuple(RestoreObject(k, days, tier) for k in batch)))
        return RestoreReport.of(states)


def _unsealed(listing: LogListing, base: int, limit: int, *, appending: bool) -> list[int]:
    """Return the first versions of the ranges to seal below `limit`.

    Ranges wholly in the life from `base`.

    `appending` (the seal an append makes): at most the two newest unsealed ranges, and
    the range the append completed even if an object already sits at its segment's key:
    that object is judged by its content (a damaged or foreign one is replaced), never
    trusted for being there.
    """
    first_range = -(-base // SEGMENT_SPAN) * SEGMENT_SPAN
    missing = [
        first
        for first in range(first_range, limit - SEGMENT_SPAN + 1, SEGMENT_SPAN)
        if not listing.sealed(first)
    ]
    if not appending:
        return missing
    missing = missing[-SEALS_PER_APPEND:]
    newest = limit - limit % SEGMENT_SPAN - SEGMENT_SPAN
    packed = pack_start(newest) in listing.packs
    if newest >= first_range and newest not in missing and not packed:
        missing.append(newest)
    return missing
