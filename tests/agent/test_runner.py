"""Concurrent resumers of one agent checkpoint, with real threads on real backends.

The rest of the agent layer runs in the contract suite (`tests/contract/test_agent_contract.py`).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import (
    CheckpointConflict,
)
from stashpoint.agent import (
    AgentCheckpoint,
    AgentRunner,
    ResumePolicy,
)
from tests.contract.test_agent_contract import Boom, crash_in_turn

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import fake_model


@pytest.fixture(params=["local_url", "s3_seaweed_url"], ids=["local", "s3"])
def stash(request: pytest.FixtureRequest) -> Any:
    url, options = request.getfixturevalue(request.param)
    with stashpoint.open(url, **options) as opened:
        yield opened


def test_two_concurrent_resumers_exactly_one_proceeds(stash: Any) -> None:
    checkpoint_id = stashpoint.new_id()
    runner = AgentRunner(AgentCheckpoint.existing(checkpoint_id, stash.checkpoints))
    with pytest.raises(Boom):
        runner.run(crash_in_turn(2), agent="researcher", model=fake_model.MODEL,
                   transcript=fake_model.opening())  # fmt: skip
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def resumer() -> None:
        runner = AgentRunner(
            AgentCheckpoint.existing(checkpoint_id, stash.checkpoints),
            policy=ResumePolicy.RETRY_INTERRUPTED_TURN,
        )
        cursor, state = runner.resume()
        barrier.wait()  # both loaded the same revision: a zombie and its replacement
        try:
            runner.run_turn(cursor, state, fake_model.turn)
            outcomes.append("proceeded")
        except CheckpointConflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=resumer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict", "proceeded"]
    state = AgentCheckpoint.existing(checkpoint_id, stash.checkpoints).load()[1]
    assert state.turns == 2  # one transcript, not two forks
