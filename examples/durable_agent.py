"""A 5-turn agent with waits, as durable steps: it survives a crash, waits without compute,
and never calls the model twice for one turn without being told to.

Each turn is an at-most-once step (a model call costs money and may act on the world): a
replay returns the stored reply; a turn cut off by a crash raises `StepInterrupted` until an
operator settles it (`stashpoint runs resolve RUN turn-N --retry`, or `--result JSON`).
Between turns the agent waits when the model asks it to (`run.wait`): the run is
suspended, no process runs, and `stashpoint runs due` lists it when its time has come.

    python examples/durable_agent.py --id agent-1 --local

`--local` is the driver a laptop needs: it runs the handler, sleeps until a wait is due,
and runs it again. On AWS the handler is a Lambda function: return `stop.until` and let an
EventBridge Scheduler one-time schedule (or a Step Functions Wait state) invoke it again.

The user code is the 14 lines between the markers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

import stashpoint
from stashpoint import RunSuspended, Semantics, StepInterrupted


def call_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """A deterministic stand-in for a model: turns 1 and 3 ask to wait a moment."""
    turn = sum(1 for m in transcript if m["role"] == "assistant") + 1
    digest = hashlib.sha256(json.dumps(transcript).encode()).hexdigest()[:8]
    reply: dict[str, Any] = {"role": "assistant", "content": f"turn {turn} ({digest})"}
    if turn in (1, 3):
        reply["wait_seconds"] = WAIT_SECONDS
    return reply


WAIT_SECONDS = 1.0


# --- user code: begin
def agent(url: str | None, run_id: str, question: str) -> list[dict[str, Any]]:
    with stashpoint.open(url) as stash:
        run = stash.runs.durable(run_id, graph_name="agent")
        transcript: list[dict[str, Any]] = [{"role": "user", "content": question}]
        for turn in range(1, 6):
            reply = run.step(
                f"turn-{turn}", call_model, list(transcript), semantics=Semantics.AT_MOST_ONCE
            )
            transcript.append(reply)
            if "wait_seconds" in reply:
                run.wait(f"wait-{turn}", seconds=reply["wait_seconds"])
        run.complete()
    return transcript


# --- user code: end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None)
    parser.add_argument("--id", required=True)
    parser.add_argument("--question", default="What is 6 x 7?")
    parser.add_argument("--local", action="store_true", help="Sleep through waits and go on.")
    parser.add_argument("--delay", type=float, default=0.0, help="Seconds per turn (tests).")
    parser.add_argument("--trace", default=None, help="Append each model call here (tests).")
    args = parser.parse_args(argv)
    global call_model
    model = call_model

    def traced(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if args.trace:
            with open(args.trace, "a") as trace:
                trace.write(f"{len(transcript)}\n")
        time.sleep(args.delay)
        return model(transcript)

    call_model = traced
    while True:
        try:
            transcript = agent(args.url, args.id, args.question)
        except RunSuspended as stop:
            print(f"suspended ({stop.reason}) until {stop.until}", flush=True)
            if not args.local:
                return 0
            if stop.until is not None:
                time.sleep(max(0.0, (stop.until - datetime.now(UTC)).total_seconds()))
            continue
        except StepInterrupted as cut:
            print(f"{cut}: settle it with `stashpoint runs resolve {args.id} {cut.step} "
                  "--retry`", file=sys.stderr)  # fmt: skip
            return 3
        print(json.dumps(transcript[-1]), flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
