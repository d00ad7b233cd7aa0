"""A Pydantic AI agent answering a queue of tickets on a spot worker: reclaimed, resumed,
never billed twice.

Each ticket is a durable run (`stash.runs.durable(f"{batch}-{n}")`) with a lease, and the
agent runs inside `with durable(run):` with `StashDurability`: its model requests and tool
calls are journaled steps. Kill the worker anywhere (`kill -9`, a spot reclaim), start it
again: tickets already answered are skipped, a step the dead worker held is taken over once
its lease runs out, the ticket in hand replays the model requests
and tool calls it had journaled (not sent again) and goes on from the first it had not;
only the unit cut off runs again. A zombie worker still running after another took the
ticket over is fenced by the lease (it stores nothing more).

Run it here, with a scripted model (no network) that appends each request it is billed for
to `--billed`:

    python examples/pydantic_ai_spot.py --id batch --tickets 20 --billed billed.log
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import stashpoint
from stashpoint.pydantic_ai import StashDurability, durable


def build_agent(billed: str | None, delay: float) -> Agent[None, str]:
    """The support agent: a scripted model (replace it with yours) and one tool."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        ticket = str(messages[0].parts[-1].content)  # type: ignore[union-attr]
        if billed:
            with open(billed, "a") as log:
                log.write(f"{ticket} request {len(messages)}\n")
        time.sleep(delay)  # the model's latency
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"ticket": ticket})])
        return ModelResponse(parts=[TextPart(f"answered {ticket}")])

    agent = Agent(FunctionModel(model), name="support", capabilities=[StashDurability()])

    @agent.tool_plain
    def lookup(ticket: str) -> str:
        return f"{ticket}: order ships Monday"

    return agent


async def work(
    url: str | None, batch: str, tickets: int, billed: str | None, delay: float, lease: float
) -> int:
    """Answer every ticket not answered yet; return how many this worker answered."""
    agent = build_agent(billed, delay)
    answered = 0
    async with stashpoint.open_async(url) as stash:
        for n in range(tickets):
            run_id = f"{batch}-{n}"
            existing = await stash.runs.load_run(run_id)
            if existing is not None and existing.status is stashpoint.RunStatus.COMPLETED:
                continue
            # A step a vanished worker held is taken over once its lease runs out.
            run = stash.runs.durable(run_id, lease=lease, claim_wait=True)
            with durable(run):
                result = await agent.run(f"ticket-{n}")
            await run.complete()
            answered += 1
            print(f"{run_id} {result.output}", flush=True)
    return answered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None)
    parser.add_argument("--id", required=True)
    parser.add_argument("--tickets", type=int, default=20)
    parser.add_argument("--billed", default=None, help="Append each billed request here.")
    parser.add_argument("--delay", type=float, default=0.0, help="Seconds per model request.")
    parser.add_argument("--lease", type=float, default=60.0, help="Seconds a step is held.")
    args = parser.parse_args(argv)
    answered: Any = asyncio.run(
        work(args.url, args.id, args.tickets, args.billed, args.delay, args.lease)
    )
    print(f"answered {answered}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
