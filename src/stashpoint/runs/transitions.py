"""Run state transitions as pure functions: `RunHead` in, a `Change` out, or a typed error.

A run is a log (`runs.journal`): a transition returns the new head and the records it
appends, never the run's earlier attempts, so its cost does not grow with them. No I/O and
no clock of their own (`now` is passed in), so the store can apply them inside a
compare-and-swap retry loop and tests can check every rule directly. Where the Rust format's
in-memory store silently ignores unknown ids, these raise.

Ending an attempt the head does not have running raises `AttemptNotFound`: the head does
not keep ended attempts, so the store then reads the run and says which it is
(`journal.not_running`: unknown, or already ended).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stashpoint.errors import AttemptNotFound, Fenced, TerminalStateConflict
from stashpoint.runs.journal import (
    AttemptEnd,
    attempt_record,
    end_record,
    lease_row,
    signal_record,
)
from stashpoint.runs.models import (
    AttemptRecord,
    AttemptRow,
    CheckpointMetadata,
    Interrupt,
    RunHead,
    RunningAttempt,
    Signal,
    TraceContext,
)
from stashpoint.status import AttemptStatus, RunStatus


@dataclass(frozen=True)
class Change:
    """What a transition does: the new head, the records to append, the attempts touched."""

    head: RunHead
    """The run head after the transition."""
    records: tuple[dict[str, Any], ...] = ()
    """Log records of the transition (attempts recorded or ended)."""
    touched: tuple[AttemptRow, ...] = ()
    """Index rows of the attempts the transition recorded or ended."""
    unchanged: bool = False
    """Nothing to write: the run already is what the transition makes it (a repeated
    `complete_run`, say, after a retried Lambda invocation)."""


def compose(head: RunHead, parts: Sequence[Callable[[RunHead], Change]]) -> Change:
    """Apply transitions one after the other as one change (one append for a batch).

    Each part sees the head the previous one left; the records and touched rows add up.
    """
    records: list[dict[str, Any]] = []
    touched: list[AttemptRow] = []
    current = head
    for part in parts:
        change = part(current)
        records += change.records
        touched += change.touched
        current = change.head
    return Change(current, tuple(records), tuple(touched))


def check_owner(head: RunHead, epoch: int | None) -> None:
    """Refuse with `Fenced` a writer whose owner epoch is not the run's.

    `epoch` None is a writer that never claimed the run: it is not fenced.
    """
    if epoch is not None and epoch != head.epoch:
        raise Fenced(head.run_id, epoch=epoch, current_epoch=head.epoch)


def _require_open(head: RunHead, action: str) -> None:
    if head.status.is_terminal:
        raise TerminalStateConflict(
            f"cannot {action}: run is {head.status.value}", object_name=head.run_id
        )


def _end(
    head: RunHead, attempt_id: str, now: datetime, status: AttemptStatus, **results: Any
) -> tuple[dict[str, RunningAttempt], dict[str, Any], AttemptRow]:
    """End a running attempt: the running set without it, its record, its index row."""
    running = head.running.get(attempt_id)
    if running is None:
        raise AttemptNotFound("not a running attempt of this run", object_name=attempt_id)
    end = AttemptEnd(attempt_id=attempt_id, status=status, finished_at=now, **results)
    row = AttemptRow(
        attempt_id=attempt_id,
        run_id=head.run_id,
        node_id=running.node_id,
        attempt=running.attempt,
        status=status,
        error=end.error,
        started_at=running.started_at,
        finished_at=now,
    )
    rest = {k: v for k, v in head.running.items() if k != attempt_id}
    return rest, end_record(end), row


def record_attempt(
    head: RunHead,
    *,
    attempt_id: str,
    node_id: str,
    attempt: int,
    input: Any,
    trace_ctx: TraceContext | None,
    now: datetime,
    lease_seconds: float | None = None,
    worker: dict[str, str] | None = None,
) -> Change:
    """Add a running attempt. Recording an attempt resumes an interrupted run.

    With `lease_seconds`, the worker promises a heartbeat at least that often; recording is
    the first one.
    """
    _require_open(head, "record an attempt")
    if attempt_id in head.running:
        raise TerminalStateConflict("attempt id already recorded", object_name=attempt_id)
    record = AttemptRecord(
        attempt_id=attempt_id,
        run_id=head.run_id,
        node_id=node_id,
        attempt=attempt,
        input=input,
        trace_ctx=trace_ctx,
        started_at=now,
        lease_seconds=lease_seconds,
        worker=dict(worker or {}),
        epoch=head.epoch,
    )
    running = RunningAttempt(
        node_id=node_id,
        attempt=attempt,
        started_at=now,
        lease_seconds=lease_seconds,
        heartbeat_at=now,
        epoch=head.epoch,
    )
    new = head.model_copy(
        update={
            "running": {**head.running, attempt_id: running},
            "attempt_count": head.attempt_count + 1,
            "status": RunStatus.RUNNING,
            "interrupted": None,
            "wake_at": None,
            "waiting_for": None,
            "updated_at": now,
        }
    )
    return Change(new, (attempt_record(record),), (lease_row(new, attempt_id, running),))


def record_ended_attempt(
    head: RunHead,
    *,
    attempt_id: str,
    node_id: str,
    attempt: int,
    input: Any,
    started_at: datetime,
    now: datetime,
    output: Any = None,
    error: str | None = None,
) -> Change:
    """Add an attempt that already ran, with its outcome, as one change.

    Completed with `output` when `error` is None, else failed with `error`. Its records
    are those of recording it then ending it; its index row is the ended one alone.
    """
    started = record_attempt(
        head, attempt_id=attempt_id, node_id=node_id, attempt=attempt, input=input,
        trace_ctx=None, now=started_at,
    )  # fmt: skip
    if error is None:
        ended = complete_attempt(started.head, attempt_id, output=output, meta={}, now=now)
    else:
        ended = fail_attempt(started.head, attempt_id, error=error, now=now)
    return Change(ended.head, started.records + ended.records, ended.touched)


def complete_attempt(
    head: RunHead, attempt_id: str, *, output: Any, meta: dict[str, Any], now: datetime
) -> Change:
    """Mark a running attempt completed with its output and metadata."""
    running, record, row = _end(
        head, attempt_id, now, AttemptStatus.COMPLETED, output=output, meta=dict(meta)
    )
    new = head.model_copy(update={"running": running, "updated_at": now})
    return Change(new, (record,), (row,))


def fail_attempt(head: RunHead, attempt_id: str, *, error: str, now: datetime) -> Change:
    """Mark a running attempt failed with its error."""
    running, record, row = _end(head, attempt_id, now, AttemptStatus.FAILED, error=error)
    new = head.model_copy(
        update={"running": running, "failed_count": head.failed_count + 1, "updated_at": now}
    )
    return Change(new, (record,), (row,))


def record_interrupt(
    head: RunHead, attempt_id: str, *, interrupt: Interrupt, now: datetime
) -> Change:
    """Mark a running attempt interrupted and the run interrupted, keeping the interrupt."""
    _require_open(head, "record an interrupt")
    running, record, row = _end(head, attempt_id, now, AttemptStatus.INTERRUPTED)
    new = head.model_copy(
        update={
            "running": running,
            "status": RunStatus.INTERRUPTED,
            "interrupted": interrupt,
            "updated_at": now,
        }
    )
    return Change(new, (record,), (row,))


def save_state_snapshot(
    head: RunHead,
    snapshot: dict[str, Any],
    *,
    metadata: CheckpointMetadata | None,
    now: datetime,
) -> Change:
    """Replace the state snapshot (and its metadata) of a run that is not finished."""
    _require_open(head, "save a snapshot")
    update: dict[str, Any] = {"state_snapshot": dict(snapshot), "updated_at": now}
    if metadata is not None:
        update["checkpoint"] = metadata
        update["graph_hash"] = metadata.graph_hash
    return Change(head.model_copy(update=update))


def finish_run(
    head: RunHead, status: RunStatus, *, error: str | None = None, now: datetime
) -> Change:
    """Move a running run to a final status (as in the Rust format: only from Running).

    Repeating it with the same outcome changes nothing (a retry after a lost answer or a
    crash); another final outcome is a `TerminalStateConflict`.
    """
    if head.status is status and head.error == error:
        return Change(head, unchanged=True)
    if head.status is not RunStatus.RUNNING:
        raise TerminalStateConflict(
            f"cannot mark run {status.value}: it is {head.status.value}",
            object_name=head.run_id,
        )
    return Change(head.model_copy(update={"status": status, "error": error, "updated_at": now}))


def cancel_run(head: RunHead, *, now: datetime) -> Change:
    """Cancel a running or interrupted run; its running attempts are cancelled too.

    Cancelling a cancelled run changes nothing.
    """
    if head.status is RunStatus.CANCELLED:
        return Change(head, unchanged=True)
    _require_open(head, "cancel")
    records: list[dict[str, Any]] = []
    rows: list[AttemptRow] = []
    current = head
    for attempt_id in head.running:
        running, record, row = _end(current, attempt_id, now, AttemptStatus.CANCELLED)
        current = current.model_copy(update={"running": running})
        records.append(record)
        rows.append(row)
    new = current.model_copy(
        update={
            "status": RunStatus.CANCELLED,
            "interrupted": None,  # nothing is pending any more
            "wake_at": None,
            "waiting_for": None,
            "updated_at": now,
        }
    )
    return Change(new, tuple(records), tuple(rows))


def suspend_run(
    head: RunHead, *, until: datetime | None, now: datetime, waiting_for: str | None = None
) -> Change:
    """Make a running run wait until `until` (a durable wait): no attempt may be running.

    With `waiting_for`, it waits for that event (`deliver_signal` makes it due), `until`
    being its timeout (None: none; the run is due only once the event arrives).
    """
    if until is None and waiting_for is None:
        raise TerminalStateConflict("a wait needs a wake time or an event", object_name=head.run_id)
    if head.status not in (RunStatus.RUNNING, RunStatus.WAITING):
        raise TerminalStateConflict(
            f"cannot wait: run is {head.status.value}", object_name=head.run_id
        )
    if head.running:
        raise TerminalStateConflict(
            f"cannot wait: {len(head.running)} attempts are running", object_name=head.run_id
        )
    update = {
        "status": RunStatus.WAITING,
        "wake_at": until,
        "waiting_for": waiting_for,
        "updated_at": now,
    }
    return Change(head.model_copy(update=update))


def resume_run(head: RunHead, *, now: datetime) -> Change:
    """Wake a waiting run: it is running again."""
    if head.status is not RunStatus.WAITING:
        raise TerminalStateConflict(
            f"cannot wake: run is {head.status.value}, not waiting", object_name=head.run_id
        )
    update = {"status": RunStatus.RUNNING, "wake_at": None, "waiting_for": None, "updated_at": now}
    return Change(head.model_copy(update=update))


def heartbeat(head: RunHead, attempt_id: str, *, now: datetime) -> Change:
    """Renew a running attempt's lease: the worker is alive (no record; the head changes)."""
    running = head.running.get(attempt_id)
    if running is None:
        raise AttemptNotFound("not a running attempt of this run", object_name=attempt_id)
    renewed = running.model_copy(update={"heartbeat_at": now})
    new = head.model_copy(update={"running": {**head.running, attempt_id: renewed}})
    return Change(new, (), (lease_row(new, attempt_id, renewed),))


def takeover(head: RunHead, *, now: datetime, reason: str) -> Change:
    """Make the caller the run's owner: raise the epoch, fence every older owner.

    Running attempts recorded under an older epoch can never be ended by their owner any
    more (it is fenced), so they end here, failed with `reason`, for the new owner to retry.
    """
    _require_open(head, "take over")
    epoch = head.epoch + 1
    records: list[dict[str, Any]] = []
    rows: list[AttemptRow] = []
    current = head
    for attempt_id, held in head.running.items():
        if held.epoch >= epoch:
            continue
        running, record, row = _end(current, attempt_id, now, AttemptStatus.FAILED, error=reason)
        current = current.model_copy(
            update={"running": running, "failed_count": current.failed_count + 1}
        )
        records.append(record)
        rows.append(row)
    new = current.model_copy(update={"epoch": epoch, "updated_at": now})
    return Change(new, tuple(records), tuple(rows))


def deliver_signal(
    head: RunHead, *, name: str, signal_id: str, payload: Any, now: datetime
) -> Change:
    """Keep an event from outside in the run; wake the run if it waits for it.

    One signal per name: the same id again changes nothing (a retried delivery), another
    id is a `TerminalStateConflict` (the event happened). A finished run takes none. A
    run waiting for `name` becomes due at once (its wake time is now), so `list_due`
    finds it; a signal sent before its wait is kept for it.
    """
    known = head.signal_ids.get(name)
    if known == signal_id:
        return Change(head, unchanged=True)
    _require_open(head, f"signal {name!r}")
    if known is not None:
        raise TerminalStateConflict(
            f"event {name!r} was delivered already (signal id {known!r})",
            object_name=head.run_id,
        )
    signal = Signal(name=name, signal_id=signal_id, payload=payload, received_at=now)
    update: dict[str, Any] = {"signal_ids": {**head.signal_ids, name: signal_id}}
    if head.status is RunStatus.WAITING and head.waiting_for == name:
        update["wake_at"] = now
    update["updated_at"] = now
    return Change(head.model_copy(update=update), (signal_record(signal),))


def await_signal(
    head: RunHead,
    *,
    name: str,
    attempt_id: str,
    attempt: int,
    timeout_at: datetime | None,
    now: datetime,
) -> Change:
    """Record that step `name` waits for event `name`, and suspend the run, in one change.

    Unchanged (nothing written) when the event arrived since the caller read the run:
    the caller reads it and takes the event instead of waiting.
    """
    if name in head.signal_ids:
        return Change(head, unchanged=True)
    output = {
        "waiting_for": name,
        "timeout_at": None if timeout_at is None else timeout_at.isoformat(),
    }
    recorded = record_ended_attempt(
        head, attempt_id=attempt_id, node_id=name, attempt=attempt, input={"wait_for": name},
        started_at=now, now=now, output=output,
    )  # fmt: skip
    suspended = suspend_run(recorded.head, until=timeout_at, now=now, waiting_for=name)
    return Change(suspended.head, recorded.records, recorded.touched)


def time_out_wait(
    head: RunHead, *, name: str, attempt_id: str, attempt: int, error: str, now: datetime
) -> Change:
    """Record that the wait of step `name` timed out (a failed attempt of it).

    Unchanged when the event arrived first (it is the wait's outcome, not the timeout):
    of a signal and a timeout racing, the one the log takes first decides.
    """
    if name in head.signal_ids:
        return Change(head, unchanged=True)
    return record_ended_attempt(
        head, attempt_id=attempt_id, node_id=name, attempt=attempt, input={"wait_for": name},
        started_at=now, now=now, error=error,
    )  # fmt: skip
