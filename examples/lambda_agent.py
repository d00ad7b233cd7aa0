"""A Lambda-style handler that checkpoints before its deadline and continues next time.

Each invocation resumes the agent, runs turns while `context.get_remaining_time_in_millis()`
leaves a safety margin, and returns `{"status": "continue"}` with every finished turn saved;
the caller (Step Functions, a queue, a retry) invokes it again until `{"status": "done"}`.
The stash is opened once per container, outside the handler, as Lambda best practice wants.

Run it here, with a fake Lambda context whose clock runs 2 s per turn (the fake model's
turns are instant), invoking until it is done:

    python examples/lambda_agent.py --local                 # local://./.stashpoint
    python examples/lambda_agent.py --local --budget-ms 4000 --url memory://

Deploy it: package this file, `fake_model.py` (replace it with your model client) and
`pip install --target package stashpoint`; handler `lambda_agent.handler`; environment
`STASHPOINT_URL=s3://BUCKET/PREFIX?index=dynamodb://TABLE` (deploy `infra/stashpoint.yaml`
and attach its worker policy to the function's role); timeout at least 2x your slowest turn.
Invoke with `{"checkpoint_id": "..."}` from a Step Functions loop that re-invokes while the
result says `"continue"`.
"""

from __future__ import annotations

import argparse
import json
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


class LocalContext:
    """A stand-in for Lambda's context: `budget_ms` per invocation, each turn spends 2 s."""

    def __init__(self, budget_ms: int, turn_ms: int = 2_000) -> None:
        self.remaining = budget_ms
        self.turn_ms = turn_ms

    def get_remaining_time_in_millis(self) -> int:
        remaining = self.remaining
        self.remaining -= self.turn_ms
        return remaining


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run the Lambda handler locally")
    parser.add_argument("--local", action="store_true", help="invoke with a fake context")
    parser.add_argument("--url", default=None, help="stash URL (default: STASHPOINT_URL)")
    parser.add_argument("--budget-ms", type=int, default=6_500, help="time per invocation")
    parser.add_argument("--checkpoint-id", default=None)
    args = parser.parse_args(argv)
    if not args.local:
        parser.error("this file is a Lambda handler; pass --local to run it here")
    global _stash
    _stash = stashpoint.open(args.url)
    event = {"checkpoint_id": args.checkpoint_id or stashpoint.new_id()}
    for invocation in range(1, 51):
        result = handler(event, LocalContext(args.budget_ms))
        print(json.dumps({"invocation": invocation, **result}), flush=True)
        if result["status"] == "done":
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
