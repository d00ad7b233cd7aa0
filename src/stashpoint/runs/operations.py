"""The graph-run operations, defined once as steps: `RunOperations`.

A run is an append-only log (`runs.journal`): every transition applies a pure transition
(`runs.transitions`) to the small run head and appends the head and the transition's
records after the version it read, so concurrent workers completing attempts of one run
lose nothing (a lost race re-reads the head and applies the transition again) and a
transition costs the same at attempt 10,000 as at attempt 10. The index is written after
storage, never before (`runs.index`): one item per transition, two when an attempt is
recorded or ends.

`RunStore` and `AsyncRunStore` (`runs.store`) are this class with a driver
(`stashpoint.twins`). A plain `RunOperations` (`owner_view()`) is the same operations as
typed steps, for logic that runs them inside its own steps (durable runs, agent turns):
`ops.record_attempt(run_id, ...)` returns `Steps[str]`, checked by mypy.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Generic, TypeVar

import pydantic

from stashpoint.cache import Lru
from stashpoint.codec import check_json, pointer_token
from stashpoint.deadline import Deadline
from stashpoint.errors import (
    AttemptNotFound,
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    GraphDriftError,
    InvalidArgument,
    Purged,
    RunNotFound,
    StashpointError,
    described,
)
from stashpoint.ids import new_id, validate_id
from stashpoint.logs.format import LogKeys
from stashpoint.logs.log import LogHead, LogSteps
from stashpoint.logs.state import Known, LoggedState
from stashpoint.progress import OnProgress, Progress, silent
from stashpoint.retry import RetryPolicy
from stashpoint.runs import callbacks, journal, transitions
from stashpoint.runs.index import RunIndex
from stashpoint.runs.journal import parse_head
from stashpoint.runs.models import (
    RUN_LOG_KIND,
    RUN_LOG_SCHEMA_VERSION,
    AttemptRow,
    CheckpointMetadata,
    Interrupt,
    Page,
    ReindexReport,
    RunHead,
    RunRow,
    RunState,
    RunSummary,
    SignalReceipt,
    TraceContext,
)
from stashpoint.runs.transitions import Change
from stashpoint.status import AttemptStatus, RunStatus
from stashpoint.steps import Now, Steps, ask
from stashpoint.stores.blobs import Blobs
from stashpoint.twins import operation

log = logging.getLogger("stashpoint")

DurableT = TypeVar("DurableT")
FleetT = TypeVar("FleetT")

RUN_RETRY = RetryPolicy(max_attempts=400, base_delay=0.005, max_delay=0.25)
"""Retry policy of transition loops: many workers may update one run at once. A worker
that just won appends again from its cached head in one round trip while one that lost
reads first, so on a busy machine a loser can lose many times in a row: 400 tries (about
100 s at the longest delay) before the last conflict is raised."""

CLOCK_SKEW = timedelta(seconds=5)
"""How far apart two workers' clocks may be: a lease counts as run out only this long
after its expiry, read on the lister's clock against the expiry the worker wrote on its
own. Safety never rests on it: a worker that takes over an attempt wrongly judged
abandoned fences the other, which then stores nothing."""

_HELD_RUNS = 65_536
"""Runs whose owner epoch a store remembers (the most recently created or taken over)."""

ATTEMPT_SEPARATOR = "~"
"""Separates the run id from the unique part of an attempt id (`{run_id}~{uuid7}`)."""


def run_of(attempt_id: str) -> str:
    """Return the run id embedded in an attempt id (no scan needed to find the run)."""
    if not isinstance(attempt_id, str):
        raise InvalidArgument(f"attempt id must be a str, not {described(attempt_id)}")
    run_id, sep, _ = attempt_id.rpartition(ATTEMPT_SEPARATOR)
    if not sep or not run_id:
        raise AttemptNotFound("not an attempt id of this library", object_name=attempt_id)
    return run_id


def _text(value: object, name: str, *, optional: bool = False) -> Any:
    """Return `value` if it is a non-empty str (or None when `optional`), else refuse it."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{name} must be a non-empty str, not {described(value)}")
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


def _seconds(value: object, name: str) -> float | None:
    """Return a duration (a timedelta, or seconds) as seconds > 0, None for None."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if type(seconds) not in (int, float) or not 0 < seconds < 10**9:  # type: ignore[operator]
        raise InvalidArgument(f"{name} must be a positive duration, not {described(value)}")
    return float(seconds)  # type: ignore[arg-type]


def _moment(value: object, name: str) -> datetime | None:
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise InvalidArgument(f"{name} must be a timezone-aware datetime, not {described(value)}")
    return value


@dataclass(frozen=True)
class RunRead:
    """A whole run read once (`read_run`)."""

    state: RunState
    """The run with every attempt, blobs resolved."""
    revision: int
    """The run's revision when read."""
    running: list[AttemptRow]
    """Its running attempts, with their leases."""


@dataclass(frozen=True)
class TakenOver:
    """The outcome of `take_over_read`."""

    epoch: int
    """The new owner epoch."""
    at: datetime
    """When the takeover was written (when the attempts it ended, ended)."""
    unchanged: bool
    """Whether nothing was written to the run between the read and the takeover."""


class _RunForm:
    """How a run's head is kept in its log (`logs.state.StateForm`)."""

    kind = RUN_LOG_KIND
    schema_version = RUN_LOG_SCHEMA_VERSION

    def __init__(self, keys: LogKeys) -> None:
        self.keys = keys

    def parse(self, head: LogHead) -> RunHead:
        """Return the typed run head a log's latest version stores."""
        name = self.keys.entries_prefix(head.log_id)
        return parse_head(head.state, head.kind, head.schema_version, head.log_id, name)

    def document(self, state: RunHead) -> dict[str, Any]:
        """Return what an entry stores of the head."""
        return journal.head_document(state)


def _revision(known: Known[RunHead]) -> int:
    """Return the run's revision (what the index items of this head carry)."""
    return known.state.revision_base + known.version


def _no_run(run_id: str) -> Callable[[], RunHead]:
    def missing() -> RunHead:
        raise RunNotFound("no run with this id", object_name=run_id)

    return missing


def _attempt_id(run_id: str) -> str:
    """Return a new attempt id of `run_id` (`{run_id}~{uuid7}`)."""
    return f"{validate_id(run_id, what='run id')}{ATTEMPT_SEPARATOR}{new_id()}"


def _signal_name(name: object) -> str:
    """Check an event's name: a step name (non-empty, no '[')."""
    if not isinstance(name, str) or not name or "[" in name or len(name) > 200:
        raise InvalidArgument(
            f"an event name is a non-empty str of at most 200 characters without '[', "
            f"not {described(name)}"
        )
    return name


class RunOperations(Generic[DurableT, FleetT]):
    """The run operations, defined once as steps; see `RunStore` for what each does."""

    _durable_type: Callable[..., DurableT]
    _fleet_type: Callable[..., FleetT]

    def __init__(
        self,
        logs: LogSteps,
        blobs: Blobs,
        index: RunIndex | None,
        execute: Callable[[Any], Any],
        *,
        retry: RetryPolicy = RUN_RETRY,
        cache_size: int = 1024,
        fleet_logs: LogSteps | None = None,
    ) -> None:
        self._logs = logs
        self._fleet_logs = fleet_logs
        self._blobs = blobs
        self._index = index
        self.driver = execute
        """Runs this object's requests: what its operations' steps are driven with."""
        self._retry = retry
        # The one log-backed state: the last head this process wrote or read per run lets
        # a single writer append with one PUT and no read (a stale one costs a conflict).
        self._runs = LoggedState(
            logs,
            _RunForm(logs.keys),
            retry=retry,
            max_attempts=retry.max_attempts,
            cache_size=cache_size,
        )
        # The owner epoch this store holds per run (from create_run or takeover): its writes
        # to that run are refused with `Fenced` once another store takes the run over.
        self._epochs: Lru[str, int] = Lru(_HELD_RUNS)
        self.clock_skew = CLOCK_SKEW
        """How long after its expiry a lease counts as run out (`CLOCK_SKEW`)."""

    # -- the core run operations -------------------------------------------------------------

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
        """Create a running run; return its id (a new UUIDv7 unless `run_id` is given).

        `CheckpointConflict` if a run with this id exists.
        """
        run_id = validate_id(new_id() if run_id is None else run_id, what="run id")
        _text(graph_name, "graph_name")
        validate_id(namespace, what="namespace")
        _text(graph_hash, "graph_hash", optional=True)
        _of(trace_ctx, TraceContext, "trace_ctx")
        now = yield from ask(Now())
        head = RunHead(
            run_id=run_id,
            graph_name=graph_name,
            namespace=namespace,
            graph_hash=graph_hash,
            trace_ctx=trace_ctx,
            created_at=now,
            updated_at=now,
        )
        # Appending after no head creates the log with one create-only PUT: of two
        # creators exactly one succeeds, and the other learns the run exists.
        try:
            yield from self._append(Known(head, None), Change(head))
        except CheckpointConflict:
            raise CheckpointConflict(
                run_id, expected_revision=None, message="a run with this id exists"
            ) from None
        self._hold(run_id, head.epoch)
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
        lease: timedelta | float | None = None,
        worker: dict[str, str] | None = None,
    ) -> Steps[str]:
        """Record a running attempt of `node_id`; return the attempt id.

        Recording an attempt resumes an interrupted run. With `lease` (a duration, or
        seconds), the worker promises to call `heartbeat` at least that often; an attempt
        whose lease runs out is listed as abandoned (`list_attempts(abandoned=True)`).
        `worker` says where it runs (`stashpoint.spot.compute_identity()`).
        """
        attempt_id = _attempt_id(run_id)
        _text(node_id, "node_id")
        if type(attempt) is not int or attempt < 0:
            raise InvalidArgument(f"attempt must be an int >= 0, not {described(attempt)}")
        _of(trace_ctx, TraceContext, "trace_ctx")
        lease_seconds = _seconds(lease, "lease")
        if worker is not None and not (
            isinstance(worker, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in worker.items())
        ):
            raise InvalidArgument(f"worker must be a dict of str to str, not {described(worker)}")
        stored_input = yield from self._blobs.offload(input, "input", owner=run_id)
        yield from self._apply(
            run_id,
            lambda head, now: transitions.record_attempt(
                head,
                attempt_id=attempt_id,
                node_id=node_id,
                attempt=attempt,
                input=stored_input,
                trace_ctx=trace_ctx,
                now=now,
                lease_seconds=lease_seconds,
                worker=worker,
            ),
        )
        return attempt_id

    @operation
    def record_ended_attempt(
        self,
        run_id: str,
        node_id: str,
        attempt: int,
        input: Any = None,
        *,
        started_at: datetime,
        output: Any = None,
        error: str | None = None,
    ) -> Steps[str]:
        """Record an attempt that already ran, with its outcome, in one append; return its id.

        Completed with `output` when `error` is None, else failed with `error`. For work
        done before it is recorded: an at-least-once step without a lease costs one write,
        and a crash before it loses only the work, which then runs again.
        """
        attempt_id = _attempt_id(run_id)
        _text(node_id, "node_id")
        if type(attempt) is not int or attempt < 0:
            raise InvalidArgument(f"attempt must be an int >= 0, not {described(attempt)}")
        started = _moment(started_at, "started_at")
        if started is None:
            raise InvalidArgument("started_at must be a timezone-aware datetime")
        _text(error, "error", optional=True)
        stored_input = yield from self._blobs.offload(input, "input", owner=run_id)
        stored_output = yield from self._blobs.offload(output, "output", owner=run_id)
        yield from self._apply(
            run_id,
            lambda head, now: transitions.record_ended_attempt(
                head, attempt_id=attempt_id, node_id=node_id, attempt=attempt,
                input=stored_input, started_at=min(started, now), now=now,
                output=stored_output, error=error,
            ),
        )  # fmt: skip
        return attempt_id

    @operation
    def record_attempts(
        self,
        run_id: str,
        attempts: Sequence[tuple[str, int, Any]],
        *,
        lease: timedelta | float | None = None,
    ) -> Steps[list[str]]:
        """Record running attempts of several nodes in one append; return their ids.

        `attempts` are `(node_id, attempt, input)`. One write however many (a batch of
        mapped steps); the index gets the run's item and each attempt's.
        """
        validate_id(run_id, what="run id")
        if not isinstance(attempts, Sequence) or not attempts:
            raise InvalidArgument("attempts must be a non-empty sequence of (node, n, input)")
        lease_seconds = _seconds(lease, "lease")
        planned: list[tuple[str, str, int, Any]] = []
        for entry in attempts:
            if not (isinstance(entry, tuple) and len(entry) == 3):
                raise InvalidArgument(
                    f"an attempt is (node_id, attempt, input), not {described(entry)}"
                )
            node_id, attempt, value = entry
            _text(node_id, "node_id")
            if type(attempt) is not int or attempt < 0:
                raise InvalidArgument(f"attempt must be an int >= 0, not {described(attempt)}")
            stored = yield from self._blobs.offload(value, "input", owner=run_id)
            planned.append((f"{run_id}{ATTEMPT_SEPARATOR}{new_id()}", node_id, attempt, stored))

        def record(head: RunHead, now: datetime) -> Change:
            return transitions.compose(head, [
                partial(
                    transitions.record_attempt, attempt_id=attempt_id, node_id=node_id,
                    attempt=attempt, input=stored, trace_ctx=None, now=now,
                    lease_seconds=lease_seconds,
                )
                for attempt_id, node_id, attempt, stored in planned
            ])  # fmt: skip

        yield from self._apply(run_id, record)
        return [attempt_id for attempt_id, *_ in planned]

    @operation
    def end_attempts(
        self,
        run_id: str,
        *,
        completed: Mapping[str, Any] | None = None,
        failed: Mapping[str, str] | None = None,
    ) -> Steps[None]:
        """End running attempts of one run in one append.

        `completed` maps attempt ids to outputs, `failed` to errors.
        """
        validate_id(run_id, what="run id")
        _of(completed, Mapping, "completed")
        _of(failed, Mapping, "failed")
        ids = [*(completed or {}), *(failed or {})]
        if not ids or len(set(ids)) != len(ids):
            raise InvalidArgument("end each attempt once, and at least one")
        for attempt_id in ids:
            if run_of(attempt_id) != run_id:
                raise InvalidArgument(f"{attempt_id!r} is not an attempt of run {run_id!r}")
        outputs: dict[str, Any] = {}
        for attempt_id, output in (completed or {}).items():
            outputs[attempt_id] = yield from self._blobs.offload(output, "output", owner=run_id)
        errors: dict[str, str] = {a: _text(error, "error") for a, error in (failed or {}).items()}

        def end(head: RunHead, now: datetime) -> Change:
            return transitions.compose(head, [
                *(
                    partial(transitions.complete_attempt, attempt_id=a, output=o, meta={}, now=now)
                    for a, o in outputs.items()
                ),
                *(
                    partial(transitions.fail_attempt, attempt_id=a, error=e, now=now)
                    for a, e in errors.items()
                ),
            ])  # fmt: skip

        yield from self._apply(run_id, end)

    @operation
    def heartbeat(self, attempt_id: str) -> Steps[None]:
        """Say a running attempt's worker is alive: its lease starts again from now."""
        yield from self._apply(
            run_of(attempt_id),
            lambda head, now: transitions.heartbeat(head, attempt_id, now=now),
        )

    @operation
    def heartbeats(self, run_id: str, attempt_ids: Sequence[str]) -> Steps[None]:
        """Renew the leases of several running attempts of one run in one append.

        A batch of mapped steps beats with it: one write per beat, however many items.
        """
        validate_id(run_id, what="run id")
        if isinstance(attempt_ids, str) or not isinstance(attempt_ids, Sequence) or not attempt_ids:
            raise InvalidArgument("attempt_ids must be a non-empty sequence of attempt ids")
        for attempt_id in attempt_ids:
            if run_of(attempt_id) != run_id:
                raise InvalidArgument(f"{attempt_id!r} is not an attempt of run {run_id!r}")

        def renew(head: RunHead, now: datetime) -> Change:
            return transitions.compose(head, [
                partial(transitions.heartbeat, attempt_id=a, now=now) for a in attempt_ids
            ])  # fmt: skip

        yield from self._apply(run_id, renew)

    @operation
    def takeover(
        self, run_id: str, *, reason: str = "abandoned: the run was taken over"
    ) -> Steps[int]:
        """Become the run's owner; return the new owner epoch.

        Every earlier owner (a store that created the run or took it over before) is fenced:
        its next write to the run raises `Fenced` and stores nothing. Running attempts
        recorded under an earlier epoch end as failed with `reason`, for the new owner to
        retry. Take over a run whose worker is gone (`list_attempts(abandoned=True)`,
        `stashpoint runs stuck`), or at the start of every Lambda invocation of a run.
        """
        return (yield from self._take_over(run_id, reason, None)).epoch

    @operation
    def take_over_read(self, read: RunRead, *, reason: str) -> Steps[TakenOver]:
        """Take over the run `read_run` returned (as `takeover`), saying what changed.

        `TakenOver.unchanged`: nothing was written to the run between that read and the
        takeover, so the read plus the takeover's own change (running attempts ended with
        `reason`) is the run now, and the caller need not read it again.
        """
        seen: list[int] = []
        head = yield from self._take_over(read.state.run_id, reason, seen)
        return TakenOver(head.epoch, head.updated_at, bool(seen) and seen[-1] == read.revision)

    def _take_over(self, run_id: str, reason: str, seen: list[int] | None) -> Steps[RunHead]:
        _text(reason, "reason")
        return (
            yield from self._apply(
                run_id,
                lambda head, now: transitions.takeover(head, now=now, reason=reason),
                claim=True,
                seen=seen,
            )
        )

    @operation
    def complete_attempt(
        self, attempt_id: str, output: Any, meta: dict[str, Any] | None = None
    ) -> Steps[None]:
        """Mark a running attempt completed with its output and metadata."""
        _of(meta, dict, "meta")
        stored_output = yield from self._blobs.offload(output, "output", owner=run_of(attempt_id))
        check_json(meta or {}, self._logs.codec.limits.max_depth, start_depth=5, root="meta")
        yield from self._apply(
            run_of(attempt_id),
            lambda head, now: transitions.complete_attempt(
                head, attempt_id, output=stored_output, meta=meta or {}, now=now
            ),
        )

    @operation
    def fail_attempt(self, attempt_id: str, error: str) -> Steps[None]:
        """Mark a running attempt failed."""
        _text(error, "error")
        yield from self._apply(
            run_of(attempt_id),
            lambda head, now: transitions.fail_attempt(head, attempt_id, error=error, now=now),
        )

    @operation
    def record_interrupt(self, attempt_id: str, interrupt: Interrupt) -> Steps[None]:
        """Mark a running attempt, and its run, interrupted."""
        _of(interrupt, Interrupt, "interrupt", optional=False)
        yield from self._apply(
            run_of(attempt_id),
            lambda head, now: transitions.record_interrupt(
                head, attempt_id, interrupt=interrupt, now=now
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
            where = f"state/{pointer_token(key)}"
            stored[key] = yield from self._blobs.offload(value, where, owner=run_id)
        yield from self._apply(
            run_id,
            lambda head, now: transitions.save_state_snapshot(
                head, stored, metadata=metadata, now=now
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
        """Return the run's full state, None if unknown (`Purged` if it was purged).

        With `graph_hash`, a run recorded with another graph raises `GraphDriftError`
        unless `allow_graph_drift`. Repairs the index if it lags behind storage.
        """
        return self._load_run(run_id, graph_hash, allow_graph_drift, resolve_blobs)

    @operation
    def complete_run(self, run_id: str) -> Steps[None]:
        """Mark a running run completed.

        A completed run is left as it is (a retried call returns); a run that ended
        otherwise, or waits, raises `TerminalStateConflict`.
        """
        return self._finish_run(run_id, RunStatus.COMPLETED, None)

    @operation
    def fail_run(self, run_id: str, error: str) -> Steps[None]:
        """Mark a running run failed, keeping the error.

        A run that failed with this error is left as it is; any other end raises
        `TerminalStateConflict`.
        """
        _text(error, "error")
        return self._finish_run(run_id, RunStatus.FAILED, error)

    @operation
    def cancel_run(self, run_id: str) -> Steps[None]:
        """Cancel a running or interrupted run and its running attempts.

        A cancelled run is left as it is; a finished one raises `TerminalStateConflict`.
        """
        yield from self._apply(run_id, lambda head, now: transitions.cancel_run(head, now=now))

    @operation
    def suspend_run(self, run_id: str, *, until: datetime) -> Steps[None]:
        """Make a running run wait until `until` (status `waiting`; `list_due` finds it then).

        No attempt may be running. Recording an attempt, or `resume_run`, wakes it.
        """
        wake = _moment(until, "until")
        if wake is None:
            raise InvalidArgument("until must be a timezone-aware datetime")
        yield from self._apply(
            run_id, lambda head, now: transitions.suspend_run(head, until=wake, now=now)
        )

    @operation
    def signal(
        self, run_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> Steps[SignalReceipt]:
        """Deliver event `name` with a JSON `payload` to a run (`DurableRun.wait_for`).

        Kept in the run's log whether or not the run waits for it yet (a signal sent before
        its wait is kept for it); a run waiting for it is due at once (`list_due`). One
        signal per name: the same `signal_id` again is the same signal (`duplicate`, the
        first payload kept); another id for a delivered name, or any signal to a finished
        run, is `TerminalStateConflict`; an unknown run is `RunNotFound`. A large payload
        is stored once as a blob, like a step's output.
        """
        validate_id(run_id, what="run id")
        name = _signal_name(name)
        signal_id = validate_id(new_id() if signal_id is None else signal_id, what="signal id")
        return (yield from self._signal(run_id, name, payload, signal_id))

    @operation
    def redeem(self, token: str, payload: Any = None) -> Steps[SignalReceipt]:
        """Deliver a `DurableRun.callback(name)` token's event with `payload`.

        The token names the run and the event, so the caller needs neither; the run must
        have recorded exactly this token (`InvalidArgument` otherwise: altered, guessed,
        or another stash's). Redeeming a token again is the same signal (`duplicate`).
        Otherwise as `signal`.
        """
        run_id, name = callbacks.parse_token(token)
        read = yield from self._read_all(validate_id(run_id, what="run id"))
        if read is None:
            raise RunNotFound("the callback token's run does not exist", object_name=run_id)
        step = callbacks.step_name(name)
        if not any(
            a.node_id == step and callbacks.same_token(a.output, token) for a in read[1].attempts
        ):
            raise InvalidArgument("the run did not make this callback token", object_name=run_id)
        return (yield from self._signal(run_id, name, payload, callbacks.signal_id_of(token)))

    def _signal(self, run_id: str, name: str, payload: Any, signal_id: str) -> Steps[SignalReceipt]:
        known = yield from self._read(run_id)  # unknown: RunNotFound before any blob
        if known.state.signal_ids.get(name) == signal_id:
            return SignalReceipt(run_id, name, signal_id, duplicate=True, woke=False)
        stored = yield from self._blobs.offload(payload, "payload", owner=run_id)
        change = yield from self._apply_change(
            run_id,
            lambda head, now: transitions.deliver_signal(
                head, name=name, signal_id=signal_id, payload=stored, now=now
            ),
        )
        woke = (
            not change.unchanged
            and change.head.waiting_for == name
            and (change.head.status is RunStatus.WAITING)
        )
        return SignalReceipt(run_id, name, signal_id, duplicate=change.unchanged, woke=woke)

    def await_signal(
        self, run_id: str, name: str, attempt: int, timeout_at: datetime | None
    ) -> Steps[bool]:
        """Record that step `name` waits for event `name` and suspend the run (one append).

        False: the event arrived since the caller read the run (nothing was written).
        """
        attempt_id = _attempt_id(run_id)
        change = yield from self._apply_change(
            run_id,
            lambda head, now: transitions.await_signal(
                head, name=name, attempt_id=attempt_id, attempt=attempt,
                timeout_at=timeout_at, now=now,
            ),
        )  # fmt: skip
        return not change.unchanged

    def time_out_wait(self, run_id: str, name: str, attempt: int, error: str) -> Steps[bool]:
        """Record that the wait of step `name` timed out; False: its event arrived first."""
        attempt_id = _attempt_id(run_id)
        change = yield from self._apply_change(
            run_id,
            lambda head, now: transitions.time_out_wait(
                head, name=name, attempt_id=attempt_id, attempt=attempt, error=error, now=now
            ),
        )
        return not change.unchanged

    def _apply_change(
        self, run_id: str, transition: Callable[[RunHead, datetime], Change]
    ) -> Steps[Change]:
        """`_apply`, returning the change the winning try made (to tell an unchanged one)."""
        made: list[Change] = []

        def keep(head: RunHead, now: datetime) -> Change:
            change = transition(head, now)
            made[:] = [change]
            return change

        yield from self._apply(run_id, keep)
        return made[-1]

    @operation
    def resume_run(self, run_id: str) -> Steps[None]:
        """Wake a waiting run (else `TerminalStateConflict`): it is running again."""
        yield from self._apply(run_id, lambda head, now: transitions.resume_run(head, now=now))

    @operation
    def list_due(
        self,
        now: datetime | None = None,
        *,
        namespace: str = "default",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Steps[Page[RunRow]]:
        """Return waiting runs whose wake time has come (<= `now`, default this clock's).

        Only due runs are read from the index, the latest wake time first; wake each by
        running it again (a durable run resumes itself) or with `resume_run`.
        """
        moment = _moment(now, "now")
        index = self._require_index()
        namespace = validate_id(namespace, what="namespace")
        cursor = _text(cursor, "cursor", optional=True)
        if moment is None:
            moment = yield from ask(Now())
        return (
            yield from index.list_due(namespace=namespace, now=moment, limit=limit, cursor=cursor)
        )

    @operation
    def claim_wake(
        self, run_id: str, wake_at: datetime, *, every: timedelta = timedelta(minutes=15)
    ) -> Steps[int | None]:
        """Claim the right to send a due run on now (`stashpoint.wake`): once per `every`.

        For a scheduler that polls `list_due` and hands each due run to a queue or a
        function: of pollers racing (or one polling every minute), one gets the number of
        the current `every` window for a run's wake time, the others None, so a run is
        sent once, and again only if it is still due a window later (the send, or the
        worker, was lost). One conditional index write; needs an index.
        """
        validate_id(run_id, what="run id")
        moment = _moment(wake_at, "wake_at")
        seconds = _seconds(every, "every")
        if moment is None or seconds is None:
            raise InvalidArgument("claim_wake needs a wake_at and an every")
        index = self._require_index()
        now = yield from ask(Now())
        return (yield from index.claim_wake(run_id, moment, now, seconds))

    @operation
    def running_attempts(self, run_id: str) -> Steps[list[AttemptRow]]:
        """Return the run's running attempts with their leases (one read: its head)."""
        known = yield from self._read(run_id)
        return [
            journal.lease_row(known.state, attempt_id, held)
            for attempt_id, held in known.state.running.items()
        ]

    @operation
    def read_run(self, run_id: str) -> Steps[RunRead | None]:
        """Read the whole run once: its state (blobs resolved), revision and leases.

        None if unknown. Unlike `load_run` it leaves the index alone: a worker opening the
        run writes the run's items with its next transition anyway.
        """
        read = yield from self._read_all(run_id)
        if read is None:
            return None
        known, state = read
        running = [
            journal.lease_row(known.state, attempt_id, held)
            for attempt_id, held in known.state.running.items()
        ]
        return RunRead((yield from self._resolve(state)), _revision(known), running)

    @operation
    def summarize_run(self, run_id: str) -> Steps[RunSummary | None]:
        """Return the run's summary, None if unknown (reads every attempt of the run)."""
        state = yield from self._load_run(run_id, None, True, False)
        return None if state is None else summary_of(state)

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
        abandoned: bool = False,
    ) -> Steps[Page[AttemptRow]]:
        """Return one page of attempts in `status` (running by default), from the index.

        With `abandoned`, only running attempts whose lease ran out (more than `clock_skew`
        ago, on this machine's clock), the latest expiry first; only those are read.
        """
        if abandoned:
            if _status(status, AttemptStatus) is not AttemptStatus.RUNNING or since is not None:
                raise InvalidArgument("abandoned attempts are running ones, listed without since")
            index = self._require_index()
            namespace = validate_id(namespace, what="namespace")
            cursor = _text(cursor, "cursor", optional=True)
            now = yield from ask(Now())
            return (
                yield from index.list_abandoned(
                    namespace=namespace, before=now - self.clock_skew, limit=limit, cursor=cursor
                )
            )
        return (
            yield from self._require_index().list_attempts(
                namespace=validate_id(namespace, what="namespace"),
                status=_status(status, AttemptStatus),
                since=_moment(since, "since"),
                limit=limit,
                cursor=_text(cursor, "cursor", optional=True),
            )
        )

    @operation
    def reindex(
        self, *, resume: bool = True, on_progress: OnProgress = silent
    ) -> Steps[ReindexReport]:
        """Make the index equal to storage (idempotent, resumable); say what it did.

        Every run's items are compared with its head: stale, wrong (a status that storage
        does not say, a revision from the future) and missing items are rewritten, items
        storage does not know are deleted. Progress is kept in the index after every page,
        and a new call continues after it unless `resume=False`. A run that cannot be read
        is skipped and reported (`ReindexReport.unreadable`), never an end to the rebuild.
        `on_progress` hears the count of runs looked at (`runs`; the total is not known).
        """
        index = self._require_index()
        where = self._logs.keys.layout.prefix or "-"
        indexed = seen = 0
        unreadable: list[str] = []
        marker = f"run-logs:{where}"
        cursor = (yield from index.read_marker(marker)) if resume else None
        while True:
            ids, cursor = yield from self._logs.list_page("", 100, cursor)
            for run_id in ids:
                indexed += yield from self._reindex_skipping(run_id, unreadable)
                seen += 1
                on_progress(Progress("runs", seen))
            if cursor is None:
                break
            yield from index.write_marker(marker, cursor)
        yield from index.clear_marker(marker)
        return ReindexReport(indexed, unreadable)

    # -- durable steps -----------------------------------------------------------------------

    def owner_view(self) -> RunOperations[Any, Any]:
        """Return these operations as typed steps, holding owner epochs of their own.

        A durable handle runs its transitions through one: the epoch it created or took a
        run over with is its own, so two handles of one run on one stash fence each other
        exactly as two processes do (the later takeover fences the earlier handle).
        """
        view: RunOperations[Any, Any] = RunOperations(
            self._logs,
            self._blobs,
            self._index,
            self.driver,
            retry=self._retry,
            fleet_logs=self._fleet_logs,
        )
        view.clock_skew = self.clock_skew
        return view

    def durable(
        self,
        run_id: str,
        *,
        graph_name: str = "durable",
        lease: float | None = None,
        deadline: Deadline | None = None,
        clock: Callable[[], datetime] | None = None,
        claim_wait: bool = False,
    ) -> DurableT:
        """Return the run `run_id` as durable steps (`stashpoint.runs.durable`).

        No request until the first step: then the run is created, or taken over (its
        previous worker is fenced), and its recorded steps are read for replay. With a
        `deadline` (`Deadline.of_lambda(context)`), a step that would not finish in time is
        not started: `RunSuspended` (reason `deadline`). `clock` is "now" for waits and
        retry delays (tests pass a fake one to skip time). A step running in another
        worker under a live `lease` holds the run: `RunClaimed`, or with `claim_wait` a
        wait until its lease runs out. While a step runs, its lease is renewed three times per
        lease (heartbeats from the driver), so a step may take longer than its lease; a
        worker that dies stops renewing, and its lease runs out a lease after its last beat.
        """
        if deadline is not None and not isinstance(deadline, Deadline):
            raise InvalidArgument(
                f"deadline must be a stashpoint.Deadline, not {described(deadline)}"
            )
        # The handle's transitions go through a view holding owner epochs of its own, so
        # two handles of one run on one stash fence each other as two processes do.
        return self._durable_type(
            self.owner_view(), validate_id(run_id, what="run id"), execute=self.driver,
            graph_name=graph_name, lease=lease, deadline=deadline, clock=clock,
            claim_wait=claim_wait,
        )  # fmt: skip

    def fleet(
        self,
        run_id: str,
        *,
        worker_id: str | None = None,
        clock_skew: timedelta | None = None,
    ) -> FleetT:
        """Return the fleet map `run_id` (`stashpoint.runs.fleet`): start, work, results.

        No request until the first operation. `worker_id` names this worker in its claims
        (default: the host, the AWS Batch job and array index when there is one, the
        process). `clock_skew`: how long after its expiry another worker's lease counts
        as run out (default one second); safety never rests on it.
        """
        if self._fleet_logs is None:
            raise ConfigurationError("this run store was made without a fleet namespace")
        if worker_id is not None:
            validate_id(worker_id, what="worker id")
        if clock_skew is not None and (
            not isinstance(clock_skew, timedelta) or clock_skew < timedelta(0)
        ):
            raise InvalidArgument(
                f"clock_skew must be a timedelta >= 0, not {described(clock_skew)}"
            )
        return self._fleet_type(
            self.owner_view(), self._fleet_logs, self._blobs, run_id, execute=self.driver,
            worker_id=worker_id, clock_skew=clock_skew,
        )  # fmt: skip

    # -- logic shared by the operations ----------------------------------------------------

    def _reindex_skipping(self, run_id: str, unreadable: list[str]) -> Steps[int]:
        """Repair one run's items; a run that cannot be read is noted and skipped."""
        try:
            return (yield from self._reindex_one(run_id))
        except (RunNotFound, CheckpointNotFound):
            return 0  # deleted since it was listed
        except StashpointError as exc:
            log.warning("reindex: run %s cannot be read (%s); skipped", run_id, exc.kind.value)
            unreadable.append(f"{run_id}: {exc.kind.value}")
            return 0

    def _reindex_one(self, run_id: str) -> Steps[int]:
        """Repair one run's items; return 1 if it was indexed (0: gone since listed)."""
        index = self._require_index()
        read = yield from self._read_all(run_id)
        if read is None:
            return 0
        known, state = read
        rows = journal.rows_of(known.state, state)
        yield from index.repair(known.state, rows, _revision(known), self._revision_now(run_id))
        return 1

    def _revision_now(self, run_id: str) -> Callable[[], Steps[int | None]]:
        """Return steps that read the run's current revision afresh."""

        def read() -> Steps[int | None]:
            try:
                known = yield from self._read(run_id)
            except RunNotFound:
                return None
            return _revision(known)

        return read

    def _require_index(self) -> RunIndex:
        if self._index is None:
            raise ConfigurationError(
                "this stash has no index: open it with ?index=dynamodb://TABLE (S3) or use the "
                "local default, which keeps one in SQLite"
            )
        return self._index

    def _name(self, run_id: str) -> str:
        return self._logs.keys.entries_prefix(run_id)

    def _read(self, run_id: str) -> Steps[Known[RunHead]]:
        """Read the run's latest head (its log's); `RunNotFound` if there is none."""
        validate_id(run_id, what="run id")
        return (yield from self._runs.read(run_id, _no_run(run_id)))

    def _read_all(self, run_id: str) -> Steps[tuple[Known[RunHead], RunState] | None]:
        """Read the whole run (every attempt): its log folded (None: no such run)."""
        validate_id(run_id, what="run id")
        try:
            entries = yield from self._logs.entries(run_id)
        except Purged:
            raise  # erased on purpose: said so, not passed off as never having existed
        except CheckpointNotFound:
            return None
        known = self._runs.known_of(LogHead.of(entries[-1]))
        state = journal.fold(
            known.state, (r for e in entries for r in e.records), self._name(run_id)
        )
        self._runs.remember(run_id, known)
        return known, state

    def _load_run(
        self, run_id: str, graph_hash: str | None, allow_graph_drift: bool, resolve_blobs: bool
    ) -> Steps[RunState | None]:
        read = yield from self._read_all(run_id)
        if read is None:
            return None
        known, state = read
        if (
            graph_hash is not None
            and state.graph_hash is not None
            and state.graph_hash != graph_hash
            and not allow_graph_drift
        ):
            raise GraphDriftError(run_id, stored_hash=state.graph_hash, current_hash=graph_hash)
        if self._index is not None:
            # The index is derived: a failed repair must not fail a read.
            rows = journal.rows_of(known.state, state)
            with contextlib.suppress(StashpointError):
                yield from self._index.repair(
                    known.state, rows, _revision(known), self._revision_now(run_id)
                )
        if resolve_blobs:
            state = yield from self._resolve(state)
        return state

    def _finish_run(self, run_id: str, status: RunStatus, error: str | None) -> Steps[None]:
        yield from self._apply(
            run_id, lambda head, now: transitions.finish_run(head, status, error=error, now=now)
        )

    def _hold(self, run_id: str, epoch: int) -> None:
        self._epochs.put(run_id, epoch)

    def _apply(
        self,
        run_id: str,
        transition: Callable[[RunHead, datetime], Change],
        *,
        claim: bool = False,
        seen: list[int] | None = None,
    ) -> Steps[RunHead]:
        """Apply a pure transition to the latest head and append it; retry a lost race.

        A cached head is tried first (no read); if the transition refuses it, it is judged
        again on a fresh read, since a stale copy may be what it objected to. Ending an
        attempt the fresh head does not have running reads the whole run to say why. A
        store holding an owner epoch for the run (`create_run`, `takeover`) is refused with
        `Fenced` once the run's epoch moved past it; `claim` (a takeover) is not. `seen`
        gets the revision of each head the transition was applied to (the last one won).
        """
        epoch = None if claim else self._epochs.get(run_id)

        def change(known: Known[RunHead], fresh: bool) -> Steps[Change]:
            if seen is not None:
                seen.append(_revision(known))
            transitions.check_owner(known.state, epoch)
            now = yield from ask(Now())
            try:
                return transition(known.state, now)
            except AttemptNotFound as exc:
                read = (yield from self._read_all(run_id)) if fresh else None
                if read is None:
                    raise
                raise journal.not_running(read[1], exc.object_name or "") from None
            except pydantic.ValidationError as exc:
                raise InvalidArgument(f"invalid run data: {exc}", object_name=run_id) from None

        def write(known: Known[RunHead], change: Change) -> Steps[RunHead]:
            if change.unchanged:
                return change.head  # already so: nothing to write
            yield from self._append(known, change)
            if claim:
                self._hold(run_id, change.head.epoch)
            return change.head

        validate_id(run_id, what="run id")
        return (yield from self._runs.update(run_id, change, write, initial=_no_run(run_id)))

    def _append(self, known: Known[RunHead], change: Change) -> Steps[None]:
        """Append a change after `known` (no log: create the run's), then index it."""
        run_id = change.head.run_id
        saved = yield from self._runs.append(run_id, known.log, list(change.records), change.head)
        if self._index is not None:
            yield from self._index.record(
                change.head, change.touched, _revision(saved), before=known.state
            )

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
        signals = {}
        for name, signal in state.signals.items():
            payload = yield from self._blobs.resolve(signal.payload)
            signals[name] = signal.model_copy(update={"payload": payload})
        return state.model_copy(
            update={"attempts": tuple(attempts), "state_snapshot": snapshot, "signals": signals}
        )


def summary_of(state: RunState) -> RunSummary:
    """Return the summary of a whole run: what ran, how often, how it ended."""
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
