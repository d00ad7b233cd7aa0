"""Two seams of the agent runner a new user hit (issue 47, items 12-13).

A turn that raises `TurnNotStarted` (it had no effect) leaves no turn in flight: the next run
runs it again with no operator. Any other exception leaves it in flight, and the error says
which agent and which command settles it. A completed agent handed a new run never leaves
that run `running`: the run fails with the reason and the caller gets `IdentityMismatch`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint.agent import (
    AgentCheckpoint,
    AgentRunner,
    Message,
    ModelRef,
    ModelResponse,
    TurnNotStarted,
    TurnResult,
)
from stashpoint.status import RunStatus

MODEL = ModelRef(provider="fake", name="echo-1")


def _answer(state: Any, number: int) -> TurnResult:
    done = Message(role="assistant", content="42")
    return TurnResult(messages=[done], response=ModelResponse(message=done))


def test_a_turn_that_says_it_had_no_effect_runs_again_without_an_operator(
    tmp_path: Path,
) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        run_id = stash.runs.create_run("support")
        runner = AgentRunner(
            AgentCheckpoint.existing("agent-7", stash.checkpoints), runs=stash.runs
        )

        def unavailable(state: Any, number: int) -> TurnResult:
            raise TurnNotStarted("model answered 503") from ConnectionError("503")

        with pytest.raises(TurnNotStarted):
            runner.run(unavailable, agent="support", model=MODEL, run_id=run_id)
        outcome = runner.run(_answer, agent="support", model=MODEL, run_id=run_id)
        assert outcome.turns == 1 and outcome.response.message.content == "42"
        run = stash.runs.load_run(run_id)
        assert run.status is RunStatus.COMPLETED
        assert [a.status.value for a in run.attempts] == ["failed", "completed"]


def test_a_turn_that_raised_anything_else_stays_in_flight_and_the_error_says_what_to_do(
    tmp_path: Path,
) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        runner = AgentRunner(AgentCheckpoint.existing("agent-7", stash.checkpoints))

        def broken(state: Any, number: int) -> TurnResult:
            raise RuntimeError("tool crashed after charging the card")

        with pytest.raises(RuntimeError):
            runner.run(broken, agent="support", model=MODEL)
        with pytest.raises(stashpoint.AmbiguousResume) as ambiguous:
            runner.run(_answer, agent="support", model=MODEL)
        message = str(ambiguous.value)
        assert "agent-7" in message and "stashpoint agent resolve agent-7" in message
        assert ambiguous.value.object_name == "agent-7"


def test_a_completed_agent_handed_a_new_run_ends_that_run(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        first = stash.runs.create_run("support")
        runner = AgentRunner(
            AgentCheckpoint.existing("agent-7", stash.checkpoints), runs=stash.runs
        )
        runner.run(_answer, agent="support", model=MODEL, run_id=first)
        again = runner.run(_answer, agent="support", model=MODEL, run_id=first)  # a retry
        assert again.response.message.content == "42"
        second = stash.runs.create_run("support")
        for _ in range(2):  # the second delivery of the same event finds the run ended
            with pytest.raises(stashpoint.IdentityMismatch) as refused:
                runner.run(_answer, agent="support", model=MODEL, run_id=second)
            assert first in str(refused.value) and second in str(refused.value)
        ended = stash.runs.load_run(second)
        assert ended.status is RunStatus.FAILED and "agent-7" in (ended.error or "")
        assert stash.runs.load_run(first).status is RunStatus.COMPLETED
        assert stash.runs.list_runs(status=RunStatus.RUNNING).items == []
