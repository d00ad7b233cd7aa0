"""The agent layer's contract: handles, cursors, runners and conversations behave the same
on every backend (memory, local, S3 on SeaweedFS and its directory-bucket stand-in; not
moto, which runs the store's and log's contracts they build on) and both drivers.

`agent` is the driver's agent API (`conftest.AgentKit`); `other_store` is an independent
blocking stash on the same storage, reading what another process would see.
"""

from __future__ import annotations

import sys
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
    Completed,
    DurableConversationCheckpoint,
    Message,
    ReadyForTurn,
    ResumePolicy,
    TurnInFlight,
)
from tests.contract.conftest import MECHANISMS_ONLY, backend_fixture

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import fake_model

backend = backend_fixture(MECHANISMS_ONLY)  # not moto: see `backend_fixture`


class Boom(Exception):
    pass


def crash_in_turn(n: int) -> Any:
    def turn(state: Any, number: int) -> Any:
        if number == n:
            raise Boom  # the process "dies" with the turn in flight
        return fake_model.turn(state, number)

    return turn


def run(agent: Any, checkpoint_id: str, turn: Any = fake_model.turn, **kw: Any) -> Any:
    runner = agent.AgentRunner(agent.AgentCheckpoint.existing(checkpoint_id, agent.store), **kw)
    return runner.run(
        agent.turn(turn), agent="researcher", model=fake_model.MODEL,
        transcript=fake_model.opening(),
    )  # fmt: skip


def test_phases_move_ready_inflight_ready_then_completed(agent: Any, other_store: Any) -> None:
    handle = agent.AgentCheckpoint.new(agent.store)
    watcher = AgentCheckpoint.existing(handle.id, other_store)  # another process's view
    runner = agent.AgentRunner(handle)
    cursor, state = runner.start(agent="a", model=fake_model.MODEL, transcript=fake_model.opening())
    assert isinstance(watcher.load()[1].phase, ReadyForTurn) and cursor.revision == 0
    seen: list[Any] = []

    def spy(current: Any, number: int) -> Any:
        seen.append(watcher.load()[1].phase)  # what a crash right now would leave behind
        return fake_model.turn(current, number)

    state = runner.run_turn(cursor, state, agent.turn(spy))
    assert seen == [TurnInFlight(turn=1)]
    envelope, loaded = handle.load()
    assert isinstance(loaded.phase, ReadyForTurn) and loaded.turns == 1 and envelope.revision == 2
    assert cursor.revision == 2
    while state.outcome() is None:
        state = runner.run_turn(cursor, state, agent.turn(fake_model.turn))
    final = handle.load()[1]
    assert isinstance(final.phase, Completed) and final.turns == fake_model.FINAL_TURN
    assert final.tool_calls == fake_model.FINAL_TURN - 1


def test_reject_ambiguous_is_the_default_and_carries_the_turn(agent: Any) -> None:
    checkpoint_id = stashpoint.new_id()
    with pytest.raises(Boom):
        run(agent, checkpoint_id, crash_in_turn(3))
    with pytest.raises(AmbiguousResume) as info:
        run(agent, checkpoint_id)
    assert info.value.turn == 3 and info.value.kind == stashpoint.ErrorKind.AMBIGUOUS_RESUME
    handle = agent.AgentCheckpoint.existing(checkpoint_id, agent.store)
    assert handle.load()[1].phase == TurnInFlight(turn=3)


def test_retry_interrupted_turn_restarts_from_the_stable_transcript(agent: Any) -> None:
    reference = run(agent, stashpoint.new_id())
    checkpoint_id = stashpoint.new_id()
    with pytest.raises(Boom):
        run(agent, checkpoint_id, crash_in_turn(2))
    outcome = run(agent, checkpoint_id, policy=ResumePolicy.RETRY_INTERRUPTED_TURN)
    assert outcome.transcript == reference.transcript
    assert outcome.turns == reference.turns and outcome.usage == reference.usage


def test_completed_checkpoint_returns_outcome_without_calling_the_model(agent: Any) -> None:
    checkpoint_id = stashpoint.new_id()
    first = run(agent, checkpoint_id)

    def must_not_run(state: Any, number: int) -> Any:
        raise AssertionError("model called for a completed checkpoint")

    again = run(agent, checkpoint_id, must_not_run)
    assert again == first


def test_load_rejects_other_kinds_and_schema_versions(agent: Any, other_store: Any) -> None:
    """Agent checkpoints are logs (format v1): a log of another kind, a newer schema or a
    broken state is a typed error; a whole envelope of a pre-release is no checkpoint."""
    from stashpoint.steps import run_sync

    logs = other_store.log_steps("agents")

    def plant(kind: str, schema_version: int, state: dict[str, Any]) -> str:
        log_id = stashpoint.new_id()
        planting = logs.append(
            log_id, [], after=None, state=state, kind=kind, schema_version=schema_version
        )
        run_sync(planting, other_store.driver)
        return log_id

    for log_id, error in [
        (plant("stashpoint.job", 1, {"x": 1}), InvalidPayload),
        (plant("stashpoint.agent", 2, {"x": 1}), UnsupportedFormat),
        (plant("stashpoint.agent", 1, {"agent": 3}), InvalidPayload),
    ]:
        with pytest.raises(error):
            agent.AgentCheckpoint.existing(log_id, agent.store).load()
    envelope = Envelope.initial(stashpoint.new_id(), None, "stashpoint.agent", 1, {"x": 1})
    agent.store.compare_and_swap(envelope, None)
    with pytest.raises(stashpoint.CheckpointNotFound):
        agent.AgentCheckpoint.existing(envelope.id, agent.store).load()


def test_resume_checks_agent_and_model_identity(agent: Any) -> None:
    checkpoint_id = stashpoint.new_id()
    run(agent, checkpoint_id)
    runner = agent.AgentRunner(agent.AgentCheckpoint.existing(checkpoint_id, agent.store))
    with pytest.raises(stashpoint.IdentityMismatch, match="agent") as info:
        runner.resume(agent="someone-else")
    assert info.value.kind is stashpoint.ErrorKind.IDENTITY_MISMATCH
    with pytest.raises(stashpoint.IdentityMismatch, match="model"):
        runner.resume(model=fake_model.MODEL.model_copy(update={"name": "other"}))


def test_cursor_create_load_next_and_save_are_compare_and_swap(agent: Any) -> None:
    handle = agent.AgentCheckpoint.new(agent.store)
    state = agent.AgentRunner(handle).start(agent="a", model=fake_model.MODEL, transcript=[])[1]
    with pytest.raises(CheckpointConflict):
        agent.CheckpointCursor.create(handle, state)  # create-only: the id exists
    first = agent.CheckpointCursor.loaded(handle, handle.load()[0])
    second = agent.CheckpointCursor.loaded(handle, handle.load()[0])
    following = first.next(state.model_copy(update={"turns": 1}))
    assert following.revision == 1 and following.payload["turns"] == 1
    first.save(state.model_copy(update={"turns": 1}))
    with pytest.raises(CheckpointConflict):
        second.save(state.model_copy(update={"turns": 9}))
    assert handle.load()[1].turns == 1 and first.revision == 1 and first.id == handle.id
    fresh = agent.CheckpointCursor.create(agent.AgentCheckpoint.new(agent.store), state)
    assert fresh.revision == 0


def test_durable_conversation_commits_each_turn_minus_runtime_prefix(agent: Any) -> None:
    conversations = agent.ConversationStore(agent.store)
    conversation = f"c-{stashpoint.new_id()}"
    durable = DurableConversationCheckpoint(
        conversation_id=conversation, namespace="tenant-a", expected_version=0,
        persisted_prefix_len=1,
    )  # fmt: skip
    runner = agent.AgentRunner(agent.AgentCheckpoint.new(agent.store))
    outcome = runner.run(
        agent.turn(fake_model.turn), agent="a", model=fake_model.MODEL,
        transcript=fake_model.opening(), durable=durable,
    )  # fmt: skip
    version, messages = conversations.load("tenant-a", conversation)
    assert version == fake_model.FINAL_TURN  # one commit per turn
    assert messages == outcome.transcript[1:]  # the system prompt is runtime-only
    state = runner.checkpoint.load()[1]
    assert state.durable_conversation is not None
    assert state.durable_conversation.expected_version == fake_model.FINAL_TURN


def test_conversation_commit_is_compare_and_swap_and_idempotent(agent: Any) -> None:
    conversations = agent.ConversationStore(agent.store)
    cid = f"c-{stashpoint.new_id()}"
    hello = [Message(role="user", content="hello")]
    assert conversations.commit("ns", cid, 0, hello) == 1
    assert conversations.commit("ns", cid, 0, hello) == 1  # the same commit, replayed
    with pytest.raises(CheckpointConflict):
        conversations.commit("ns", cid, 0, [Message(role="user", content="fork")])
    second = [*hello, Message(role="assistant", content="hi")]
    assert conversations.commit("ns", cid, 1, second) == 2
    assert conversations.commit("ns", cid, 1, second) == 2  # replayed after a crash
    with pytest.raises(CheckpointConflict):
        conversations.commit("ns", cid, 1, [Message(role="user", content="late fork")])
    assert conversations.load("ns", cid) == (2, second)
    assert conversations.load("ns", "never") == (0, [])


def test_a_coroutine_turn_on_the_blocking_runner_is_a_type_error(agent: Any) -> None:
    if agent.driver != "sync":
        pytest.skip("the asyncio runner awaits coroutine turns")

    async def turn(state: Any, number: int) -> Any:
        return fake_model.turn(state, number)

    with pytest.raises(TypeError, match="asyncio API"):
        run(agent, stashpoint.new_id(), turn)


def test_run_turn_on_a_completed_checkpoint_is_refused_without_a_model_call(agent: Any) -> None:
    checkpoint_id = stashpoint.new_id()
    first = run(agent, checkpoint_id)
    handle = agent.AgentCheckpoint.existing(checkpoint_id, agent.store)
    runner = agent.AgentRunner(handle)
    cursor, state = runner.resume()
    revision = cursor.revision

    def must_not_run(state: Any, number: int) -> Any:
        raise AssertionError("model called for a completed checkpoint")

    with pytest.raises(stashpoint.TerminalStateConflict) as info:
        runner.run_turn(cursor, state, agent.turn(must_not_run))
    assert info.value.kind == stashpoint.ErrorKind.TERMINAL_STATE
    envelope, stored = handle.load()
    assert envelope.revision == revision and stored.outcome() == first
