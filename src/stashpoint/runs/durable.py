"""Durable steps: a run replays the steps it already did and does the rest, once per claim.

    with stashpoint.open(url) as stash:
        run = stash.runs.durable("nightly-2026-11-30", graph_name="batch")
        totals = [run.step(f"item-{i}", process, i) for i in range(50)]
        run.complete()

Opening a durable run creates it, or takes it over (`RunStore.takeover`): the previous
worker, if it still runs, is fenced and stores nothing more, and the steps it left running
end as failed. Each `step(name, fn, *args)` is an attempt of node `name`: a step with a
completed attempt returns the stored result without calling `fn` (replay); otherwise `fn`
runs and its result is stored (through the codec and blobs, like any output). Steps are
identified by name and position: a replay that asks for another step at a recorded
position raises `NondeterministicReplay` naming both. `AT_MOST_ONCE` steps found started
but not completed (a crash mid-`fn`) raise `StepInterrupted` instead of running again.

`wait(name, seconds=|until=)` suspends the run until a moment recorded as a step (status
`waiting`; `RunStore.list_due` finds it when due); `retry=Retry(...)` runs a failed step
again after a delay counted from the recorded failure; a `deadline` keeps a step that would
not finish in time from starting. Each of these stops raises `RunSuspended`.

Built on runs as logs (`runs.journal`), so a step costs the same however long the run: one
append for an at-least-once step without a lease (recorded with its outcome once `fn` has
run), two with a lease or `AT_MOST_ONCE` (recorded before `fn` runs, ended after).
`DurableRun` and `AsyncDurableRun` are made from one definition (`stashpoint.twins`); the
asyncio one awaits coroutine functions.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple, overload

from stashpoint.deadline import Deadline
from stashpoint.errors import (
    CheckpointConflict,
    Fenced,
    NondeterministicReplay,
    RunClaimed,
    RunNotFound,
    RunSuspended,
    StepFailed,
    StepInterrupted,
    TerminalStateConflict,
    WaitTimedOut,
)
from stashpoint.runs import callbacks
from stashpoint.runs.durable_terms import (
    CLAIM_POLL,
    MAX_WAIT_SECONDS,
    RESOLVED_RETRY,
    TAKEN_OVER,
    TIMED_OUT,
    Outcome,
    Retry,
    Semantics,
    captured,
    check_name,
    checked_map,
    checked_step,
    checked_timeout,
    checked_wait,
    iso,
    item_name,
    recorded_event,
    step_of,
    submitted,
)
from stashpoint.runs.heads import RunRead
from stashpoint.runs.models import Signal
from stashpoint.runs.operations import RunOperations
from stashpoint.status import AttemptStatus, RunStatus
from stashpoint.steps import Call, Now, Parallel, Sleep, Steps, ask
from stashpoint.twins import Awaiting, Blocking, operation

if TYPE_CHECKING:
    from concurrent.futures import Executor

__all__ = [
    "CLAIM_POLL",
    "MAX_WAIT_SECONDS",
    "RESOLVED_RETRY",
    "TAKEN_OVER",
    "AsyncDurableRun",
    "DurableRun",
    "Retry",
    "Semantics",
]


class _DurableApi:
    """A durable run's operations, defined once; see `DurableRun`."""

    def __init__(
        self,
        ops: RunOperations[Any, Any],
        run_id: str,
        *,
        execute: Callable[[Any], Any],
        graph_name: str = "durable",
        lease: float | None = None,
        deadline: Deadline | None = None,
        clock: Callable[[], datetime] | None = None,
        claim_wait: bool = False,
    ) -> None:
        self.run_id = run_id
        """The run."""
        self.graph_name = graph_name
        """The graph name the run is created with."""
        self.lease = lease
        """Lease of each step's attempt, in seconds (None: none)."""
        self.deadline = deadline
        """The invocation's deadline: a step that would not finish in time is not started
        (`RunSuspended`, reason `deadline`). None: no deadline."""
        self.clock = clock
        """What "now" is for waits and retry delays; None: the stash's clock (tests open
        the stash with a `stashpoint.clock.FakeClock`, or give a function here)."""
        self.claim_wait = claim_wait
        """On finding a step running under another worker's live lease: wait for the lease
        to run out (True), or raise `RunClaimed` (False)."""
        self._ops = ops
        self.driver = execute
        """Runs this object's requests: what its operations' steps are driven with."""
        self._opened = False
        self._finished = False
        self._waiting = False
        # Step names in the order the run first recorded them (a dict: ordered, O(1) tests),
        # and those this invocation has asked for; replays check one against the other.
        self._order: dict[str, int] = {}
        self._positions: list[str] = []
        self._last: dict[str, Outcome] = {}
        self._tries: dict[str, int] = {}
        self._asked: set[str] = set()
        self._stopped: RunSuspended | RunClaimed | None = None
        self._signals: dict[str, Signal] = {}  # events delivered, as the run was read
        self._waiting_for: str | None = None
        self._step_seconds: list[float] = []
        self._ran = False

    @operation
    def now(self) -> Steps[datetime]:
        """Return "now" as this run sees it: its `clock` if given, else the stash's clock."""
        return (yield from self._now())

    def _now(self) -> Steps[datetime]:
        """Return "now": the caller's clock if given, else the stash's."""
        if self.clock is not None:
            return self.clock()
        return (yield from ask(Now()))

    def key(self, name: str) -> str:
        """Return an idempotency key for step `name`, the same on every retry and replay."""
        return f"{self.run_id}:{name}"

    def _open(self, *, create: bool = True) -> Steps[None]:
        """Create the run, or take it over; learn the steps it recorded (once).

        Not `create`: a run that does not exist is `RunNotFound` (a resolve never makes one).

        A handle that suspended or found its run claimed stays stopped: a broad `except
        StashpointError` that swallowed the signal cannot go on running steps.
        """
        if self._stopped is not None:
            raise self._stopped
        if self._opened:
            return
        # The run's log is read once: a new run costs that listing and its creation, an
        # existing one the read and the takeover (read again only if it moved meanwhile).
        read = yield from self._ops.read_run(self.run_id)
        if read is None and not create:
            raise RunNotFound("no run with this id", object_name=self.run_id)
        if read is None:
            try:
                yield from self._ops.create_run(self.graph_name, run_id=self.run_id)
            except CheckpointConflict:  # another worker created it since the read
                read = yield from self._read_again()
            else:
                self._opened = True
                return
        read = yield from self._respect_claims(read)
        read, taken = yield from self._take_over(read)
        self._learn(read, taken)
        self._opened = True

    def _take_over(self, read: RunRead) -> Steps[tuple[RunRead, dict[str, datetime]]]:
        """Take the run over; return it as read after, and when each attempt it ended did.

        A finished run is not taken over: it only replays.
        """
        try:
            took = yield from self._ops.take_over_read(read, reason=TAKEN_OVER)
        except TerminalStateConflict:
            self._finished = True
            return read, {}
        if took.unchanged:  # the read is the run, but for what the takeover ended
            return read, {a.attempt_id: took.at for a in read.running}
        return (yield from self._read_again()), {}

    def _learn(self, read: RunRead, taken: dict[str, datetime]) -> None:
        """Learn the steps the run recorded: outcomes, tries, order, durations, signals.

        `taken`: the attempts the takeover ended (failed, `TAKEN_OVER`), with when.
        """
        state = read.state
        self._waiting = state.status is RunStatus.WAITING
        self._waiting_for = state.waiting_for if self._waiting else None
        self._signals = dict(state.signals)
        for record in state.attempts:
            self._ordered(step_of(record.node_id))
            ended = taken.get(record.attempt_id)
            self._last[record.node_id] = (
                Outcome(AttemptStatus.FAILED, None, TAKEN_OVER, ended)
                if ended is not None
                else Outcome(record.status, record.output, record.error, record.finished_at)
            )
            self._tries[record.node_id] = self._tries.get(record.node_id, 0) + 1
            if record.status is AttemptStatus.COMPLETED and record.finished_at is not None:
                seconds = (record.finished_at - record.started_at).total_seconds()
                self._step_seconds.append(max(0.0, seconds))

    def _read_again(self) -> Steps[RunRead]:
        """Read the run afresh while opening it (`RunNotFound` if it was deleted meanwhile)."""
        read = yield from self._ops.read_run(self.run_id)
        if read is None:
            raise RunNotFound("the run was deleted while being opened", object_name=self.run_id)
        return read

    def _respect_claims(self, read: RunRead) -> Steps[RunRead]:
        """Leave a run alone while a step of it runs under a lease that has not run out.

        Judged on this clock, `clock_skew` late (as `stashpoint runs stuck` does); steps
        without a lease cannot be judged alive, so they never hold the run back. Safety
        does not rest on this: a worker taken over is fenced whatever the clocks say.
        Returns the run as last read (read again after each wait).
        """
        skew = self._ops.clock_skew
        while True:
            running = read.running
            now = yield from self._now()
            live = [
                (a.lease_expires_at, step_of(a.node_id))
                for a in running
                if a.lease_expires_at is not None and a.lease_expires_at + skew > now
            ]
            if not live:
                return read
            until, step = max(live)
            if not self.claim_wait:
                raise self._stop(RunClaimed(self.run_id, step=step, until=until))
            # Poll: the holder may end its step (or the run) long before its lease would.
            yield from ask(Sleep(min(CLAIM_POLL, max(0.05, (until + skew - now).total_seconds()))))
            read = yield from self._read_again()

    def _replay(self, name: str) -> Steps[Outcome | None]:
        """Open the run, check `name` is asked for in order, return its last outcome."""
        check_name(name)
        yield from self._open()
        self._position(name)
        return self._last.get(name)

    def _position(self, name: str) -> None:
        """Check `name` is the step recorded at this position (replays are deterministic)."""
        if name in self._asked:  # asking again for a step is retrying it, not a new one
            return
        position = len(self._asked)
        self._asked.add(name)
        if position < len(self._positions) and self._positions[position] != name:
            raise NondeterministicReplay(
                self.run_id, position=position, recorded=self._positions[position], asked=name
            )

    def _recorded_wake(self, name: str, last: Outcome) -> datetime:
        """Return the wake time a completed wait recorded; a step's result is no wait."""
        output = last.output
        try:
            wake = datetime.fromisoformat(str(output["wake_at"]))
        except (TypeError, KeyError, ValueError):
            wake = None
        if wake is None or wake.tzinfo is None:
            raise NondeterministicReplay(
                self.run_id,
                position=self._order.get(name, 0),
                recorded=f"{name} (not a wait)",
                asked=f"{name} (a wait)",
            )
        return wake

    def _ordered(self, name: str) -> None:
        """Note that step `name` is recorded, at the next position if it is new."""
        if name not in self._order:
            self._order[name] = len(self._positions)
            self._positions.append(name)

    def _require_open(self, name: str) -> None:
        if self._finished:
            raise TerminalStateConflict(
                f"the run is finished: step {name!r} was never completed in it",
                object_name=self.run_id,
            )

    def _suspend(self, until: datetime, reason: str) -> Steps[None]:
        """Make the run wait until `until` (durably), then stop this invocation."""
        yield from self._ops.suspend_run(self.run_id, until=until)
        self._waiting = True
        raise self._stop(RunSuspended(self.run_id, until=until, reason=reason))

    def _stop(self, signal: RunSuspended | RunClaimed) -> RunSuspended | RunClaimed:
        """Stop this handle for good with `signal`: every later call raises it again."""
        self._stopped = signal
        return signal

    def _wake(self) -> Steps[None]:
        if self._waiting:
            yield from self._ops.resume_run(self.run_id)
            self._waiting = False

    def _check_deadline(self) -> None:
        """Refuse to start work the time left would not cover (slowest step so far)."""
        if self.deadline is not None:
            needed = self.deadline.needed(self._step_seconds, first=not self._ran)
            if self.deadline.remaining() < needed:
                raise self._stop(RunSuspended(self.run_id, until=None, reason="deadline"))

    def _record(
        self, name: str, args: tuple[Any, ...], fn: Any, *, first: bool
    ) -> Steps[tuple[bool, Any]]:
        """Run one try of a step: (True, result), or (False, error) when `fn` raised.

        `first`: the attempt is recorded before `fn` runs and ended after (a lease, or
        `AT_MOST_ONCE`: a try cut off is seen). Otherwise (at least once, no lease) it is
        recorded once `fn` has run, with its outcome, in one append: no lease means no
        worker could be judged alive anyway, and a crash mid-`fn` runs it again, as the
        semantics promise. Either way a takeover meanwhile fences the write (`Fenced`).
        """
        self._check_deadline()
        if not first:
            yield from self._wake()  # a waiting run is running again before its step runs
        self._ordered(name)
        attempt = self._tries.get(name, 0) + 1
        self._tries[name] = attempt
        key = {"key": self.key(name)}
        started_at = yield from self._now()
        attempt_id = None
        call = Call(fn, args)
        if first:
            attempt_id = yield from self._ops.record_attempt(
                self.run_id, name, attempt, key, lease=self.lease
            )
            self._waiting = False  # recording an attempt wakes a waiting run
            call = self._leased_call(fn, args, attempt_id)
        measure = time.monotonic if self.deadline is None else self.deadline.clock
        started = measure()
        try:
            result = yield from ask(call)
        except Exception as exc:
            if isinstance(exc, Fenced):
                raise  # taken over while it ran: its outcome is the new owner's to decide
            error = f"{type(exc).__name__}: {exc}"
            yield from self._end(name, attempt, key, started_at, attempt_id, error=error)
            self._last[name] = Outcome(AttemptStatus.FAILED, None, error, (yield from self._now()))
            return False, exc
        finally:
            self._ran = True
        self._step_seconds.append(measure() - started)
        yield from self._end(name, attempt, key, started_at, attempt_id, output=result)
        self._last[name] = Outcome(AttemptStatus.COMPLETED, result, None)
        return True, result

    def _end(
        self,
        name: str,
        attempt: int,
        key: dict[str, str],
        started_at: datetime,
        attempt_id: str | None,
        *,
        output: Any = None,
        error: str | None = None,
    ) -> Steps[None]:
        """End a try: its recorded attempt, or (None) record it ended in one append."""
        if attempt_id is None:
            yield from self._ops.record_ended_attempt(
                self.run_id, name, attempt, key, started_at=started_at, output=output,
                error=error,
            )  # fmt: skip
        elif error is None:
            yield from self._ops.complete_attempt(attempt_id, output)
        else:
            yield from self._ops.fail_attempt(attempt_id, error)

    def _leased_call(self, fn: Any, args: tuple[Any, ...], attempt_id: str) -> Call:
        """Call a step's function; under a lease, renew it three times per lease meanwhile.

        So a step may run longer than its lease: while its worker lives, the lease does,
        and no other worker takes the run over (or reports the step cut off) in the middle.
        """
        if self.lease is None:
            return Call(fn, args)
        beat = functools.partial(self._ops.heartbeat, attempt_id)
        # A beat that finds the run taken over ends the step's claim: its result is not
        # stored (Fenced is raised once it returns; `stashpoint.steps.stopped()` says so).
        return Call(fn, args, beat=beat, every=self.lease / 3, fatal=(Fenced,))

    def _retry_wait(self, name: str, retry: Retry, last: Outcome) -> Steps[None]:
        """Wait out the delay before the next try: sleep, or suspend when it is long."""
        tries = self._tries.get(name, 0)
        if tries >= retry.attempts:
            raise StepFailed(self.run_id, step=name, attempts=tries, error=last.error)
        now = yield from self._now()
        failed_at = last.finished_at or now
        due = failed_at + timedelta(seconds=retry.delay_after(tries))
        left = (due - now).total_seconds()
        if left <= 0:
            return
        room = float("inf") if self.deadline is None else self.deadline.remaining()
        if left > retry.sleep_up_to or left >= room:
            yield from self._suspend(due, "retry")
        yield from ask(Sleep(left))

    @operation
    def step(
        self,
        name: str,
        fn: Any,
        *args: Any,
        semantics: Semantics = Semantics.AT_LEAST_ONCE,
        retry: Retry | None = None,
    ) -> Steps[Any]:
        """Return the step's stored result, or run `fn(*args)` and store its result.

        An exception from `fn` is recorded (the attempt fails). Without `retry` it is
        raised, and the next replay runs the step again (`AT_LEAST_ONCE`) or raises
        `StepInterrupted`. With `retry`, the step runs again after the policy's delay
        (slept, or the run suspends when it is long); when every try failed, the last
        exception is raised, and a replay raises `StepFailed`.
        """
        semantics = checked_step(fn, semantics, retry)
        last = yield from self._replay(name)
        if last is not None and last.status is AttemptStatus.COMPLETED:
            return last.output
        self._require_open(name)
        if last is not None and last.error != RESOLVED_RETRY:
            yield from self._before_again(name, last, semantics, retry)
        while True:
            first = semantics is Semantics.AT_MOST_ONCE or self.lease is not None
            done, outcome = yield from self._record(name, args, fn, first=first)
            if done:
                return outcome
            if retry is None or self._tries[name] >= retry.attempts:
                raise outcome
            yield from self._retry_wait(name, retry, self._last[name])

    def _before_again(
        self, name: str, last: Outcome, semantics: Semantics, retry: Retry | None
    ) -> Steps[None]:
        """Before a step with an attempt runs again: refuse, or wait out a retry's delay.

        Refused: an `AT_MOST_ONCE` step cut off, or one that failed without a retry.
        """
        cut_off = last.status is not AttemptStatus.FAILED or last.error == TAKEN_OVER
        at_most_once = semantics is Semantics.AT_MOST_ONCE
        if at_most_once and (cut_off or retry is None):
            raise StepInterrupted(self.run_id, step=name, detail=last.error or last.status.value)
        if retry is not None and last.status is AttemptStatus.FAILED:
            yield from self._retry_wait(name, retry, last)

    @operation
    def wait(
        self,
        name: str,
        *,
        until: datetime | None = None,
        seconds: float | None = None,
    ) -> Steps[None]:
        """Wait until a moment (`until`) or for a time (`seconds`), durably.

        The wake time is recorded as step `name` the first time (so a replay waits for the
        same moment). Before it, the run is suspended (status `waiting`, its wake time in
        the index for `list_due`) and `RunSuspended` is raised: return from the handler,
        and run it again when due. From it on, the wait returns and the run goes on.
        """
        checked_wait(until, seconds)
        last = yield from self._replay(name)
        if last is not None and last.status is AttemptStatus.COMPLETED:
            wake = self._recorded_wake(name, last)
        else:
            wake = yield from self._record_wake(name, until, seconds)
        if (yield from self._now()) >= wake or self._finished:
            yield from self._wake()
            return
        yield from self._suspend(wake, "wait")

    def _record_wake(
        self, name: str, until: datetime | None, seconds: float | None
    ) -> Steps[datetime]:
        """Record step `name` of a wait with its wake time; return it."""
        self._require_open(name)
        now = yield from self._now()
        wake = until if until is not None else now + timedelta(seconds=seconds or 0)
        self._ordered(name)
        self._tries[name] = self._tries.get(name, 0) + 1
        attempt_id = yield from self._ops.record_attempt(
            self.run_id, name, self._tries[name], {"wait_until": str(wake)}
        )
        self._waiting = False
        yield from self._ops.complete_attempt(attempt_id, {"wake_at": wake.isoformat()})
        self._last[name] = Outcome(AttemptStatus.COMPLETED, {"wake_at": wake.isoformat()}, None)
        return wake

    @operation
    def wait_for(self, name: str, *, timeout: float | timedelta | None = None) -> Steps[Any]:
        """Wait for event `name` from outside; return its JSON payload (step `name`).

        The event is delivered by `stash.runs.signal(run_id, name, payload)`, by
        `stashpoint runs signal RUN NAME --json ...`, or by redeeming a `callback(name)`
        token. Sent before the wait, it is kept for it. Until it arrives the run is
        suspended (status `waiting`; `RunSuspended`, reason `event`): return from the
        handler; the event makes the run due (`list_due`), and the next invocation's
        `wait_for` returns the payload. With `timeout` (seconds or a timedelta, counted
        from the first call, as recorded), the run is due then too and the wait raises
        `WaitTimedOut`, on that replay and every later one. Of an event and a timeout that
        race, the one the run's log takes first is the outcome, recorded once.
        """
        timeout = checked_timeout(timeout)
        last = yield from self._replay(name)
        waiting = False
        timeout_at: datetime | None = None
        if last is not None:
            kind, value = self._recorded_event(name, last)
            if kind == "delivered":
                return self._payload(name)
            if kind == "timed_out":
                raise WaitTimedOut(self.run_id, name=name, timeout_at=value)
            if kind == "waiting":
                waiting, timeout_at = True, value
        self._require_open(name)
        self._ordered(name)
        now = yield from self._now()
        if not waiting and timeout is not None:
            timeout_at = now + timedelta(seconds=timeout)
        if name not in self._signals:
            yield from self._await_event(name, now, waiting, timeout_at)
            # The event arrived since the run was read: take it.
            read = yield from self._read_again()
            self._signals = dict(read.state.signals)
        signal = self._signals[name]
        self._tries[name] = self._tries.get(name, 0) + 1
        output = {"event": name, "signal_id": signal.signal_id}
        yield from self._ops.record_ended_attempt(
            self.run_id, name, self._tries[name], {"wait_for": name}, started_at=now,
            output=output,
        )  # fmt: skip
        self._waiting = False
        self._last[name] = Outcome(AttemptStatus.COMPLETED, output, None)
        return signal.payload

    def _await_event(
        self, name: str, now: datetime, waiting: bool, timeout_at: datetime | None
    ) -> Steps[None]:
        """Event `name` has not arrived: time the wait out, or suspend the run for it.

        Returns only when the run's log says the event arrived meanwhile (a race the
        event won): the caller reads it.
        """
        if waiting and timeout_at is not None and now >= timeout_at:
            self._tries[name] = self._tries.get(name, 0) + 1
            error = f"{TIMED_OUT} {timeout_at.isoformat()}"
            if (yield from self._ops.time_out_wait(self.run_id, name, self._tries[name], error)):
                self._waiting = False
                self._last[name] = Outcome(AttemptStatus.FAILED, None, error, now)
                raise WaitTimedOut(self.run_id, name=name, timeout_at=timeout_at)
        elif waiting and self._waiting and self._waiting_for == name:
            raise self._stop(RunSuspended(self.run_id, until=timeout_at, reason="event"))
        else:
            self._tries[name] = self._tries.get(name, 0) + 1
            if (yield from self._ops.await_signal(
                self.run_id, name, self._tries[name], timeout_at
            )):  # fmt: skip
                self._waiting, self._waiting_for = True, name
                output = {"waiting_for": name, "timeout_at": iso(timeout_at)}
                self._last[name] = Outcome(AttemptStatus.COMPLETED, output, None)
                raise self._stop(RunSuspended(self.run_id, until=timeout_at, reason="event"))

    def _payload(self, name: str) -> Any:
        """Return the payload of the event a recorded wait took."""
        signal = self._signals.get(name)
        if signal is None:
            raise NondeterministicReplay(
                self.run_id, position=self._order.get(name, 0),
                recorded=f"{name} (an event the run does not hold)", asked=f"{name} (a wait_for)",
            )  # fmt: skip
        return signal.payload

    def _recorded_event(self, name: str, last: Outcome) -> tuple[str, Any]:
        """Return what a recorded `wait_for` step says: delivered, timed out, or waiting."""
        said = recorded_event(name, last)
        if said is None:
            raise NondeterministicReplay(
                self.run_id, position=self._order.get(name, 0),
                recorded=f"{name} (not a wait_for)", asked=f"{name} (a wait_for)",
            )  # fmt: skip
        return said

    @operation
    def callback(self, name: str) -> Steps[str]:
        """Return a token that delivers event `name` to this run when redeemed.

        Hand it to another system (an approval service, a webhook's sender): it calls
        `stash.runs.redeem(token, payload)` (or `stashpoint runs redeem TOKEN --json ...`)
        without knowing the run id, and `wait_for(name)` returns the payload. Recorded as
        step `callback:{name}`, so every replay returns the same token; a token this run
        did not make is refused. Redeeming it again is the same signal (idempotent).
        """
        step = callbacks.step_name(check_name(name))
        last = yield from self._replay(step)
        if last is not None and last.status is AttemptStatus.COMPLETED:
            token = last.output.get("token") if isinstance(last.output, dict) else None
            if not isinstance(token, str):
                raise NondeterministicReplay(
                    self.run_id, position=self._order.get(step, 0),
                    recorded=f"{step} (not a callback)", asked=f"{step} (a callback)",
                )  # fmt: skip
            return token
        self._require_open(step)
        self._ordered(step)
        token = callbacks.new_token(self.run_id, name)
        self._tries[step] = self._tries.get(step, 0) + 1
        now = yield from self._now()
        yield from self._ops.record_ended_attempt(
            self.run_id, step, self._tries[step], {"callback": name}, started_at=now,
            output={"token": token},
        )  # fmt: skip
        self._waiting = False  # recording an attempt wakes a waiting run
        self._last[step] = Outcome(AttemptStatus.COMPLETED, {"token": token}, None)
        return token

    @operation
    def map(
        self,
        name: str,
        items: Any,
        fn: Any,
        *,
        max_concurrency: int = 8,
        executor: Any = None,
    ) -> Steps[list[Any]]:
        """Run `fn(item)` for every item as step `name[i]`, `max_concurrency` at a time.

        Threads (sync) or tasks (async) run a batch at once; each batch costs two appends
        in all (its attempts recorded together, then ended together), not two per item.
        Items completed before return their stored results. A failed item is recorded;
        the first failure is raised once its batch has ended (no later batch starts), and
        a replay runs the failed items again. `executor`: any `concurrent.futures.Executor`
        (a `ProcessPoolExecutor`, a Dask client's `get_executor()`, Ray's) runs the items
        instead, the run recording them as before; `fn` and the items must then travel
        (picklable), and `max_concurrency` items are in flight at once.
        """
        values = checked_map(name, items, fn, max_concurrency, executor)
        yield from self._open()
        self._position(name)
        results: list[Any] = [None] * len(values)
        todo = []
        for index in range(len(values)):
            last = self._last.get(item_name(name, index))
            if last is not None and last.status is AttemptStatus.COMPLETED:
                results[index] = last.output
            else:
                todo.append(index)
        if todo:
            self._require_open(name)
        self._ordered(name)
        for start in range(0, len(todo), max_concurrency):
            batch = todo[start : start + max_concurrency]
            self._check_deadline()
            yield from self._map_batch(name, batch, values, results, fn, executor)
        return results

    def _map_batch(
        self,
        name: str,
        batch: list[int],
        values: list[Any],
        results: list[Any],
        fn: Any,
        executor: Any,
    ) -> Steps[None]:
        """Run one batch of a map's items: attempts recorded together, then ended together.

        Results go into `results`; the first failure is raised once the batch has ended.
        """
        planned = []
        for index in batch:
            step = item_name(name, index)
            self._tries[step] = self._tries.get(step, 0) + 1
            planned.append((step, self._tries[step], {"key": self.key(step)}))
        ids = yield from self._ops.record_attempts(self.run_id, planned, lease=self.lease)
        self._waiting = False
        measure = time.monotonic if self.deadline is None else self.deadline.clock
        started = measure()
        try:
            outcomes = yield from ask(self._batch_calls(batch, values, fn, executor, ids))
        finally:
            self._ran = True
        self._step_seconds.append(measure() - started)
        now = yield from self._now()
        completed = {}
        failed = {}
        first_failure: Exception | None = None
        for index, attempt_id, (ok, value) in zip(batch, ids, outcomes, strict=True):
            step = item_name(name, index)
            if ok:
                completed[attempt_id] = value
                results[index] = value
                self._last[step] = Outcome(AttemptStatus.COMPLETED, value, None)
            else:
                error = f"{type(value).__name__}: {value}"
                failed[attempt_id] = error
                self._last[step] = Outcome(AttemptStatus.FAILED, None, error, now)
                first_failure = first_failure or value
        yield from self._ops.end_attempts(self.run_id, completed=completed, failed=failed)
        if first_failure is not None:
            raise first_failure

    def _batch_calls(
        self, batch: list[int], values: list[Any], fn: Any, executor: Any, ids: list[str]
    ) -> Parallel:
        """Return the calls of a batch's items, run at once (on `executor`, if given).

        Under a lease the whole batch's leases are renewed in one append, three times a
        lease, while its items run; a beat that finds the run taken over stops it.
        """
        if executor is None:
            calls = tuple(Call(captured, (fn, values[i])) for i in batch)
        else:
            awaiting = isinstance(self, Awaiting)
            calls = tuple(Call(submitted, (executor, fn, values[i], awaiting)) for i in batch)
        if self.lease is None:
            return Parallel(calls)
        beat = functools.partial(self._ops.heartbeats, self.run_id, tuple(ids))
        return Parallel(calls, beat=beat, every=self.lease / 3, fatal=(Fenced,))

    @operation
    def resolve(self, name: str, *, retry: bool = False, result: Any = None) -> Steps[bool]:
        """Settle a step that did not complete, as an operator decided (True: it needed it).

        `retry=True`: the step may run again (an at-most-once step cut off by a crash
        raises `StepInterrupted` until then). Otherwise it counts as completed with
        `result`, which replays return; its function is not called. Recorded as an attempt
        of the step, so `stashpoint runs show` tells. The command line: `stashpoint runs
        resolve RUN_ID STEP --retry | --result JSON`. A run that does not exist is
        `RunNotFound` (a resolve never creates one).
        """
        check_name(name)
        yield from self._open(create=False)
        last = self._last.get(name)
        if last is None or last.status is AttemptStatus.COMPLETED:
            return False
        self._require_open(name)
        self._tries[name] = self._tries.get(name, 0) + 1
        how = {"resolved": "retry" if retry else "result"}
        now = yield from self._now()
        # One append: the operator's decision is recorded already ended.
        yield from self._ops.record_ended_attempt(
            self.run_id, name, self._tries[name], how, started_at=now,
            output=None if retry else result, error=RESOLVED_RETRY if retry else None,
        )  # fmt: skip
        self._waiting = False
        if retry:
            self._last[name] = Outcome(AttemptStatus.FAILED, None, RESOLVED_RETRY, now)
        else:
            self._last[name] = Outcome(AttemptStatus.COMPLETED, result, None)
        return True

    @operation
    def complete(self) -> Steps[None]:
        """Mark the run completed (every step is done); a finished run stays as it is."""
        yield from self._open()
        if not self._finished:
            yield from self._wake()
            yield from self._ops.complete_run(self.run_id)


_R = TypeVar("_R")
_Item = TypeVar("_Item")
_Args = TypeVarTuple("_Args")


class DurableRun(Blocking, _DurableApi):
    """A run whose steps replay: `step(name, fn, *args)` runs `fn` once per claim."""

    if TYPE_CHECKING:
        # What mypy and editors see (the operation above runs): `step` and `map` keep the
        # types of the function they run, its arguments checked and its result kept.
        def step(
            self,
            name: str,
            fn: Callable[[*_Args], _R],
            *args: *_Args,
            semantics: Semantics = ...,
            retry: Retry | None = ...,
        ) -> _R:
            """Return the step's stored result, or run `fn(*args)` and store its result."""

        def map(
            self,
            name: str,
            items: Iterable[_Item],
            fn: Callable[[_Item], _R],
            *,
            max_concurrency: int = ...,
            executor: Executor | None = ...,
        ) -> list[_R]:
            """Run `fn(item)` for every item as step `name[i]`; return the results in order."""


class AsyncDurableRun(Awaiting, _DurableApi):
    """The asyncio twin of `DurableRun`; `fn` may be a coroutine function."""

    if TYPE_CHECKING:

        @overload
        async def step(
            self,
            name: str,
            fn: Callable[[*_Args], Awaitable[_R]],
            *args: *_Args,
            semantics: Semantics = ...,
            retry: Retry | None = ...,
        ) -> _R: ...
        @overload
        async def step(
            self,
            name: str,
            fn: Callable[[*_Args], _R],
            *args: *_Args,
            semantics: Semantics = ...,
            retry: Retry | None = ...,
        ) -> _R: ...
        async def step(
            self,
            name: str,
            fn: Callable[[*_Args], Any],
            *args: *_Args,
            semantics: Semantics = ...,
            retry: Retry | None = ...,
        ) -> Any:
            """Return the step's stored result, or run (and await) `fn(*args)`, store it."""

        @overload
        async def map(
            self,
            name: str,
            items: Iterable[_Item],
            fn: Callable[[_Item], Awaitable[_R]],
            *,
            max_concurrency: int = ...,
            executor: Executor | None = ...,
        ) -> list[_R]: ...
        @overload
        async def map(
            self, name: str, items: Iterable[_Item], fn: Callable[[_Item], _R], *,
            max_concurrency: int = ..., executor: Executor | None = ...,
        ) -> list[_R]: ...  # fmt: skip
        async def map(
            self, name: str, items: Any, fn: Any, *, max_concurrency: int = ...,
            executor: Executor | None = ...,
        ) -> Any:  # fmt: skip
            """Run (and await) `fn(item)` for every item as step `name[i]`, in order."""
