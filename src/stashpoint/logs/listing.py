"""What one listing of a log says, and the reads a reader plans from it.

Which object holds each version (its entry, a sealed segment, a pack), its size and ETag,
and the newest version; the plans of the newest objects, of a window backwards, and the
conflict an append that lost its version raises.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    InvalidArgument,
    InvalidId,
    described,
)
from stashpoint.logs.bounds import (
    READ_WINDOW,
)
from stashpoint.logs.format import (
    PACK_SPAN,
    SEGMENT_SPAN,
    LogEntry,
    Vacated,
    check_log_id,
    pack_start,
    parse_entry_name,
    parse_segment_name,
    segment_start,
)
from stashpoint.stores.objects import (
    GetObject,
    KeyPage,
    ListKeys,
    ObjectInfo,
)


@dataclass(frozen=True, slots=True)
class Source:
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
    beside: KeyPage | None = None
    """The first page of a caller's listing sent in the same round (`ReadAhead.listed`)."""

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

    def sealed_objects(self) -> list[Source]:
        """Return every pack and every segment no pack covers, oldest first."""
        found = [Source(k, first, first + PACK_SPAN - 1, True) for first, k in self.packs.items()]
        found += [
            Source(key, first, first + SEGMENT_SPAN - 1, True)
            for first, key in self.segments.items()
            if pack_start(first) not in self.packs
        ]
        return sorted(found, key=lambda source: source.first)

    def sources(self, start: int, stop: int) -> list[Source]:
        """Return the objects holding versions `start .. stop`, in order; refuse a gap.

        A pack is read rather than the segments it replaced (they are being deleted).
        """
        sources: list[Source] = []
        version = start
        while version <= stop:
            first = segment_start(version)
            packed = pack_start(version)
            if packed in self.packs:
                sources.append(Source(self.packs[packed], packed, packed + PACK_SPAN - 1, True))
                version = packed + PACK_SPAN
            elif first in self.segments:
                sources.append(Source(self.segments[first], first, first + SEGMENT_SPAN - 1, True))
                version = first + SEGMENT_SPAN
            elif version in self.entries:
                key = self.entries[version]
                sources.append(Source(key, version, version, False, self.etags.get(version)))
                version += 1
            else:
                raise Gap(version, self.above(version))
        return sources

    def guessed(self, versions: Collection[int], taken: set[str], most: int) -> list[Source]:
        """Return the objects holding `versions` (a reader's guess), at most `most` of them.

        Versions above the top or in no listed object are passed over (a guess may miss),
        as are objects whose key is in `taken` (read anyway); a sealed range is one object.
        """
        top = -1 if self.top is None else self.top
        found: list[Source] = []
        seen = set(taken)
        for version in sorted(set(versions)):
            if not 0 <= version <= top or len(found) >= most:
                continue
            try:
                source = self.sources(version, version)[0]
            except Gap:
                continue
            if source.key not in seen:
                seen.add(source.key)
                found.append(source)
        return found

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


Guess = Callable[[LogListing], tuple[Collection[int], Sequence[GetObject]]]
"""What a reader guesses from a log's listing: versions and objects of its own to fetch."""


@dataclass(slots=True)
class ReadAhead:
    """What a read of a log's head fetches beside the newest entry, guessed from its listing.

    A reader that lists a log learns its top in the listing's round, but what the head
    names (older versions, objects of the caller's) only from the head: one round more. A
    caller that can guess that from the listing, and from a listing of its own sent in the
    same round, gets both in the head's round (`LogReader.head_with`). A wrong guess costs
    requests, never a wrong read: what the head names and the guess missed is read in the
    next round, as without one.
    """

    listed: ListKeys | None
    """The caller's listing, sent with the log's (its page: `LogListing.beside`)."""
    guess: Guess
    """The versions (of the current life, at most the top) and the caller's objects to
    fetch with the newest entry."""
    fetched: dict[str, ObjectInfo | None] = field(default_factory=dict)
    """The caller's objects fetched, by key (None: not found)."""


class Gap(Exception):
    """A version no listed object holds (may be a listing race; checked again in full)."""

    def __init__(self, version: int, above: str | None) -> None:
        super().__init__(version)
        self.version = version
        self.above = above
        """The key of the lowest listed object above the gap."""


class Vanished(Exception):
    """A listed object changed under a reader (a seal vacated it): list again."""


Item = LogEntry | Vacated
"""What a log object holds: entries, or the marker of a vacated one."""


def add_entries(listing: LogListing, page: KeyPage, entries_prefix: str) -> None:
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


def lost_race(log_id: str, version: int, top: int | None) -> CheckpointConflict:
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


def top_sources(
    listing: LogListing, log_id: str, base: Callable[[int], int], versions: int = 0
) -> list[Source]:
    """Plan the newest objects for one round of GETs.

    From the head's state base (or, for a tail, at least `versions` versions back) to the
    head.
    """
    top = listing.top
    if top is None:
        raise CheckpointNotFound("no log with this id", object_name=log_id)
    # A read starts at a version that stores its whole state, so the patches fold.
    return listing.sources(base(max(0, min(top, top - versions + 1))), top)


def backwards(listing: LogListing, below: int, base: int) -> list[Source]:
    """Plan the (up to `READ_WINDOW`) objects ending at version `below`, oldest first."""
    sources: list[Source] = []
    version = below
    while version >= base and len(sources) < READ_WINDOW:
        source = listing.sources(version, version)[0]
        sources.append(source)
        version = source.first - 1
    sources.reverse()
    return sources


def cursor_id(cursor: str) -> str:
    """Return the log id a listing's cursor names, or refuse one no listing gave."""
    try:
        return check_log_id(cursor)
    except InvalidId:
        raise InvalidArgument(
            f"{described(cursor)} is not a cursor of this listing (pass the one a page returned)"
        ) from None


def add_segment(listing: LogListing, key: str, segments_prefix: str) -> None:
    """Add a listed segment (or pack: a whole `PACK_SPAN`) to `listing`."""
    first_version, last = parse_segment_name(key[len(segments_prefix) :], key)
    if last - first_version + 1 == PACK_SPAN:
        listing.packs[first_version] = key
    else:
        listing.segments[first_version] = key
