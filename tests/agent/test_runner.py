"""Agent checkpoints on real backends: phases, resume policies, concurrent resumers."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import (
    AmbiguousResume,
    CheckpointConflict,
    Envelope,
    InvalidPayload,
    UnsupportedFormat,
)
from stashpoint.agent import (
    AgentCheckpoint,
    AgentRunner,
    CheckpointCursor,
    Completed,
    ConversationStore,
    DurableConversationCheckpoint,
    Message,
    ReadyForTurn,
    ResumePolicy,
    TurnInFlight,
)

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import fake_model


@pytest.fixture(params=["local_url", "s3_seaweed_url"], ids=["local", "s3"])
def stash(request: pytest.FixtureRequest) -> Any:
    url, options = request.getfixturevalue(request.param)
    with stashpoint.open(url, **options) as opened:
        yield opened


class Boom(Exception):
    pass


def crash_in_turn(n: int) -> Any:
    def turn(state: Any, number: int) -> Any:
        if number == n:
            raise Boom  # the process "dies" with the turn in flight
        return fake_model.turn(state, number)

    return turn


def run(stash: Any, checkpoint_id: str, turn: Any = fake_model.turn, **kw: Any) -> Any:
    runner = AgentRunner(AgentCheckpoint.existing(checkpoint_id, stash.checkpoints), **kw)
    return runner.run(
        turn, agent="researcher", model=fake_model.MODEL, transcript=fake_model.opening()
    )


def test_phases_move_ready_inflight_ready_then_completed(stash: Any) -> None:
    handle = AgentCheckpoint.new(stash.checkpoints)
    runner = AgentRunner(handle)
    cursor, state = runner.start(agent="a", model=fake_model.MODEL, transcript=fake_model.opening())
    assert isinstance(handle.load()[1].phase, ReadyForTurn) and cursor.revision == 0
    seen: list[Any] = []

    def spy(current: Any, number: int) -> Any:
        seen.append(handle.load()[1].phase)  # what a crash right now would leave behind
        return fake_model.turn(current, number)

    state = runner.run_turn(cursor, state, spy)
    assert seen == [TurnInFlight(turn=1)]
    envelope, loaded = handle.load()
    assert isinstance(loaded.phase, ReadyForTurn) and loaded.turns == 1 and envelope.revision == 2
    while state.outcome() is None:
        state = runner.run_turn(cursor, state, fake_model.turn)
    final = handle.load()[1]
    assert isinstance(final.phase, Completed) and final.turns == fake_model.FINAL_TURN
    assert final.tool_calls == fake_model.FINAL_TURN - 1


def test_reject_ambiguous_is_the_default_and_carries_the_turn(stash: Any) -> None:
    checkpoint_id = stashpoint.new_id()
    with pytest.raises(Boom):
        run(stash, checkpoint_id, crash_in_turn(3))
    with pytest.raises(AmbiguousResume) as info:
        run(stash, checkpoint_id)
    assert info.value.turn == 3 and info.value.kind == stashpoint.ErrorKind.AMBIGUOUS_RESUME
    assert AgentCheckpoint.existing(checkpoint_id, stash.checkpoints).load()[
        1
    ].phase == TurnInFlight(turn=3)


def test_retry_interrupted_turn_restarts_from_the_stable_transcript(stash: Any) -> None:
    reference = run(stash, stashpoint.new_id())
    checkpoint_id = stashpoint.new_id()
    with pytest.raises(Boom):
        run(stash, checkpoint_id, crash_in_turn(2))
    outcome = run(stash, checkpoint_id, policy=ResumePolicy.RETRY_INTERRUPTED_TURN)
    assert outcome.transcript == reference.transcript
    assert outcome.turns == reference.turns and outcome.usage == reference.usage


def test_completed_checkpoint_returns_outcome_without_calling_the_model(stash: Any) -> None:
    checkpoint_id = stashpoint.new_id()
    first = run(stash, checkpoint_id)

    def must_not_run(state: Any, number: int) -> Any:
        raise AssertionError("model called for a completed checkpoint")

    again = run(stash, checkpoint_id, must_not_run)
    assert again == first


def test_two_concurrent_resumers_exactly_one_proceeds(stash: Any) -> None:
    checkpoint_id = stashpoint.new_id()
    with pytest.raises(Boom):
        run(stash, checkpoint_id, crash_in_turn(2))
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


def test_load_rejects_other_kinds_and_schema_versions(stash: Any) -> None:
    other = Envelope.initial(stashpoint.new_id(), None, "stashpoint.job", 1, {"x": 1})
    stash.checkpoints.compare_and_swap(other, None)
    with pytest.raises(InvalidPayload):
        AgentCheckpoint.existing(other.id, stash.checkpoints).load()
    future = Envelope.initial(stashpoint.new_id(), None, "stashpoint.agent", 2, {"x": 1})
    stash.checkpoints.compare_and_swap(future, None)
    with pytest.raises(UnsupportedFormat):
        AgentCheckpoint.existing(future.id, stash.checkpoints).load()
    broken = Envelope.initial(stashpoint.new_id(), None, "stashpoint.agent", 1, {"agent": 3})
    stash.checkpoints.compare_and_swap(broken, None)
    with pytest.raises(InvalidPayload):
        AgentCheckpoint.existing(broken.id, stash.checkpoints).load()


def test_resume_checks_agent_and_model_identity(stash: Any) -> None:
    checkpoint_id = stashpoint.new_id()
    run(stash, checkpoint_id)
    runner = AgentRunner(AgentCheckpoint.existing(checkpoint_id, stash.checkpoints))
    with pytest.raises(InvalidPayload, match="agent"):
        runner.resume(agent="someone-else")
    with pytest.raises(InvalidPayload, match="model"):
        runner.resume(model=fake_model.MODEL.model_copy(update={"name": "other"}))


def test_cursor_save_is_compare_and_swap(stash: Any) -> None:
    handle = AgentCheckpoint.new(stash.checkpoints)
    state = AgentRunner(handle).start(agent="a", model=fake_model.MODEL, transcript=[])[1]
    first = CheckpointCursor.loaded(handle, handle.load()[0])
    second = CheckpointCursor.loaded(handle, handle.load()[0])
    first.save(state.model_copy(update={"turns": 1}))
    with pytest.raises(CheckpointConflict):
        second.save(state.model_copy(update={"turns": 9}))
    assert handle.load()[1].turns == 1 and first.revision == 1 and first.id == handle.id


def test_durable_conversation_commits_each_turn_minus_runtime_prefix(stash: Any) -> None:
    conversations = ConversationStore(stash.checkpoints)
    conversation = f"c-{stashpoint.new_id()}"
    durable = DurableConversationCheckpoint(
        conversation_id=conversation, namespace="tenant-a", expected_version=0,
        persisted_prefix_len=1,
    )  # fmt: skip
    runner = AgentRunner(AgentCheckpoint.new(stash.checkpoints))
    outcome = runner.run(
        fake_model.turn, agent="a", model=fake_model.MODEL, transcript=fake_model.opening(),
        durable=durable,
    )  # fmt: skip
    version, messages = conversations.load("tenant-a", conversation)
    assert version == fake_model.FINAL_TURN  # one commit per turn
    assert messages == outcome.transcript[1:]  # the system prompt is runtime-only
    state = runner.checkpoint.load()[1]
    assert state.durable_conversation is not None
    assert state.durable_conversation.expected_version == fake_model.FINAL_TURN


def test_conversation_commit_is_compare_and_swap_and_idempotent(stash: Any) -> None:
    conversations = ConversationStore(stash.checkpoints)
    cid = f"c-{stashpoint.new_id()}"
    hello = [Message(role="user", content="hello")]
    assert conversations.commit("ns", cid, 0, hello) == 1
    assert conversations.commit("ns", cid, 0, hello) == 1  # the same commit, replayed
    with pytest.raises(CheckpointConflict):
        conversations.commit("ns", cid, 0, [Message(role="user", content="fork")])
    assert (
        conversations.commit("ns", cid, 1, [*hello, Message(role="assistant", content="hi")]) == 2
    )
    assert conversations.load("ns", cid)[0] == 2
    assert conversations.load("ns", "never") == (0, [])
