"""Agent frameworks' sessions on the stash, beside the frameworks' own backends, in one run.

`--framework openai` (the default) or `strands`, or `all`.

The OpenAI Agents SDK: `StashSession` on SeaweedFS behind a latency proxy (15 ms added to
every request; requests and round trips counted) and the SDK's `SQLiteSession` on a local
file, each given the same turns (a user message and a ~2 KB answer per turn, one
`add_items` per turn, as the runner saves):

- requests, bytes sent and wall time per turn at turns 10-30 and 180-200;
- a cold load of the 200-turn session in a new stash (requests, rounds, wall);
- two writers of one session at once (100 turns each): items lost or duplicated.

    .venv/bin/python -m bench.frameworks_bench --turns 200

Strands Agents (`bench.strands_sessions`): a real `Agent` loop with a scripted model (a user
message and a ~2 KB answer per turn), on SeaweedFS behind the same proxy, its session kept
by Strands' `S3SessionManager`, by `SnapshotSessionManager` over Strands' `S3Storage`, and
by ours (`StashSessionManager`, per message and per turn; `SnapshotSessionManager` over
`StashStorage`); the same counts, and two invocations of one session at once.

    .venv/bin/python -m bench.frameworks_bench --framework strands --turns 200
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from agents import SQLiteSession

import stashpoint
from bench.common import started_servers
from bench.langgraph_lambda_bench import _text
from bench.latency_proxy import Counts, LatencyProxy
from stashpoint.openai_agents import StashSession


def turn_items(turn: int) -> list[dict[str, Any]]:
    """A turn's items: the user's message and the assistant's ~2 KB answer."""
    return [
        {"role": "user", "content": f"turn {turn}: " + _text(turn, 300)},
        {"role": "assistant", "content": f"answer {turn}: " + _text(10_000 + turn)},
    ]


def _window(values: list[float], first: int, last: int) -> float:
    return statistics.mean(values[first:last])


def ours(url: str, turns: int, counts: Counts) -> dict[str, Any]:
    """Turns on `StashSession`; per-turn requests, bytes and wall; a cold load after."""
    requests: list[float] = []
    sent: list[float] = []
    walls: list[float] = []
    with stashpoint.open(url) as stash:
        session = StashSession("bench", stash)
        body = [0]

        def count(request: Any, proceed: Any) -> Any:
            data = getattr(request, "body", None)
            if isinstance(data, bytes | bytearray | memoryview):
                body[0] += len(data)
            return proceed()

        with stash.intercept(count):
            for turn in range(turns):
                counts.reset()
                body[0] = 0
                start = time.perf_counter()
                asyncio.run(session.add_items(turn_items(turn)))
                walls.append(time.perf_counter() - start)
                requests.append(counts.requests)
                sent.append(body[0])
    with stashpoint.open(url) as stash:
        counts.reset()
        start = time.perf_counter()
        items = asyncio.run(StashSession("bench", stash).get_items())
        cold = time.perf_counter() - start
        assert len(items) == 2 * turns
        cold_requests, cold_rounds = counts.requests, counts.rounds
    return {
        "kind": "stashpoint (S3, 15 ms)",
        "early": (_window(requests, 10, 30), _window(sent, 10, 30), _window(walls, 10, 30)),
        "late": (
            _window(requests, turns - 20, turns),
            _window(sent, turns - 20, turns),
            _window(walls, turns - 20, turns),
        ),
        "cold": (cold_requests, cold_rounds, cold),
    }


def sdk_sqlite(folder: Path, turns: int) -> dict[str, Any]:
    """The same turns on the SDK's `SQLiteSession` (a local file, no network)."""
    path = folder / "sdk.db"
    session = SQLiteSession("bench", path)
    walls = []
    for turn in range(turns):
        start = time.perf_counter()
        asyncio.run(session.add_items(turn_items(turn)))
        walls.append(time.perf_counter() - start)
    session.close()
    cold_session = SQLiteSession("bench", path)
    start = time.perf_counter()
    items = asyncio.run(cold_session.get_items())
    cold = time.perf_counter() - start
    cold_session.close()
    assert len(items) == 2 * turns
    return {
        "kind": "SQLiteSession (local file)",
        "early": (0, 0, _window(walls, 10, 30)),
        "late": (0, 0, _window(walls, turns - 20, turns)),
        "cold": (0, 0, cold),
    }


def two_writers(make: Any, turns: int) -> tuple[int, int]:
    """Two writers of one session at once; return (items lost, items duplicated)."""

    def write(w: int) -> None:
        session = make()
        for turn in range(turns):
            asyncio.run(session.add_items([{"role": "user", "content": f"w{w} t{turn}"}]))
        session.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    session = make()
    contents = [i["content"] for i in asyncio.run(session.get_items())]
    session.close()
    wanted = {f"w{w} t{t}" for w in range(2) for t in range(turns)}
    return len(wanted - set(contents)), len(contents) - len(set(contents))


def main(argv: list[str] | None = None) -> None:
    """Run the bench; print a markdown table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.015)
    parser.add_argument("--framework", choices=["openai", "strands", "all"], default="openai")
    parser.add_argument("--race-turns", type=int, default=30)
    args = parser.parse_args(argv)
    if args.framework in ("strands", "all"):
        from bench.strands_sessions import run as run_strands

        run_strands(args.turns, args.latency, args.race_turns)
    if args.framework == "strands":
        return
    counts = Counts()
    with (
        started_servers() as (s3, _),
        LatencyProxy(s3.endpoint, args.latency, counts) as proxy,
        tempfile.TemporaryDirectory() as folder,
    ):
        url = s3.url(f"frameworks-{uuid.uuid4().hex[:8]}", endpoint=proxy.endpoint)
        rows = [ours(url, args.turns, counts), sdk_sqlite(Path(folder), args.turns)]
        print(f"\nOpenAI Agents SDK sessions, {args.turns} turns (~2.3 KB each)")
        print("| session | requests/turn 10-30 | 180-200 | KB sent/turn 10-30 | 180-200 "
              "| ms/turn 10-30 | 180-200 | cold load: requests | rounds | ms |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            (er, eb, ew), (lr, lb, lw), (cr, cro, cw) = r["early"], r["late"], r["cold"]
            print(f"| {r['kind']} | {er:.2f} | {lr:.2f} | {eb / 1024:.1f} | {lb / 1024:.1f} "
                  f"| {ew * 1000:.1f} | {lw * 1000:.1f} | {cr} | {cro} | {cw * 1000:.0f} |")  # fmt: skip
        shared = s3.url(f"frameworks-race-{uuid.uuid4().hex[:8]}", endpoint=proxy.endpoint)
        stashes: list[Any] = []

        def make_ours() -> Any:
            stash = stashpoint.open(shared)
            stashes.append(stash)
            return StashSession("race", stash)

        lost, duplicated = two_writers(make_ours, 100)
        for stash in stashes:
            stash.close()
        sqlite_lost, sqlite_duplicated = two_writers(
            lambda: SQLiteSession("race", Path(folder) / "race.db"), 100
        )
        print(f"\ntwo writers x 100 turns at once: stashpoint lost {lost}, duplicated "
              f"{duplicated}; SQLiteSession lost {sqlite_lost}, duplicated {sqlite_duplicated}")  # fmt: skip


if __name__ == "__main__":
    main()
