"""The golden corpus of format v1: one stash folder holding an object of every kind.

`moto_fixtures/golden/v1/store` was written once by `make` (`python -m tests.golden_v1
DIR`) and is never rewritten: every later version must read it as `read` says
(`tests/test_golden_v1.py`). Add a new corpus beside it for a new format; do not regenerate
this one. `read` is the readers' view of a store: what a user gets back, as plain JSON.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import stashpoint
from stashpoint import Envelope
from stashpoint.agent import ConversationStore, Message

RUN_ID = "golden-run"
"""A run: 70 transitions (a sealed segment), a blob output, every attempt status."""
LOG_ID = "golden-log"
"""An application log (`stash.logs`) of 3 versions."""
CHECKPOINT_ID = "golden-job"
"""A job checkpoint (a whole envelope, If-Match CAS) at revision 2."""
CONVERSATION = ("tenant", "golden-chat")
"""A durable conversation of 2 commits, the second an extension."""
THREAD_ID = "golden-thread"
"""A LangGraph thread of 2 checkpoints, with pending writes and a large value."""

_BIG = "golden " * 12_000
"""A value past the blob threshold (64 KiB): stored once under `blobs/`."""
_HUGE = "golden " * 40_000
"""A LangGraph value past its large-value threshold (256 KiB): under `langgraph-values/`."""


def make(root: Path) -> None:
    """Write the corpus into `root` (a new folder) with this version of the library."""
    with stashpoint.open(f"local://{root}") as stash:
        first = Envelope.initial(CHECKPOINT_ID, None, "golden.job", 1, {"step": 1})
        stash.checkpoints.compare_and_swap(first, None)
        second = first.next({"step": 2, "rows": [1, 2, 3], "note": "naïve ☃"})
        stash.checkpoints.compare_and_swap(second, 0)
        stash.checkpoints.compare_and_swap(second.next({"step": 3, "done": True}), 1)

        stash.logs.append(LOG_ID, [{"line": 0}], after=None, state={"offset": 1})
        head = stash.logs.head(LOG_ID)
        head = stash.logs.append(
            LOG_ID, [{"line": 1}, {"line": 2}], after=head, state={"offset": 3}
        )
        stash.logs.append(LOG_ID, [], after=head, state={"offset": 3, "closed": True})

        runs = stash.runs
        runs.create_run("golden-graph", run_id=RUN_ID, graph_hash="sha256:golden")
        for i in range(32):
            attempt = runs.record_attempt(RUN_ID, f"step-{i}", 1, {"item": i})
            runs.complete_attempt(attempt, {"rows": i}, {"cost": i})
        big = runs.record_attempt(RUN_ID, "big", 1)
        runs.complete_attempt(big, {"text": _BIG})
        failed = runs.record_attempt(RUN_ID, "flaky", 1)
        runs.fail_attempt(failed, "boom")
        runs.record_attempt(RUN_ID, "flaky", 2, lease=600.0)
        runs.save_state_snapshot(RUN_ID, {"cursor": 42})

        chats = ConversationStore(stash.checkpoints)
        hello = [Message(role="user", content="hello")]
        chats.commit(*CONVERSATION, 0, hello)
        chats.commit(*CONVERSATION, 1, [*hello, Message(role="assistant", content="hi ☃")])

        _thread(stash)


def _thread(stash: stashpoint.Stash) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from stashpoint.langgraph import StashpointSaver

    saver = StashpointSaver(stash)
    config: Any = {"configurable": {"thread_id": THREAD_ID, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["id"] = "1f0a0000-0000-6000-8000-000000000001"
    checkpoint["channel_values"] = {"messages": ["hello"], "big": _HUGE}
    checkpoint["channel_versions"] = {"messages": 1, "big": 1}
    config = saver.put(
        config, checkpoint, {"source": "input", "step": -1}, {"messages": 1, "big": 1}
    )
    saver.put_writes(config, [("messages", "pending")], task_id="task-1")
    following = empty_checkpoint()
    following["id"] = "1f0a0000-0000-6000-8000-000000000002"
    following["channel_values"] = {"messages": ["hello", "hi"], "big": _HUGE}
    following["channel_versions"] = {"messages": 2, "big": 1}
    saver.put(config, following, {"source": "loop", "step": 0}, {"messages": 2})


def _short(value: Any) -> Any:
    """Return `value` with every long string replaced by its length and SHA-256."""
    if isinstance(value, str) and len(value) > 200:
        return {"length": len(value), "sha256": hashlib.sha256(value.encode()).hexdigest()}
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_short(v) for v in value]
    return value


def read(root: Path) -> dict[str, Any]:
    """Return what the readers of this version return for a corpus, as plain JSON."""
    return _short(_read(root))  # type: ignore[no-any-return]


def _read(root: Path) -> dict[str, Any]:
    with stashpoint.open(f"local://{root}") as stash:
        job = stash.checkpoints.load(CHECKPOINT_ID)
        old = stash.checkpoints.load(CHECKPOINT_ID, 1)
        log = stash.logs.head(LOG_ID)
        run = stash.runs.load_run(RUN_ID)
        assert run is not None
        chats = ConversationStore(stash.checkpoints)
        version, messages = chats.load(*CONVERSATION)
        return {
            "checkpoint": {
                "revision": job.revision, "kind": job.kind, "payload": job.payload,
                "revision_1": old.payload,
            },
            "log": {
                "version": log.version, "state": log.state,
                "records": stash.logs.records(LOG_ID),
            },
            "run": {
                "status": run.status.value, "graph_hash": run.graph_hash,
                "snapshot": run.state_snapshot,
                "attempts": [
                    [a.node_id, a.attempt, a.status.value, a.input, a.output, a.meta, a.error]
                    for a in run.attempts
                ],
            },
            "conversation": {
                "version": version, "messages": [m.model_dump(mode="json") for m in messages],
            },
            "thread": _read_thread(stash),
        }  # fmt: skip


def _read_thread(stash: stashpoint.Stash) -> dict[str, Any]:
    from stashpoint.langgraph import StashpointSaver

    saver = StashpointSaver(stash)
    config: Any = {"configurable": {"thread_id": THREAD_ID, "checkpoint_ns": ""}}
    history = []
    for found in saver.list(config):
        history.append({
            "id": found.checkpoint["id"],
            "values": found.checkpoint["channel_values"],
            "versions": found.checkpoint["channel_versions"],
            "metadata": {k: found.metadata.get(k) for k in ("source", "step")},
            "pending": [list(w) for w in found.pending_writes or []],
        })  # fmt: skip
    return {"history": history}


if __name__ == "__main__":
    target = Path(sys.argv[1])
    make(target / "store")
    (target / "expected.json").write_text(
        json.dumps(read(target / "store"), indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    )
    # Derived or per-process files are no part of the format.
    shutil.rmtree(target / "store" / ".locks")
    shutil.rmtree(target / "store" / ".tmp", ignore_errors=True)
    (target / "store" / "index.sqlite3").unlink()
