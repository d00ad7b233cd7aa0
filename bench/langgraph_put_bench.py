"""A LangGraph `put`'s CPU on `memory://`, this tree against another in the same run.

A thread of `--steps` checkpoints, each adding a user and an assistant message (LangChain
messages, through LangGraph's own serializer) to the `messages` channel and a pending
write; CPU per step (`put` + `put_writes`, `time.process_time`) over the last half. With
`--against PATH` the same runs for the source tree at PATH (a worktree of the code
before), each in a fresh process.

    .venv/bin/python -m bench.langgraph_put_bench [--steps 400] [--against /path/to/old/src]
"""

from __future__ import annotations

import argparse

from bench.common import measure_in_fresh_process

MEASURE = """
import json, sys, time
import stashpoint
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from stashpoint.langgraph import StashpointSaver
steps = int(sys.argv[1])
cpu = []
with stashpoint.open("memory://") as stash:
    saver = StashpointSaver(stash)
    config = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
    messages = []
    version = None
    for n in range(steps):
        messages = [*messages, HumanMessage(f"question {n} " * 20), AIMessage(f"answer {n} " * 40)]
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": messages, "step": n}
        version = saver.get_next_version(version, None)
        checkpoint["channel_versions"] = {"messages": version, "step": version}
        start = time.process_time()
        config = saver.put(config, checkpoint, {"source": "loop", "step": n},
                           checkpoint["channel_versions"])
        saver.put_writes(config, [("messages", [AIMessage("tool")])], f"task-{n}")
        cpu.append(time.process_time() - start)
late = cpu[len(cpu) // 2:]
print(json.dumps({"put_ms": 1000 * sum(late) / len(late)}))
"""


def _measure(steps: int, source: str | None) -> dict[str, float]:
    result: dict[str, float] = measure_in_fresh_process(MEASURE, str(steps), source=source)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--against", default=None)
    args = parser.parse_args()
    here = _measure(args.steps, None)
    print(f"this tree: {here['put_ms']:.2f} ms CPU per step")
    if args.against:
        there = _measure(args.steps, args.against)
        print(f"against:   {there['put_ms']:.2f} ms CPU per step")
        print(f"ratio this/against: {here['put_ms'] / there['put_ms']:.2f}")


if __name__ == "__main__":
    main()
