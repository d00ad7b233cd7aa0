"""Requests per cold chat turn: the median and the 99th percentile over N turns.

Issue 52 #1 asks p99 <= 1.3x the median over 300 cold turns. The chat graph of the cold-read
tests (`tests/langgraph/chat.py`) on a memory stash; each turn opens a new stash (a
new process's state) and counts every request the turn sends, the read of the latest
checkpoint included; seals and clean-up run after the count (`flush`).

    .venv/bin/python -m bench.langgraph_cold_requests [--turns 300]

Run it with `PYTHONPATH=<another checkout>/src` to measure that code instead.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from langchain_core.messages import HumanMessage

import stashpoint
from stashpoint.langgraph import StashpointSaver
from tests.langgraph.chat import chat_graph

_CONFIG = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    url = f"memory://cold-requests-{stashpoint.new_id()}"
    per_turn: list[int] = []
    for turn in range(args.turns):
        with stashpoint.open(url) as stash:
            saver = StashpointSaver(stash, background=False)
            sent: list[str] = []

            def count(request: Any, proceed: Any, sent: list[str] = sent) -> Any:
                sent.append(type(request).__name__)
                return proceed()

            interception = stash.intercept(count)
            chat_graph(saver).invoke({"messages": [HumanMessage(content=f"q{turn}")]}, _CONFIG)
            per_turn.append(len(sent))
            interception.remove()
            saver.flush()
    median = statistics.median(per_turn)
    p99 = statistics.quantiles(per_turn, n=100)[98]
    print(f"{args.turns} cold turns: median {median:.0f}, p99 {p99:.0f} ({p99 / median:.2f}x), "
          f"max {max(per_turn)}")  # fmt: skip


if __name__ == "__main__":
    main()
