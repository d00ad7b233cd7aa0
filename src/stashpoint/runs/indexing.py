"""Index mapping, written once: run state -> index items, index items -> rows, cursors.

Items hold no payloads (inputs, outputs and snapshots stay in object storage), only what
listings and status queries show.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from stashpoint.errors import ConfigurationError
from stashpoint.index.schema import BY_GRAPH, BY_NAMESPACE, BY_STATUS, TTL_ATTRIBUTE
from stashpoint.runs.models import (
    AttemptRow,
    AttemptStatus,
    RunHead,
    RunRow,
    RunStatus,
)

RUN_SORT = "run"
"""Sort key of a run's own item."""
ERROR_CHARS = 512
"""Errors are cut to this length in the index (the full text stays in storage)."""


def sortable(moment: datetime) -> str:
    """Return a timestamp that sorts as text: fixed-width UTC with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def run_pk(run_id: str) -> str:
    """Return the partition key of a run's items."""
    return f"run#{run_id}"


def attempt_sk(attempt_id: str) -> str:
    """Return the sort key of an attempt's item."""
    return f"attempt#{attempt_id}"


def graph_partition(namespace: str, graph_name: str) -> str:
    """Return the by_graph partition of a graph's runs."""
    return f"graph#{namespace}#{graph_name}"


def status_partition(namespace: str, status: RunStatus) -> str:
    """Return the by_status partition of runs in a status."""
    return f"status#{namespace}#{status.value}"


def attempt_status_partition(namespace: str, status: AttemptStatus) -> str:
    """Return the by_status partition of attempts in a status."""
    return f"attempt-status#{namespace}#{status.value}"


def lease_partition(namespace: str) -> str:
    """Return the by_namespace partition of running attempts with a lease, by expiry.

    Attempt items do not use by_namespace otherwise, so it holds leases too (a sparse,
    overloaded index: an item leaves it when its attempt ends).
    """
    return f"lease#{namespace}"


def namespace_partition(namespace: str) -> str:
    """Return the by_namespace partition of all runs of a namespace."""
    return f"runs#{namespace}"


def _short(error: str | None) -> str | None:
    return None if error is None else error[:ERROR_CHARS]


def run_item(head: RunHead, revision: int, expires_at: int | None) -> dict[str, Any]:
    """Return the index item of a run at `revision` (counts come from the head)."""
    created, updated = sortable(head.created_at), sortable(head.updated_at)
    return {
        "pk": run_pk(head.run_id),
        "sk": RUN_SORT,
        BY_GRAPH.partition_key: graph_partition(head.namespace, head.graph_name),
        BY_GRAPH.sort_key: f"{created}#{head.run_id}",
        BY_STATUS.partition_key: status_partition(head.namespace, head.status),
        BY_STATUS.sort_key: f"{updated}#{head.run_id}",
        BY_NAMESPACE.partition_key: namespace_partition(head.namespace),
        BY_NAMESPACE.sort_key: f"{created}#{head.run_id}",
        "revision": revision,
        TTL_ATTRIBUTE: expires_at,
        "run_id": head.run_id,
        "graph_name": head.graph_name,
        "namespace": head.namespace,
        "status": head.status.value,
        "attempts": head.attempt_count,
        "failed_attempts": head.failed_count,
        "running_attempts": len(head.running),
        "error": _short(head.error),
        "created_at": created,
        "updated_at": updated,
    }


def attempt_item(
    row: AttemptRow, namespace: str, revision: int, expires_at: int | None
) -> dict[str, Any]:
    """Return the index item of an attempt, as of run `revision`."""
    started = sortable(row.started_at)
    leased = row.status is AttemptStatus.RUNNING and row.lease_expires_at is not None
    expires = sortable(row.lease_expires_at) if leased and row.lease_expires_at else None
    return {
        "pk": run_pk(row.run_id),
        "sk": attempt_sk(row.attempt_id),
        BY_STATUS.partition_key: attempt_status_partition(namespace, row.status),
        BY_STATUS.sort_key: f"{started}#{row.attempt_id}",
        "revision": revision,
        TTL_ATTRIBUTE: expires_at,
        "attempt_id": row.attempt_id,
        "run_id": row.run_id,
        "node_id": row.node_id,
        "attempt": row.attempt,
        "status": row.status.value,
        "error": _short(row.error),
        "started_at": started,
        "finished_at": None if row.finished_at is None else sortable(row.finished_at),
        BY_NAMESPACE.partition_key: lease_partition(namespace) if expires else None,
        BY_NAMESPACE.sort_key: f"{expires}#{row.attempt_id}" if expires else None,
        "lease_expires_at": expires,
    }


def items_for(
    head: RunHead, attempts: Iterable[AttemptRow], revision: int, expires_at: int | None
) -> tuple[dict[str, Any], ...]:
    """Return the run's item and those of `attempts` (the ones a transition touched)."""
    return (
        run_item(head, revision, expires_at),
        *(attempt_item(a, head.namespace, revision, expires_at) for a in attempts),
    )


def _moment(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


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


def encode_cursor(keys: Mapping[str, str] | None) -> str | None:
    """Return an opaque cursor for the keys of the last item of a page."""
    if keys is None:
        return None
    raw = json.dumps(dict(keys), separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> dict[str, str] | None:
    """Return the keys inside a cursor; a malformed cursor is a `ConfigurationError`."""
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        keys = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"malformed listing cursor {cursor!r}") from exc
    if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
        raise ConfigurationError(f"malformed listing cursor {cursor!r}")
    return keys
