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

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Generic, TypeVar

from stashpoint.codec import check_json, pointer_token
from stashpoint.deadline import Deadline
from stashpoint.errors import (
    CheckpointConflict,
    ConfigurationError,
    InvalidArgument,
    RunNotFound,
    described,
)
from stashpoint.ids import validate_id
from stashpoint.logs.state import Known
from stashpoint.runs import callbacks, transitions
from stashpoint.runs.heads import (
    ATTEMPT_SEPARATOR,
    RunRead,
    TakenOver,
    check_moment,
    check_seconds,
    check_text,
    check_type,
    run_of,
)
from stashpoint.runs.models import (
    CheckpointMetadata,
    Interrupt,
    RunHead,
    RunState,
    SignalReceipt,
    TraceContext,
)
from stashpoint.runs.queries import RunQueries
from stashpoint.runs.transitions import Change
from stashpoint.status import RunStatus
from stashpoint.steps import NewId, Now, Steps, ask
from stashpoint.twins import operation

DurableT = TypeVar("DurableT")
FleetT = TypeVar("FleetT")


def _attempt_id(run_id: str) -> Steps[str]:
    """Return a new attempt id of `run_id` (`{run_id}~{uuid7}`)."""
    validate_id(run_id, what="run id")
    return f"{run_id}{ATTEMPT_SEPARATOR}{(yield from ask(NewId()))}"


def _signal_name(name: object) -> str:
    """Check an event's name: a step name (non-empty, no '[')."""
    if not isinstance(name, str) or not name or "[" in name or len(name) > 200:
        raise InvalidArgument(
            f"an event name is a non-empty str of at most 200 characters without '[', "
            f"not {described(name)}"
        )
    return name


class RunOperations(RunQueries, Generic[DurableT, FleetT]):
    """The run operations, defined once as steps; see `RunStore` for what each does."""

    _durable_type: Callable[..., DurableT]
    _fleet_type: Callable[..., FleetT]

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
        if run_id is None:
            run_id = yield from ask(NewId())
        run_id = validate_id(run_id, what="run id")
        check_text(graph_name, "graph_name")
        validate_id(namespace, what="namespace")
        check_text(graph_hash, "graph_hash", optional=True)
        check_type(trace_ctx, TraceContext, "trace_ctx")
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
        attempt_id = yield from _attempt_id(run_id)
        check_text(node_id, "node_id")
        if type(attempt) is not int or attempt < 0:
            raise InvalidArgument(f"attempt must be an int >= 0, not {described(attempt)}")
        check_type(trace_ctx, TraceContext, "trace_ctx")
        lease_seconds = check_seconds(lease, "lease")
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
        attempt_id = yield from _attempt_id(run_id)
        check_text(node_id, "node_id")
        if type(attempt) is not int or attempt < 0:
            raise InvalidArgument(f"attempt must be an int >= 0, not {described(attempt)}")
        started = check_moment(started_at, "started_at")
        if started is None:
            raise InvalidArgument("started_at must be a timezone-aware datetime")
        check_text(error, "error", optional=True)
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
        lease_seconds = check_seconds(lease, "lease")
        planned: list[tuple[str, str, int, Any]] = []
        for entry in attempts:
            if not (isinstance(entry, tuple) and len(entry) == 3):
                raise InvalidArgument(
                    f"an attempt is (node_id, attempt, input), not {described(entry)}"
                )
            node_id, attempt, value = entry
            check_text(node_id, "node_id")
            if type(attempt) is not int or attempt < 0:
                raise InvalidArgument(f"attempt must be an int >= 0, not {described(attempt)}")
            stored = yield from self._blobs.offload(value, "input", owner=run_id)
            attempt_id = f"{run_id}{ATTEMPT_SEPARATOR}{(yield from ask(NewId()))}"
            planned.append((attempt_id, node_id, attempt, stored))

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
        check_type(completed, Mapping, "completed")
        check_type(failed, Mapping, "failed")
        ids = [*(completed or {}), *(failed or {})]
        if not ids or len(set(ids)) != len(ids):
            raise InvalidArgument("end each attempt once, and at least one")
        for attempt_id in ids:
            if run_of(attempt_id) != run_id:
                raise InvalidArgument(f"{attempt_id!r} is not an attempt of run {run_id!r}")
        outputs: dict[str, Any] = {}
        for attempt_id, output in (completed or {}).items():
            outputs[attempt_id] = yield from self._blobs.offload(output, "output", owner=run_id)
        errors: dict[str, str] = {
            a: check_text(error, "error") for a, error in (failed or {}).items()
        }

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
        check_text(reason, "reason")
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
        check_type(meta, dict, "meta")
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
        check_text(error, "error")
        yield from self._apply(
            run_of(attempt_id),
            lambda head, now: transitions.fail_attempt(head, attempt_id, error=error, now=now),
        )

    @operation
    def record_interrupt(self, attempt_id: str, interrupt: Interrupt) -> Steps[None]:
        """Mark a running attempt, and its run, interrupted."""
        check_type(interrupt, Interrupt, "interrupt", optional=False)
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
        check_type(state, dict, "state", optional=False)
        check_type(metadata, CheckpointMetadata, "metadata")
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
        check_text(error, "error")
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
        wake = check_moment(until, "until")
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
        if signal_id is None:
            signal_id = yield from ask(NewId())
        signal_id = validate_id(signal_id, what="signal id")
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
        attempt_id = yield from _attempt_id(run_id)
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
        attempt_id = yield from _attempt_id(run_id)
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
