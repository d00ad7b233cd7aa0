"""An agent loop that survives `kill -9` mid-turn and resumes according to its policy.

    python examples/agent_kill9.py --id my-agent                 # run (or resume) to the end
    python examples/agent_kill9.py --id my-agent --pause-turn 2  # stall in turn 2: kill it!
    python examples/agent_kill9.py --id my-agent --policy retry  # resume, re-running turn 2

With the default policy (reject), resuming a checkpoint whose turn was in flight stops with
AmbiguousResume (exit 3): the model call and its tools may have run, and running them again
could pay twice or act twice. `--policy retry` says that is fine for this agent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_model

import stashpoint
from stashpoint.agent import AgentCheckpoint, AgentRunner, ResumePolicy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None)
    parser.add_argument("--id", required=True)
    parser.add_argument("--policy", choices=["reject", "retry"], default="reject")
    parser.add_argument("--pause-turn", type=int, default=0)
    args = parser.parse_args(argv)
    policy = {"reject": ResumePolicy.REJECT_AMBIGUOUS, "retry": ResumePolicy.RETRY_INTERRUPTED_TURN}

    def turn(
        state: stashpoint.agent.AgentCheckpointState, number: int
    ) -> stashpoint.agent.TurnResult:
        if number == args.pause_turn:
            print(f"turn {number} in flight", flush=True)
            time.sleep(120)  # the model is "thinking": a good moment for kill -9
        return fake_model.turn(state, number)

    with stashpoint.open(args.url) as stash:
        runner = AgentRunner(
            AgentCheckpoint.existing(args.id, stash.checkpoints), policy=policy[args.policy]
        )
        try:
            outcome = runner.run(
                turn, agent="researcher", model=fake_model.MODEL, transcript=fake_model.opening()
            )
        except stashpoint.AmbiguousResume as exc:
            print(f"refusing to resume: {exc}", file=sys.stderr)
            return 3
    print(json.dumps({
        "turns": outcome.turns,
        "tool_calls": outcome.tool_calls,
        "transcript": [m.model_dump(mode="json") for m in outcome.transcript],
        "answer": outcome.response.message.content,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
