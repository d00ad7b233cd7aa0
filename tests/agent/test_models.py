"""Agent state JSON: the seed's field names and phase tags, frozen in golden files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stashpoint.agent import (
    AgentCheckpointState,
    Completed,
    Message,
    ModelRef,
    ReadyForTurn,
    TurnInFlight,
)

GOLDEN = Path(__file__).parents[2] / "moto_fixtures" / "golden" / "agent"
SEED_FIELDS = ["execution_id", "agent", "model", "transcript", "turns", "tool_calls",
               "delegations", "usage", "phase"]  # fmt: skip


@pytest.mark.parametrize("name", ["turn_in_flight", "completed", "ready_for_turn"])
def test_golden_state_round_trips_byte_for_byte(name: str) -> None:
    golden = json.loads((GOLDEN / f"{name}.v1.json").read_text())
    state = AgentCheckpointState.model_validate(golden)
    assert state.to_payload() == golden
    assert list(golden)[: len(SEED_FIELDS)] == SEED_FIELDS
    assert golden["phase"]["state"] == name


def test_phase_tags_are_snake_case_as_in_the_seed() -> None:
    golden = json.loads((GOLDEN / "turn_in_flight.v1.json").read_text())
    state = AgentCheckpointState.model_validate(golden)
    assert golden["phase"] == {"state": "turn_in_flight", "turn": 2}
    assert isinstance(state.phase, TurnInFlight) and state.phase.turn == 2
    assert golden["durable_conversation"] == {
        "conversation_id": "conv-9", "namespace": "tenant-a",
        "expected_version": 4, "persisted_prefix_len": 1,
    }  # fmt: skip


def test_durable_conversation_is_omitted_when_absent() -> None:
    golden = json.loads((GOLDEN / "ready_for_turn.v1.json").read_text())
    assert "durable_conversation" not in golden
    assert golden["phase"] == {"state": "ready_for_turn"}


def test_outcome_only_for_completed_phase() -> None:
    done = AgentCheckpointState.model_validate(
        json.loads((GOLDEN / "completed.v1.json").read_text())
    )
    assert isinstance(done.phase, Completed)
    outcome = done.outcome()
    assert outcome is not None and outcome.response.message.content == "Hello!"
    assert outcome.turns == 1 and outcome.transcript == done.transcript
    for phase in (ReadyForTurn(), TurnInFlight(turn=1)):
        assert done.model_copy(update={"phase": phase}).outcome() is None


def test_provider_specific_fields_round_trip_unchanged() -> None:
    raw = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi", "citations": []}],
        "refusal": None,
        "reasoning_content": "…",
    }
    assert Message.model_validate(raw).model_dump(mode="json") == raw
    assert ModelRef.model_validate({"provider": "bedrock", "name": "m", "arn": "x"}).model_dump() == {
        "provider": "bedrock", "name": "m", "arn": "x",
    }  # fmt: skip


def test_turn_numbers_are_one_based() -> None:
    with pytest.raises(ValueError):
        TurnInFlight(turn=0)
