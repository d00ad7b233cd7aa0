"""Executing the agent protocols' requests: with a `Store`, or with an `AsyncStore`."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from stashpoint.agent.models import AgentCheckpointState
from stashpoint.agent.protocol import LoadEnvelope, RunTurn, SaveEnvelope, TurnResult
from stashpoint.stores.store import AsyncStore, Store

Turn = Callable[[AgentCheckpointState, int], TurnResult]
"""A turn: given the stable state and the one-based turn number, call the model and tools."""
AsyncTurn = Callable[[AgentCheckpointState, int], Awaitable[TurnResult] | TurnResult]
"""A turn for the asyncio API: a coroutine function (or a plain function)."""


def _no_turn(state: AgentCheckpointState, number: int) -> TurnResult:
    raise TypeError("this operation runs no turn")


def blocking(store: Store, turn: Turn = _no_turn) -> Callable[[Any], Any]:
    """Return an `execute` for the agent protocols over a blocking store."""

    def execute(request: Any) -> Any:
        match request:
            case LoadEnvelope(checkpoint_id):
                return store.load(checkpoint_id)
            case SaveEnvelope(envelope, expected_revision):
                return store.compare_and_swap(envelope, expected_revision)
            case RunTurn(state, number):
                return turn(state, number)
        raise TypeError(f"unknown agent request {request!r}")

    return execute


def awaiting(store: AsyncStore, turn: AsyncTurn = _no_turn) -> Callable[[Any], Awaitable[Any]]:
    """Return an `execute` for the agent protocols over an asyncio store."""

    async def execute(request: Any) -> Any:
        match request:
            case LoadEnvelope(checkpoint_id):
                return await store.load(checkpoint_id)
            case SaveEnvelope(envelope, expected_revision):
                return await store.compare_and_swap(envelope, expected_revision)
            case RunTurn(state, number):
                result = turn(state, number)
                return await result if inspect.isawaitable(result) else result
        raise TypeError(f"unknown agent request {request!r}")

    return execute
