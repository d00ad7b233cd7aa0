"""Graph-run recording as protocols: transitions applied with compare-and-swap, then indexed.

A run's state is one envelope (kind `stashpoint.run`) under `runs/{run_id}`. Every operation
loads it, applies a pure transition (`runs.transitions`), saves the result with
compare-and-swap and retries on conflict, so concurrent workers completing attempts of one
run lose nothing. The index is written after storage, never before.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pydantic

from stashpoint._sansio import Protocol, Sleep
from stashpoint.envelope import Envelope, utc_now
from stashpoint.errors import (
    AttemptNotFound,
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    GraphDriftError,
    InvalidPayload,
    RunNotFound,
    StashpointError,
    UnsupportedFormat,
)
from stashpoint.ids import new_id, validate_id
from stashpoint.index.protocol import IndexProtocol
from stashpoint.index.requests import PutItems
from stashpoint.retry import RetryPolicy
from stashpoint.runs import transitions
from stashpoint.runs.models import (
    RUN_KIND,
    RUN_SCHEMA_VERSION,
    AttemptStatus,
    CheckpointMetadata,
    Interrupt,
    RunState,
    RunStatus,
    RunSummary,
    TraceContext,
)
from stashpoint.stores.blobs import BlobProtocol
from stashpoint.stores.cas import CasProtocol
from stashpoint.stores.objects import KeyPage, ListKeys

RUN_RETRY = RetryPolicy(max_attempts=100, base_delay=0.005, max_delay=0.25)
"""Retry policy of transition loops: many workers may update one run at once."""

ATTEMPT_SEPARATOR = "~"
"""Separates the run id from the unique part of an attempt id (`{run_id}~{uuid7}`)."""


def run_of(attempt_id: str) -> str:
    """Return the run id embedded in an attempt id (no scan needed to find the run)."""
    run_id, sep, _ = attempt_id.rpartition(ATTEMPT_SEPARATOR)
    if not sep or not run_id:
        raise AttemptNotFound("not an attempt id of this library", object_name=attempt_id)
    return run_id


def state_of(envelope: Envelope) -> RunState:
    """Return the typed run state of an envelope, checking its kind and schema version."""
    if envelope.kind != RUN_KIND:
        raise InvalidPayload(f"not a run: kind is {envelope.kind!r}", object_name=envelope.id)
    if envelope.schema_version > RUN_SCHEMA_VERSION:
        raise UnsupportedFormat(
            f"run schema version {envelope.schema_version} is newer than this library reads",
            object_name=envelope.id,
        )
    try:
        return RunState.model_validate(envelope.payload)
    except pydantic.ValidationError as exc:
        raise InvalidPayload(f"run state is invalid: {exc}", object_name=envelope.id) from exc


class RunProtocol:
    """The graph-run API of seed 004, durable, as protocols run by `RunStore`s."""

    def __init__(
        self,
        cas: CasProtocol,
        blobs: BlobProtocol,
        index: IndexProtocol | None,
        retry: RetryPolicy = RUN_RETRY,
        cache_size: int = 1024,
    ) -> None:
        self.cas = cas
        """Compare-and-swap over the `runs` namespace."""
        self.blobs = blobs
        """Offloads large inputs, outputs and snapshots."""
        self.index = index
        """Run/attempt index, None where the stash has none."""
        self.retry = retry
        """Retry policy of transition loops."""
        # The last envelope this process wrote or read per run: a single writer then saves
        # with one PUT and no GET. A stale entry only costs a conflict and a reload.
        self._latest: OrderedDict[str, Envelope] = OrderedDict()
        self._latest_lock = threading.Lock()
        self._cache_size = cache_size

    # -- the seed's operations -------------------------------------------------------------

    def create_run(
        self,
        graph_name: str,
        *,
        run_id: str | None,
        namespace: str,
        graph_hash: str | None,
        trace_ctx: TraceContext | None,
    ) -> Protocol[str]:
        """Create a running run and return its id."""
        run_id = validate_id(run_id or new_id(), what="run id")
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
        yield from self.cas.compare_and_swap(envelope, None)
        self._remember(envelope)
        if self.index is not None:
            yield from self.index.record(None, state, envelope.revision)
        return run_id

    def record_attempt(
        self,
        run_id: str,
        node_id: str,
        attempt: int,
        input: Any,
        trace_ctx: TraceContext | None,
    ) -> Protocol[str]:
        """Record a running attempt of a node and return its id."""
        attempt_id = f"{validate_id(run_id, what='run id')}{ATTEMPT_SEPARATOR}{new_id()}"
        stored_input = yield from self.blobs.offload(input)
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

    def complete_attempt(
        self, attempt_id: str, output: Any, meta: dict[str, Any]
    ) -> Protocol[None]:
        """Mark an attempt completed with its output."""
        stored_output = yield from self.blobs.offload(output)
        yield from self._apply(
            run_of(attempt_id),
            lambda state, now: transitions.complete_attempt(
                state, attempt_id, output=stored_output, meta=meta, now=now
            ),
        )

    def fail_attempt(self, attempt_id: str, error: str) -> Protocol[None]:
        """Mark an attempt failed."""
        yield from self._apply(
            run_of(attempt_id),
            lambda state, now: transitions.fail_attempt(state, attempt_id, error=error, now=now),
        )

    def record_interrupt(self, attempt_id: str, interrupt: Interrupt) -> Protocol[None]:
        """Mark an attempt and its run interrupted."""
        yield from self._apply(
            run_of(attempt_id),
            lambda state, now: transitions.record_interrupt(
                state, attempt_id, interrupt=interrupt, now=now
            ),
        )

    def save_state_snapshot(
        self, run_id: str, snapshot: dict[str, Any], metadata: CheckpointMetadata | None
    ) -> Protocol[None]:
        """Replace the run's state snapshot (large values become blobs)."""
        stored: dict[str, Any] = {}
        for key, value in snapshot.items():
            stored[key] = yield from self.blobs.offload(value)
        yield from self._apply(
            run_id,
            lambda state, now: transitions.save_state_snapshot(
                state, stored, metadata=metadata, now=now
            ),
        )

    def finish_run(self, run_id: str, status: RunStatus, error: str | None) -> Protocol[None]:
        """Complete or fail a running run."""
        yield from self._apply(
            run_id, lambda state, now: transitions.finish_run(state, status, error=error, now=now)
        )

    def cancel_run(self, run_id: str) -> Protocol[None]:
        """Cancel a running or interrupted run."""
        yield from self._apply(run_id, lambda state, now: transitions.cancel_run(state, now=now))

    def load_run(
        self,
        run_id: str,
        *,
        graph_hash: str | None,
        allow_graph_drift: bool,
        resolve_blobs: bool,
    ) -> Protocol[RunState | None]:
        """Return the run (None if unknown), repairing the index if it lags behind it."""
        try:
            envelope = yield from self.cas.load(run_id)
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
        if self.index is not None:
            # The index is derived: a failed repair must not fail a read.
            with contextlib.suppress(StashpointError):
                yield from self.index.repair(state, envelope.revision)
        if resolve_blobs:
            state = yield from self._resolve(state)
        return state

    def summarize_run(self, run_id: str) -> Protocol[RunSummary | None]:
        """Return the run's summary (None if unknown)."""
        state = yield from self.load_run(
            run_id, graph_hash=None, allow_graph_drift=True, resolve_blobs=False
        )
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

    def require_index(self) -> IndexProtocol:
        """Return the index, or say plainly that this stash has none."""
        if self.index is None:
            raise ConfigurationError(
                "this stash has no index: open it with ?index=dynamodb://TABLE (S3) or use the "
                "local default, which keeps one in SQLite"
            )
        return self.index

    def reindex(self, *, resume: bool, page_size: int = 100) -> Protocol[int]:
        """Rebuild the index from storage; return how many runs were indexed.

        Idempotent (writes are conditional on revision) and resumable: progress is kept in
        the index after every page, and a new call continues after it unless `resume=False`.
        """
        index = self.require_index()
        marker = f"runs:{self.cas.layout.prefix or '-'}"
        start_after = (yield from index.read_marker(marker)) if resume else None
        base = self.cas.layout.namespace_prefix(self.cas.namespace)
        indexed = 0
        while True:
            page: KeyPage = yield ListKeys(base, None, page_size, start_after)
            for key in page.keys:
                run_id = key[len(base) :]
                if "/" in run_id:
                    continue
                try:
                    envelope = yield from self.cas.load(run_id)
                except CheckpointNotFound:
                    continue
                yield PutItems(index.items(None, state_of(envelope), envelope.revision))
                indexed += 1
            if not page.keys:
                break
            start_after = page.keys[-1]
            yield from index.write_marker(marker, start_after)
            if page.next_token is None:
                break
        yield from index.clear_marker(marker)
        return indexed

    # -- the compare-and-swap loop ---------------------------------------------------------

    def _apply(
        self, run_id: str, transition: Callable[[RunState, datetime], RunState]
    ) -> Protocol[RunState]:
        attempt = 0
        while True:
            attempt += 1
            cached = self._cached(run_id)
            envelope = cached
            if envelope is None:
                envelope = yield from self._load(run_id)
            state = state_of(envelope)
            try:
                new_state = transition(state, utc_now())
            except StashpointError:
                if cached is None:
                    raise
                self._forget(run_id)  # judged on a cached state: judge again on a fresh one
                continue
            following = envelope.next(new_state.model_dump(mode="json"))
            try:
                yield from self.cas.compare_and_swap(following, envelope.revision)
            except CheckpointConflict:
                self._forget(run_id)
                if attempt >= self.retry.max_attempts:
                    raise
                yield Sleep(self.retry.delay(min(attempt, 6)))
                continue
            self._remember(following)
            if self.index is not None:
                yield from self.index.record(state, new_state, following.revision)
            return new_state

    def _load(self, run_id: str) -> Protocol[Envelope]:
        try:
            envelope = yield from self.cas.load(run_id)
        except CheckpointNotFound:
            raise RunNotFound("no run with this id", object_name=run_id) from None
        self._remember(envelope)
        return envelope

    def _resolve(self, state: RunState) -> Protocol[RunState]:
        attempts = []
        for record in state.attempts:
            resolved_input = yield from self.blobs.resolve(record.input)
            resolved_output = yield from self.blobs.resolve(record.output)
            attempts.append(
                record.model_copy(update={"input": resolved_input, "output": resolved_output})
            )
        snapshot = {}
        for key, value in state.state_snapshot.items():
            snapshot[key] = yield from self.blobs.resolve(value)
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
