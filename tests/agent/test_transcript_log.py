"""Agent transcripts in logs: O(delta) saves, tails, rewrites, and checkpoints of earlier
versions continued in place."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from examples import fake_model
from stashpoint import CheckpointConflict, CheckpointNotFound, Envelope
from stashpoint.agent import (
    AGENT_KIND,
    AgentCheckpoint,
    AgentRunner,
    Message,
    ReadyForTurn,
    TurnInFlight,
    TurnResult,
)
from stashpoint.agent.logic import AgentStorage

GOLDEN_LOG = Path(__file__).parents[2] / "moto_fixtures" / "golden" / "log"


def _entries(stash: stashpoint.Stash, checkpoint_id: str) -> list[Any]:
    storage = AgentStorage.of(stash.checkpoints.steps, stash.checkpoints.log_steps)
    return stashpoint.LogStore(storage.logs, stash.driver).entries(checkpoint_id)


def _talk(number: int) -> TurnResult:
    return TurnResult(
        messages=[
            Message(role="assistant", content=f"reply {number}"),
            Message(role="tool", content=f"output {number}", tool_call_id=f"c{number}"),
        ]
    )


def test_each_save_sends_only_its_new_messages(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path}") as stash:
        runner = AgentRunner(AgentCheckpoint.new(stash.checkpoints))
        cursor, state = runner.start(
            agent="a", model=fake_model.MODEL, transcript=[Message(role="user", content="go")]
        )
        for _ in range(5):
            state = runner.run_turn(cursor, state, lambda s, n: _talk(n))
        entries = _entries(stash, cursor.id)
    # Version 0 holds the opening message; then per turn an in-flight marker with no
    # message and a commit with the turn's two.
    assert [len(e.records) for e in entries] == [1] + [0, 2] * 5
    assert entries[1].state["phase"] == {"state": "turn_in_flight", "turn": 1}
    assert entries[-1].state["transcript_length"] == 11
    assert "transcript" not in entries[-1].state  # the state never repeats the messages
    assert cursor.revision == 10 and state.turns == 5


def test_load_tail_reads_the_last_messages_and_says_how_many_it_left(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path}") as stash:
        handle = AgentCheckpoint.new(stash.checkpoints)
        runner = AgentRunner(handle)
        cursor, state = runner.start(agent="a", model=fake_model.MODEL, transcript=[])
        for _ in range(70):  # past a sealed segment
            state = runner.run_turn(cursor, state, lambda s, n: _talk(n))
        full = handle.load()[1].transcript
        tail = handle.load_tail(5)
        assert tail.state.transcript == full[-5:] and tail.earlier == 135
        assert tail.state.turns == 70 and tail.revision == cursor.revision
        assert handle.load_tail(0).state.transcript == []
        everything = handle.load_tail(10_000)
        assert everything.state.transcript == full and everything.earlier == 0
        with pytest.raises(stashpoint.InvalidArgument):
            handle.load_tail(-1)


def test_a_rewritten_transcript_is_appended_whole_and_read_back_alone(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path}") as stash:
        handle = AgentCheckpoint.new(stash.checkpoints)
        runner = AgentRunner(handle)
        cursor, state = runner.start(agent="a", model=fake_model.MODEL, transcript=[])
        for _ in range(3):
            state = runner.run_turn(cursor, state, lambda s, n: _talk(n))
        summary = [Message(role="system", content="summary of six messages")]
        cursor.save(state.model_copy(update={"transcript": summary}))
        assert handle.load()[1].transcript == summary
        state = handle.load()[1]
        state = runner.run_turn(cursor, state, lambda s, n: _talk(n))
        assert handle.load()[1].transcript == [*summary, *_talk(4).messages]
        assert handle.load_tail(10).state.transcript == [*summary, *_talk(4).messages]
        # The log kept everything: the old messages are still in its history.
        assert len(_entries(stash, cursor.id)[-1].records) == 2


def test_a_whole_envelope_checkpoint_of_a_pre_release_is_not_an_agent_checkpoint(
    tmp_path: Path,
) -> None:
    """Format v1 freezes agent checkpoints as logs: 0.x's whole envelopes are not read."""
    opening = [Message(role="user", content="hello")]
    with stashpoint.open(f"local://{tmp_path}") as stash:
        handle = AgentCheckpoint.existing("old", stash.checkpoints)
        payload = {
            "execution_id": "e1",
            "agent": "a",
            "model": fake_model.MODEL.model_dump(mode="json"),
            "transcript": [m.model_dump(mode="json") for m in opening],
            "turns": 0,
            "phase": {"state": "ready_for_turn"},
        }
        legacy = Envelope.initial("old", None, AGENT_KIND, 1, payload)
        stash.checkpoints.compare_and_swap(legacy, None)
        for load in (handle.load, lambda: handle.load_tail(5), lambda: handle.load(0)):
            with pytest.raises(CheckpointNotFound):
                load()
        with pytest.raises(CheckpointNotFound):
            AgentRunner(handle).resume()
        # The id is free for an agent checkpoint (a log): one create-only PUT.
        AgentRunner(handle).start(agent="a", model=fake_model.MODEL, transcript=opening)
        assert handle.load()[1].transcript == opening
        assert stash.checkpoints.load("old").payload == payload  # the envelope is untouched


def test_two_runners_resuming_one_transcript_cannot_both_save(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path}") as stash:
        handle = AgentCheckpoint.new(stash.checkpoints)
        runner = AgentRunner(handle)
        runner.start(agent="a", model=fake_model.MODEL, transcript=[])
        first_cursor, first_state = runner.resume()
        second_cursor, second_state = runner.resume()
        runner.run_turn(first_cursor, first_state, lambda s, n: _talk(n))
        with pytest.raises(CheckpointConflict, match="latest is") as lost:
            runner.run_turn(second_cursor, second_state, lambda s, n: _talk(n))
        # The save hands its conflict to the caller: it names the version that won.
        assert lost.value.actual_revision == handle.load()[0].revision
        assert isinstance(handle.load()[1].phase, ReadyForTurn)
        assert len(handle.load()[1].transcript) == 2


def test_golden_log_loads_and_decodes_with_the_zstd_and_jq_tools(tmp_path: Path) -> None:
    """A committed agent log (one sealed segment and two entries) reads with this library
    and, per docs/logs.md, with nothing but `zstd` and `jq`."""
    expected = Path(GOLDEN_LOG / "expected.json").read_text()
    import json

    want = json.loads(expected)
    root = tmp_path / "stash"
    shutil.copytree(GOLDEN_LOG / "store", root)
    with stashpoint.open(f"local://{root}") as stash:
        envelope, state = AgentCheckpoint.existing("golden-agent", stash.checkpoints).load()
    assert [m.model_dump(mode="json") for m in state.transcript] == want["transcript"]
    assert envelope.revision == want["revision"] and isinstance(state.phase, TurnInFlight)
    if shutil.which("zstd") is None or shutil.which("jq") is None:
        pytest.skip("the zstd and jq command-line tools are not installed")
    script = (GOLDEN_LOG.parents[2] / "docs" / "transcript-from-objects.sh").resolve()
    out = subprocess.run(
        ["sh", str(script), str(root), "agents", "golden-agent"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(out) == want["transcript"]


@pytest.mark.parametrize("vacate", [False, True], ids=["kept", "vacated"])
def test_a_rewritten_transcript_with_patches_reads_with_zstd_and_jq(
    tmp_path: Path, vacate: bool
) -> None:
    if shutil.which("zstd") is None or shutil.which("jq") is None:
        pytest.skip("the zstd and jq command-line tools are not installed")
    root = tmp_path / "stash"
    with stashpoint.open(f"local://{root}", vacate_sealed_entries=vacate) as stash:
        handle = AgentCheckpoint.existing("rewritten", stash.checkpoints)
        runner = AgentRunner(handle)
        cursor, state = runner.start(agent="a", model=fake_model.MODEL, transcript=[])
        for _ in range(40):  # past a sealed segment
            state = runner.run_turn(cursor, state, lambda s, n: _talk(n))
        summary = [Message(role="system", content="summary")]
        cursor.save(state.model_copy(update={"transcript": summary}))
        state = handle.load()[1]
        for _ in range(3):  # later versions store patches that leave transcript_start alone
            state = runner.run_turn(cursor, state, lambda s, n: _talk(n))
        expected = [m.model_dump(mode="json") for m in handle.load()[1].transcript]
    script = GOLDEN_LOG.parents[2] / "docs" / "transcript-from-objects.sh"
    out = subprocess.run(
        ["sh", str(script), str(root), "agents", "rewritten"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    import json

    assert json.loads(out) == expected and expected[0]["content"] == "summary"
