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


def _steps_keep_their_function_types(run: DurableRun) -> None:
    def charge(amount: int, currency: str) -> dict[str, int]:
        return {currency: amount}

    assert_type(run.step("charge", charge, 5, "eur"), dict[str, int])
    run.step("charge", charge, "5", "eur")  # type: ignore[arg-type]
    run.step("charge", charge, 5)  # type: ignore[arg-type]
    assert_type(run.map("double", [1, 2], lambda n: n * 2.0), list[float])


async def _async_steps_keep_their_function_types(run: AsyncDurableRun) -> None:
    async def fetch(url: str) -> bytes:
        return url.encode()

    def parse(data: bytes) -> int:
        return len(data)

    assert_type(await run.step("fetch", fetch, "https://x"), bytes)
    assert_type(await run.step("parse", parse, b"x"), int)
    assert_type(await run.map("fetch-all", ["a", "b"], fetch), list[bytes])


def _open_knows_its_options() -> None:
    import stashpoint

    assert_type(stashpoint.open("memory://", compression_level=5, blob_threshold=1024), Stash)
    stashpoint.open("memory://", compression_level="high")  # type: ignore[arg-type]
    stashpoint.open("memory://", sse="rot13")  # type: ignore[arg-type]
    stashpoint.open("memory://", no_such_option=1)  # type: ignore[call-arg]


def _compare_and_swap_returns_what_it_saved(stash: Stash, envelope: Envelope) -> None:
    assert_type(stash.checkpoints.compare_and_swap(envelope, None), Envelope)


def _a_blocking_runner_takes_plain_turns(runner: AgentRunner, model: ModelRef) -> None:
    from stashpoint.agent import AgentOutcome, TurnResult

    def turn(state: AgentCheckpointState, number: int) -> TurnResult:
        return TurnResult(messages=[])

    async def coroutine_turn(state: AgentCheckpointState, number: int) -> TurnResult:
        return TurnResult(messages=[])

    assert_type(runner.run(turn, agent="a", model=model), AgentOutcome)
    runner.run(coroutine_turn, agent="a", model=model)  # type: ignore[arg-type]
