"""Run state transitions as pure functions: `RunState` in, new `RunState` out, or a typed error.

No I/O and no clock of their own (`now` is passed in), so the store can apply them inside a
compare-and-swap retry loop and tests can check every rule directly. Where the seed's
in-memory store silently ignores unknown ids, these raise.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stashpoint.errors import AttemptNotFound, TerminalStateConflict
from stashpoint.runs.models import (
    AttemptRecord,
    AttemptStatus,
    CheckpointMetadata,
    Interrupt,
    RunState,
    RunStatus,
    TraceContext,
)


def _require_open(state: RunState, action: str) -> None:
    if state.status.is_terminal:
        raise TerminalStateConflict(
            f"cannot {action}: run is {state.status.value}", object_name=state.run_id
        )


def _finish_attempt(
    state: RunState, attempt_id: str, now: datetime, **changes: Any
) -> tuple[AttemptRecord, ...]:
    record = state.attempt(attempt_id)
    if record is None:
        raise AttemptNotFound("no such attempt in this run", object_name=attempt_id)
    if record.status is not AttemptStatus.RUNNING:
        raise TerminalStateConflict(
            f"attempt is already {record.status.value}", object_name=attempt_id
        )
    updated = record.model_copy(update={**changes, "finished_at": now})
    return tuple(updated if a.attempt_id == attempt_id else a for a in state.attempts)


def record_attempt(
    state: RunState,
    *,
    attempt_id: str,
    node_id: str,
    attempt: int,
    input: Any,
    trace_ctx: TraceContext | None,
    now: datetime,
) -> RunState:
    """Add a running attempt. Recording an attempt resumes an interrupted run."""
    _require_open(state, "record an attempt")
    if state.attempt(attempt_id) is not None:
        raise TerminalStateConflict("attempt id already recorded", object_name=attempt_id)
    record = AttemptRecord(
        attempt_id=attempt_id,
        run_id=state.run_id,
        node_id=node_id,
        attempt=attempt,
        input=input,
        trace_ctx=trace_ctx,
        started_at=now,
    )
    return state.model_copy(
        update={
            "attempts": (*state.attempts, record),
            "status": RunStatus.RUNNING,
            "interrupted": None,
            "updated_at": now,
        }
    )


def complete_attempt(
    state: RunState, attempt_id: str, *, output: Any, meta: dict[str, Any], now: datetime
) -> RunState:
    """Mark a running attempt completed with its output and metadata."""
    attempts = _finish_attempt(
        state, attempt_id, now, status=AttemptStatus.COMPLETED, output=output, meta=dict(meta)
    )
    return state.model_copy(update={"attempts": attempts, "updated_at": now})


def fail_attempt(state: RunState, attempt_id: str, *, error: str, now: datetime) -> RunState:
    """Mark a running attempt failed with its error."""
    attempts = _finish_attempt(state, attempt_id, now, status=AttemptStatus.FAILED, error=error)
    return state.model_copy(update={"attempts": attempts, "updated_at": now})


def record_interrupt(
    state: RunState, attempt_id: str, *, interrupt: Interrupt, now: datetime
) -> RunState:
    """Mark a running attempt interrupted and the run interrupted, keeping the interrupt."""
    _require_open(state, "record an interrupt")
    attempts = _finish_attempt(state, attempt_id, now, status=AttemptStatus.INTERRUPTED)
    return state.model_copy(
        update={
            "attempts": attempts,
            "status": RunStatus.INTERRUPTED,
            "interrupted": interrupt,
            "updated_at": now,
        }
    )


def save_state_snapshot(
    state: RunState,
    snapshot: dict[str, Any],
    *,
    metadata: CheckpointMetadata | None,
    now: datetime,
) -> RunState:
    """Replace the state snapshot (and its metadata) of a run that is not finished."""
    _require_open(state, "save a snapshot")
    update: dict[str, Any] = {"state_snapshot": dict(snapshot), "updated_at": now}
    if metadata is not None:
        update["checkpoint"] = metadata
        update["graph_hash"] = metadata.graph_hash
    return state.model_copy(update=update)


def finish_run(
    state: RunState, status: RunStatus, *, error: str | None = None, now: datetime
) -> RunState:
    """Move a running run to a final status (seed: only from Running)."""
    if state.status is not RunStatus.RUNNING:
        raise TerminalStateConflict(
            f"cannot mark run {status.value}: it is {state.status.value}",
            object_name=state.run_id,
        )
    return state.model_copy(update={"status": status, "error": error, "updated_at": now})


def cancel_run(state: RunState, *, now: datetime) -> RunState:
    """Cancel a running or interrupted run; its running attempts are cancelled too."""
    _require_open(state, "cancel")
    attempts = tuple(
        a.model_copy(update={"status": AttemptStatus.CANCELLED, "finished_at": now})
        if a.status is AttemptStatus.RUNNING
        else a
        for a in state.attempts
    )
    return state.model_copy(
        update={
            "status": RunStatus.CANCELLED,
            "attempts": attempts,
            "interrupted": None,  # nothing is pending any more
            "updated_at": now,
        }
    )
