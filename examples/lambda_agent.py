"""A Lambda-style handler that never starts a turn it cannot finish, and continues next time.

Each invocation resumes the agent and runs turns with `AgentRunner.run_until`: a turn
starts only if the time left (`context.get_remaining_time_in_millis()`) covers what recent
turns took, with headroom. Turn durations are kept in the checkpoint, so the plan follows
the agent from one invocation to the next; a fixed margin fails as soon as one turn is
slower than the margin (the process is killed mid-turn and every later resume is refused
as ambiguous). The handler returns `{"status": "continue"}` with every finished turn saved
and no turn in flight; the caller (Step Functions, a queue, a retry) invokes it again until
`{"status": "done"}`. The stash is opened once per container, outside the handler, as
Lambda best practice wants.

If a turn is cut off anyway (a turn slower than anything seen, a crash), resume raises
`AmbiguousResume`: decide, then `stashpoint agent resolve ID --retry-turn` (run it again;
its tools may repeat) or `--abandon-turn` (go on without it), or `runner.resolve(...)`.

Run it here, with a fake Lambda context whose clock advances 2 s per turn (the fake
model's turns are instant), invoking until it is done:

    python examples/lambda_agent.py --local                 # local://./.stashpoint
    python examples/lambda_agent.py --local --budget-ms 9000 --url memory://

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
from stashpoint.agent import AgentCheckpoint, AgentRunner, Deadline, Suspended

_stash: stashpoint.Stash | None = None


def _open() -> stashpoint.Stash:
    global _stash
    if _stash is None:
        _stash = stashpoint.open()  # STASHPOINT_URL, from the function's environment
    return _stash


def handler(event: dict[str, Any], context: Any, clock: Any = None) -> dict[str, Any]:
    checkpoint = AgentCheckpoint.existing(event["checkpoint_id"], _open().checkpoints)
    runner = AgentRunner(checkpoint)
    deadline = Deadline.of_lambda(context, **({"clock": clock} if clock else {}))
    result = runner.run_until(
        deadline, getattr(context, "turn", fake_model.turn), agent="researcher",
        model=fake_model.MODEL, transcript=fake_model.opening(),
    )  # fmt: skip
    if isinstance(result, Suspended):
        return {"status": "continue", "turns": result.turns}
    return {"status": "done", "turns": result.turns, "answer": result.response.message.content}


class LocalContext:
    """A stand-in for Lambda's context over a fake clock: `budget_ms` per invocation, and
    each turn of the fake model moves the clock 2 s."""

    def __init__(self, budget_ms: int, turn_ms: int = 2_000) -> None:
        self.now = 0.0
        self.ends_at = budget_ms / 1000
        self.turn_seconds = turn_ms / 1000

    def clock(self) -> float:
        return self.now

    def get_remaining_time_in_millis(self) -> int:
        return int((self.ends_at - self.now) * 1000)

    def turn(self, state: Any, number: int) -> Any:
        self.now += self.turn_seconds
        if self.now > self.ends_at:
            raise SystemExit("the invocation timed out mid-turn")  # what Lambda would do
        return fake_model.turn(state, number)


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
        context = LocalContext(args.budget_ms)
        result = handler(event, context, clock=context.clock)
        print(json.dumps({"invocation": invocation, **result}), flush=True)
        if result["status"] == "done":
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
