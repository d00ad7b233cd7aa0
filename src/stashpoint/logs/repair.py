"""Repair a log wedged by a gap: move the objects above it aside, never delete them.

A log is read from its newest whole state up to its top, so an object planted above the
real top (version 50 of a log whose writers reached 10) leaves versions 11 to 49 missing
and every read stops there. Storage that lost a real entry looks the same from the log.
No reader may guess which it is; an operator who has looked decides, and `repair` then
moves every object above the first gap to `{prefix}/quarantine/` (a copy named by the
original key and ETag, written create-only and judged by its content), and only then
deletes the original, conditional on the ETag it copied. Writers go on from the last
version below the gap. Nothing is lost: what was moved stays in quarantine until the
operator deletes it, or copies it back after restoring the missing version.
"""

from __future__ import annotations

from dataclasses import dataclass

from stashpoint.logs.format import PACK_SPAN, SEGMENT_SPAN
from stashpoint.logs.log import LogListing, LogSteps
from stashpoint.steps import Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.layout import QUARANTINE
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    GetObject,
    ObjectInfo,
    PutObject,
)
from stashpoint.stores.writes import Found


@dataclass(frozen=True)
class LogRepair:
    """What `repair_log` found and did."""

    namespace: str
    """The log namespace (`agents`, `run-logs`, `logs`, ...)."""
    log_id: str
    """The log repaired."""
    gap: int | None
    """The first version no object holds below the top, None when the log has no gap."""
    above: tuple[str, ...]
    """The keys of the objects above the gap (moved unless `dry_run`)."""
    moved: tuple[str, ...]
    """The quarantine keys the objects were copied to (empty on a dry run)."""
    kept: tuple[str, ...]
    """Objects above the gap that changed while being moved, so were left in place."""
    dry_run: bool
    """Whether nothing was written."""


def first_gap(listing: LogListing) -> int | None:
    """Return the lowest version no object holds, above the lowest one that is held.

    Versions below the first held one are a life that ended before the log's history was
    kept (older stashes freed those keys), so only a hole above it wedges a read.
    """
    spans = sorted(
        [(v, v) for v in listing.entries]
        + [(first, first + SEGMENT_SPAN - 1) for first in listing.segments]
        + [(first, first + PACK_SPAN - 1) for first in listing.packs]
    )
    if not spans:
        return None
    reached = spans[0][1]
    for first, last in spans[1:]:
        if first > reached + 1:
            return reached + 1
        reached = max(reached, last)
    return None


def above_gap(listing: LogListing, gap: int) -> list[tuple[int, str]]:
    """Return `(first version, key)` of every object above `gap`, lowest first."""
    found = [(v, key) for v, key in listing.entries.items() if v > gap]
    found += [(first, key) for first, key in listing.segments.items() if first > gap]
    found += [(first, key) for first, key in listing.packs.items() if first > gap]
    return sorted(found)


def repair_log(
    logs: LogSteps, log_id: str, *, quarantine_prefix: str, dry_run: bool
) -> Steps[LogRepair]:
    """Move the objects above a log's first gap to quarantine (see the module docstring).

    `quarantine_prefix`: the quarantine namespace's key prefix (`Layout.namespace_prefix`).
    """
    listing = yield from logs.listing(log_id, ordered=True)
    gap = first_gap(listing)
    above = [] if gap is None else above_gap(listing, gap)
    moved: list[str] = []
    kept: list[str] = []
    store_prefix = quarantine_prefix[: -len(QUARANTINE) - 1]
    if not dry_run:
        for _, key in above:
            info = yield from ask(GetObject(key))
            if info is None or info.body is None:
                continue  # gone since listed: nothing to move
            target = f"{quarantine_prefix}{key[len(store_prefix) :]}.{info.etag}"
            body = info.body
            yield from writes.create_named(
                PutObject(target, body, Create(), content_encoding=None),
                _same_bytes(body),
                logs.retry,
                what="quarantine copy",
                limit=len(body) + 1,
                refresh=False,
            )
            gone = yield from writes.delete(
                DeleteObject(key, info.etag),
                writes.judged_read_back(key, info.etag),
                logs.retry,
                what="quarantined object's delete",
            )
            if gone:
                moved.append(target)
            else:
                kept.append(key)  # rewritten since it was read: the operator looks again
    return LogRepair(
        logs.keys.namespace,
        log_id,
        gap,
        tuple(key for _, key in above),
        tuple(moved),
        tuple(kept),
        dry_run,
    )


def _same_bytes(body: bytes) -> writes.Judge:
    """Judge a quarantine copy by its content: the same bytes are this copy.

    The copy is named by the original key and ETag; anything else under that name is
    written over with ours.
    """

    def judge(info: ObjectInfo) -> Steps[Found]:
        return Found.SAME if info.body == body else Found.OTHER
        yield  # a generator, like every judge

    return judge
