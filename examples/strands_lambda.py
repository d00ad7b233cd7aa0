"""A Strands agent on Lambda, its session in your bucket: one request per turn, no database.

Each invocation (`{"session_id": "...", "prompt": "..."}`) builds the agent with a
`StashSessionManager(save="turn")`: the session's log is read in two or three rounds, the
turn runs, and its messages are appended as one entry when the invocation ends. Two
invocations of one session at once (a user who double-submits, a retried event) never
overwrite or interleave each other: the one that is behind gets `SessionConflict` and
nothing of its turn is stored; this handler loads the session again and reruns the turn
(at most `RETRIES` times: a rerun calls the model again), so every accepted prompt is
answered once, after the other's. The stash is opened once per container, outside the
handler, as Lambda best practice wants.

Run it here, with a scripted model in place of Bedrock (no network): a few turns of one
session, then two invocations of it at once:

    python examples/strands_lambda.py --local                  # local://./.stashpoint
    python examples/strands_lambda.py --local --url memory://

Deploy it: package this file and `pip install --target package 'stashpoint[strands]'`;
handler `strands_lambda.handler`; environment `STASHPOINT_URL=s3://BUCKET/PREFIX` (deploy
`infra/stashpoint.yaml` and attach its worker policy to the function's role); replace
`model()` with your model (`strands.models.BedrockModel(...)`).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import AsyncGenerator
from typing import Any

from strands import Agent
from strands.models import Model

import stashpoint
from stashpoint.strands_agents import SessionConflict, StashSessionManager

RETRIES = 3
"""Times a turn that lost to another invocation of its session is run again."""

_stash: stashpoint.Stash | None = None


def _open() -> stashpoint.Stash:
    global _stash
    if _stash is None:
        _stash = stashpoint.open()  # STASHPOINT_URL, from the function's environment
    return _stash


class ScriptedModel(Model):
    """Answers `You asked: ...` without a network (stands in for Bedrock here)."""

    def update_config(self, **config: Any) -> None:
        """Nothing to configure."""

    def get_config(self) -> Any:
        """Nothing configured."""
        return {}

    async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """Not used here."""
        yield {}

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """Answer the last user text."""
        asked = messages[-1]["content"][0]["text"]
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"delta": {"text": f"You asked: {asked}"}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}


def model() -> Model:
    """The agent's model: replace with `BedrockModel(model_id=...)` in production."""
    return ScriptedModel()


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """Run one turn of the session `event["session_id"]` with `event["prompt"]`."""
    for attempt in range(RETRIES + 1):
        manager = StashSessionManager(event["session_id"], _open(), save="turn")
        agent = Agent(model=model(), session_manager=manager, callback_handler=None)
        try:
            answer = agent(event["prompt"])
        except SessionConflict:
            continue  # another invocation wrote first: load its turn, run this one after it
        return {"status": "done", "answer": str(answer).strip(), "attempts": attempt + 1,
                "messages": len(agent.messages)}  # fmt: skip
    return {"status": "conflict", "attempts": RETRIES + 1}  # the caller may send it again


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run the Lambda handler locally")
    parser.add_argument("--local", action="store_true", help="invoke it here")
    parser.add_argument("--url", default=None, help="stash URL (default: STASHPOINT_URL)")
    parser.add_argument("--session-id", default=None)
    args = parser.parse_args(argv)
    if not args.local:
        parser.error("this file is a Lambda handler; pass --local to run it here")
    global _stash
    _stash = stashpoint.open(args.url)
    session = args.session_id or stashpoint.new_id()
    for prompt in ("Where is my order?", "Can it come sooner?"):
        print(json.dumps(handler({"session_id": session, "prompt": prompt})), flush=True)
    results: list[dict[str, Any]] = []
    both = [
        threading.Thread(target=lambda p=p: results.append(handler({"session_id": session,
                                                                     "prompt": p})))
        for p in ("Cancel it.", "No, keep it.")
    ]  # fmt: skip
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    for result in results:
        print(json.dumps(result), flush=True)
    final = handler({"session_id": session, "prompt": "What did I decide?"})
    print(json.dumps(final), flush=True)
    _stash.close()
    return 0 if final["status"] == "done" and final["messages"] == 10 else 1


if __name__ == "__main__":
    sys.exit(main())
