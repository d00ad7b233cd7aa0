"""`RunStore` (blocking) and `AsyncRunStore` (asyncio): the graph-run API.

Both are `RunOperations` (`runs.operations`, where every operation is defined once as
steps) with a driver (`stashpoint.twins`).
"""

from __future__ import annotations

from stashpoint.runs.durable import AsyncDurableRun, DurableRun
from stashpoint.runs.fleet import AsyncFleetMap, FleetMap
from stashpoint.runs.heads import ATTEMPT_SEPARATOR, CLOCK_SKEW, RUN_RETRY, run_of, summary_of
from stashpoint.runs.operations import RunOperations
from stashpoint.twins import Awaiting, Blocking

__all__ = [
    "ATTEMPT_SEPARATOR",
    "CLOCK_SKEW",
    "RUN_RETRY",
    "AsyncRunStore",
    "RunStore",
    "run_of",
    "summary_of",
]


class RunStore(Blocking, RunOperations[DurableRun, FleetMap]):
    """Durable per-attempt recording of graph runs. Thread-safe: share one per process.

    Unknown runs raise `RunNotFound`, unknown attempts `AttemptNotFound`, transitions out of
    a final state `TerminalStateConflict`.
    """

    _durable_type = DurableRun
    _fleet_type = FleetMap


class AsyncRunStore(Awaiting, RunOperations[AsyncDurableRun, AsyncFleetMap]):
    """The asyncio twin of `RunStore`: the same methods, awaitable."""

    _durable_type = AsyncDurableRun
    _fleet_type = AsyncFleetMap
