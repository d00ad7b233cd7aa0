"""`RunStore` (blocking) and `AsyncRunStore` (asyncio): the graph-run API of seed 004.

Both run the same protocols from `runs.protocol`; only the execution of requests differs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from stashpoint._sansio import run_async, run_sync
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


class RunStore:
    """Durable per-attempt recording of graph runs. Thread-safe: share one per process.

    Unknown runs raise `RunNotFound`, unknown attempts `AttemptNotFound`, transitions out of
    a final state `TerminalStateConflict`.
    """

    def __init__(self, protocol: RunProtocol, execute: Callable[[Any], Any]) -> None:
        self._runs = protocol
        self._execute = execute

    def create_run(
        self,
        graph_name: str,
        *,
        run_id: str | None = None,
        namespace: str = "default",
        graph_hash: str | None = None,
        trace_ctx: TraceContext | None = None,
    ) -> str:
        """Create a running run; return its id (a new UUIDv7 unless `run_id` is given)."""
        return run_sync(
            self._runs.create_run(
                graph_name,
                run_id=run_id,
                namespace=namespace,
                graph_hash=graph_hash,
                trace_ctx=trace_ctx,
            ),
            self._execute,
        )

    def record_attempt(
        self,
        run_id: str,
        node_id: str,
        attempt: int,
        input: Any = None,
        *,
        trace_ctx: TraceContext | None = None,
    ) -> str:
        """Record a running attempt of `node_id`; return the attempt id."""
        return run_sync(
            self._runs.record_attempt(run_id, node_id, attempt, input, trace_ctx), self._execute
        )

    def complete_attempt(
        self, attempt_id: str, output: Any, meta: dict[str, Any] | None = None
    ) -> None:
        """Mark a running attempt completed with its output and metadata."""
        run_sync(self._runs.complete_attempt(attempt_id, output, meta or {}), self._execute)

    def fail_attempt(self, attempt_id: str, error: str) -> None:
        """Mark a running attempt failed."""
        run_sync(self._runs.fail_attempt(attempt_id, error), self._execute)

    def record_interrupt(self, attempt_id: str, interrupt: Interrupt) -> None:
        """Mark a running attempt, and its run, interrupted."""
        run_sync(self._runs.record_interrupt(attempt_id, interrupt), self._execute)

    def save_state_snapshot(
        self, run_id: str, state: dict[str, Any], *, metadata: CheckpointMetadata | None = None
    ) -> None:
        """Replace the run's state snapshot (with its graph-hash metadata, if given)."""
        run_sync(self._runs.save_state_snapshot(run_id, state, metadata), self._execute)

    def load_run(
        self,
        run_id: str,
        *,
        graph_hash: str | None = None,
        allow_graph_drift: bool = False,
        resolve_blobs: bool = True,
    ) -> RunState | None:
        """Return the run's full state, None if unknown.

        With `graph_hash`, a run recorded with another graph raises `GraphDriftError`
        unless `allow_graph_drift`. Repairs the index if it lags behind storage.
        """
        return run_sync(
            self._runs.load_run(
                run_id,
                graph_hash=graph_hash,
                allow_graph_drift=allow_graph_drift,
                resolve_blobs=resolve_blobs,
            ),
            self._execute,
        )

    def complete_run(self, run_id: str) -> None:
        """Mark a running run completed."""
        run_sync(self._runs.finish_run(run_id, RunStatus.COMPLETED, None), self._execute)

    def fail_run(self, run_id: str, error: str) -> None:
        """Mark a running run failed, keeping the error."""
        run_sync(self._runs.finish_run(run_id, RunStatus.FAILED, error), self._execute)

    def cancel_run(self, run_id: str) -> None:
        """Cancel a running or interrupted run and its running attempts."""
        run_sync(self._runs.cancel_run(run_id), self._execute)

    def summarize_run(self, run_id: str) -> RunSummary | None:
        """Return the run's summary, None if unknown."""
        return run_sync(self._runs.summarize_run(run_id), self._execute)

    def list_runs(
        self,
        *,
        graph_name: str | None = None,
        status: RunStatus | None = None,
        since: datetime | None = None,
        namespace: str = "default",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[RunRow]:
        """Return one page of runs, newest first, from the index only."""
        return run_sync(
            self._runs.list_runs(
                namespace=namespace,
                graph_name=graph_name,
                status=status,
                since=since,
                limit=limit,
                cursor=cursor,
            ),
            self._execute,
        )

    def list_attempts(
        self,
        status: AttemptStatus = AttemptStatus.RUNNING,
        *,
        namespace: str = "default",
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[AttemptRow]:
        """Return one page of attempts in `status` (running by default), from the index."""
        return run_sync(
            self._runs.list_attempts(
                namespace=namespace, status=status, since=since, limit=limit, cursor=cursor
            ),
            self._execute,
        )

    def reindex(self, *, resume: bool = True) -> int:
        """Rebuild the index from storage (idempotent, resumable); return runs indexed."""
        return run_sync(self._runs.reindex(resume=resume), self._execute)


class AsyncRunStore:
    """The asyncio twin of `RunStore`: the same methods, awaitable."""

    def __init__(self, protocol: RunProtocol, execute: Callable[[Any], Awaitable[Any]]) -> None:
        self._runs = protocol
        self._execute = execute

    async def create_run(
        self,
        graph_name: str,
        *,
        run_id: str | None = None,
        namespace: str = "default",
        graph_hash: str | None = None,
        trace_ctx: TraceContext | None = None,
    ) -> str:
        """Create a running run; return its id (see `RunStore.create_run`)."""
        return await run_async(
            self._runs.create_run(
                graph_name,
                run_id=run_id,
                namespace=namespace,
                graph_hash=graph_hash,
                trace_ctx=trace_ctx,
            ),
            self._execute,
        )

    async def record_attempt(
        self,
        run_id: str,
        node_id: str,
        attempt: int,
        input: Any = None,
        *,
        trace_ctx: TraceContext | None = None,
    ) -> str:
        """Record a running attempt; return its id."""
        return await run_async(
            self._runs.record_attempt(run_id, node_id, attempt, input, trace_ctx), self._execute
        )

    async def complete_attempt(
        self, attempt_id: str, output: Any, meta: dict[str, Any] | None = None
    ) -> None:
        """Mark a running attempt completed."""
        await run_async(self._runs.complete_attempt(attempt_id, output, meta or {}), self._execute)

    async def fail_attempt(self, attempt_id: str, error: str) -> None:
        """Mark a running attempt failed."""
        await run_async(self._runs.fail_attempt(attempt_id, error), self._execute)

    async def record_interrupt(self, attempt_id: str, interrupt: Interrupt) -> None:
        """Mark a running attempt, and its run, interrupted."""
        await run_async(self._runs.record_interrupt(attempt_id, interrupt), self._execute)

    async def save_state_snapshot(
        self, run_id: str, state: dict[str, Any], *, metadata: CheckpointMetadata | None = None
    ) -> None:
        """Replace the run's state snapshot."""
        await run_async(self._runs.save_state_snapshot(run_id, state, metadata), self._execute)

    async def load_run(
        self,
        run_id: str,
        *,
        graph_hash: str | None = None,
        allow_graph_drift: bool = False,
        resolve_blobs: bool = True,
    ) -> RunState | None:
        """Return the run's full state, None if unknown (see `RunStore.load_run`)."""
        return await run_async(
            self._runs.load_run(
                run_id,
                graph_hash=graph_hash,
                allow_graph_drift=allow_graph_drift,
                resolve_blobs=resolve_blobs,
            ),
            self._execute,
        )

    async def complete_run(self, run_id: str) -> None:
        """Mark a running run completed."""
        await run_async(self._runs.finish_run(run_id, RunStatus.COMPLETED, None), self._execute)

    async def fail_run(self, run_id: str, error: str) -> None:
        """Mark a running run failed."""
        await run_async(self._runs.finish_run(run_id, RunStatus.FAILED, error), self._execute)

    async def cancel_run(self, run_id: str) -> None:
        """Cancel a running or interrupted run."""
        await run_async(self._runs.cancel_run(run_id), self._execute)

    async def summarize_run(self, run_id: str) -> RunSummary | None:
        """Return the run's summary, None if unknown."""
        return await run_async(self._runs.summarize_run(run_id), self._execute)

    async def list_runs(
        self,
        *,
        graph_name: str | None = None,
        status: RunStatus | None = None,
        since: datetime | None = None,
        namespace: str = "default",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[RunRow]:
        """Return one page of runs, newest first, from the index only."""
        return await run_async(
            self._runs.list_runs(
                namespace=namespace,
                graph_name=graph_name,
                status=status,
                since=since,
                limit=limit,
                cursor=cursor,
            ),
            self._execute,
        )

    async def list_attempts(
        self,
        status: AttemptStatus = AttemptStatus.RUNNING,
        *,
        namespace: str = "default",
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[AttemptRow]:
        """Return one page of attempts in `status`, from the index."""
        return await run_async(
            self._runs.list_attempts(
                namespace=namespace, status=status, since=since, limit=limit, cursor=cursor
            ),
            self._execute,
        )

    async def reindex(self, *, resume: bool = True) -> int:
        """Rebuild the index from storage; return runs indexed."""
        return await run_async(self._runs.reindex(resume=resume), self._execute)
