"""Pydantic AI agents made durable by a stash: model requests and tool calls as durable steps.

Pydantic AI's durable execution is a public extension point (`pydantic_ai.durable_exec`):
a durability capability routes an agent's I/O (model requests, tool calls, toolset
discovery, event handlers) through an engine's durable units. `StashDurability` is that
capability on stashpoint's durable runs (`stash.runs.durable(run_id)`): each unit is a step
of the run, its result journaled (zstd JSON) before the agent goes on, so a run resumed
after a crash, a spot reclaim or a Lambda deadline replays the model responses and tool
results it had (never re-billed, never re-run) and continues from the first unit it had
not finished. The run's lease fences a second worker, its `Deadline` suspends it before
Lambda's timeout, and the run is in the index, the CLI, purge and export like any run.

    durability = StashDurability()
    agent = Agent(model, name="support", capabilities=[durability])

    async with stashpoint.open_async(url) as stash:
        run = stash.runs.durable("ticket-17")
        with durable(run):
            result = await agent.run("Where is my order?")
        await run.complete()

Each unit's step is named `{operation}#{n}` (Pydantic AI's stable journal names, and how
many units of that name this run asked for before): tools run one after the other inside a
durable run so the order is the same on every replay (`NondeterministicReplay` otherwise).

Needs `pydantic-ai-slim` (`stashpoint[pydantic-ai]`); imported only by this module.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurableOperationBackend,
    DurableOperationId,
    JournalCallableOperationBackend,
    RoleBasedOperationConfig,
    conversation_id_from_run_id,
)
from pydantic_ai.durable_exec._spec import DurabilityEngineSpec
from pydantic_ai.tools import AgentDepsT

from stashpoint.errors import InvalidArgument, described

if TYPE_CHECKING:
    from pydantic_ai.agent import EventStreamHandler
    from pydantic_ai.models import Model

    from stashpoint.runs.durable import AsyncDurableRun


@dataclass
class _Journal:
    """The durable run the current task's agent runs in, and how many units it asked for."""

    run: AsyncDurableRun
    asked: Counter[str]


_CURRENT: contextvars.ContextVar[_Journal | None] = contextvars.ContextVar(
    "stashpoint_pydantic_ai_run", default=None
)


@contextlib.contextmanager
def durable(run: AsyncDurableRun) -> Iterator[AsyncDurableRun]:
    """Run the agents called inside this block as units of `run` (a durable run, asyncio).

    A run is entered once per invocation: the counters that name its units start again at
    zero, so a replay asks for the same names in the same order.
    """
    from stashpoint.runs.durable import AsyncDurableRun

    if not isinstance(run, AsyncDurableRun):
        raise InvalidArgument(
            f"durable() takes an asyncio durable run (stash.runs.durable(...) of an "
            f"AsyncStash), not {described(run)}"
        )
    token = _CURRENT.set(_Journal(run, Counter()))
    try:
        yield run
    finally:
        _CURRENT.reset(token)


class StashOperationBackend(JournalCallableOperationBackend[None]):
    """Runs each durable unit as a step of the current durable run (Pydantic AI's backend)."""

    def __init__(self, *, agent_name: str, default_model_id: str | None) -> None:
        super().__init__(
            agent_name=agent_name,
            default_model_id=default_model_id,
            config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None),
        )

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        """Return the unit's journaled result, or run it and journal its result (a step)."""
        journal = _CURRENT.get()
        if journal is None:  # outside a durable run: the agent runs as it would without us
            return await body()
        number = journal.asked[name]
        journal.asked[name] += 1
        return await journal.run.step(f"{name}#{number}", body)


class StashDurability(BaseDurabilityCapability[AgentDepsT]):
    """Pydantic AI's durability capability on stashpoint durable runs.

    Add it to an agent (`Agent(..., capabilities=[StashDurability()])`) and call the agent
    inside `with durable(run):`. Outside a durable run the agent runs as usual. `models`:
    more models the run may switch to, by id; `name`: the agent's name in step names
    (default: the agent's `name`; keep it stable, replays find units by it).
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="stashpoint",
        durable_unit_noun="step",
        durable_unit_plural="steps",
        durable_container_noun="durable run",
        codec=JSON_CODEC,  # steps are journaled as JSON
        # Replays must ask for steps in the order they were recorded.
        sequential_tools_in_durable_context=True,
        tool_config_key="stashpoint",
    )

    def __init__(
        self,
        *,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)

    @property
    def in_durable_context(self) -> bool:
        """Whether the current task runs inside `durable(run)`."""
        return _CURRENT.get() is not None

    def get_default_run_id(self) -> str | None:
        """Name the agent's run after the durable run (and how many it started before)."""
        journal = _CURRENT.get()
        if journal is None:
            return None
        number = journal.asked["pydantic_ai:run"]
        journal.asked["pydantic_ai:run"] += 1
        return f"{journal.run.run_id}:{number}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        """Return the conversation of a run inside a durable run (from its run id)."""
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        """When the agent's run first started: journaled, so a resumed run keeps its timeout."""
        journal = _CURRENT.get()
        if journal is None:
            return None

        async def now() -> str:
            return (await journal.run.now()).isoformat()

        started = await journal.run.step(f"{self.name}__run_start_time:{run_id}", now)
        return datetime.fromisoformat(started)

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        """Stashpoint's backend: each unit a step of the current durable run."""
        return StashOperationBackend(agent_name=self.name, default_model_id=self.default_model_id)


__all__ = ["StashDurability", "StashOperationBackend", "durable"]
