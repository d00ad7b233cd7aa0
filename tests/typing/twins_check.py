"""Checked by mypy in `make lint` (never run): both twins show the real signatures.

If the twin mechanism lost a parameter or a return type, `assert_type` would fail to type.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, assert_type

from stashpoint import AsyncStash, Envelope, RunState, Stash
from stashpoint.agent import (
    AgentCheckpoint,
    AgentCheckpointState,
    AgentRunner,
    AsyncAgentCheckpoint,
    AsyncAgentRunner,
    AsyncCheckpointCursor,
    CheckpointCursor,
    ModelRef,
)
from stashpoint.runs.durable import AsyncDurableRun, DurableRun


def blocking(stash: Stash, runner: AgentRunner, handle: AgentCheckpoint) -> None:
    assert_type(stash.checkpoints.load("id"), Envelope)
    assert_type(stash.checkpoints.update("id", lambda head: head.payload), Envelope)
    assert_type(stash.runs.load_run("r", graph_hash="h"), RunState | None)
    cursor, state = runner.resume(agent="a", model=ModelRef(provider="p", name="m"))
    assert_type(cursor, CheckpointCursor)
    assert_type(handle.load(), tuple[Envelope, AgentCheckpointState])
    assert_type(CheckpointCursor.create(handle, state), CheckpointCursor)


async def awaiting(
    stash: AsyncStash, runner: AsyncAgentRunner, handle: AsyncAgentCheckpoint
) -> None:
    pending = stash.checkpoints.load("id")
    _: object = assert_type(pending, Coroutine[Any, Any, Envelope])
    pending.close()
    assert_type(await stash.checkpoints.load("id", revision=2), Envelope)
    assert_type(await stash.runs.load_run("r"), RunState | None)
    cursor, state = await runner.resume()
    assert_type(cursor, AsyncCheckpointCursor)
    assert_type(await AsyncCheckpointCursor.create(handle, state), AsyncCheckpointCursor)


def _durable_runs_are_typed(stash: Stash, async_stash: AsyncStash) -> None:
    assert_type(stash.runs.durable("r"), DurableRun)
    assert_type(async_stash.runs.durable("r"), AsyncDurableRun)
