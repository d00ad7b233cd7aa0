"""Reading a log: one listing, then every object it needs in one round of GETs.

A reader lists the log's entries and segments (from a segment below the top it last saw,
where the store's listing can start mid-way), fetches the newest objects from the state
base up in one parallel round, and folds their state patches. Entries read before are
taken from memory while the listing names the same object (its ETag); a version whose
entry a seal vacated meanwhile is read from its segment after listing again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from stashpoint.cache import Lru
from stashpoint.codec import Codec
from stashpoint.errors import (
    ArchivedObject,
    CheckpointNotFound,
    InvalidArgument,
    InvalidPayload,
    StashpointError,
    StorageUnavailable,
)
from stashpoint.logs import log_ids
from stashpoint.logs.bounds import (
    COLD_LISTING_PAGE,
    FETCH_BATCH,
    KNOWN_TOPS,
    READ_CACHE_BYTES,
    READ_ENTRIES,
    RELISTS,
    SEALED_BYTES,
    TAIL_GUESS,
    WRITTEN_ENTRIES,
    T,
)
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
    entry_from_document,
    is_vacated,
    pack_start,
    parse_entry_name,
    parse_segment_name,
    resolve,
    segment_start,
    state_base,
    vacated_from_document,
)
from stashpoint.logs.head import (
    NO_SNAPSHOT,
    LogHead,
    ended_error,
)
from stashpoint.logs.listing import (
    Gap,
    Item,
    LogListing,
    ReadAhead,
    Source,
    Vanished,
    add_entries,
    add_segment,
    backwards,
    top_sources,
)
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Parallel, Steps, ask
from stashpoint.stores.objects import (
    LIST_PAGE,
    GetObject,
    KeyPage,
    ListKeys,
    ObjectInfo,
)


class LogReader:
    """The reading half of a namespace's logs: listings, heads, entries, tails, ids."""

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
        seal_on_append: bool = True,
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
        self.seal_on_append = seal_on_append
        """Whether the append that completes a range of `SEGMENT_SPAN` versions seals it
        before it returns; off, the range is noted in `due_seals` for its owner to seal
        later (`LogSteps.seal_due`: the LangGraph saver's background work) or `gc`."""
        self.due_seals: Lru[str, tuple[tuple[int, ...], int]] = Lru(KNOWN_TOPS)
        """Logs with ranges due to be sealed: (the versions that completed them, their
        life's base), by log id; bounded (what it forgets, `gc` seals)."""
        self._tops: Lru[str, int] = Lru(KNOWN_TOPS)
        # Entries this process wrote, by key: their stored bodies and ETags, as a GET would
        # return them. Entries are immutable, so a seal of their range, or a read of them,
        # needs no GET (an append costs one PUT, seals included). Bodies, not the entries:
        # an entry's state and records are the caller's objects, which it may change after
        # the append (the head's state, changed in place for the next append, is the
        # natural pattern), and a seal must store what was appended.
        self._written: Lru[str, ObjectInfo] = Lru(WRITTEN_ENTRIES)
        # Segments this process sealed, by key: what it wrote, which holds exactly the
        # entries (a segment found there is judged by them before it counts as sealed), so
        # its reads of the range need no GET, packed or not. Never segments it only read: a
        # damaged or planted one is replaced by the next sealer, and a reader must see that.
        self._sealed: Lru[str, ObjectInfo] = Lru(
            KNOWN_TOPS, max_weight=SEALED_BYTES, weigh=lambda info: len(info.body or b"")
        )
        # Entries this process read, by key, as stored. A read below a log's top takes one
        # from here (or from `_written`) only while its listing names the same object (its
        # ETag): an entry vacated, repaired or planted since has another ETag and is read
        # again, as is every entry of storage whose listing gives no ETag. A writer that
        # lost a race reads the head again with one GET per version written since, not one
        # per version since the last whole state. A read at a known top (`read_at_top`)
        # takes them without a listing: its GET of the key after the top shows whether
        # anything was written since, as for `_written`.
        self._read_entries: Lru[str, ObjectInfo] | None = None
        if read_cache_bytes > 0:
            self._read_entries = Lru(
                READ_ENTRIES, max_weight=read_cache_bytes, weigh=lambda i: len(i.body or b"")
            )

    def listing(
        self,
        log_id: str,
        *,
        ordered: bool = False,
        complete: bool = False,
        beside: ListKeys | None = None,
    ) -> Steps[LogListing]:
        """List a log's entries and segments (in parallel; `ordered`: entries first).

        Keys are never freed, so every version ever written is listed (a vacated one by
        its marker). When there are more entries than one page, the listing resumes after
        the last sealed version (unless `complete`): the markers of sealed versions are
        not needed to read. `beside`: a caller's listing sent in the first round (not
        with `ordered`); its page is the listing's `beside`.
        """
        log_id = check_log_id(log_id)
        entries_prefix = self.keys.entries_prefix(log_id)
        segments_prefix = self.keys.segments_prefix(log_id)
        extra: tuple[ListKeys, ...] = () if beside is None or ordered else (beside,)
        beside_page: KeyPage | None = None
        if ordered:
            entry_pages = yield from self._all_pages(entries_prefix, None)
            segment_pages = yield from self._all_pages(segments_prefix, None)
        elif not self.seeks:
            # Unordered pages, no StartAfter: every page of both, the first two at once.
            first = yield from ask(
                Parallel((ListKeys(entries_prefix), ListKeys(segments_prefix), *extra))
            )
            beside_page = first[2] if extra else None
            entry_pages = yield from self._all_pages(entries_prefix, first[0])
            segment_pages = yield from self._all_pages(segments_prefix, first[1])
        else:
            entry_pages, segment_pages, beside_page = yield from self._seeking_pages(
                log_id, complete=complete, beside=extra
            )
        listing = LogListing(log_id, beside=beside_page)
        for page in entry_pages:
            add_entries(listing, page, entries_prefix)
        for page in segment_pages:
            for key in page.keys:
                add_segment(listing, key, segments_prefix)
        if listing.top is not None:
            self._tops.put(log_id, listing.top)  # what storage says, even if lower
        return listing

    def _seeking_pages(
        self, log_id: str, *, complete: bool, beside: tuple[ListKeys, ...] = ()
    ) -> Steps[tuple[list[KeyPage], list[KeyPage], KeyPage | None]]:
        """List a log's entry and segment pages on a store that lists from a key.

        A log this process read or wrote lists from a segment before its last known top:
        on S3 a 1,000-key page costs ten times a short one, and the sealed versions before
        it are read from their segments. A log it knows nothing of lists a first page of
        `COLD_LISTING_PAGE` keys beside its segments, and a longer one resumes after the
        last sealed version. A version this skips that a read needs is a gap, and gaps are
        listed again in full. `beside`: a caller's listing sent in the first round; its
        page is returned third.
        """
        entries_prefix = self.keys.entries_prefix(log_id)
        segments_prefix = self.keys.segments_prefix(log_id)
        hint = None if complete else self._tops.get(log_id)
        start = None
        page_size = LIST_PAGE if complete else COLD_LISTING_PAGE
        if hint is not None and hint >= 2 * SEGMENT_SPAN:
            start = self.keys.entry(log_id, segment_start(hint) - SEGMENT_SPAN - 1)
            page_size = LIST_PAGE
        entries = ListKeys(entries_prefix, start_after=start, page_size=page_size)
        first = yield from ask(Parallel((entries, ListKeys(segments_prefix), *beside)))
        segment_pages = yield from self._all_pages(segments_prefix, first[1])
        entry_pages = [first[0]]
        if first[0].next_token is not None and first[0].keys and not complete:
            entry_pages += yield from self._past_sealed(log_id, first[0], segment_pages)
        if len(entry_pages) == 1:
            entry_pages = yield from self._all_pages(entries_prefix, first[0])
        return entry_pages, segment_pages, (first[2] if beside else None)

    def _past_sealed(
        self, log_id: str, first: KeyPage, segment_pages: list[KeyPage]
    ) -> Steps[list[KeyPage]]:
        """Return the entry pages after the last sealed version, when it is past `first`'s.

        None otherwise: the listing goes on page by page.
        """
        entries_prefix = self.keys.entries_prefix(log_id)
        segments_prefix = self.keys.segments_prefix(log_id)
        sealed_keys = [k for page in segment_pages for k in page.keys]
        if not sealed_keys:
            return []
        last_sealed = max(
            parse_segment_name(key[len(segments_prefix) :], key)[1] for key in sealed_keys
        )
        skip_to = self.keys.entry(log_id, last_sealed)
        if skip_to <= first.keys[-1]:
            return []
        after = yield from ask(ListKeys(entries_prefix, start_after=skip_to))
        return list((yield from self._all_pages(entries_prefix, after)))

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
        self,
        log_id: str,
        plan: Callable[[LogListing], list[Source]],
        complete: bool,
        beside: ListKeys | None = None,
    ) -> Steps[tuple[LogListing, list[Source]]]:
        """List the log and plan a read; a gap is checked again with a complete listing.

        `beside`: a caller's listing sent with the first (`listing`).
        """
        listing = yield from self.listing(log_id, ordered=complete, beside=beside)
        try:
            return listing, plan(listing)
        except Gap:
            if complete:
                raise
        listing = yield from self.listing(log_id, ordered=True)
        return listing, plan(listing)

    def _gap_error(self, log_id: str, gap: Gap) -> InvalidPayload:
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

    def _fetch(self, log_id: str, sources: list[Source]) -> Steps[list[Item]]:
        """Read `sources` in parallel (`FETCH_BATCH` at a time); return what they hold."""
        items: list[Item] = []
        for _, decoded in (yield from self._fetch_objects(log_id, sources)):
            items.extend(decoded)
        return items

    def _fetch_objects(
        self, log_id: str, sources: list[Source], *, kept: bool = False
    ) -> Steps[list[tuple[ObjectInfo, list[Item]]]]:
        """Read `sources` in parallel; return each object with what it holds, in order.

        With `kept`, entries this process appended and has not sealed are not read again:
        their bodies are kept (`_written`; entries never change, a sealed range is read
        from its segment). Without, an entry below the newest asked for is taken from
        memory only while its listing names the object kept (`_verified`). Reads that find
        a log's top never take it so: the top comes from the bucket, where a purge's
        tombstone or a damaged object shows.
        """
        fetched, _ = yield from self._fetch_with(log_id, sources, (), kept=kept)
        return fetched

    def _fetch_with(
        self, log_id: str, sources: list[Source], also: Sequence[GetObject], *, kept: bool = False
    ) -> Steps[tuple[list[tuple[ObjectInfo, list[Item]]], list[ObjectInfo | None]]]:
        """`_fetch_objects`, with the GETs `also` sent in its first round; their answers."""
        newest = max((source.last for source in sources), default=-1)
        known = [
            self._kept(source) if kept else self._verified(source, newest) for source in sources
        ]
        unknown = [s for s, info in zip(sources, known, strict=True) if info is None]
        got: list[ObjectInfo | None] = []
        also_got: list[ObjectInfo | None] = []
        for start in range(0, max(len(unknown), 1), FETCH_BATCH):
            window = unknown[start : start + FETCH_BATCH]
            extra = also if start == 0 else ()
            if window or extra:
                requests = [*(self._get(s.key) for s in window), *extra]
                answered = yield from self._gets(log_id, requests)
                got.extend(answered[: len(window)])
                also_got.extend(answered[len(window) :])
        answers = iter(got)
        fetched: list[tuple[ObjectInfo, list[Item]]] = []
        for source, body in zip(sources, known, strict=True):
            info = body if body is not None else next(answers)
            if info is None:
                raise Vanished(source.key)
            decoded = yield from self._decode(log_id, source, info)
            if body is None:
                self._remember_read(source, info)
            fetched.append((info, decoded))
        return fetched, also_got

    def _verified(self, source: Source, newest: int) -> ObjectInfo | None:
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

    def _remember_read(self, source: Source, info: ObjectInfo) -> None:
        """Keep an entry read (and decoded) from storage, by its ETag, for later reads."""
        if self._read_entries is not None and not source.sealed and info.etag and info.body:
            self._read_entries.put(source.key, ObjectInfo(etag=info.etag, body=info.body))

    def _forget_bodies(self, log_id: str) -> None:
        """Drop every stored body of `log_id` this process keeps (its payload is purged)."""
        prefixes = (self.keys.entries_prefix(log_id), self.keys.segments_prefix(log_id))
        for kept in (self._read_entries, self._written, self._sealed):
            if kept is not None:
                kept.forget_where(lambda key: key.startswith(prefixes))

    def _read_kept(self, source: Source) -> ObjectInfo | None:
        """Return the stored body of entry `source` if this process read it (any ETag)."""
        return None if self._read_entries is None else self._read_entries.get(source.key)

    def _kept(self, source: Source) -> ObjectInfo | None:
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

    def _decode(self, log_id: str, source: Source, info: ObjectInfo) -> Steps[list[Item]]:
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
        was sealed since the listing (its segment holds it): `Vanished`, so the read
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
                    raise Vanished(self.keys.entry(log_id, item.version))
                raise InvalidPayload(
                    f"version {item.version} of log {log_id!r} is vacated ({item.reason}) but "
                    f"the log's life starts at {base}",
                    object_name=self.keys.entry(log_id, item.version),
                )
            entries.append(item)
        return entries

    def _relisting(self, log_id: str, read: Callable[[bool], Steps[T]]) -> Steps[T]:
        """Run `read(complete)`; list again, completely, when objects changed under it.

        Up to `RELISTS` times; a gap that persists in a complete listing is a missing
        object.
        """
        for attempt in range(1, RELISTS + 1):
            try:
                return (yield from read(attempt > 1))
            except Vanished as gone:
                if attempt == RELISTS:
                    raise StorageUnavailable(
                        "log objects keep changing while being read", object_name=str(gone)
                    ) from None
            except Gap as gap:
                if attempt == RELISTS:
                    raise self._gap_error(log_id, gap) from None
        raise AssertionError("unreachable")

    def _read(
        self, log_id: str, plan: Callable[[LogListing], list[Source]]
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

    def written_after(self, log_id: str, version: int) -> Steps[bool | None]:
        """Whether anything was written to the log after `version`, in one short listing.

        Keys are never freed: no entry key after `version`'s means nothing was appended,
        deleted, purged or begun anew since. None where listings cannot start after a key
        (`seeks` off): the caller reads the head instead.
        """
        if not self.seeks:
            return None
        page = yield from ask(
            ListKeys(
                self.keys.entries_prefix(check_log_id(log_id)),
                page_size=1,
                start_after=self.keys.entry(log_id, version),
            )
        )
        return bool(page.keys)

    def head_with(
        self,
        log_id: str,
        wanted: Callable[[LogHead], Iterable[int]],
        beside: Callable[[LogHead], Sequence[GetObject]] | None = None,
        ahead: ReadAhead | None = None,
    ) -> Steps[tuple[LogHead, dict[int, LogEntry], list[ObjectInfo | None]]]:
        """Return the head, the versions `wanted(head)` names, by version, and `beside`'s.

        One listing, the newest objects, then every wanted version in one parallel round
        (a sealed segment read once for all the versions it holds), with the objects
        `beside(head)` asks for (a caller's objects the head names) in the same round.
        `ahead`: what the caller guesses from the listing, fetched with the newest objects
        (`ReadAhead`); when the guess holds, nothing is left for a third round. States of
        the wanted entries may be left as stored (a patch): they are read for their
        records.
        """

        def read(
            complete: bool,
        ) -> Steps[tuple[LogHead, dict[int, LogEntry], list[ObjectInfo | None]]]:
            guessing = ahead if not complete else None
            listing, sources = yield from self._planned(
                log_id,
                self._top_plan(log_id),
                complete,
                None if guessing is None else guessing.listed,
            )
            guessed: list[Item] = []
            if guessing is None:
                items = yield from self._fetch(log_id, sources)
            else:
                items, guessed = yield from self._fetch_ahead(log_id, listing, sources, guessing)
            name = self.keys.entries_prefix(log_id)
            newest = self._current(log_id, items, ended=True)
            check_chain(newest, name)
            newest = resolve(newest, UNKNOWN_STATE, name)
            head = LogHead.of(newest[-1])
            found = {entry.version: entry for entry in newest}
            if not head.ended:
                for entry in self._current(log_id, guessed, head.base):
                    found.setdefault(entry.version, entry)
            missing = sorted(
                {v for v in wanted(head) if v not in found and head.base <= v <= head.version}
            )
            plan: dict[str, Source] = {}
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
                    raise Vanished(source.key)
                older.extend((yield from self._decode(log_id, source, info)))
                self._remember_read(source, info)
            for entry in self._current(log_id, older, head.base):
                found.setdefault(entry.version, entry)
            return head, found, infos[len(sources) :]

        return (yield from self._relisting(log_id, read))

    def _fetch_ahead(
        self, log_id: str, listing: LogListing, sources: list[Source], ahead: ReadAhead
    ) -> Steps[tuple[list[Item], list[Item]]]:
        """Read the newest objects `sources` with what `ahead` guesses, in one round.

        Returns what `sources` hold, and the live entries of the guessed versions that
        were found and read (a guess may miss: a version sealed or vacated since, an
        object that does not decode is left to the read that needs it, which judges it).
        The caller's objects go to `ahead.fetched`.
        """
        versions, objects = ahead.guess(listing)
        top = -1 if listing.top is None else listing.top
        guessed = [
            source  # not those held in memory: taken from there when the head names them
            for source in listing.guessed(versions, {s.key for s in sources}, FETCH_BATCH)
            if not (self._kept(source) or self._verified(source, top))
        ]
        fetched, infos = yield from self._fetch_with(
            log_id, sources, [*(self._get(source.key) for source in guessed), *objects]
        )
        items = [item for _, decoded in fetched for item in decoded]
        answers = iter(infos)
        extra: list[Item] = []
        for source in guessed:
            info = next(answers)
            if info is None or not info.body:
                continue
            try:
                decoded = yield from self._decode(log_id, source, info)
            except StashpointError:
                continue
            extra.extend(item for item in decoded if isinstance(item, LogEntry))
            self._remember_read(source, info)
        for request in objects:
            ahead.fetched[request.key] = next(answers)
        return items, extra

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
        source = Source(self.keys.entry(log_id, version), version, version, False)
        infos = yield from self._gets(
            log_id, [self._get(source.key), self._get(self.keys.entry(log_id, version + 1))]
        )
        found, beyond = infos
        if found is None or beyond is not None or not found.body:
            return None  # not written (the race was lost to something else), or went on
        items = yield from self._decode(log_id, source, found)
        entry = items[0] if items else None
        if not isinstance(entry, LogEntry) or not _follows(entry, after):
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
        plan: dict[str, Source] = {}
        items: list[Item] = []
        held: set[str] = set()  # segments this process sealed, read from memory
        for version in sorted({top, *wanted}):
            if 0 <= version <= top:
                source = yield from self._at_top(log_id, top, version, items, held)
                if source is not None:
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
        held_head = _head_among(items, top)
        if held_head is None:
            return None
        return (*held_head, infos[1 + len(sources) :])

    def _at_top(
        self, log_id: str, top: int, version: int, items: list[Item], held: set[str]
    ) -> Steps[Source | None]:
        """Add what this process holds of `version` to `items`; else return where to read it.

        What this process wrote or read of the log: entries never change, and the round's
        GET of the key after `top` shows whether anything came since (a purge's tombstone,
        a deletion, another writer's append), as for `_written`. A version sealed at `top`
        is read from its segment (one this process sealed, from memory, once: `held`).
        """
        entry_source = Source(self.keys.entry(log_id, version), version, version, False)
        kept = self._kept(entry_source) or self._read_kept(entry_source)
        if kept is not None:
            items.extend((yield from self._decode(log_id, entry_source, kept)))
            return None
        if version >= segment_start(top):
            return entry_source
        first = segment_start(version)
        source = Source(self.keys.segment(log_id, first), first, first + SEGMENT_SPAN - 1, True)
        sealed = self._kept(source)
        if sealed is None:
            return source
        if source.key not in held:
            held.add(source.key)
            items.extend((yield from self._decode(log_id, source, sealed)))
        return None

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

        def plan(listing: LogListing) -> list[Source]:
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
        first, `READ_WINDOW` at a time in parallel (a listing and, for a recent tail, one
        round of GETs). `since(head)` is the first record position
        wanted at all (an agent's current transcript start): nothing before it is read.
        """
        if type(records) is not int or records < 0:
            raise InvalidArgument("records must be an int >= 0", object_name=log_id)

        def read(complete: bool) -> Steps[tuple[LogHead, list[LogEntry]]]:
            # Versions rarely hold no record: fetching as many versions as records wanted
            # usually finishes a tail in this first round.
            wanted = min(records, TAIL_GUESS)
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
                window = backwards(listing, collected[0].version - 1, head.base)
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
            items = yield from self._decode(log_id, Source(key, version, version, False), info)
            return items[0]
        segment, pack = segment_start(version), pack_start(version)
        for source in (
            Source(self.keys.segment(log_id, segment), segment, segment + SEGMENT_SPAN - 1, True),
            Source(self.keys.pack(log_id, pack), pack, pack + PACK_SPAN - 1, True),
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
        for start in range(0, len(wanted), FETCH_BATCH):
            window = wanted[start : start + FETCH_BATCH]
            sources = [Source(self.keys.entry(i, v), v, v, False) for i, v in window]
            infos = yield from ask(Parallel(tuple(self._get(s.key) for s in sources)))
            for (log_id, version), source, info in zip(window, sources, infos, strict=True):
                if info is None:
                    items.append((yield from self.read_version(log_id, version)))
                else:
                    items.append((yield from self._decode(log_id, source, info))[0])
        return items

    def _base(self, version: int) -> int:
        return state_base(version, self.full_state_every)

    def _top_plan(self, log_id: str, versions: int = 0) -> Callable[[LogListing], list[Source]]:
        return lambda listing: top_sources(listing, log_id, self._base, versions)

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

    def list_page(
        self, prefix: str, limit: int, cursor: str | None
    ) -> Steps[tuple[list[str], str | None]]:
        """Return up to `limit` log ids after `cursor` starting with `prefix`; and a cursor.

        See `log_ids.list_page`.
        """
        return (yield from log_ids.list_page(self.keys, self.seeks, prefix, limit, cursor))

    def list_tops(self, prefix: str = "") -> Steps[dict[str, int | None]]:
        """Return the ids `list_ids` returns, each with its newest version when known.

        See `log_ids.list_tops`.
        """
        return (yield from log_ids.list_tops(self.keys, self.seeks, prefix))

    def list_ids(self, prefix: str = "") -> Steps[list[str]]:
        """Return the ids of logs with entries in this namespace that start with `prefix`."""
        return (yield from log_ids.list_ids(self.keys, self.seeks, prefix))


def _follows(entry: LogEntry, after: LogHead) -> bool:
    """Whether a live `entry` is the version right after `after`, of the same life.

    Its write id and records follow, and a patch has `after`'s state to apply to.
    """
    if entry.ended or after.ended:
        return False
    if entry.prev is not None and entry.prev != after.write_id:
        return False
    if not entry.starts_life and entry.first_record != after.next_record:
        return False
    return entry.patch is None or after.snapshot is not NO_SNAPSHOT


def _head_among(items: list[Item], top: int) -> tuple[LogHead, dict[int, LogEntry]] | None:
    """Return the head at `top` and the entries of its life up to it, from what was read.

    None when version `top` is not a live entry.
    """
    newest = next((item for item in items if item.version == top), None)
    if not isinstance(newest, LogEntry) or newest.ended:
        return None
    head = LogHead.of(newest)
    found = {
        item.version: item
        for item in items
        if isinstance(item, LogEntry) and head.base <= item.version <= top
    }
    return head, found
