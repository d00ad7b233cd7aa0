"""Agent turns as steps: a runner given the run store records each turn as an attempt of
the run its checkpoint belongs to, so `stashpoint runs show` lists them like any step; a
turn that raises is a failed attempt."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import AttemptStatus
from stashpoint.agent import (
    AgentCheckpoint,
    AgentCheckpointState,
    AgentRunner,
    AsyncAgentCheckpoint,
    AsyncAgentRunner,
    TurnResult,
)

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import fake_model


def test_every_turn_is_an_attempt_of_the_checkpoints_run(local_url: Any) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("research")
        runner = AgentRunner(AgentCheckpoint.new(stash.checkpoints), runs=stash.runs)
        outcome = runner.run(
            fake_model.turn, agent="researcher", model=fake_model.MODEL,
            transcript=fake_model.opening(), run_id=run_id,
        )  # fmt: skip
        assert outcome.turns == fake_model.FINAL_TURN
        state = stash.runs.load_run(run_id)
        # Issue 25 #7: the agent completed, so did its run (it stayed running on main);
        # running the completed checkpoint again returns its outcome and writes nothing.
        assert state is not None and state.status is stashpoint.RunStatus.COMPLETED
        again = runner.run(
            fake_model.turn, agent="researcher", model=fake_model.MODEL,
            transcript=fake_model.opening(), run_id=run_id,
        )  # fmt: skip
        assert again == outcome
        assert stash.runs.load_run(run_id).updated_at == state.updated_at  # type: ignore[union-attr]
    turns = [(a.node_id, a.status) for a in state.attempts]
    assert turns == [(f"turn-{n}", AttemptStatus.COMPLETED) for n in range(1, 5)]
    assert state.attempts[0].output["tool_calls"] == 1
    assert state.attempts[-1].output == {
        "turn": 4, "messages": 1, "tool_calls": 0, "input_tokens": 80, "output_tokens": 5,
    }  # fmt: skip


def test_a_turn_that_raises_is_a_failed_attempt_and_no_run_means_no_record(
    memory_url: Any,
) -> None:
    url, _ = memory_url

    def broken(state: AgentCheckpointState, number: int) -> TurnResult:
        if number == 2:
            raise RuntimeError("the model API is down")
        return fake_model.turn(state, number)

    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("research")
        runner = AgentRunner(AgentCheckpoint.new(stash.checkpoints), runs=stash.runs)
        with pytest.raises(RuntimeError):
            runner.run(broken, agent="a", model=fake_model.MODEL,
                       transcript=fake_model.opening(), run_id=run_id)  # fmt: skip
        state = stash.runs.load_run(run_id)
        assert state is not None
        assert [(a.node_id, a.status.value, a.error) for a in state.attempts] == [
            ("turn-1", "completed", None),
            ("turn-2", "failed", "RuntimeError: the model API is down"),
        ]
        plain = AgentRunner(AgentCheckpoint.new(stash.checkpoints), runs=stash.runs)
        plain.run(fake_model.turn, agent="a", model=fake_model.MODEL,
                  transcript=fake_model.opening())  # fmt: skip
        assert stash.runs.load_run(run_id).attempts == state.attempts  # type: ignore[union-attr]


def test_the_async_runner_records_turns_too(memory_url: Any) -> None:
    url, _ = memory_url

    async def main() -> list[str]:
        async with stashpoint.open_async(url) as stash:
            run_id = await stash.runs.create_run("research")
            checkpoint = AsyncAgentCheckpoint.new(stash.checkpoints)
            runner = AsyncAgentRunner(checkpoint, runs=stash.runs)
            await runner.run(fake_model.turn, agent="a", model=fake_model.MODEL,
                             transcript=fake_model.opening(), run_id=run_id)  # fmt: skip
            state = await stash.runs.load_run(run_id)
            return [a.node_id for a in state.attempts]

    assert asyncio.run(main()) == [f"turn-{n}" for n in range(1, 5)]
