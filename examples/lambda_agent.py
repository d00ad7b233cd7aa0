"""A Lambda-style handler that checkpoints before its deadline and continues next time.

Each invocation resumes the agent, runs turns while `context.get_remaining_time_in_millis()`
leaves a safety margin, and returns `{"status": "continue"}` with every finished turn saved;
the caller (Step Functions, a queue, a retry) invokes it again until `{"status": "done"}`.
The stash is opened once per container, outside the handler, as Lambda best practice wants.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_model

import stashpoint
from stashpoint.agent import AgentCheckpoint, AgentRunner

SAFETY_MARGIN_MS = 3_000
"""Stop starting turns when less than this remains: a turn must finish before the deadline."""

_stash: stashpoint.Stash | None = None


def _open() -> stashpoint.Stash:
    global _stash
    if _stash is None:
        _stash = stashpoint.open()  # STASHPOINT_URL, from the function's environment
    return _stash


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    checkpoint = AgentCheckpoint.existing(event["checkpoint_id"], _open().checkpoints)
    runner = AgentRunner(checkpoint)
    try:
        cursor, state = runner.resume(agent="researcher", model=fake_model.MODEL)
    except stashpoint.CheckpointNotFound:
        cursor, state = runner.start(
            agent="researcher", model=fake_model.MODEL, transcript=fake_model.opening()
        )
    turns_here = 0
    while (outcome := state.outcome()) is None:
        if context.get_remaining_time_in_millis() < SAFETY_MARGIN_MS:
            return {"status": "continue", "turns": state.turns, "turns_here": turns_here}
        state = runner.run_turn(cursor, state, fake_model.turn)
        turns_here += 1
    return {
        "status": "done",
        "turns": outcome.turns,
        "turns_here": turns_here,
        "answer": outcome.response.message.content,
    }
