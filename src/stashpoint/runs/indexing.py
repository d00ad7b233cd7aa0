"""Index mapping, written once: run state -> index items, index items -> rows, cursors.

Items hold no payloads (inputs, outputs and snapshots stay in object storage), only what
listings and status queries show.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from stashpoint.errors import InvalidArgument
from stashpoint.index.requests import MALFORMED, Malformed
from stashpoint.index.schema import (
    ATTEMPTS_BY_STATUS,
    RUNS_BY_GRAPH,
    RUNS_BY_NAMESPACE,
    RUNS_BY_STATUS,
    SHARDS,
    TTL_ATTRIBUTE,
)
from stashpoint.runs.models import (
    AttemptRow,
    RunHead,
    RunRow,
)
from stashpoint.status import AttemptStatus, RunStatus

RUN_SORT = "run"
"""Sort key of a run's own item."""
ERROR_CHARS = 512
"""Errors are cut to this length in the index (the full text stays in storage)."""
UNLISTED_ATTEMPTS = (AttemptStatus.COMPLETED,)
"""Attempt statuses in no GSI: most attempts end completed, and listing them across a
namespace is not worth a GSI write per attempt (a run's attempts are read from its log)."""

T = TypeVar("T")

log = logging.getLogger("stashpoint")


def sortable(moment: datetime) -> str:
    """Return a timestamp that sorts as text: fixed-width UTC with microseconds."""
    # isoformat is strftime's text for years 1000-9999 (the zero-padded year), 5x faster.
    utc = moment.astimezone(UTC).replace(tzinfo=None)
    return f"{utc.isoformat(timespec='microseconds')}Z"


def shard_of(run_id: str) -> int:
    """Return the write shard of a run's GSI entries (stable across processes and versions)."""
    return zlib.crc32(run_id.encode()) % SHARDS


def run_pk(run_id: str) -> str:
    """Return the partition key of a run's items."""
    return f"run#{run_id}"


def attempt_sk(attempt_id: str) -> str:
    """Return the sort key of an attempt's item."""
    return f"attempt#{attempt_id}"


def graph_partition(namespace: str, graph_name: str, status: RunStatus, shard: int) -> str:
    """Return the runs_by_graph partition of a graph's runs in a status, in one shard."""
    return f"graph#{namespace}#{graph_name}#{status.value}#{shard}"


def status_partition(namespace: str, status: RunStatus, shard: int) -> str:
    """Return the runs_by_status partition of runs in a status, in one shard."""
    return f"status#{namespace}#{status.value}#{shard}"


def namespace_partition(namespace: str, shard: int) -> str:
    """Return the runs_by_namespace partition of a namespace's runs, in one shard."""
    return f"runs#{namespace}#{shard}"


def attempt_status_partition(namespace: str, status: AttemptStatus, shard: int) -> str:
    """Return the attempts_by_status partition of attempts in a status, in one shard.

    Running attempts with a lease are in the lease partitions instead (by expiry).
    """
    return f"attempt-status#{namespace}#{status.value}#{shard}"


def lease_partition(namespace: str, shard: int) -> str:
    """Return the attempts_by_status partition of running leased attempts, in one shard.

    A leased running attempt is indexed by lease expiry here and nowhere else, so starting,
    renewing and ending it each write one GSI entry (renewing moves it: two).
    """
    return f"lease#{namespace}#{shard}"


def every_shard(partition: Callable[[int], str]) -> list[str]:
    """Return a partition in every shard (what a listing queries)."""
    return [partition(shard) for shard in range(SHARDS)]


_KIND = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}(?=:|$)")


def listed_error(error: str | None, *, plain: bool = True) -> str | None:
    """Return what the index lists of an error: its start, or (`plain` False) its kind.

    An encrypted stash keeps error text in its (sealed) run log alone: the index, which is
    not encrypted, lists the error's kind (the exception's name it starts with, or
    `error`) and its length, so no payload is readable there, before or after a shred.
    """
    if error is None:
        return None
    if plain:
        return error[:ERROR_CHARS]
    match = _KIND.match(error)
    kind = match.group(0) if match else "error"
    return f"{kind} ({len(error)} characters: sealed in the run's log)"


def run_item(
    head: RunHead, revision: int, expires_at: int | None, *, plain: bool = True
) -> dict[str, Any]:
    """Return the index item of a run at `revision` (counts come from the head)."""
    created, updated = sortable(head.created_at), sortable(head.updated_at)
    shard, ns = shard_of(head.run_id), head.namespace
    order = f"{created}#{head.run_id}"
    wake = None if head.wake_at is None else sortable(head.wake_at)
    # Waiting runs are listed by wake time, so `list_due` reads only the due ones.
    status_order = order if wake is None else f"{wake}#{head.run_id}"
    if wake is None and head.status is RunStatus.WAITING:
        # Waiting for an event without a timeout: never due until the event makes it so.
        status_order = f"{NEVER_DUE}#{head.run_id}"
    return {
        "pk": run_pk(head.run_id),
        "sk": RUN_SORT,
        RUNS_BY_NAMESPACE.partition_key: namespace_partition(ns, shard),
        RUNS_BY_NAMESPACE.sort_key: order,
        RUNS_BY_STATUS.partition_key: status_partition(ns, head.status, shard),
        RUNS_BY_STATUS.sort_key: status_order,
        RUNS_BY_GRAPH.partition_key: graph_partition(ns, head.graph_name, head.status, shard),
        RUNS_BY_GRAPH.sort_key: order,
        "revision": revision,
        TTL_ATTRIBUTE: expires_at,
        "run_id": head.run_id,
        "graph_name": head.graph_name,
        "namespace": ns,
        "status": head.status.value,
        "attempts": head.attempt_count,
        "failed_attempts": head.failed_count,
        "running_attempts": len(head.running),
        "error": listed_error(head.error, plain=plain),
        "created_at": created,
        "updated_at": updated,
        "wake_at": wake,
    }


NEVER_DUE = "~"
"""The wake key of a waiting run with no wake time: sorts after every timestamp."""


def due_partitions(namespace: str) -> list[str]:
    """Return the runs_by_status partitions (every shard) of waiting runs, by wake time."""
    return every_shard(partial(status_partition, namespace, RunStatus.WAITING))


def due_bound(now: datetime) -> str:
    """Return the exclusive upper sort key of runs due at `now` (wake time <= now).

    Sort keys are `{wake}#{id}`; `$` sorts right after `#`, so a run waking exactly at
    `now` is due.
    """
    return sortable(now) + "$"


def attempt_item(
    row: AttemptRow, namespace: str, revision: int, expires_at: int | None, *, plain: bool = True
) -> dict[str, Any]:
    """Return the index item of an attempt, as of run `revision`."""
    started = sortable(row.started_at)
    leased = row.status is AttemptStatus.RUNNING and row.lease_expires_at is not None
    expires = sortable(row.lease_expires_at) if leased and row.lease_expires_at else None
    shard = shard_of(row.run_id)
    partition: str | None
    order: str | None
    if expires is not None:
        partition, order = lease_partition(namespace, shard), f"{expires}#{row.attempt_id}"
    elif row.status in UNLISTED_ATTEMPTS:
        partition = order = None
    else:
        partition = attempt_status_partition(namespace, row.status, shard)
        order = f"{started}#{row.attempt_id}"
    return {
        "pk": run_pk(row.run_id),
        "sk": attempt_sk(row.attempt_id),
        ATTEMPTS_BY_STATUS.partition_key: partition,
        ATTEMPTS_BY_STATUS.sort_key: order,
        "revision": revision,
        TTL_ATTRIBUTE: expires_at,
        "attempt_id": row.attempt_id,
        "run_id": row.run_id,
        "namespace": namespace,
        "node_id": row.node_id,
        "attempt": row.attempt,
        "status": row.status.value,
        "error": listed_error(row.error, plain=plain),
        "started_at": started,
        "finished_at": None if row.finished_at is None else sortable(row.finished_at),
        "lease_expires_at": expires,
    }


def items_for(
    head: RunHead,
    attempts: Iterable[AttemptRow],
    revision: int,
    expires_at: int | None,
    *,
    before: RunHead | None = None,
    plain: bool = True,
) -> tuple[dict[str, Any], ...]:
    """Return the run's item and those of `attempts` (the ones a transition touched).

    The run's item is left out when it would say what it said at `before` (a heartbeat
    changes no listed field): the index write then costs the attempt's item alone.
    `plain` False (an encrypted stash): errors are listed by kind (`listed_error`).
    """
    run = run_item(head, revision, expires_at, plain=plain)
    attempt_items = tuple(
        attempt_item(a, head.namespace, revision, expires_at, plain=plain) for a in attempts
    )
    before_item = None if before is None else run_item(before, 0, expires_at, plain=plain)
    if before_item is not None and attempt_items and same_listing(before_item, run):
        return attempt_items
    return (run, *attempt_items)


def same_listing(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a stored item says what `wanted` says (their revisions and retention aside)."""
    ignore = ("revision", TTL_ATTRIBUTE)
    keys = (set(stored) | set(wanted)) - set(ignore)
    return all(stored.get(k) == wanted.get(k) for k in keys)


def _moment(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def revision_of(item: Mapping[str, Any]) -> int | Malformed:
    """Return an item's stored revision, or `MALFORMED` if it is not an int (planted)."""
    value = item.get("revision")
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():  # DynamoDB numbers may come back so
        return int(value)
    return MALFORMED


def parsed(item: dict[str, Any], to_row: Callable[[dict[str, Any]], T]) -> T | None:
    """Return the listing row of an item, or None (logged) for a malformed one."""
    try:
        return to_row(item)
    except (KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError too
        log.warning(
            "index item %s/%s is malformed (%s); left out until `load_run` or `reindex` repairs it",
            item.get("pk"),
            item.get("sk"),
            type(exc).__name__,
        )
        return None


def run_row(item: Mapping[str, Any]) -> RunRow:
    """Return the listing row of a run item."""
    return RunRow(
        run_id=item["run_id"],
        graph_name=item["graph_name"],
        namespace=item["namespace"],
        status=RunStatus(item["status"]),
        revision=int(item["revision"]),
        attempts=int(item["attempts"]),
        failed_attempts=int(item["failed_attempts"]),
        running_attempts=int(item["running_attempts"]),
        error=item.get("error"),
        created_at=_moment(item["created_at"]),
        updated_at=_moment(item["updated_at"]),
        wake_at=_moment(item.get("wake_at")),
    )


def attempt_row(item: Mapping[str, Any]) -> AttemptRow:
    """Return the listing row of an attempt item."""
    return AttemptRow(
        attempt_id=item["attempt_id"],
        run_id=item["run_id"],
        node_id=item["node_id"],
        attempt=int(item["attempt"]),
        status=AttemptStatus(item["status"]),
        error=item.get("error"),
        started_at=_moment(item["started_at"]),
        finished_at=_moment(item.get("finished_at")),
        lease_expires_at=_moment(item.get("lease_expires_at")),
    )


def fingerprint(index: str, partitions: Sequence[str], since: str | None) -> str:
    """Return what ties a cursor to its listing (the same query, in the same shards)."""
    spec = "|".join((index, *partitions, since or ""))
    return hashlib.blake2s(spec.encode(), digest_size=6).hexdigest()


def encode_cursor(query: str, below: str, done: Iterable[int]) -> str:
    """Return an opaque cursor: the last sort key listed, and the shards with no more."""
    raw = json.dumps({"q": query, "below": below, "done": sorted(done)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, query: str) -> tuple[str | None, set[int]]:
    """Return where a cursor of this listing continues: below a key, without some shards.

    A malformed cursor, or one made by another listing, is an `InvalidArgument`.
    """
    if not cursor:
        return None, set()
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        decoded = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(
            f"malformed listing cursor {cursor[:40]!r}: pass the cursor a listing returned"
        ) from exc
    if not isinstance(decoded, dict):
        raise InvalidArgument(
            f"malformed listing cursor {cursor[:40]!r}: pass the cursor a listing returned"
        )
    below, done = decoded.get("below"), decoded.get("done")
    if not isinstance(below, str) or not isinstance(done, list):
        raise InvalidArgument(
            f"malformed listing cursor {cursor[:40]!r}: pass the cursor a listing returned"
        )
    if not all(type(n) is int for n in done):
        raise InvalidArgument(
            f"malformed listing cursor {cursor[:40]!r}: pass the cursor a listing returned"
        )
    if decoded.get("q") != query:
        raise InvalidArgument(
            "this cursor belongs to another listing (other filters): pass the cursor the same "
            "listing returned"
        )
    return below, set(done)
