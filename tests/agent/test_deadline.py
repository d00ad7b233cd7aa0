"""Deadline-aware agent runs: a Lambda whose turns take 2 s, 2 s, then 4.5 s.

A fake clock advances as turns run; a fake Lambda context reads it against the
invocation's budget and "kills" a turn that would outlive it (the process dies mid-turn,
leaving it in flight). With a fixed 3 s margin the third turn is killed and every later
invocation is refused as ambiguous; `run_until` plans from the durations the checkpoint
keeps, and the conversation finishes with no turn ever cut off.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import stashpoint
from stashpoint import AmbiguousResume
from stashpoint.agent import (
    AgentCheckpoint,
    AgentCheckpointState,
    AgentOutcome,
    AgentRunner,
    Deadline,
    Suspended,
    TurnInFlight,
    TurnResult,
)

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import fake_model

DURATIONS = {1: 2.0, 2: 2.0, 3: 4.5, 4: 2.0}
"""Seconds each turn takes on the fake clock (turn 4 answers)."""
BUDGET = 8.0
"""Seconds a fake Lambda invocation lives."""


class Killed(BaseException):
    """The Lambda runtime ended the invocation mid-turn (nothing after this runs)."""


class FakeLambda:
    """A fake clock and a Lambda context over it: each invocation gets `BUDGET` seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ends_at = BUDGET

    def invoke(self) -> None:
        self.ends_at = self.now + BUDGET

    def clock(self) -> float:
        return self.now

    def get_remaining_time_in_millis(self) -> int:
        return int((self.ends_at - self.now) * 1000)

    def turn(self, state: AgentCheckpointState, number: int) -> TurnResult:
        self.now += DURATIONS[number]
        if self.now > self.ends_at:
            raise Killed(number)
        return fake_model.turn(state, number)


def _invoke_with_a_fixed_margin(runner: AgentRunner, fake: FakeLambda) -> str:
    """The old example's loop: a turn starts while 3 s remain."""
    cursor, state = runner.resume(agent="researcher", model=fake_model.MODEL)
    while state.outcome() is None:
        if fake.get_remaining_time_in_millis() < 3_000:
            return "continue"
        state = runner.run_turn(cursor, state, fake.turn)
    return "done"


def test_a_fixed_margin_gets_stuck_on_the_slow_third_turn(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path}") as stash:
        runner = AgentRunner(AgentCheckpoint.existing("job", stash.checkpoints))
        runner.start(agent="researcher", model=fake_model.MODEL, transcript=fake_model.opening())
        fake = FakeLambda()
        with pytest.raises(Killed):
            _invoke_with_a_fixed_margin(runner, fake)  # 2 s, 2 s, then 4.5 s with 4 s left
        fake.invoke()
        with pytest.raises(AmbiguousResume):
            _invoke_with_a_fixed_margin(runner, fake)  # and every invocation after it


def test_run_until_plans_from_turn_durations_and_never_cuts_a_turn(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path}") as stash:
        runner = AgentRunner(AgentCheckpoint.existing("job", stash.checkpoints))
        fake = FakeLambda()
        results: list[AgentOutcome | Suspended] = []
        for _ in range(10):
            fake.invoke()
            deadline = Deadline.of_lambda(fake, clock=fake.clock)
            result = runner.run_until(
                deadline, fake.turn, agent="researcher", model=fake_model.MODEL,
                transcript=fake_model.opening(),
            )  # fmt: skip
            results.append(result)
            if isinstance(result, AgentOutcome):
                break
            state = AgentCheckpoint.existing("job", stash.checkpoints).load()[1]
            assert not isinstance(state.phase, TurnInFlight)  # suspended between turns
        assert [r.turns if isinstance(r, Suspended) else "done" for r in results] == [
            2,  # 2 s + 2 s; 4 s left < 2 x 2 s + 1 s: stop before turn 3
            3,  # turn 3 (4.5 s) alone; 3.5 s left < 2 x 4.5 s + 1 s
            "done",  # turn 4 answers
        ]
        first = results[0]
        assert isinstance(first, Suspended) and first.needed_seconds == 5.0
        assert first.remaining_seconds == 4.0
        state = AgentCheckpoint.existing("job", stash.checkpoints).load()[1]
        assert state.turn_seconds == [2.0, 2.0, 4.5, 2.0]
        assert state.abandoned_turns == []


def test_a_turn_killed_anyway_is_resolved_by_the_operator(tmp_path: Path) -> None:
    url = f"local://{tmp_path}"
    with stashpoint.open(url) as stash:
        runner = AgentRunner(AgentCheckpoint.existing("stuck", stash.checkpoints))
        runner.start(agent="researcher", model=fake_model.MODEL, transcript=fake_model.opening())
        fake = FakeLambda()
        with pytest.raises(Killed):
            _invoke_with_a_fixed_margin(runner, fake)
        with pytest.raises(AmbiguousResume):
            runner.resume()
    from stashpoint.cli.app import app

    cli = CliRunner()
    done = cli.invoke(app, ["agent", "resolve", "stuck", "--abandon-turn", "--url", url, "--json"])
    assert done.exit_code == 0, done.output
    report: dict[str, Any] = __import__("json").loads(done.stdout)
    assert report == {"checkpoint_id": "stuck", "resolved": True, "turn": 3, "how": "abandoned"}
    again = cli.invoke(app, ["agent", "resolve", "stuck", "--retry-turn", "--url", url, "--json"])
    assert __import__("json").loads(again.stdout)["resolved"] is False  # nothing in flight
    with stashpoint.open(url) as stash:
        runner = AgentRunner(AgentCheckpoint.existing("stuck", stash.checkpoints))
        _, state = runner.resume()
        assert state.turns == 3 and state.abandoned_turns == [3]
        outcome = runner.run(fake_model.turn, agent="researcher", model=fake_model.MODEL)
        assert outcome.turns == 4


def test_retry_turn_runs_the_interrupted_turn_again(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path}") as stash:
        runner = AgentRunner(AgentCheckpoint.existing("again", stash.checkpoints))
        runner.start(agent="researcher", model=fake_model.MODEL, transcript=fake_model.opening())
        fake = FakeLambda()
        with pytest.raises(Killed):
            _invoke_with_a_fixed_margin(runner, fake)
        resolved, state = runner.resolve(retry=True)
        assert resolved and state.turns == 2 and state.abandoned_turns == []
        outcome = runner.run(fake_model.turn, agent="researcher", model=fake_model.MODEL)
        assert outcome.turns == 4 and len(outcome.transcript) == 2 + 2 * 3 + 1
