"""The asyncio agent API on real backends: same protocols, coroutine turns."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import AmbiguousResume, CheckpointConflict
from stashpoint.agent import (
    AsyncAgentCheckpoint,
    AsyncAgentRunner,
    AsyncConversationStore,
    DurableConversationCheckpoint,
    ResumePolicy,
    TurnInFlight,
)

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import fake_model


@pytest.fixture(params=["local_url", "s3_seaweed_url"], ids=["local", "s3"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(request.param)[0])


class Boom(Exception):
    pass


async def model_turn(state: Any, number: int) -> Any:
    await asyncio.sleep(0)  # a real model call would await the network here
    return fake_model.turn(state, number)


def crashing(n: int) -> Any:
    async def turn(state: Any, number: int) -> Any:
        if number == n:
            raise Boom
        return await model_turn(state, number)

    return turn


async def run(stash: Any, checkpoint_id: str, turn: Any = model_turn, **kw: Any) -> Any:
    runner = AsyncAgentRunner(AsyncAgentCheckpoint.existing(checkpoint_id, stash.checkpoints), **kw)
    return await runner.run(turn, agent="researcher", model=fake_model.MODEL,
                            transcript=fake_model.opening())  # fmt: skip


def test_async_runner_matches_the_blocking_one_and_resumes_by_policy(url: str) -> None:
    async def main() -> None:
        async with stashpoint.open_async(url) as stash:
            reference = await run(stash, stashpoint.new_id())
            assert reference.turns == fake_model.FINAL_TURN
            victim = stashpoint.new_id()
            with pytest.raises(Boom):
                await run(stash, victim, crashing(3))
            _, state = await AsyncAgentCheckpoint.existing(victim, stash.checkpoints).load()
            assert state.phase == TurnInFlight(turn=3)
            with pytest.raises(AmbiguousResume):
                await run(stash, victim)
            resumed = await run(stash, victim, policy=ResumePolicy.RETRY_INTERRUPTED_TURN)
            assert resumed.transcript == reference.transcript
        with stashpoint.open(url) as sync_stash:  # the blocking API reads the same state
            from stashpoint.agent import AgentCheckpoint

            assert (
                AgentCheckpoint.existing(victim, sync_stash.checkpoints).load()[1].outcome()
                == resumed
            )

    asyncio.run(main())


def test_two_async_resumers_exactly_one_proceeds(url: str) -> None:
    async def main() -> list[str]:
        async with stashpoint.open_async(url) as stash:
            checkpoint_id = stashpoint.new_id()
            with pytest.raises(Boom):
                await run(stash, checkpoint_id, crashing(2))
            both_resumed = asyncio.Barrier(2)

            async def resumer() -> str:
                runner = AsyncAgentRunner(
                    AsyncAgentCheckpoint.existing(checkpoint_id, stash.checkpoints),
                    policy=ResumePolicy.RETRY_INTERRUPTED_TURN,
                )
                cursor, state = await runner.resume()
                await both_resumed.wait()  # both hold the same revision now
                try:
                    await runner.run_turn(cursor, state, model_turn)
                    return "proceeded"
                except CheckpointConflict:
                    return "conflict"

            return sorted(await asyncio.gather(resumer(), resumer()))

    assert asyncio.run(main()) == ["conflict", "proceeded"]


def test_async_durable_conversation(url: str) -> None:
    async def main() -> None:
        async with stashpoint.open_async(url) as stash:
            conversation = f"c-{stashpoint.new_id()}"
            durable = DurableConversationCheckpoint(
                conversation_id=conversation, namespace="ns", expected_version=0,
                persisted_prefix_len=1,
            )  # fmt: skip
            runner = AsyncAgentRunner(AsyncAgentCheckpoint.new(stash.checkpoints))
            outcome = await runner.run(model_turn, agent="a", model=fake_model.MODEL,
                                       transcript=fake_model.opening(), durable=durable)  # fmt: skip
            version, messages = await AsyncConversationStore(stash.checkpoints).load(
                "ns", conversation
            )
            assert version == fake_model.FINAL_TURN and messages == outcome.transcript[1:]

    asyncio.run(main())
