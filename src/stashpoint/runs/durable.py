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

Built on runs as logs (`runs.journal`), so a step costs two appends however long the run.
`DurableRun` and `AsyncDurableRun` are made from one definition (`stashpoint.twins`); the
asyncio one awaits coroutine functions.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from stashpoint.errors import (
    CheckpointConflict,
    InvalidArgument,
    NondeterministicReplay,
    StepInterrupted,
    TerminalStateConflict,
)
from stashpoint.runs.models import AttemptStatus
from stashpoint.steps import Call, Steps, ask
from stashpoint.twins import Awaiting, Blocking, operation


class Semantics(StrEnum):
    """What a step promises about running its function."""

    AT_LEAST_ONCE = "at_least_once"
    """A step cut off mid-function runs again on replay (make it idempotent: `key`)."""
    AT_MOST_ONCE = "at_most_once"
    """A step cut off mid-function is reported (`StepInterrupted`), never run again."""


@dataclass(frozen=True)
class _Outcome:
    """How a step's latest attempt ended (or that it did not)."""

    status: AttemptStatus
    output: Any
    error: str | None


class _DurableApi:
    """A durable run's operations, defined once; see `DurableRun`."""

    def __init__(
        self, runs: Any, run_id: str, *, graph_name: str = "durable", lease: float | None = None
    ) -> None:
        self.run_id = run_id
        """The run."""
        self.graph_name = graph_name
        """The graph name the run is created with."""
        self.lease = lease
        """Lease of each step's attempt, in seconds (None: none)."""
        self._runs = runs
        self._execute = runs._execute
        self._opened = False
        self._finished = False
        self._order: list[str] = []
        self._last: dict[str, _Outcome] = {}
        self._tries: dict[str, int] = {}
        self._asked: list[str] = []

    def _run_op(self, name: str, *args: Any, **kwargs: Any) -> Steps[Any]:
        """Return the steps of a run-store operation (one driver runs them all)."""
        definition: Any = inspect.getattr_static(self._runs, name)
        return definition.steps(self._runs, *args, **kwargs)  # type: ignore[no-any-return]

    def key(self, name: str) -> str:
        """Return an idempotency key for step `name`, the same on every retry and replay."""
        return f"{self.run_id}:{name}"

    def _open(self) -> Steps[None]:
        """Create the run, or take it over; learn the steps it recorded (once)."""
        if self._opened:
            return
        try:
            yield from self._run_op("create_run", self.graph_name, run_id=self.run_id)
        except CheckpointConflict:
            try:
                yield from self._run_op(
                    "takeover", self.run_id, reason="interrupted: the run was taken over"
                )
            except TerminalStateConflict:
                self._finished = True  # a finished run only replays
        state = yield from self._run_op("load_run", self.run_id)
        for record in state.attempts:
            if record.node_id not in self._last:
                self._order.append(record.node_id)
            self._last[record.node_id] = _Outcome(record.status, record.output, record.error)
            self._tries[record.node_id] = self._tries.get(record.node_id, 0) + 1
        self._opened = True

    @operation
    def step(
        self,
        name: str,
        fn: Any,
        *args: Any,
        semantics: Semantics = Semantics.AT_LEAST_ONCE,
    ) -> Steps[Any]:
        """Return the step's stored result, or run `fn(*args)` and store its result.

        An exception from `fn` is recorded (the attempt fails) and raised; the next replay
        runs the step again (`AT_LEAST_ONCE`) or raises `StepInterrupted`.
        """
        try:
            semantics = Semantics(semantics)
        except ValueError:
            raise InvalidArgument(f"unknown step semantics {semantics!r}") from None
        yield from self._open()
        if name not in self._asked:  # asking again for a step is retrying it, not a new one
            position = len(self._asked)
            self._asked.append(name)
            if position < len(self._order) and self._order[position] != name:
                raise NondeterministicReplay(
                    self.run_id, position=position, recorded=self._order[position], asked=name
                )
        last = self._last.get(name)
        if last is not None and last.status is AttemptStatus.COMPLETED:
            return last.output
        if self._finished:
            raise TerminalStateConflict(
                f"the run is finished: step {name!r} was never completed in it",
                object_name=self.run_id,
            )
        if last is not None and semantics is Semantics.AT_MOST_ONCE:
            raise StepInterrupted(self.run_id, step=name, detail=last.error or last.status.value)
        if name not in self._order:
            self._order.append(name)
        attempt = self._tries.get(name, 0) + 1
        self._tries[name] = attempt
        attempt_id = yield from self._run_op(
            "record_attempt", self.run_id, name, attempt, {"key": self.key(name)}, lease=self.lease
        )
        try:
            result = yield from ask(Call(fn, args))
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            yield from self._run_op("fail_attempt", attempt_id, error)
            self._last[name] = _Outcome(AttemptStatus.FAILED, None, error)
            raise
        yield from self._run_op("complete_attempt", attempt_id, result)
        self._last[name] = _Outcome(AttemptStatus.COMPLETED, result, None)
        return result

    @operation
    def complete(self) -> Steps[None]:
        """Mark the run completed (every step is done); a finished run stays as it is."""
        yield from self._open()
        if not self._finished:
            yield from self._run_op("complete_run", self.run_id)


class DurableRun(Blocking, _DurableApi):
    """A run whose steps replay: `step(name, fn, *args)` runs `fn` once per claim."""


class AsyncDurableRun(Awaiting, _DurableApi):
    """The asyncio twin of `DurableRun`; `fn` may be a coroutine function."""
