"""The run index as steps: what to write after a storage write, how to page listings.

Index writes always follow the storage write they describe and are conditional on the
run revision, so a crash leaves the index behind, never ahead, and a stale writer never
regresses it. Listings page with an opaque cursor over index queries only.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from stashpoint.errors import InvalidArgument, StashpointError, described
from stashpoint.index.requests import (
    DeleteItem,
    Expected,
    GetItem,
    GetItems,
    GetPartition,
    PutItems,
    QueryItems,
    ReplaceItems,
)
from stashpoint.index.schema import (
    ATTEMPTS_BY_STATUS,
    RUNS_BY_GRAPH,
    RUNS_BY_NAMESPACE,
    RUNS_BY_STATUS,
    SECONDARY_INDEXES,
    SHARDS,
)
from stashpoint.runs import indexing as mapping
from stashpoint.runs.models import (
    AttemptRow,
    Page,
    RunHead,
    RunRow,
)
from stashpoint.status import AttemptStatus, RunStatus
from stashpoint.steps import Parallel, Steps, ask

log = logging.getLogger("stashpoint.index")

Row = TypeVar("Row", RunRow, AttemptRow)

_MARKER_PK = "meta#progress"
_WAKE_PK = "wake#"
"""Partition of a waker's marks (`claim_wake`): one item per run and wake time."""

MAX_PAGE = 1000
"""Largest page a listing returns."""

_GSI = {gsi.name: gsi for gsi in SECONDARY_INDEXES}


class RunIndex:
    """Keeps the run/attempt index in step with storage, and answers listings from it."""

    def __init__(self, ttl_seconds: int | None = None, *, plain_errors: bool = True) -> None:
        self.ttl_seconds = ttl_seconds
        """Retention of index items (DynamoDB TTL), None to keep them."""
        self.plain_errors = plain_errors
        """Whether error text is listed (False on an encrypted stash: kind and length)."""

    def _expires_at(self) -> int | None:
        return None if self.ttl_seconds is None else int(time.time()) + self.ttl_seconds

    def items(
        self,
        head: RunHead,
        attempts: Iterable[AttemptRow],
        revision: int,
        *,
        before: RunHead | None = None,
    ) -> tuple[dict[str, Any], ...]:
        """Return the run's item at `revision` and the items of `attempts`.

        The run's item is left out if it lists nothing new since `before`.
        """
        return mapping.items_for(
            head, attempts, revision, self._expires_at(), before=before, plain=self.plain_errors
        )

    def read_marker(self, name: str) -> Steps[str | None]:
        """Return the progress a resumable job (reindex) recorded under `name`."""
        item = yield from ask(GetItem(_MARKER_PK, name))
        return None if item is None else str(item["position"])

    def write_marker(self, name: str, position: str) -> Steps[None]:
        """Record the progress of a resumable job."""
        marker = {"pk": _MARKER_PK, "sk": name, "revision": time.time_ns(), "position": position}
        yield from ask(PutItems((marker,)))

    def claim_wake(
        self, run_id: str, wake_at: datetime, now: datetime, every: float
    ) -> Steps[int | None]:
        """Claim this `every`-second window to send the run in; None if it is taken.

        One conditional write (`PutItems` writes only over a lower revision): the revision
        is the number of the `every`-second window `now` falls in, so of wakers racing in
        one window exactly one item is written, and the next window may send again (a
        wake lost on its way is sent once more). The item expires two days on.
        """
        window = int(now.timestamp() // every)
        item = {
            "pk": f"{_WAKE_PK}{run_id}",
            "sk": wake_at.isoformat(),
            "revision": window,
            "expires_at": int(now.timestamp()) + 2 * 86_400,
        }
        return window if (yield from ask(PutItems((item,)))) == 1 else None

    def clear_marker(self, name: str) -> Steps[None]:
        """Forget a finished job's progress."""
        yield from ask(DeleteItem(_MARKER_PK, name))

    def record(
        self,
        head: RunHead,
        touched: Iterable[AttemptRow],
        revision: int,
        *,
        before: RunHead | None = None,
    ) -> Steps[bool]:
        """Write the run's item and those of the attempts a transition touched.

        One item, or two for a transition of one attempt (one for a heartbeat: the run's
        item would list the same as at `before`). Returns False if the index lags
        instead: an index failure does not undo or fail the storage write before it
        (storage is the truth); it is logged, and `reindex` or the next `load_run` repairs
        the index.
        """
        try:
            yield from ask(PutItems(self.items(head, touched, revision, before=before)))
        except StashpointError as exc:
            log.warning("index write for run %s failed; index lags: %s", head.run_id, exc)
            return False
        return True

    def repair(
        self,
        head: RunHead,
        attempts: Iterable[AttemptRow],
        revision: int,
        confirm: Callable[[], Steps[int | None]],
    ) -> Steps[int]:
        """Make the run's items equal to what storage says; return how many were fixed.

        One consistent read of the run's partition (the run item and every attempt item),
        compared field by field with the items of `head` and all its `attempts` at
        `revision`: a stale or wrong
        item is replaced over exactly the revision read (never over a concurrent writer's
        newer item), a missing one created, one storage does not know deleted. An item
        claiming a revision newer than storage's is trusted only if `confirm()` (a fresh
        read of the head's revision) says storage has moved on; otherwise it is corrupt and
        replaced too.
        """
        stored = yield from ask(GetPartition(mapping.run_pk(head.run_id)))
        by_sort = {str(item.get("sk")): item for item in stored}
        fixes, ahead = _judged(self.items(head, attempts, revision), by_sort, revision)
        # Items storage did not know when it was read: deleted, or written since by a
        # concurrent transition (an attempt just recorded: its item is newer than the
        # storage read). Only those no newer than the read are removed for sure.
        orphans, later = _orphans(by_sort.values(), revision)
        # Storage has not moved on since the read: the items claiming later revisions are
        # corrupt (asked only when there is one).
        unmoved = False
        if ahead or later:
            unmoved = _at_most(revision, (yield from confirm()))
        if unmoved:
            fixes += ahead  # storage has not moved: those revisions are corrupt
        if fixes:
            yield from ask(ReplaceItems(tuple(fixes)))
        doomed = orphans + later if unmoved else orphans  # (then later came from nowhere)
        yield from _delete_judged(doomed)
        return len(fixes) + len(doomed)

    def list_runs(
        self,
        *,
        namespace: str,
        graph_name: str | None,
        status: RunStatus | None,
        since: datetime | None,
        limit: int,
        cursor: str | None,
    ) -> Steps[Page[RunRow]]:
        """Return one page of runs, newest first (created), every shard queried at once.

        A graph's runs in every status are its runs in each status, merged.
        """
        if graph_name is not None:
            statuses = list(RunStatus) if status is None else [status]
            index = RUNS_BY_GRAPH.name
            partitions = [
                mapping.graph_partition(namespace, graph_name, s, shard)
                for s in statuses
                for shard in range(SHARDS)
            ]
        elif status is not None:
            index = RUNS_BY_STATUS.name
            partitions = mapping.every_shard(partial(mapping.status_partition, namespace, status))
        else:
            index = RUNS_BY_NAMESPACE.name
            partitions = mapping.every_shard(partial(mapping.namespace_partition, namespace))
        since_key = None if since is None else mapping.sortable(since)
        return (yield from self._page(index, partitions, limit, cursor, mapping.run_row, since_key))

    def list_attempts(
        self,
        *,
        namespace: str,
        status: AttemptStatus,
        since: datetime | None,
        limit: int,
        cursor: str | None,
    ) -> Steps[Page[AttemptRow]]:
        """Return one page of attempts in a status, most recently started first.

        Running attempts with a lease sort by lease expiry among the others (the latest
        moment they are known to be alive). Completed attempts are not indexed.
        """
        if status in mapping.UNLISTED_ATTEMPTS:
            raise InvalidArgument(
                f"{status.value} attempts are not indexed (most attempts end so, and a GSI "
                "write each is not worth it): list runs, then read a run's attempts"
            )
        partitions = mapping.every_shard(
            partial(mapping.attempt_status_partition, namespace, status)
        )
        if status is AttemptStatus.RUNNING:
            partitions += mapping.every_shard(partial(mapping.lease_partition, namespace))
        since_key = None if since is None else mapping.sortable(since)
        return (
            yield from self._page(
                ATTEMPTS_BY_STATUS.name, partitions, limit, cursor, mapping.attempt_row, since_key
            )
        )

    def list_abandoned(
        self, *, namespace: str, before: datetime, limit: int, cursor: str | None
    ) -> Steps[Page[AttemptRow]]:
        """Return running attempts whose lease ran out before `before`, latest expiry first.

        Only expired leases are read (partitions keyed by expiry), never every running
        attempt.
        """
        return (
            yield from self._page(
                ATTEMPTS_BY_STATUS.name,
                mapping.every_shard(partial(mapping.lease_partition, namespace)), limit, cursor,
                mapping.attempt_row, None, below=mapping.sortable(before),
            )
        )  # fmt: skip

    def list_due(
        self, *, namespace: str, now: datetime, limit: int, cursor: str | None
    ) -> Steps[Page[RunRow]]:
        """Return waiting runs due at `now` (wake time <= now), latest wake time first.

        Only due runs are read (waiting runs are keyed by wake time).
        """
        return (
            yield from self._page(
                RUNS_BY_STATUS.name, mapping.due_partitions(namespace), limit, cursor,
                mapping.run_row, None, below=mapping.due_bound(now),
            )
        )  # fmt: skip

    def _page(
        self,
        index: str,
        partitions: list[str],
        limit: int,
        cursor: str | None,
        to_row: Callable[[dict[str, Any]], Row],
        since: str | None,
        *,
        below: str | None = None,
    ) -> Steps[Page[Row]]:
        """Merge one page, newest first, from every partition (shard) of a listing.

        One round of queries, all at once, each asking a shard for a whole page below the
        cursor's key; a shard that answers short but is not exhausted is asked again, so
        the newest `limit` of the union are exact. Then one batch read of the
        page's items (the GSIs hold keys only), dropping any that left the listing since
        (the index is eventually consistent; storage decides).
        """
        _check_limit(limit)
        sort_key = _GSI[index].sort_key
        query = mapping.fingerprint(index, partitions, since)
        after, done = mapping.decode_cursor(cursor, query)
        live = [n for n in range(len(partitions)) if n not in done]
        asked = _Asking(index, partitions, since, below)
        pages = yield from ask(Parallel(tuple(asked(n, after, limit) for n in live)))
        found: dict[int, tuple[list[dict[str, Any]], bool]] = {}
        for n, page in zip(live, pages, strict=True):
            found[n] = yield from _filled(asked, n, page, limit, sort_key, after)
        merged = _newest(found, sort_key, limit)
        # Every shard answered a whole page or all it has, so the page is the newest
        # `limit` of them all, and every shard goes on below its last key (sort keys end
        # in a unique id: no two are equal). A shard whose items were all taken and that
        # has no more is done.
        next_cursor = _next_cursor(query, merged, found, done, len(partitions))
        rows = yield from _fresh_rows(merged, partitions, _GSI[index].partition_key, to_row)
        return Page[Row](items=rows, cursor=next_cursor)


_Fix = tuple[dict[str, Any], Expected]
"""An item to write, over exactly the revision judged (None: none there)."""


def _judged(
    items: Iterable[Mapping[str, Any]], by_sort: dict[str, dict[str, Any]], revision: int
) -> tuple[list[_Fix], list[_Fix]]:
    """Compare a run's items with those stored (`by_sort`, emptied of those compared).

    Returns the items to fix, and those whose stored revision is ahead of `revision`
    (fixed only if storage has not moved on). An item that says the same is left alone,
    unless its revision is no number.
    """
    fixes: list[_Fix] = []
    ahead: list[_Fix] = []
    for item in items:
        have = by_sort.pop(str(item["sk"]), None)
        have_revision = None if have is None else mapping.revision_of(have)
        numbered = isinstance(have_revision, int)
        if have is not None and numbered and mapping.same_listing(have, item):
            continue
        if isinstance(have_revision, int) and have_revision > revision:
            ahead.append((dict(item), have_revision))
        else:
            fixes.append((dict(item), have_revision))
    return fixes, ahead


def _check_limit(limit: Any) -> None:
    if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit must be an int from 1 to {MAX_PAGE}, not {described(limit)}")


@dataclass(frozen=True)
class _Asking:
    """Makes the query of one shard of a listing, below the listing's bounds."""

    index: str
    """The secondary index queried."""
    partitions: list[str]
    """The listing's shards."""
    since: str | None
    """The lowest sort key wanted."""
    below: str | None
    """Only sort keys below it."""

    def __call__(self, n: int, above: str | None, want: int) -> QueryItems:
        """Return the query of shard `n` for `want` items below `above` (and `below`)."""
        upper = min((b for b in (self.below, above) if b is not None), default=None)
        return QueryItems(self.index, self.partitions[n], want, self.since, upper)


def _filled(
    asked: _Asking, n: int, page: Any, limit: int, sort_key: str, after: str | None
) -> Steps[tuple[list[dict[str, Any]], bool]]:
    """Return shard `n`'s items for a page (asked again while short with more behind it)."""
    items, more = list(page.items), page.more
    while more and len(items) < limit:  # rare: a short page with more behind it
        above = str(items[-1][sort_key]) if items else after
        extra = yield from ask(asked(n, above, limit - len(items)))
        items, more = items + extra.items, extra.more
    return items, more


_Merged = list[tuple[str, int, dict[str, Any]]]
"""A page's items, newest first: (sort key, shard, item)."""


def _newest(
    found: dict[int, tuple[list[dict[str, Any]], bool]], sort_key: str, limit: int
) -> _Merged:
    """Return the newest `limit` items of every shard's, newest first."""
    return sorted(
        ((str(item[sort_key]), n, item) for n, (items, _) in found.items() for item in items),
        key=lambda entry: entry[0],
        reverse=True,
    )[:limit]


def _fresh_rows(
    merged: _Merged,
    partitions: list[str],
    partition_key: str,
    to_row: Callable[[dict[str, Any]], Row],
) -> Steps[list[Row]]:
    """Read the page's items (one batch read) and return their rows.

    Those that left the listing since are dropped (the index is eventually consistent;
    storage decides); a malformed item is left out (`load_run` repairs it).
    """
    keys = tuple((str(item["pk"]), str(item["sk"])) for _, _, item in merged)
    fresh = (yield from ask(GetItems(keys))) if keys else []
    rows = []
    for (_, n, _), item in zip(merged, fresh, strict=True):
        if item is not None and item.get(partition_key) == partitions[n]:
            row = mapping.parsed(item, to_row)
            if row is not None:
                rows.append(row)
    return rows


def _next_cursor(
    query: str,
    merged: _Merged,
    found: dict[int, tuple[list[dict[str, Any]], bool]],
    done: set[int],
    shards: int,
) -> str | None:
    """Return the cursor of the page after `merged` (None: the listing is over).

    A shard whose items were all taken and that has no more is done.
    """
    taken = Counter(n for _, n, _ in merged)
    done = done | {n for n, (items, more) in found.items() if not more and taken[n] == len(items)}
    if not merged or len(done) == shards:
        return None
    return mapping.encode_cursor(query, merged[-1][0], done)


def _orphans(
    items: Iterable[dict[str, Any]], revision: int
) -> tuple[list[tuple[dict[str, Any], Expected]], list[tuple[dict[str, Any], Expected]]]:
    """Split the stored items no current item names by their revision.

    Those no later than `revision`, and those later (written since by a concurrent
    transition, or corrupt).
    """
    judged: list[tuple[dict[str, Any], Expected]] = [
        (item, mapping.revision_of(item)) for item in items
    ]
    later = [o for o in judged if isinstance(o[1], int) and o[1] > revision]
    return [o for o in judged if o not in later], later


def _at_most(revision: int, current: int | None) -> bool:
    """Whether storage's `current` revision (None: unknown) is no later than `revision`."""
    return current is not None and current <= revision


def _delete_judged(doomed: Sequence[tuple[dict[str, Any], Expected]]) -> Steps[None]:
    """Delete each item, conditional on the revision judged: one rewritten since stays."""
    for item, seen in doomed:
        yield from ask(DeleteItem(str(item.get("pk")), str(item.get("sk")), expected=seen))
