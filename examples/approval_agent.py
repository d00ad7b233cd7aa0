"""An agent whose tool asks a human first: the Lambda returns, the approval arrives, the next
invocation goes on.

The agent (a deterministic stand-in for a model) proposes a refund. Its `refund` tool must
not pay without a human's yes: it makes a callback token (`run.callback`), hands it to
whatever reaches the approver (a Slack message, an email, a ticket: here, the handler's
answer), and waits for the event (`run.wait_for`). The run is suspended and the handler
returns: nothing runs, nothing is billed, for as long as the approver takes (a timeout
ends the wait with `WaitTimedOut`, recorded, and the agent says so).

The approver answers with the token, knowing nothing of the run:

    stashpoint runs redeem TOKEN --payload '{"approved": true, "by": "ana"}'

or, knowing the run, `stashpoint runs signal RUN_ID approval --payload '{...}'`. The run is
then due (`stashpoint runs due`), and the next invocation of the handler (from a
scheduler polling due runs, a queue, or by hand) finds the approval and finishes: every
step before the wait replays from the run, the model is not called again.

    python examples/approval_agent.py --url local://./.stashpoint --id refund-7   # waits
    stashpoint runs redeem <token> --payload '{"approved": true, "by": "ana"}'
    python examples/approval_agent.py --url local://./.stashpoint --id refund-7   # pays

Each invocation prints one JSON line: `{"status": "waiting", "token": ...}` or
`{"status": "done", "answer": ...}`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import stashpoint
from stashpoint import RunSuspended, Semantics, WaitTimedOut

APPROVAL_TIMEOUT = 3 * 24 * 3600.0
"""How long the tool waits for a human (three days): then it gives up, as recorded."""


def call_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """A stand-in for a model: it asks for a refund, then answers from the tool's result."""
    if not any(m["role"] == "tool" for m in transcript):
        return {"role": "assistant", "tool": "refund", "args": {"order": "A-7", "amount": 120}}
    result = next(m for m in reversed(transcript) if m["role"] == "tool")["content"]
    return {"role": "assistant", "content": f"Refund: {result}."}


def pay(order: str, amount: int) -> str:
    """The side effect the human must approve first."""
    return f"paid {amount} for order {order}"


def refund_tool(run: Any, args: dict[str, Any], out: dict[str, Any]) -> str:
    """The tool: ask a human, wait (the run suspends), then pay or not."""
    token = run.callback("approval")  # recorded: every replay gets the same token
    out["token"] = token  # hand it to the approver (here: in the handler's answer)
    try:
        answer = run.wait_for("approval", timeout=APPROVAL_TIMEOUT)
    except WaitTimedOut:
        return "not paid: nobody approved in time"
    if not answer.get("approved"):
        return f"not paid: declined by {answer.get('by', 'the approver')}"
    paid: str = run.step(
        "pay", pay, args["order"], args["amount"], semantics=Semantics.AT_MOST_ONCE
    )
    return f"{paid} (approved by {answer.get('by', 'the approver')})"


def handler(url: str | None, run_id: str) -> dict[str, Any]:
    """One invocation: go as far as the run can, return what the caller should know."""
    out: dict[str, Any] = {}
    with stashpoint.open(url) as stash:
        run = stash.runs.durable(run_id, graph_name="approval-agent")
        transcript: list[dict[str, Any]] = [{"role": "user", "content": "Refund my order A-7"}]
        try:
            for turn in range(1, 5):
                reply = run.step(f"model-{turn}", call_model, list(transcript),
                                 semantics=Semantics.AT_MOST_ONCE)  # fmt: skip
                transcript.append(reply)
                if "tool" not in reply:
                    break
                result = refund_tool(run, reply["args"], out)
                transcript.append({"role": "tool", "content": result})
            run.complete()
        except RunSuspended as waiting:
            return {"status": "waiting", "reason": waiting.reason, "token": out.get("token")}
    return {"status": "done", "answer": transcript[-1]["content"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None, help="The stash (default: $STASHPOINT_URL).")
    parser.add_argument("--id", required=True, help="The run (one per request).")
    args = parser.parse_args(argv)
    print(json.dumps(handler(args.url, args.id)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
