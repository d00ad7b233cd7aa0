"""`delete_thread` and `prune` of a long LangGraph thread, and what `gc` does after them.

A 200-turn thread (each put adds a 1-3 KB message of real source text to a list channel),
on SeaweedFS, from a new process (no cached head), and `delete_thread` by the saver that
wrote the thread (`delete_thread_warm`). Printed: the requests `delete_thread`
and `prune(keep_latest)` send, and the requests of the `gc` pass that vacates what they
left below (`LogSteps.tidy`); the two together are what a deletion cost before issue 27
(the vacating was done inside `delete_thread`).

    .venv/bin/python -m bench.langgraph_delete_bench [--turns 200]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

import stashpoint
from bench.log_bench import _sources
from stashpoint.langgraph import StashpointSaver
from tests import servers


def _grow(saver: StashpointSaver, thread_id: str, turns: int) -> None:
    source = _sources()
    config: Any = None
    messages: list[str] = []
    version = None
    for step in range(turns):
        messages.append(source())
        checkpoint = empty_checkpoint()
        version = saver.get_next_version(version, None)
        checkpoint["channel_values"] = {"messages": list(messages)}
        checkpoint["channel_versions"] = {"messages": version}
        configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
        if config is not None:
            configurable["checkpoint_id"] = config["configurable"]["checkpoint_id"]
        config = saver.put(
            {"configurable": configurable}, checkpoint, {"source": "loop", "step": step},
            {"messages": version},
        )  # fmt: skip


def _counted(stash: stashpoint.Stash, work: Any) -> dict[str, int]:
    requests: Counter[str] = Counter()

    def hook(request: Any, proceed: Any) -> Any:
        if not request.for_index:
            requests[type(request).__name__] += 1
        return proceed()

    with stash.intercept(hook):
        work()
    return {"total": sum(requests.values()), **requests}


def run(url: str, turns: int) -> dict[str, Any]:
    result: dict[str, Any] = {"turns": turns}
    with stashpoint.open(url) as stash:
        saver = StashpointSaver(stash)
        _grow(saver, "deleted", turns)
        _grow(saver, "pruned", turns)
        _grow(saver, "deleted-warm", turns)
        # The saver that wrote the thread deletes it (it knows the head).
        result["delete_thread_warm"] = _counted(stash, lambda: saver.delete_thread("deleted-warm"))
    with stashpoint.open(url) as stash:  # a new process, as a Lambda is
        saver = StashpointSaver(stash)
        result["delete_thread"] = _counted(stash, lambda: saver.delete_thread("deleted"))
        result["prune_keep_latest"] = _counted(
            stash, lambda: saver.prune(["pruned"], strategy="keep_latest")
        )
        report: list[Any] = []
        result["gc_after_both"] = _counted(
            stash, lambda: report.append(stash.admin.collect_garbage(dry_run=False))
        )
        result["gc_vacated"] = report[0].lives_tidied
        result["gc_again"] = _counted(stash, lambda: stash.admin.collect_garbage(dry_run=False))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
    with tempfile.TemporaryDirectory() as data:
        server = servers.start_seaweedfs(Path(data))
        try:
            result = run(server.url(f"bench-{uuid.uuid4().hex}"), args.turns)
        finally:
            servers.stop(server)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
