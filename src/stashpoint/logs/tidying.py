"""Tidying a log: vacated markers in place of entries nothing needs, and lives.

Once its segment is stored, each sealed entry is replaced by a small `vacated` marker,
conditional on the entry's ETag; rebases and deletions vacate every entry below them the
same way (and delete the segments there, which nothing needs). A key is never freed: a
writer whose head is stale, however stale, finds the key occupied and loses its append.
"""

from __future__ import annotations

from collections.abc import Sequence

from stashpoint.envelope import MAX_REVISION
from stashpoint.errors import (
    CheckpointNotFound,
    InvalidPayload,
    StashpointError,
    UnsupportedFormat,
)
from stashpoint.ids import new_write_id
from stashpoint.logs.bounds import (
    FETCH_BATCH,
    MARKER_MARGIN,
    logger,
)
from stashpoint.logs.format import (
    PACK_SPAN,
    SEGMENT_SPAN,
    LogEntry,
    Vacated,
    vacated_document,
)
from stashpoint.logs.head import (
    LogHead,
)
from stashpoint.logs.listing import (
    Item,
    LogListing,
    Source,
    Vanished,
)
from stashpoint.logs.reading import (
    LogReader,
)
from stashpoint.steps import Parallel, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.objects import (
    Create,
    Match,
    ObjectInfo,
    PutObject,
    delete_keys,
)
from stashpoint.stores.writes import (
    Landed,
    NotLanded,
    Rewrite,
    Verdict,
    WriteTracker,
)


class LogTidier(LogReader):
    """Reading, plus vacating what a seal, a rebase or a deletion left behind."""

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
        return len(body) + MARKER_MARGIN + self.overhead(self.keys.entry(log_id, MAX_REVISION))

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
                    log_id, [Source(listing.entries[v], v, v, False) for v in left]
                )
            except (Vanished, InvalidPayload, UnsupportedFormat) as exc:
                # A segment that cannot vouch for its entries: they stay whole.
                logger.warning(
                    "stashpoint: segment %s cannot vouch for its entries (%s); they stay",
                    segment,
                    type(exc).__name__,
                )
                continue
            targets = _held_by(sealed, first, fetched)
            vacated += len((yield from self._vacate(log_id, targets, reason="sealed", by=first)))
        return vacated

    def _with_etags(
        self, log_id: str, listing: LogListing, versions: list[int]
    ) -> Steps[list[tuple[LogEntry | int, str]]]:
        """Return each version with the ETag of its entry: as listed, else read (in rounds).

        A version whose entry is gone is left out.
        """
        targets: list[tuple[LogEntry | int, str]] = [
            (v, listing.etags[v]) for v in versions if v in listing.etags
        ]
        unknown = [v for v in versions if v not in listing.etags]
        for start in range(0, len(unknown), FETCH_BATCH):
            batch = unknown[start : start + FETCH_BATCH]
            keys = [self.keys.entry(log_id, v) for v in batch]
            infos = yield from ask(Parallel(tuple(self._get(k) for k in keys)))
            targets += [(v, info.etag) for v, info in zip(batch, infos, strict=True) if info]
        return targets

    def vacate_below(self, log_id: str, version: int, *, reason: str) -> Steps[int]:
        """Vacate every entry below `version` and delete the segments there; return how many.

        For a log whose writer started a new life at `version` (a rebase, a deletion):
        readers never read below it. Entries become markers (keys stay occupied, so a
        stale writer loses its append); segments below, which nothing needs, are deleted.
        """
        listing = yield from self.listing(log_id, ordered=True)
        ceiling = yield from self.marker_ceiling(log_id)
        doomed = [v for v in listing.entries if v < version and listing.whole(v, ceiling)]
        targets = yield from self._with_etags(log_id, listing, doomed)
        vacated = len((yield from self._vacate(log_id, targets, reason=reason, by=version)))
        segments = _sealed_below(listing, version)
        yield from delete_keys(segments)
        return vacated + len(segments)

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
        source = Source(self.keys.entry(log_id, version), version, version, False)
        try:
            items = yield from self._decode(log_id, source, info)
        except StashpointError:
            return False
        return len(items) == 1 and isinstance(items[0], Vacated)


def _sealed_below(listing: LogListing, version: int) -> list[str]:
    """Return the keys of the segments and packs wholly below `version`."""
    segments = [k for first, k in listing.segments.items() if first + SEGMENT_SPAN <= version]
    return segments + [k for first, k in listing.packs.items() if first + PACK_SPAN <= version]


def _held_by(
    sealed: list[Item], first: int, fetched: list[tuple[ObjectInfo, list[Item]]]
) -> list[tuple[LogEntry | int, str]]:
    """Return the entries (with their ETags) a sealed object from `first` holds.

    Write for write: only those are vacated.
    """
    targets: list[tuple[LogEntry | int, str]] = []
    for info, items in fetched:
        item = items[0]
        held = sealed[item.version - first]
        if isinstance(item, LogEntry) and held.write_id == item.write_id:
            targets.append((item, info.etag))
    return targets
