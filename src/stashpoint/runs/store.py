"""`RunStore` (blocking) and `AsyncRunStore` (asyncio): the graph-run API of seed 004.

The API is defined once, in `_RunApi`: each operation names its parameters, documents
itself and returns the protocol (`runs.protocol`) that does the work. The two stores are
made from it, so they cannot drift apart in signature, documentation or behaviour.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from stashpoint._sansio import Protocol, awaiting, blocking
from stashpoint.runs.models import (
    AttemptRow,
    AttemptStatus,
    CheckpointMetadata,
    Interrupt,
    Page,
    RunRow,
    RunState,
    RunStatus,
    RunSummary,
    TraceContext,
)
from stashpoint.runs.protocol import RunProtocol


class _RunApi:
    """The run operations, each returning its protocol."""

    _runs: RunProtocol

    def create_run(
        self,
        graph_name: str,
        *,
        run_id: str | None = None,
        namespace: str = "default",
        graph_hash: str | None = None,
        trace_ctx: TraceContext | None = None,
    ) -> Protocol[str]:
        """Create a running run; return its id (a new UUIDv7 unless `run_id` is given)."""
        return self._runs.create_run(
            graph_name,
            run_id=run_id,
            namespace=namespace,
            graph_hash=graph_hash,
            trace_ctx=trace_ctx,
        )

    def record_attempt(
        self,
        run_id: str,
        node_id: str,
        attempt: int,
        input: Any = None,
        *,
        trace_ctx: TraceContext | None = None,
    ) -> Protocol[str]:
        """Record a running attempt of `node_id`; return the attempt id.

        Recording an attempt resumes an interrupted run.
        """
        return self._runs.record_attempt(run_id, node_id, attempt, input, trace_ctx)

    def complete_attempt(
        self, attempt_id: str, output: Any, meta: dict[str, Any] | None = None
    ) -> Protocol[None]:
        """Mark a running attempt completed with its output and metadata."""
        return self._runs.complete_attempt(attempt_id, output, meta or {})

    def fail_attempt(self, attempt_id: str, error: str) -> Protocol[None]:
        """Mark a running attempt failed."""
        return self._runs.fail_attempt(attempt_id, error)

    def record_interrupt(self, attempt_id: str, interrupt: Interrupt) -> Protocol[None]:
        """Mark a running attempt, and its run, interrupted."""
        return self._runs.record_interrupt(attempt_id, interrupt)

    def save_state_snapshot(
        self, run_id: str, state: dict[str, Any], *, metadata: CheckpointMetadata | None = None
    ) -> Protocol[None]:
        """Replace the run's state snapshot (with its graph-hash metadata, if given)."""
        return self._runs.save_state_snapshot(run_id, state, metadata)

    def load_run(
        self,
        run_id: str,
        *,
        graph_hash: str | None = None,
        allow_graph_drift: bool = False,
        resolve_blobs: bool = True,
    ) -> Protocol[RunState | None]:
        """Return the run's full state, None if unknown.

        With `graph_hash`, a run recorded with another graph raises `GraphDriftError`
        unless `allow_graph_drift`. Repairs the index if it lags behind storage.
        """
        return self._runs.load_run(
            run_id,
            graph_hash=graph_hash,
            allow_graph_drift=allow_graph_drift,
            resolve_blobs=resolve_blobs,
        )

    def complete_run(self, run_id: str) -> Protocol[None]:
        """Mark a running run completed (only from running: else `TerminalStateConflict`)."""
        return self._runs.finish_run(run_id, RunStatus.COMPLETED, None)

    def fail_run(self, run_id: str, error: str) -> Protocol[None]:
        """Mark a running run failed, keeping the error."""
        return self._runs.finish_run(run_id, RunStatus.FAILED, error)

    def cancel_run(self, run_id: str) -> Protocol[None]:
        """Cancel a running or interrupted run and its running attempts."""
        return self._runs.cancel_run(run_id)

    def summarize_run(self, run_id: str) -> Protocol[RunSummary | None]:
        """Return the run's summary, None if unknown."""
        return self._runs.summarize_run(run_id)

    def list_runs(
        self,
        *,
        graph_name: str | None = None,
        status: RunStatus | None = None,
        since: datetime | None = None,
        namespace: str = "default",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Protocol[Page[RunRow]]:
        """Return one page of runs, newest first, from the index only."""
        return self._runs.require_index().list_runs(
            namespace=namespace,
            graph_name=graph_name,
            status=status,
            since=since,
            limit=limit,
            cursor=cursor,
        )

    def list_attempts(
        self,
        status: AttemptStatus = AttemptStatus.RUNNING,
        *,
        namespace: str = "default",
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Protocol[Page[AttemptRow]]:
        """Return one page of attempts in `status` (running by default), from the index."""
        return self._runs.require_index().list_attempts(
            namespace=namespace, status=status, since=since, limit=limit, cursor=cursor
        )

    def reindex(self, *, resume: bool = True) -> Protocol[int]:
        """Rebuild the index from storage (idempotent, resumable); return runs indexed."""
        return self._runs.reindex(resume=resume)


class RunStore:
    """Durable per-attempt recording of graph runs. Thread-safe: share one per process.

    Unknown runs raise `RunNotFound`, unknown attempts `AttemptNotFound`, transitions out of
    a final state `TerminalStateConflict`.
    """

    def __init__(self, protocol: RunProtocol, execute: Callable[[Any], Any]) -> None:
        self._runs = protocol
        self._execute = execute

    create_run = blocking(_RunApi.create_run)
    record_attempt = blocking(_RunApi.record_attempt)
    complete_attempt = blocking(_RunApi.complete_attempt)
    fail_attempt = blocking(_RunApi.fail_attempt)
    record_interrupt = blocking(_RunApi.record_interrupt)
    save_state_snapshot = blocking(_RunApi.save_state_snapshot)
    load_run = blocking(_RunApi.load_run)
    complete_run = blocking(_RunApi.complete_run)
    fail_run = blocking(_RunApi.fail_run)
    cancel_run = blocking(_RunApi.cancel_run)
    summarize_run = blocking(_RunApi.summarize_run)
    list_runs = blocking(_RunApi.list_runs)
    list_attempts = blocking(_RunApi.list_attempts)
    reindex = blocking(_RunApi.reindex)


class AsyncRunStore:
    """The asyncio twin of `RunStore`: the same methods, awaitable."""

    def __init__(self, protocol: RunProtocol, execute: Callable[[Any], Awaitable[Any]]) -> None:
        self._runs = protocol
        self._execute = execute

    create_run = awaiting(_RunApi.create_run)
    record_attempt = awaiting(_RunApi.record_attempt)
    complete_attempt = awaiting(_RunApi.complete_attempt)
    fail_attempt = awaiting(_RunApi.fail_attempt)
    record_interrupt = awaiting(_RunApi.record_interrupt)
    save_state_snapshot = awaiting(_RunApi.save_state_snapshot)
    load_run = awaiting(_RunApi.load_run)
    complete_run = awaiting(_RunApi.complete_run)
    fail_run = awaiting(_RunApi.fail_run)
    cancel_run = awaiting(_RunApi.cancel_run)
    summarize_run = awaiting(_RunApi.summarize_run)
    list_runs = awaiting(_RunApi.list_runs)
    list_attempts = awaiting(_RunApi.list_attempts)
    reindex = awaiting(_RunApi.reindex)
