"""A warm `get_tuple`'s CPU on a long thread: one msgpack array against item by item.

The messages agent of `bench/langgraph_bench.py` runs `--steps` steps on the embedded
default (a local folder), then the latest checkpoint is read `--reads` times by two savers
of the same stash, interleaved, each warm (its first read not counted):

- LangGraph's serializer: the saver keeps the snapshot's and tail's items as msgpack and
  unpacks the whole list with one `loads_typed` (`steps._joined`);
- the same serializer behind a wrapper class of the user's own: the saver cannot assume
  how it unpacks an array, so it unpacks item by item from the readable JSON (the path
  every read took before this stop).

The baseline is LangGraph's own cost of the same list: `loads_typed` of the list's msgpack
as `InMemorySaver`-style storage would hold it (one blob). `process_time`, median.

    .venv/bin/python -m bench.langgraph_read_cpu_bench [--steps 200] [--reads 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import stashpoint
from bench.langgraph_bench import _graph
from bench.log_bench import _sources
from stashpoint.langgraph import StashpointSaver


class _Wrapped:
    """LangGraph's serializer behind a class of the user's own."""

    def __init__(self) -> None:
        self.inner = JsonPlusSerializer()

    def dumps_typed(self, value: Any) -> tuple[str, bytes]:
        return self.inner.dumps_typed(value)  # type: ignore[no-any-return]

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.inner.loads_typed(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reads", type=int, default=30)
    args = parser.parse_args()
    source = _sources()
    with tempfile.TemporaryDirectory() as root, stashpoint.open(f"local://{root}") as stash:
        writer = StashpointSaver(stash)
        graph = _graph(writer, source)
        config = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
        for step in range(args.steps):
            graph.invoke({"messages": [HumanMessage(content=f"step {step}: {source()[:300]}")]},
                         config)  # fmt: skip
        fast, slow = StashpointSaver(stash), StashpointSaver(stash, serde=_Wrapped())
        latest = fast.get_tuple(config)
        assert latest is not None
        messages = latest.checkpoint["channel_values"]["messages"]
        assert slow.get_tuple(config).checkpoint["channel_values"]["messages"] == messages  # type: ignore[union-attr]
        blob = JsonPlusSerializer().dumps_typed(messages)
        times: dict[str, list[float]] = {"one array": [], "item by item": [], "baseline": []}
        for _ in range(args.reads):
            for name, read in (
                ("one array", lambda: fast.get_tuple(config)),
                ("item by item", lambda: slow.get_tuple(config)),
                ("baseline", lambda: JsonPlusSerializer().loads_typed(blob)),
            ):
                started = time.process_time()
                read()
                times[name].append(time.process_time() - started)
        base = statistics.median(times["baseline"])
        print(f"{args.steps} steps, {len(messages)} messages, warm get_tuple, "
              f"median of {args.reads} (process_time)")  # fmt: skip
        for name, found in times.items():
            ms = statistics.median(found) * 1000
            print(f"{name}: {ms:.1f} ms ({ms / 1000 / base:.2f}x LangGraph's loads_typed)")


if __name__ == "__main__":
    main()
