"""Run transitions are pure: checked against a simple model with hypothesis.

The run is what its log says: the head a transition returns folded with every record
appended so far (`journal.fold`), compared with the model after every step.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from stashpoint import AttemptNotFound, Fenced, Interrupt, TerminalStateConflict
from stashpoint.runs import journal, transitions
from stashpoint.runs.models import AttemptStatus, RunHead, RunState, RunStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class RunMachine(RuleBasedStateMachine):
    """Random sequences of operations; a plain-dict model says what must happen."""

    def __init__(self) -> None:
        super().__init__()
        self.head = RunHead(run_id="r", graph_name="g", created_at=T0, updated_at=T0)
        self.records: list[dict[str, object]] = []
        self.model_status = RunStatus.RUNNING
        self.model_attempts: dict[str, AttemptStatus] = {}
        self.clock = T0
        self.counter = 0

    def _now(self) -> datetime:
        self.clock += timedelta(seconds=1)
        return self.clock

    @property
    def state(self) -> RunState:
        return journal.fold(self.head, self.records, "r")

    def _expect(self, ok: bool, call: Callable[[], transitions.Change]) -> None:
        if ok:
            change = call()
            self.head = change.head
            self.records.extend(change.records)
            # One index item per record, or the renewed lease of a heartbeat.
            assert len(change.touched) == len(change.records) or (
                not change.records and len(change.touched) == 1
            )
        else:
            with pytest.raises((TerminalStateConflict, AttemptNotFound)):
                call()

    @rule(node=st.sampled_from(["a", "b", "c"]))
    def record(self, node: str) -> None:
        self.counter += 1
        attempt_id = f"r~{self.counter}"
        ok = not self.model_status.is_terminal
        self._expect(ok, lambda: transitions.record_attempt(
            self.head, attempt_id=attempt_id, node_id=node, attempt=1, input=None,
            trace_ctx=None, now=self._now()))  # fmt: skip
        if ok:
            self.model_attempts[attempt_id] = AttemptStatus.RUNNING
            self.model_status = RunStatus.RUNNING

    @precondition(lambda self: self.model_attempts)
    @rule(data=st.data(), how=st.sampled_from(["complete", "fail", "interrupt"]))
    def finish_attempt(self, data: st.DataObject, how: str) -> None:
        attempt_id = data.draw(st.sampled_from(sorted(self.model_attempts)))
        running = self.model_attempts[attempt_id] is AttemptStatus.RUNNING
        now = self._now()
        call: Callable[[], transitions.Change]
        if how == "complete":
            ok = running
            call = partial(
                transitions.complete_attempt, self.head, attempt_id, output=1, meta={}, now=now
            )
            new = AttemptStatus.COMPLETED
        elif how == "fail":
            ok = running
            call = partial(transitions.fail_attempt, self.head, attempt_id, error="e", now=now)
            new = AttemptStatus.FAILED
        else:
            ok = running and not self.model_status.is_terminal
            call = partial(
                transitions.record_interrupt, self.head, attempt_id, interrupt=Interrupt(), now=now
            )
            new = AttemptStatus.INTERRUPTED
        self._expect(ok, call)
        if ok:
            self.model_attempts[attempt_id] = new
            if how == "interrupt":
                self.model_status = RunStatus.INTERRUPTED

    @rule()
    def take_over(self) -> None:
        ok = not self.model_status.is_terminal
        before = self.head.epoch
        self._expect(ok, lambda: transitions.takeover(self.head, now=self._now(), reason="gone"))
        if ok:
            assert self.head.epoch == before + 1
            for k, v in self.model_attempts.items():
                if v is AttemptStatus.RUNNING:  # every one was recorded under an older epoch
                    self.model_attempts[k] = AttemptStatus.FAILED
            with pytest.raises(Fenced):
                transitions.check_owner(self.head, before)
        transitions.check_owner(self.head, self.head.epoch)
        transitions.check_owner(self.head, None)

    @precondition(lambda self: self.model_attempts)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        attempt_id = data.draw(st.sampled_from(sorted(self.model_attempts)))
        ok = self.model_attempts[attempt_id] is AttemptStatus.RUNNING
        self._expect(ok, lambda: transitions.heartbeat(self.head, attempt_id, now=self._now()))
        if ok:
            assert self.head.running[attempt_id].heartbeat_at == self.clock

    @rule()
    def unknown_attempt(self) -> None:
        with pytest.raises(AttemptNotFound):
            transitions.complete_attempt(self.head, "r~missing", output=1, meta={}, now=self._now())
        assert isinstance(journal.not_running(self.state, "r~missing"), AttemptNotFound)

    @rule(target_status=st.sampled_from([RunStatus.COMPLETED, RunStatus.FAILED]))
    def finish_run(self, target_status: RunStatus) -> None:
        again = self.model_status is target_status  # a repeated end: changes nothing
        ok = self.model_status is RunStatus.RUNNING or again
        before = self.head
        self._expect(ok, lambda: transitions.finish_run(self.head, target_status, now=self._now()))
        if again:
            assert self.head == before
        if ok:
            self.model_status = target_status

    @rule()
    def cancel(self) -> None:
        again = self.model_status is RunStatus.CANCELLED  # a repeated cancel: changes nothing
        ok = not self.model_status.is_terminal or again
        before = self.head
        self._expect(ok, lambda: transitions.cancel_run(self.head, now=self._now()))
        if again:
            assert self.head == before
        if ok:
            self.model_status = RunStatus.CANCELLED
            for k, v in self.model_attempts.items():
                if v is AttemptStatus.RUNNING:
                    self.model_attempts[k] = AttemptStatus.CANCELLED

    @invariant()
    def ended_attempts_are_explained(self) -> None:
        state = self.state
        for attempt_id, status in self.model_attempts.items():
            if status is not AttemptStatus.RUNNING:
                assert isinstance(journal.not_running(state, attempt_id), TerminalStateConflict)

    @invariant()
    def matches_model(self) -> None:
        assert self.state.status is self.model_status
        assert {a.attempt_id: a.status for a in self.state.attempts} == self.model_attempts
        assert [a.attempt_id for a in self.state.attempts] == list(self.model_attempts)
        for a in self.state.attempts:
            assert (a.finished_at is None) == (a.status is AttemptStatus.RUNNING)
        assert (self.state.interrupted is not None) == (self.model_status is RunStatus.INTERRUPTED)


TestRunMachine = RunMachine.TestCase
