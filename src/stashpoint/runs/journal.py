"""A run as an append-only log: its records, its head, and the fold back to a `RunState`.

A run is one log (`stashpoint.logs`, namespace `run-logs`). Every version stores the small
`RunHead` (the run without its attempts: running attempts, counts, snapshot) and the records
of one transition:

- `{"op": "attempt", ...AttemptRecord}`: an attempt was recorded (with its final status
  too when an at-least-once step records it after it ran);
- `{"op": "end", "attempt_id", "status", "finished_at", "output", "meta", "error"}`: a
  running attempt ended.
- `{"op": "signal", "name", "signal_id", "payload", "received_at"}`: an event from outside
  was delivered (`RunStore.signal`); the head keeps its id by name.

So a transition appends O(1) bytes, however many attempts came before, and the whole run
is the fold of its records under its latest head. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pydantic
from pydantic import Field

from stashpoint.errors import (
    AttemptNotFound,
    InvalidPayload,
    StashpointError,
    TerminalStateConflict,
    UnsupportedFormat,
)
from stashpoint.runs.models import (
    RUN_LOG_KIND,
    RUN_LOG_SCHEMA_VERSION,
    AttemptRecord,
    AttemptRow,
    RunHead,
    RunningAttempt,
    RunState,
    Signal,
    _Model,
)
from stashpoint.status import AttemptStatus

_HEAD_ONLY = ("running", "attempt_count", "failed_count", "revision_base", "signal_ids")
"""`RunHead` fields a `RunState` does not have (it has the attempts themselves)."""


class AttemptEnd(_Model):
    """The record of a running attempt reaching a final status."""

    attempt_id: str
    """The attempt that ended."""
    status: AttemptStatus
    """Its final status."""
    finished_at: datetime
    """When it ended."""
    output: Any = None
    """Output of a completed attempt (or a blob reference when large)."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Caller metadata recorded at completion."""
    error: str | None = None
    """Error message of a failed attempt."""


def attempt_record(record: AttemptRecord) -> dict[str, Any]:
    """Return the log record of a recorded attempt."""
    return {"op": "attempt", **record.model_dump(mode="json")}


def end_record(end: AttemptEnd) -> dict[str, Any]:
    """Return the log record of an attempt's end."""
    return {"op": "end", **end.model_dump(mode="json")}


def signal_record(signal: Signal) -> dict[str, Any]:
    """Return the log record of a delivered signal."""
    return {"op": "signal", **signal.model_dump(mode="json")}


def row_of(record: AttemptRecord) -> AttemptRow:
    """Return the listing row of an attempt."""
    return AttemptRow.model_validate(record, from_attributes=True)


def lease_row(head: RunHead, attempt_id: str, running: RunningAttempt) -> AttemptRow:
    """Return the index row of a running attempt, with its lease."""
    return AttemptRow(
        attempt_id=attempt_id,
        run_id=head.run_id,
        node_id=running.node_id,
        attempt=running.attempt,
        status=AttemptStatus.RUNNING,
        started_at=running.started_at,
        lease_expires_at=running.lease_expires_at,
    )


def rows_of(head: RunHead, state: RunState) -> list[AttemptRow]:
    """Return the index rows of every attempt of a whole run (leases from its head)."""
    return [
        lease_row(head, a.attempt_id, head.running[a.attempt_id])
        if a.attempt_id in head.running
        else row_of(a)
        for a in state.attempts
    ]


def head_document(head: RunHead) -> dict[str, Any]:
    """Return the JSON a log version stores as its state."""
    return head.model_dump(mode="json")


def parse_head(state: Any, kind: str, schema_version: int, run_id: str, name: str) -> RunHead:
    """Return the typed head a run log's latest version stores, or a typed error."""
    if kind != RUN_LOG_KIND:
        raise InvalidPayload(f"not a run log: kind is {kind!r}", object_name=name)
    if schema_version != RUN_LOG_SCHEMA_VERSION:
        raise UnsupportedFormat(
            f"run log schema version {schema_version} is not the one this library reads "
            f"({RUN_LOG_SCHEMA_VERSION}); upgrade stashpoint",
            object_name=name,
        )
    try:
        head = RunHead.model_validate(state)
    except pydantic.ValidationError as exc:
        raise InvalidPayload(f"run head is invalid: {exc}", object_name=name) from None
    if head.run_id != run_id:
        raise InvalidPayload(f"run head belongs to run {head.run_id!r}", object_name=name)
    return head


def fold(head: RunHead, records: Iterable[Any], name: str) -> RunState:
    """Return the whole run: the head's fields and every attempt the records describe.

    The records must agree with the head (same attempts, same running ones): a log that
    lost or gained records is refused with `InvalidPayload` naming it, never shortened.
    """
    attempts: dict[str, AttemptRecord] = {}
    signals: dict[str, Signal] = {}
    for position, record in enumerate(records):
        where = f"{name} (record {position})"
        if not isinstance(record, Mapping):
            raise InvalidPayload("run record is not an object", object_name=where)
        fields = dict(record)
        op = fields.pop("op", None)
        try:
            _fold_record(op, fields, head, attempts, signals, where)
        except pydantic.ValidationError as exc:
            raise InvalidPayload(f"run record is invalid: {exc}", object_name=where) from None
    _check_agrees(head, attempts, signals, name)
    fields = head.model_dump(exclude=set(_HEAD_ONLY))
    fields.update(head.model_extra or {})
    return RunState.model_validate(
        {**fields, "attempts": tuple(attempts.values()), "signals": signals}
    )


def _fold_record(
    op: object,
    fields: dict[str, Any],
    head: RunHead,
    attempts: dict[str, AttemptRecord],
    signals: dict[str, Signal],
    where: str,
) -> None:
    """Fold one record (an attempt, its end, a signal) into `attempts` and `signals`."""
    if op == "attempt":
        attempt = AttemptRecord.model_validate(fields)
        if attempt.attempt_id in attempts:
            raise InvalidPayload("attempt recorded twice", object_name=where)
        if attempt.run_id != head.run_id:
            raise InvalidPayload(f"attempt of another run ({attempt.run_id!r})", object_name=where)
        attempts[attempt.attempt_id] = attempt
    elif op == "end":
        end = AttemptEnd.model_validate(fields)
        before = attempts.get(end.attempt_id)
        if before is None or before.status is not AttemptStatus.RUNNING:
            raise InvalidPayload(
                f"end of attempt {end.attempt_id!r}, which is not running", object_name=where
            )
        attempts[end.attempt_id] = ended(before, end)
    elif op == "signal":
        signal = Signal.model_validate(fields)
        if signal.name in signals:
            raise InvalidPayload("signal delivered twice", object_name=where)
        signals[signal.name] = signal
    else:
        raise UnsupportedFormat(
            f"unknown run record {op!r}: written by a newer stashpoint?", object_name=where
        )


def _check_agrees(
    head: RunHead, attempts: dict[str, AttemptRecord], signals: dict[str, Signal], name: str
) -> None:
    """Refuse records that disagree with the head: records missing or extra."""
    running = {k for k, a in attempts.items() if a.status is AttemptStatus.RUNNING}
    if len(attempts) != head.attempt_count or running != set(head.running):
        raise InvalidPayload(
            f"records hold {len(attempts)} attempts ({len(running)} running), the head says "
            f"{head.attempt_count} ({len(head.running)} running): records are missing or extra",
            object_name=name,
        )
    if {n: sig.signal_id for n, sig in signals.items()} != head.signal_ids:
        raise InvalidPayload(
            f"records hold {len(signals)} signals, the head says {len(head.signal_ids)}: "
            "records are missing or extra",
            object_name=name,
        )


def ended(record: AttemptRecord, end: AttemptEnd) -> AttemptRecord:
    """Return `record` with the final status, time and results of `end`."""
    return record.model_copy(
        update={
            "status": end.status,
            "finished_at": end.finished_at,
            "output": end.output,
            "meta": dict(end.meta),
            "error": end.error,
        }
    )


def not_running(state: RunState, attempt_id: str) -> StashpointError:
    """Return the error for ending `attempt_id`, which the run does not have running."""
    record = state.attempt(attempt_id)
    if record is None:
        return AttemptNotFound("no such attempt in this run", object_name=attempt_id)
    return TerminalStateConflict(
        f"attempt is already {record.status.value}", object_name=attempt_id
    )
