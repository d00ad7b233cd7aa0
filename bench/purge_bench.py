"""Purge of a long agent transcript on SeaweedFS: objects, requests, seconds, receipts.

The transcript is written turn by turn by `AgentRunner` on a memory stash, then every
stored version is replayed, oldest first, onto a versioned SeaweedFS bucket (the same
keys and bytes the turns would have written there, without waiting ten minutes for
10,000 sequential turns). Measured in the same run, on a second copy of the same objects,
the baseline: erasing by hand, one versioned DELETE per version (what `aws s3api
delete-object --version-id` in a loop does, 16 in flight).

    .venv/bin/python -m bench.purge_bench --turns 10000
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import stashpoint
from examples import fake_model
from stashpoint.agent import AgentCheckpoint, AgentRunner, Message, TurnResult
from stashpoint.steps import Parallel, Steps, ask, run_sync
from stashpoint.stores.objects import DeleteObject
from tests import servers
from tests.purging import replay, versions

_WORDS = [
    "the",
    "agent",
    "called",
    "search",
    "with",
    "query",
    "result",
    "token",
    "plan",
    "step",
    "observation",
    "tool",
]


def _transcript(stash: stashpoint.Stash, agent_id: str, turns: int) -> None:
    runner = AgentRunner(AgentCheckpoint.existing(agent_id, stash.checkpoints))
    cursor, state = runner.start(
        agent="a", model=fake_model.MODEL, transcript=[Message(role="user", content="hello")]
    )
    for _ in range(turns):
        state = runner.run_turn(
            cursor,
            state,
            lambda s, n: TurnResult(
                messages=[Message(role="assistant", content=" ".join(_WORDS[(n + i) % 12]
                                                                     for i in range(80)))]
            ),
        )  # fmt: skip


def _by_hand(stash: stashpoint.Stash, prefixes: list[str]) -> tuple[int, float]:
    """Erase every version under `prefixes` one versioned DELETE at a time; (requests, s)."""
    started = time.perf_counter()
    listed = [versions(stash, p) for p in prefixes]
    doomed = [v for found in listed for v in found]
    pages = sum(max(1, -(-len(found) // 1000)) for found in listed)

    def delete_all() -> Steps[None]:
        for start in range(0, len(doomed), 256):
            batch = doomed[start : start + 256]
            yield from ask(Parallel(tuple(DeleteObject(v.key, None, v.version_id) for v in batch)))

    run_sync(delete_all(), stash.driver)
    return len(doomed) + pages, time.perf_counter() - started


def run(server: servers.S3Server, turns: int, vacate: bool) -> dict[str, Any]:
    with stashpoint.open(f"memory://purge-bench-{vacate}", vacate_sealed_entries=vacate) as source:
        _transcript(source, "long", turns)
        _transcript(source, "other", 5)
        copies = []
        for name in ("purged", "by-hand"):
            target = stashpoint.open(server.url(f"{name}-{vacate}-{os.getpid()}"))
            replay(source, target)
            copies.append(target)
    purged, by_hand = copies
    prefixes = ["agents/long/", "sealed/agents/long/"]
    before = [v for p in prefixes for v in versions(purged, p)]
    stored = sum(v.size for v in before)
    counts: Counter[str] = Counter()

    def hook(request: Any, proceed: Any) -> Any:
        counts[type(request).__name__] += 1
        return proceed()

    started = time.perf_counter()
    with purged.intercept(hook):
        receipt = purged.admin.purge(agent="long")
    seconds = time.perf_counter() - started
    assert receipt.verified
    assert receipt.status == "complete"
    assert AgentCheckpoint.existing("other", purged.checkpoints).load()[1].transcript
    requests = sum(counts.values())
    hand_requests, hand_seconds = _by_hand(by_hand, prefixes)  # relative to each stash
    purged.close()
    by_hand.close()
    return {
        "turns": turns,
        "vacate_sealed_entries": vacate,
        "objects": len(before),
        "stored_bytes": stored,
        "removed": receipt.objects,
        "kept": receipt.kept,
        "requests": requests,
        "requests_by_kind": dict(counts),
        "seconds": round(seconds, 2),
        "requests_per_object": round(requests / len(before), 3),
        "goal_requests": round(len(before) / 900, 1),
        "by_hand_requests": hand_requests,
        "by_hand_seconds": round(hand_seconds, 2),
        "seconds_vs_by_hand": round(seconds / hand_seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=10_000)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with tempfile.TemporaryDirectory() as data:
        server = servers.start_seaweedfs(Path(data))
        try:
            for vacate in (False, True):
                print(json.dumps(run(server, args.turns, vacate)), flush=True)
        finally:
            servers.stop(server)


if __name__ == "__main__":
    main()
