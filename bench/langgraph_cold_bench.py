"""A chat thread with one `invoke` per turn, each turn in a new process, vs one process.

Issue 27 #2: a Lambda per turn. The same deterministic messages agent as
`bench/langgraph_bench.py` (a user message and an AI message of 1-3 KB of real source text
per turn, LangChain messages, `add_messages`), on one SeaweedFS, two threads in the same
run: "warm" (one stash and saver for every turn) and "cold" (a new stash and saver per
turn, as a new process has: no cached head, no memory of what was written).

Reported per thread: requests per turn (turns 180-200), bytes sent (PUT bodies) / the zstd
of the final messages (the floor), bytes stored at rest / floor after `gc --pack`, and the
requests of a cold `get_tuple` of the latest checkpoint. Requests are counted with
`tests.meter.Meter` over `Stash.intercept` (the library's own requests: a LIST is one
`ListKeys`).

    .venv/bin/python -m bench.langgraph_cold_bench [--turns 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import zstandard
from langchain_core.messages import HumanMessage

import stashpoint
from bench.langgraph_bench import _graph, _s3_bytes
from bench.log_bench import _sources
from stashpoint.langgraph import StashpointSaver
from tests import servers
from tests.meter import Meter


def _chat(url: str, turns: int, cold: bool, source: Callable[[], str]) -> dict[str, Any]:
    config = {"configurable": {"thread_id": f"chat-{uuid.uuid4().hex[:6]}"}}
    per_turn: list[int] = []
    sent = 0
    stash = graph = None
    for turn in range(turns):
        if stash is None or cold:
            if stash is not None:
                stash.close()
            stash = stashpoint.open(url)
            graph = _graph(StashpointSaver(stash), source)
        meter = Meter(stash)
        graph.invoke({"messages": [HumanMessage(content=f"turn {turn}: {source()[:300]}")]},
                     config)  # fmt: skip
        meter.interception.remove()
        per_turn.append(sum(meter.requests.values()))
        sent += meter.put_bytes
    assert stash is not None
    final = StashpointSaver(stash).get_tuple(config)
    stash.close()
    messages = final.checkpoint["channel_values"]["messages"]
    floor = len(
        zstandard.ZstdCompressor(level=3).compress(
            StashpointSaver(stash).serde.dumps_typed(messages)[1]
        )
    )
    with stashpoint.open(url) as fresh:
        reads = Meter(fresh)
        StashpointSaver(fresh).get_tuple(config)
    return {
        "requests_per_turn": statistics.mean(per_turn[-20:]),
        "sent": sent,
        "floor": floor,
        "cold_get": dict(reads.requests),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    source = _sources()
    work = Path(tempfile.mkdtemp())
    s3_server = servers.start_seaweedfs(work)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
    try:
        rows = []
        for name, cold in (("warm (one process)", False), ("cold (a process per turn)", True)):
            prefix = f"cold-{uuid.uuid4().hex[:6]}"
            url = s3_server.url(prefix)
            result = _chat(url, args.turns, cold, source)
            with stashpoint.open(url, log_delete_after=timedelta(0)) as stash:
                stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0), pack=True)
            at_rest, _ = _s3_bytes(s3_server.client(), servers.VERSIONED_BUCKET, prefix)
            rows.append((name, result, at_rest))
    finally:
        servers.stop(s3_server)
    print(f"\n{args.turns} turns, one invoke per turn (1-3 KB tool text per message)\n")
    print("| thread | requests per turn (last 20) | bytes sent / floor | at rest / floor after "
          "gc --pack | cold get_tuple of the latest |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name, r, at_rest in rows:
        gets = r["cold_get"]
        print(f"| {name} | {r['requests_per_turn']:.1f} | {r['sent'] / r['floor']:.1f}x | "
              f"{at_rest / r['floor']:.2f}x | {sum(gets.values())} {gets} |")  # fmt: skip


if __name__ == "__main__":
    main()
