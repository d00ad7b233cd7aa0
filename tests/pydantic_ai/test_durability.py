"""`StashDurability`: a Pydantic AI agent's model requests and tool calls as durable steps.

The agent loop runs with Pydantic AI's `FunctionModel` (no network). A model request or a
tool call journaled before a crash is never made again on resume (never re-billed); a unit
cut off runs again (at least once); a Lambda deadline suspends the run between units; a
second worker on the same run is fenced; `kill -9` of a real process loses nothing it had
journaled.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import stashpoint
from stashpoint.deadline import Deadline
from stashpoint.errors import InvalidArgument, RunSuspended
from stashpoint.pydantic_ai import StashDurability, durable


class Script:
    """A model and two tools that count their calls (and can die on a given one)."""

    def __init__(self, die_in_tool: int | None = None) -> None:
        self.model_calls = 0
        self.tool_calls: list[str] = []
        self.die_in_tool = die_in_tool
        self.tick: Any = None

    def model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.model_calls += 1
        if self.tick is not None:
            self.tick()
        if len(messages) == 1:  # first: ask for both tools at once
            return ModelResponse(
                parts=[
                    ToolCallPart("lookup", {"order": "17"}, tool_call_id="c1"),
                    ToolCallPart("refund", {"order": "17"}, tool_call_id="c2"),
                ]
            )
        return ModelResponse(parts=[TextPart("Shipped Monday; refund issued.")])

    def agent(self) -> Agent[None, str]:
        agent = Agent(FunctionModel(self.model), name="support", capabilities=[StashDurability()])

        @agent.tool_plain
        def lookup(order: str) -> str:
            self._tool(f"lookup {order}")
            return f"order {order} ships Monday"

        @agent.tool_plain
        def refund(order: str) -> str:
            self._tool(f"refund {order}")
            return f"refund for {order} issued"

        return agent

    def _tool(self, call: str) -> None:
        self.tool_calls.append(call)
        if self.die_in_tool is not None and len(self.tool_calls) == self.die_in_tool:
            raise SystemExit("the process dies here")  # what a reclaimed spot instance does


@pytest.fixture(params=["local_url", "s3_seaweed_url"])
def url(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    return request.getfixturevalue(request.param)


async def _run(url: tuple[str, dict[str, Any]], script: Script, run_id: str, **options: Any) -> str:
    address, stash_options = url
    async with stashpoint.open_async(address, **stash_options) as stash:
        run = stash.runs.durable(run_id, **options)
        with durable(run):
            result = await script.agent().run("Where is my order, and refund it?")
        await run.complete()
        return result.output


def test_a_finished_run_replays_without_a_model_request_or_a_tool_call(
    url: tuple[str, dict[str, Any]],
) -> None:
    first = Script()
    assert asyncio.run(_run(url, first, "r-1")) == "Shipped Monday; refund issued."
    assert first.model_calls == 2 and first.tool_calls == ["lookup 17", "refund 17"]
    again = Script()  # the same invocation delivered twice (a retried event)
    assert asyncio.run(_run(url, again, "r-1")) == "Shipped Monday; refund issued."
    assert again.model_calls == 0 and again.tool_calls == []


def test_a_crash_in_a_tool_resumes_without_rebilling_the_model(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    dying = Script(die_in_tool=2)  # lookup journaled, the process dies in refund
    with pytest.raises(SystemExit):
        asyncio.run(_run(local_url, dying, "r-2"))
    assert dying.model_calls == 1
    resumed = Script()
    assert asyncio.run(_run(local_url, resumed, "r-2")) == "Shipped Monday; refund issued."
    # The first model request and the lookup replay; the refund, cut off, runs again.
    assert resumed.model_calls == 1 and resumed.tool_calls == ["refund 17"]


def test_a_lambda_deadline_suspends_between_units_and_the_next_invocation_goes_on(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    now = [0.0]
    left = [8.0]

    def tick() -> None:  # each model request takes 5 s of the invocation's time
        now[0] += 5
        left[0] -= 5

    script = Script()
    script.tick = tick
    deadline = Deadline(lambda: left[0], clock=lambda: now[0], margin=1.0)
    with pytest.raises(RunSuspended) as raised:
        asyncio.run(_run(local_url, script, "r-3", deadline=deadline))
    assert raised.value.reason == "deadline" and script.model_calls == 1
    left[0] = 100.0  # the next invocation
    assert asyncio.run(_run(local_url, script, "r-3", deadline=deadline)).startswith("Shipped")
    assert script.model_calls == 2 and script.tool_calls == ["lookup 17", "refund 17"]


def test_outside_a_durable_run_the_agent_runs_as_usual_and_nothing_is_stored(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    script = Script()
    result = asyncio.run(script.agent().run("Where is my order, and refund it?"))
    assert result.output.startswith("Shipped") and script.model_calls == 2
    with pytest.raises(InvalidArgument), durable("not a run"):  # type: ignore[arg-type]
        pass


KILLED = """
import asyncio, sys, time
import stashpoint
from stashpoint.pydantic_ai import durable
from tests.pydantic_ai.test_durability import Script

script = Script()
original = script._tool
def slow(call):
    original(call)
    with open(sys.argv[2], "a") as log:
        log.write(call + "\\n")
    print(call, flush=True)
    time.sleep(30)  # killed here, in the first tool
script._tool = slow

async def main():
    async with stashpoint.open_async(sys.argv[1]) as stash:
        with durable(stash.runs.durable("r-kill")):
            await script.agent().run("Where is my order, and refund it?")

asyncio.run(main())
"""


def test_kill_9_mid_run_loses_no_journaled_unit(
    s3_seaweed_url: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    address, _ = s3_seaweed_url
    log = tmp_path / "tools.log"
    root = Path(__file__).resolve().parents[2]
    victim = subprocess.Popen(
        [sys.executable, "-c", KILLED, address, str(log)],
        stdout=subprocess.PIPE, text=True, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert victim.stdout is not None
    assert victim.stdout.readline().strip() == "lookup 17"  # the model request is journaled
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    resumed = Script()
    assert asyncio.run(_run(s3_seaweed_url, resumed, "r-kill")).startswith("Shipped")
    assert resumed.model_calls == 1  # the first request replayed: never billed twice
    assert resumed.tool_calls == ["lookup 17", "refund 17"]  # the cut-off lookup runs again
    assert json.dumps(log.read_text().split()) == json.dumps(["lookup", "17"])
