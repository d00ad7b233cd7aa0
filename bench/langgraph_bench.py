"""LangGraph saver: bytes stored and requests per step for a messages agent.

Runs a 200-step chat graph (`--steps`) through `StashpointSaver` on a local folder (or
`--url`), then prints:
- bytes stored (all objects of the stash) / zstd size of the final state's serialized
  messages, and the same ratio for a saver that stores the full state every step (the
  baseline, computed in the same run from the same states);
- requests per operation at the end of the conversation.

The peers (langgraph-checkpoint-aws, -objectstorage) are not installed here: see
bench/RESULTS.md.

    .venv/bin/python bench/langgraph_bench.py [--steps 200] [--url local:///tmp/x]
"""

from __future__ import annotations

import argparse
import collections
import operator
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import zstandard
from langgraph.graph import END, START, StateGraph

import stashpoint
from stashpoint.langgraph import StashpointSaver


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    def reply(state: Chat) -> dict[str, Any]:
        turn = len(state["messages"])
        text = f"assistant turn {turn}: " + " ".join(f"token{turn * 7 + i}" for i in range(60))
        return {"messages": [text]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp()) / "stash"
    url = args.url or f"local://{folder}"
    requests: collections.Counter[str] = collections.Counter()
    baseline_bytes = 0
    compressor = zstandard.ZstdCompressor(level=3)
    with stashpoint.open(url) as stash:
        saver = StashpointSaver(stash)
        real = stash._execute

        def counting(request: Any) -> Any:
            requests[type(request).__name__] += 1
            return real(request)

        stash._execute = counting
        graph = _graph(saver)
        config = {"configurable": {"thread_id": "bench"}}
        started = time.perf_counter()
        per_step: list[float] = []
        for step in range(args.steps):
            t = time.perf_counter()
            graph.invoke({"messages": [f"user message {step}: " + "word " * 40]}, config)
            per_step.append(time.perf_counter() - t)
            state = graph.get_state(config).values
            # Full state per checkpoint (two checkpoints a step: input and loop), as the peers.
            full = compressor.compress(saver.serde.dumps_typed(state["messages"])[1])
            baseline_bytes += 2 * len(full)
        elapsed = time.perf_counter() - started
        steps = args.steps
        final = compressor.compress(saver.serde.dumps_typed(state["messages"])[1])
        before = dict(requests)
        requests.clear()
        graph.get_state(config)
        get_latest = dict(requests)
        requests.clear()
        list(saver.list(config, limit=20))
        list_20 = dict(requests)
    stored = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if not args.url else 0
    print(f"steps={steps} elapsed={elapsed:.1f}s first10={sum(per_step[:10]) / 10 * 1000:.1f}ms "
          f"last10={sum(per_step[-10:]) / 10 * 1000:.1f}ms")
    print(f"final messages zstd: {len(final)} bytes")
    if stored:
        print(f"stashpoint stored (all files incl. SQLite index, locks): {stored} bytes = "
              f"{stored / len(final):.1f}x final")
    print(f"full-state-per-checkpoint baseline: {baseline_bytes} bytes = "
          f"{baseline_bytes / len(final):.1f}x final")
    print(f"requests for the whole run: {before}")
    print(f"get latest (get_state): {get_latest}; list 20: {list_20}")


if __name__ == "__main__":
    main()
