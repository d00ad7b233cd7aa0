"""`delete_for_runs` and `list(None, filter={"run_id": ...})` across many threads: the walk
of every thread against the (run, thread) index (`stashpoint.langgraph.run_threads`).

SeaweedFS and DynamoDB Local on 127.0.0.1. `--threads` threads, each with two checkpoints
of runs of its own (as LangGraph's server stamps them) and one of a run shared by every
tenth thread, written by an indexed saver. Then, each from a new process: the walk (the same
bucket opened without its index, `index=none`) and the index, in the same run. Requests are
counted at the stash's request hook (object and index requests alike; a LIST is one
`ListKeys`).

    .venv/bin/python -m bench.langgraph_runs_bench [--threads 1000]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

import stashpoint
from bench.common import real_servers
from stashpoint.langgraph import StashpointSaver


def _put(saver: StashpointSaver, thread_id: str, run_id: str, parent: str | None) -> str:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [f"{thread_id} {run_id}"]}
    checkpoint["channel_versions"] = {"messages": saver.get_next_version(None, None)}
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if parent is not None:
        configurable["checkpoint_id"] = parent
    config = saver.put(
        {"configurable": configurable}, checkpoint,
        {"source": "loop", "step": 0, "run_id": run_id}, checkpoint["channel_versions"],
    )  # fmt: skip
    return str(config["configurable"]["checkpoint_id"])


def _counted(url: str, options: dict[str, Any], work: Callable[[StashpointSaver], Any]) -> Any:
    """Run `work` on a new saver of a new stash (a new process); count and time it."""
    requests: Counter[str] = Counter()

    def hook(request: Any, proceed: Any) -> Any:
        requests[type(request).__name__] += 1
        return proceed()

    with stashpoint.open(url, **options) as stash, stash.intercept(hook):
        saver = StashpointSaver(stash)
        started = time.perf_counter()
        work(saver)
        seconds = time.perf_counter() - started
    return {"requests": sum(requests.values()), "seconds": round(seconds, 3), **requests}


def run(url: str, options: dict[str, Any], threads: int) -> dict[str, Any]:
    unindexed = url + "&index=none"
    result: dict[str, Any] = {"threads": threads}
    index_writes = puts = 0

    def count_index(request: Any, proceed: Any) -> Any:
        nonlocal index_writes
        index_writes += type(request).__name__ == "PutItems"
        return proceed()

    started = time.perf_counter()
    with stashpoint.open(url, **options) as stash, stash.intercept(count_index):
        saver = StashpointSaver(stash)
        saver.setup()  # nothing stored yet: one walk of nothing, then the marker
        for n in range(threads):
            parent = _put(saver, f"thread-{n:05d}", f"run-{n}", None)
            parent = _put(saver, f"thread-{n:05d}", f"run-{n}", parent)
            puts += 2
            if n % 10 == 0:
                _put(saver, f"thread-{n:05d}", "shared", parent)
                puts += 1
    result["writing"] = {
        "puts": puts,
        "index_writes": index_writes,
        "index_writes_per_put": round(index_writes / puts, 3),
        "seconds": round(time.perf_counter() - started, 1),
    }
    nothing = ["no-such-run"]
    for name, where in (("walk", unindexed), ("index", url)):
        result[name] = {
            "delete_for_runs(nothing)": _counted(
                where, options, lambda saver: saver.delete_for_runs(nothing)
            ),
            "list(None, run of 1 in 10 threads)": _counted(
                where, options, lambda saver: list(saver.list(None, filter={"run_id": "shared"}))
            ),
        }
    result["index"]["delete_for_runs(one thread's run)"] = _counted(
        url, options, lambda saver: saver.delete_for_runs(["run-7"])
    )
    result["index"]["setup() again"] = _counted(url, options, lambda saver: saver.setup())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1000)
    args = parser.parse_args()
    with real_servers("runs-bench") as (url, options):
        result = run(url, options, args.threads)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
