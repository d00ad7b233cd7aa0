"""The run index as steps: what to write after a storage write, how to page listings.

Index writes always follow the storage write they describe and are conditional on the
run revision, so a crash leaves the index behind, never ahead, and a stale writer never
regresses it. Listings page with an opaque cursor over index queries only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from stashpoint.errors import InvalidArgument, StashpointError
from stashpoint.index.requests import (
    DeleteItem,
    GetItem,
    GetPartition,
    PutItems,
    QueryItems,
    ReplaceItems,
)
from stashpoint.index.schema import BY_GRAPH, BY_NAMESPACE, BY_STATUS, TTL_ATTRIBUTE
from stashpoint.runs import indexing as mapping
from stashpoint.runs.models import AttemptRow, AttemptStatus, Page, RunHead, RunRow, RunStatus
from stashpoint.steps import Steps, ask

log = logging.getLogger("stashpoint.index")

Row = TypeVar("Row", RunRow, AttemptRow)

_MARKER_PK = "meta#progress"

MAX_PAGE = 1000
"""Largest page a listing returns."""


class RunIndex:
    """Keeps the run/attempt index in step with storage, and answers listings from it."""

    def __init__(self, ttl_seconds: int | None = None) -> None:
        self.ttl_seconds = ttl_seconds
        """Retention of index items (DynamoDB TTL), None to keep them."""

    def _expires_at(self) -> int | None:
        return None if self.ttl_seconds is None else int(time.time()) + self.ttl_seconds

    def items(
        self, head: RunHead, attempts: Iterable[AttemptRow], revision: int
    ) -> tuple[dict[str, Any], ...]:
        """Return the run's item at `revision` and the items of `attempts`."""
        return mapping.items_for(head, attempts, revision, self._expires_at())

    def read_marker(self, name: str) -> Steps[str | None]:
        """Return the progress a resumable job (reindex) recorded under `name`."""
        item = yield from ask(GetItem(_MARKER_PK, name))
        return None if item is None else str(item["position"])

    def write_marker(self, name: str, position: str) -> Steps[None]:
        """Record the progress of a resumable job."""
        marker = {"pk": _MARKER_PK, "sk": name, "revision": time.time_ns(), "position": position}
        yield from ask(PutItems((marker,)))

    def clear_marker(self, name: str) -> Steps[None]:
        """Forget a finished job's progress."""
        yield from ask(DeleteItem(_MARKER_PK, name))

    def record(self, head: RunHead, touched: Iterable[AttemptRow], revision: int) -> Steps[bool]:
        """Write the run's item and those of the attempts a transition touched.

        One item, or two for a transition of one attempt. Returns False if the index lags
        instead: an index failure does not undo or fail the storage write before it
        (storage is the truth); it is logged, and `reindex` or the next `load_run` repairs
        the index.
        """
        try:
            yield from ask(PutItems(self.items(head, touched, revision)))
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
        by_sort = {str(item["sk"]): item for item in stored}
        fixes: list[tuple[dict[str, Any], int | None]] = []
        ahead: list[tuple[dict[str, Any], int | None]] = []
        for item in self.items(head, attempts, revision):
            have = by_sort.pop(str(item["sk"]), None)
            if have is not None and _same(have, item):
                continue
            have_revision = None if have is None else int(have["revision"])
            if have_revision is not None and have_revision > revision:
                ahead.append((dict(item), have_revision))
            else:
                fixes.append((dict(item), have_revision))
        if ahead:
            current = yield from confirm()
            if current is not None and current <= revision:
                fixes += ahead  # storage has not moved: those revisions are corrupt
        if fixes:
            yield from ask(ReplaceItems(tuple(fixes)))
        for orphan in by_sort.values():  # in the index, unknown to storage
            yield from ask(DeleteItem(str(orphan["pk"]), str(orphan["sk"])))
        return len(fixes) + len(by_sort)

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
        """Return one page of runs, newest first."""
        filters: dict[str, str] = {}
        if graph_name is not None:
            index, partition = BY_GRAPH.name, mapping.graph_partition(namespace, graph_name)
            if status is not None:
                filters["status"] = status.value
        elif status is not None:
            index, partition = BY_STATUS.name, mapping.status_partition(namespace, status)
        else:
            index, partition = BY_NAMESPACE.name, mapping.namespace_partition(namespace)
        since_key = None if since is None else mapping.sortable(since)
        return (
            yield from self._page(
                index, partition, since_key, filters, limit, cursor, mapping.run_row
            )
        )

    def list_attempts(
        self,
        *,
        namespace: str,
        status: AttemptStatus,
        since: datetime | None,
        limit: int,
        cursor: str | None,
    ) -> Steps[Page[AttemptRow]]:
        """Return one page of attempts in a status, most recently started first."""
        partition = mapping.attempt_status_partition(namespace, status)
        since_key = None if since is None else mapping.sortable(since)
        return (
            yield from self._page(
                BY_STATUS.name, partition, since_key, {}, limit, cursor, mapping.attempt_row
            )
        )

    def list_abandoned(
        self, *, namespace: str, before: datetime, limit: int, cursor: str | None
    ) -> Steps[Page[AttemptRow]]:
        """Return running attempts whose lease ran out before `before`, latest expiry first.

        Only expired leases are read (a sparse index keyed by expiry), never every running
        attempt.
        """
        partition = mapping.lease_partition(namespace)
        return (
            yield from self._page(
                BY_NAMESPACE.name, partition, None, {}, limit, cursor, mapping.attempt_row,
                below=mapping.sortable(before),
            )
        )  # fmt: skip

    def _page(
        self,
        index: str,
        partition: str,
        since: str | None,
        filters: dict[str, str],
        limit: int,
        cursor: str | None,
        to_row: Callable[[dict[str, Any]], Row],
        *,
        below: str | None = None,
    ) -> Steps[Page[Row]]:
        if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
            raise InvalidArgument(f"limit must be an int from 1 to {MAX_PAGE}, not {limit!r}")
        gsi = {g.name: g for g in (BY_GRAPH, BY_STATUS, BY_NAMESPACE)}[index]
        after = mapping.decode_cursor(cursor)
        found: list[dict[str, Any]] = []
        while len(found) < limit:
            # With filters, a page can come back short: ask for a full page each time.
            want = limit if filters else limit - len(found)
            page = yield from ask(
                QueryItems(index, partition, want, after, since, filters, sort_below=below)
            )
            found.extend(page.items)
            after = page.last_keys
            if after is None:
                break
        if len(found) > limit:
            found = found[:limit]
            last = found[-1]
            after = {k: last[k] for k in ("pk", "sk", gsi.partition_key, gsi.sort_key)}
        return Page[Row](items=[to_row(i) for i in found], cursor=mapping.encode_cursor(after))


def _same(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a stored item says what storage says (its revision and retention aside)."""
    ignore = ("revision", TTL_ATTRIBUTE)
    keys = (set(stored) | set(wanted)) - set(ignore)
    return all(stored.get(k) == wanted.get(k) for k in keys)
