"""`RunStore` (blocking) and `AsyncRunStore` (asyncio): the graph-run API of seed 004.

A run's state is one envelope (kind `stashpoint.run`) under `runs/{run_id}`. Every
transition loads it, applies a pure transition (`runs.transitions`), saves the result with
the store's one optimistic-update loop (`CompareAndSwap.update`), so concurrent workers
completing attempts of one run lose nothing. The index is written after storage, never
before (`runs.index`).

The API is defined once, in `_RunApi`: each operation has its signature, docstring and
logic there, as steps. `RunStore` and `AsyncRunStore` inherit it and differ only in their
driver (`stashpoint.twins`).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pydantic

from stashpoint.codec import check_json
from stashpoint.envelope import Envelope, typed_payload, utc_now
from stashpoint.errors import (
    AttemptNotFound,
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    GraphDriftError,
    InvalidArgument,
    RunNotFound,
    StashpointError,
)
from stashpoint.ids import new_id, validate_id
from stashpoint.retry import RetryPolicy
from stashpoint.runs import transitions
from stashpoint.runs.index import RunIndex
from stashpoint.runs.models import (
    RUN_KIND,
    RUN_SCHEMA_VERSION,
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
from stashpoint.steps import Steps, ask
from stashpoint.stores.blobs import Blobs
from stashpoint.stores.cas import CompareAndSwap
from stashpoint.stores.objects import ListKeys
from stashpoint.twins import Awaiting, Blocking, operation

RUN_RETRY = RetryPolicy(max_attempts=100, base_delay=0.005, max_delay=0.25)
"""Retry policy of transition loops: many workers may update one run at once."""

ATTEMPT_SEPARATOR = "~"
"""Separates the run id from the unique part of an attempt id (`{run_id}~{uuid7}`)."""


def run_of(attempt_id: str) -> str:
    """Return the run id embedded in an attempt id (no scan needed to find the run)."""
    if not isinstance(attempt_id, str):
        raise InvalidArgument(f"attempt id must be a str, not {attempt_id!r}")
    run_id, sep, _ = attempt_id.rpartition(ATTEMPT_SEPARATOR)
    if not sep or not run_id:
        raise AttemptNotFound("not an attempt id of this library", object_name=attempt_id)
    return run_id


def state_of(envelope: Envelope) -> RunState:
    """Return the typed run state of an envelope, checking its kind and schema version."""
    return typed_payload(
        envelope, RunState, kind=RUN_KIND, schema_version=RUN_SCHEMA_VERSION, what="run"
    )


def _text(value: object, name: str, *, optional: bool = False) -> Any:
    """Return `value` if it is a non-empty str (or None when `optional`), else refuse it."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{name} must be a non-empty str, not {value!r}")
    return value


def _of(value: object, kind: type[Any], name: str, *, optional: bool = True) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, kind):
        raise InvalidArgument(f"{name} must be a {kind.__name__}, not {type(value).__name__}")
    return value


def _status(value: object, kind: type[RunStatus] | type[AttemptStatus]) -> Any:
    if value is None:
        return None
    try:
        return kind(str(value)) if isinstance(value, str) else kind(value)  # type: ignore[arg-type]
    except ValueError:
        known = ", ".join(m.value for m in kind)
        raise InvalidArgument(f"unknown status {value!r}: use one of {known}") from None


def _moment(value: object, name: str) -> datetime | None:
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise InvalidArgument(f"{name} must be a timezone-aware datetime, not {value!r}")
    return value


class _RunApi:
    """The run operations, defined once as steps; see `RunStore`."""

    def __init__(
        self,
        cas: CompareAndSwap,
        blobs: Blobs,
        index: RunIndex | None,
        execute: Callable[[Any], Any],
        *,
        retry: RetryPolicy = RUN_RETRY,
        cache_size: int = 1024,
    ) -> None:
        self._cas = cas
        self._blobs = blobs
        self._index = index
        self._execute = execute
        self._retry = retry
        # The last envelope this process wrote or read per run: a single writer then saves
        # with one PUT and no GET. A stale entry only costs a conflict and a reload.
        self._latest: OrderedDict[str, Envelope] = OrderedDict()
        self._latest_lock = threading.Lock()
        self._cache_size = cache_size

    # -- the seed's operations -------------------------------------------------------------

    @operation
    def create_run(
        self,
        graph_name: str,
        *,
        run_id: str | None = None,
        namespace: str = "default",
        graph_hash: str | None = None,
        trace_ctx: TraceContext | None = None,
    ) -> Steps[str]:
        """Create a running run; return its id (a new UUIDv7 unless `run_id` is given)."""
        run_id = validate_id(new_id() if run_id is None else run_id, what="run id")
        _text(graph_name, "graph_name")
        validate_id(namespace, what="namespace")
        _text(graph_hash, "graph_hash", optional=True)
        _of(trace_ctx, TraceContext, "trace_ctx")
        now = utc_now()
        state = RunState(
            run_id=run_id,
            graph_name=graph_name,
            namespace=namespace,
            graph_hash=graph_hash,
            trace_ctx=trace_ctx,
            created_at=now,
            updated_at=now,
        )
        envelope = Envelope.initial(
            run_id, run_id, RUN_KIND, RUN_SCHEMA_VERSION, state.model_dump(mode="json")
        )
        yield from self._cas.compare_and_swap(envelope, None)
        self._remember(envelope)
        if self._index is not None:
            yield from self._index.record(None, state, envelope.revision)
        return run_id

    @operation
    def record_attempt(
        self,
        run_id: str,
        node_id: str,
        attempt: int,
        input: Any = None,
        *,
        trace_ctx: TraceContext | None = None,
    ) -> Steps[str]:
        """Record a running attempt of `node_id`; return the attempt id.

        Recording an attempt resumes an interrupted run.
        """
        attempt_id = f"{validate_id(run_id, what='run id')}{ATTEMPT_SEPARATOR}{new_id()}"
        _text(node_id, "node_id")
        if type(attempt) is not int or attempt < 0:
            raise InvalidArgument(f"attempt must be an int >= 0, not {attempt!r}")
        _of(trace_ctx, TraceContext, "trace_ctx")
        stored_input = yield from self._blobs.offload(input, "input")
        yield from self._apply(
            run_id,
            lambda state, now: transitions.record_attempt(
                state,
                attempt_id=attempt_id,
                node_id=node_id,
                attempt=attempt,
                input=stored_input,
                trace_ctx=trace_ctx,
                now=now,
            ),
        )
        return attempt_id

    @operation
    def complete_attempt(
        self, attempt_id: str, output: Any, meta: dict[str, Any] | None = None
    ) -> Steps[None]:
        """Mark a running attempt completed with its output and metadata."""
        _of(meta, dict, "meta")
        stored_output = yield from self._blobs.offload(output, "output")
        check_json(meta or {}, self._cas.codec.limits.max_depth, start_depth=5, root="meta")
        yield from self._apply(
            run_of(attempt_id),
            lambda state, now: transitions.complete_attempt(
                state, attempt_id, output=stored_output, meta=meta or {}, now=now
            ),
        )

    @operation
    def fail_attempt(self, attempt_id: str, error: str) -> Steps[None]:
        """Mark a running attempt failed."""
        _text(error, "error")
        yield from self._apply(
            run_of(attempt_id),
            lambda state, now: transitions.fail_attempt(state, attempt_id, error=error, now=now),
        )

    @operation
    def record_interrupt(self, attempt_id: str, interrupt: Interrupt) -> Steps[None]:
        """Mark a running attempt, and its run, interrupted."""
        _of(interrupt, Interrupt, "interrupt", optional=False)
        yield from self._apply(
            run_of(attempt_id),
            lambda state, now: transitions.record_interrupt(
                state, attempt_id, interrupt=interrupt, now=now
            ),
        )

    @operation
    def save_state_snapshot(
        self, run_id: str, state: dict[str, Any], *, metadata: CheckpointMetadata | None = None
    ) -> Steps[None]:
        """Replace the run's state snapshot (with its graph-hash metadata, if given).

        Large values are stored once as blobs.
        """
        _of(state, dict, "state", optional=False)
        _of(metadata, CheckpointMetadata, "metadata")
        stored: dict[str, Any] = {}
        for key, value in state.items():
            stored[key] = yield from self._blobs.offload(value, f"state.{key}")
        yield from self._apply(
            run_id,
            lambda current, now: transitions.save_state_snapshot(
                current, stored, metadata=metadata, now=now
            ),
        )

    @operation
    def load_run(
        self,
        run_id: str,
        *,
        graph_hash: str | None = None,
        allow_graph_drift: bool = False,
        resolve_blobs: bool = True,
    ) -> Steps[RunState | None]:
        """Return the run's full state, None if unknown.

        With `graph_hash`, a run recorded with another graph raises `GraphDriftError`
        unless `allow_graph_drift`. Repairs the index if it lags behind storage.
        """
        return self._load_run(run_id, graph_hash, allow_graph_drift, resolve_blobs)

    @operation
    def complete_run(self, run_id: str) -> Steps[None]:
        """Mark a running run completed (only from running: else `TerminalStateConflict`)."""
        return self._finish_run(run_id, RunStatus.COMPLETED, None)

    @operation
    def fail_run(self, run_id: str, error: str) -> Steps[None]:
        """Mark a running run failed, keeping the error."""
        _text(error, "error")
        return self._finish_run(run_id, RunStatus.FAILED, error)

    @operation
    def cancel_run(self, run_id: str) -> Steps[None]:
        """Cancel a running or interrupted run and its running attempts."""
        yield from self._apply(run_id, lambda state, now: transitions.cancel_run(state, now=now))

    @operation
    def summarize_run(self, run_id: str) -> Steps[RunSummary | None]:
        """Return the run's summary, None if unknown."""
        state = yield from self._load_run(run_id, None, True, False)
        if state is None:
            return None
        trace_id = next(
            (a.meta["trace_id"] for a in state.attempts if isinstance(a.meta.get("trace_id"), str)),
            None,
        )
        trace_ctx = next((a.trace_ctx for a in state.attempts if a.trace_ctx), state.trace_ctx)
        return RunSummary(
            run_id=state.run_id,
            graph_name=state.graph_name,
            status=state.status,
            total_nodes_executed=len({a.node_id for a in state.attempts}),
            total_attempts=len(state.attempts),
            failed_attempts=sum(1 for a in state.attempts if a.status is AttemptStatus.FAILED),
            trace_id=trace_id,
            trace_ctx=trace_ctx,
            started_at=state.created_at,
            finished_at=None if state.status is RunStatus.RUNNING else state.updated_at,
        )

    # -- listings (index only) -------------------------------------------------------------

    @operation
    def list_runs(
        self,
        *,
        graph_name: str | None = None,
        status: RunStatus | None = None,
        since: datetime | None = None,
        namespace: str = "default",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Steps[Page[RunRow]]:
        """Return one page of runs, newest first, from the index only."""
        return self._require_index().list_runs(
            namespace=validate_id(namespace, what="namespace"),
            graph_name=_text(graph_name, "graph_name", optional=True),
            status=_status(status, RunStatus),
            since=_moment(since, "since"),
            limit=limit,
            cursor=_text(cursor, "cursor", optional=True),
        )

    @operation
    def list_attempts(
        self,
        status: AttemptStatus = AttemptStatus.RUNNING,
        *,
        namespace: str = "default",
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Steps[Page[AttemptRow]]:
        """Return one page of attempts in `status` (running by default), from the index."""
        return self._require_index().list_attempts(
            namespace=validate_id(namespace, what="namespace"),
            status=_status(status, AttemptStatus),
            since=_moment(since, "since"),
            limit=limit,
            cursor=_text(cursor, "cursor", optional=True),
        )

    @operation
    def reindex(self, *, resume: bool = True) -> Steps[int]:
        """Make the index equal to storage (idempotent, resumable); return runs indexed.

        Every run's items are compared with its head: stale, wrong (a status that storage
        does not say, a revision from the future) and missing items are rewritten, items
        storage does not know are deleted. Progress is kept in the index after every page,
        and a new call continues after it unless `resume=False`.
        """
        index = self._require_index()
        marker = f"runs:{self._cas.layout.prefix or '-'}"
        start_after = (yield from index.read_marker(marker)) if resume else None
        base = self._cas.layout.namespace_prefix(self._cas.namespace)
        indexed = 0
        while True:
            page = yield from ask(ListKeys(base, None, 100, start_after))
            for key in page.keys:
                run_id = key[len(base) :]
                if "/" in run_id:
                    continue
                try:
                    envelope = yield from self._cas.load(run_id)
                except CheckpointNotFound:
                    continue
                state = state_of(envelope)
                yield from index.repair(state, envelope.revision, self._head(run_id))
                indexed += 1
            if not page.keys:
                break
            start_after = page.keys[-1]
            yield from index.write_marker(marker, start_after)
            if page.next_token is None:
                break
        yield from index.clear_marker(marker)
        return indexed

    # -- logic shared by the operations ----------------------------------------------------

    def _head(self, run_id: str) -> Callable[[], Steps[int | None]]:
        """Return steps that read the run head's revision afresh (one HEAD on S3)."""

        def read() -> Steps[int | None]:
            facts = yield from self._cas.read_head(self._cas.key(run_id))
            return None if facts is None else facts.revision

        return read

    def _require_index(self) -> RunIndex:
        if self._index is None:
            raise ConfigurationError(
                "this stash has no index: open it with ?index=dynamodb://TABLE (S3) or use the "
                "local default, which keeps one in SQLite"
            )
        return self._index

    def _load_run(
        self, run_id: str, graph_hash: str | None, allow_graph_drift: bool, resolve_blobs: bool
    ) -> Steps[RunState | None]:
        try:
            envelope = yield from self._cas.load(run_id)
        except CheckpointNotFound:
            return None
        self._remember(envelope)
        state = state_of(envelope)
        if (
            graph_hash is not None
            and state.graph_hash is not None
            and state.graph_hash != graph_hash
            and not allow_graph_drift
        ):
            raise GraphDriftError(run_id, stored_hash=state.graph_hash, current_hash=graph_hash)
        if self._index is not None:
            # The index is derived: a failed repair must not fail a read.
            with contextlib.suppress(StashpointError):
                yield from self._index.repair(state, envelope.revision, self._head(run_id))
        if resolve_blobs:
            state = yield from self._resolve(state)
        return state

    def _finish_run(self, run_id: str, status: RunStatus, error: str | None) -> Steps[None]:
        yield from self._apply(
            run_id, lambda state, now: transitions.finish_run(state, status, error=error, now=now)
        )

    def _apply(
        self, run_id: str, transition: Callable[[RunState, datetime], RunState]
    ) -> Steps[RunState]:
        """Apply a pure transition with the store's optimistic-update loop, then index it."""
        seen: list[tuple[RunState, RunState]] = []

        def mutate(envelope: Envelope) -> Any:
            old = state_of(envelope)
            try:
                new = transition(old, utc_now())
            except pydantic.ValidationError as exc:
                raise InvalidArgument(f"invalid run data: {exc}", object_name=run_id) from None
            seen.append((old, new))
            return new.model_dump(mode="json")

        try:
            saved = yield from self._cas.update(
                run_id, mutate, retry=self._retry, known=self._cached(run_id)
            )
        except CheckpointNotFound:
            raise RunNotFound("no run with this id", object_name=run_id) from None
        except CheckpointConflict:
            self._forget(run_id)
            raise
        self._remember(saved)
        old, new = seen[-1]
        if self._index is not None:
            yield from self._index.record(old, new, saved.revision)
        return new

    def _resolve(self, state: RunState) -> Steps[RunState]:
        attempts = []
        for record in state.attempts:
            resolved_input = yield from self._blobs.resolve(record.input)
            resolved_output = yield from self._blobs.resolve(record.output)
            attempts.append(
                record.model_copy(update={"input": resolved_input, "output": resolved_output})
            )
        snapshot = {}
        for key, value in state.state_snapshot.items():
            snapshot[key] = yield from self._blobs.resolve(value)
        return state.model_copy(update={"attempts": tuple(attempts), "state_snapshot": snapshot})

    def _cached(self, run_id: str) -> Envelope | None:
        with self._latest_lock:
            return self._latest.get(run_id)

    def _remember(self, envelope: Envelope) -> None:
        with self._latest_lock:
            current = self._latest.get(envelope.id)
            if current is None or current.revision <= envelope.revision:
                self._latest[envelope.id] = envelope
                self._latest.move_to_end(envelope.id)
            while len(self._latest) > self._cache_size:
                self._latest.popitem(last=False)

    def _forget(self, run_id: str) -> None:
        with self._latest_lock:
            self._latest.pop(run_id, None)


class RunStore(Blocking, _RunApi):
    """Durable per-attempt recording of graph runs. Thread-safe: share one per process.

    Unknown runs raise `RunNotFound`, unknown attempts `AttemptNotFound`, transitions out of
    a final state `TerminalStateConflict`.
    """


class AsyncRunStore(Awaiting, _RunApi):
    """The asyncio twin of `RunStore`: the same methods, awaitable."""
