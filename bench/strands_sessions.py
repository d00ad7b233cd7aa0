"""Strands Agents' sessions: ours beside Strands' own S3 backends, in one run (`frameworks_bench`).

Every configuration runs the same real `Agent` loop (a scripted model: no network) on
SeaweedFS behind the latency proxy, which counts requests, rounds and bytes sent:

- `S3SessionManager` (Strands): an object per message, `agent.json` rewritten on changes;
- `SnapshotSessionManager` over Strands' `S3Storage`: the whole agent, one blob per save;
- `StashSessionManager` (ours), `save="message"` and `save="turn"`: the session one log;
- `SnapshotSessionManager` over `StashStorage` (ours): the blob on compare-and-swap heads.

Per turn at turns 10-30 and the last 20: requests, KB sent, wall; a cold load of the
session (a new agent and manager, new clients); two invocations of one session at once
(each turn a new agent that loads the session; ours reload after `SessionConflict`):
turns lost or duplicated.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from strands import Agent
from strands.agent.conversation_manager import NullConversationManager
from strands.session.s3_session_manager import S3SessionManager
from strands.session.snapshot_session_manager import SnapshotSessionManager
from strands.storage.s3_storage import S3Storage

import stashpoint
from bench.common import started_servers
from bench.langgraph_lambda_bench import _text
from bench.latency_proxy import Counts, LatencyProxy
from stashpoint.strands_agents import SessionConflict, StashSessionManager, StashStorage
from stashpoint.strands_agents import StorageConflict as StashStorageConflict
from tests.servers import VERSIONED_BUCKET
from tests.strands_agents.fake_model import ScriptedModel

Manager = Callable[[str], Any]
"""Makes a session manager for a session id (new clients: a new invocation)."""


def _answer(prompt: str) -> str:
    return f"answer to {prompt[:12]}: " + _text(len(prompt) * 7919 % 100_000)


def _prompt(turn: int, tag: str = "") -> str:
    return f"turn {turn}{tag}: " + _text(turn, 300)


def _agent(manager: Any, **options: Any) -> Agent:
    return Agent(
        model=ScriptedModel(answer=_answer),
        session_manager=manager,
        callback_handler=None,
        **options,
    )


def _window(values: list[float], first: int, last: int) -> float:
    return statistics.mean(values[first:last])


def measure(kind: str, make: Manager, turns: int, counts: Counts) -> dict[str, Any]:
    """Run `turns` turns on one agent; then a cold load; return the row."""
    session = f"s-{uuid.uuid4().hex[:8]}"
    agent = _agent(make(session))
    requests: list[float] = []
    sent: list[float] = []
    walls: list[float] = []
    for turn in range(turns):
        counts.reset()
        start = time.perf_counter()
        agent(_prompt(turn))
        walls.append(time.perf_counter() - start)
        requests.append(counts.requests)
        sent.append(counts.sent)
    counts.reset()
    start = time.perf_counter()
    cold = _agent(make(session))
    wall = time.perf_counter() - start
    assert len(cold.messages) == len(agent.messages), (kind, len(cold.messages))
    late = max(turns - 20, 0)
    return {
        "kind": kind,
        "early": (_window(requests, 10, 30), _window(sent, 10, 30), _window(walls, 10, 30)),
        "late": (
            _window(requests, late, turns),
            _window(sent, late, turns),
            _window(walls, late, turns),
        ),
        "cold": (counts.requests, counts.rounds, wall),
    }


def race(make: Manager, turns: int) -> tuple[int, int, int]:
    """Two invocations of one session at once; return (turns lost, duplicated, conflicts)."""
    session = f"race-{uuid.uuid4().hex[:8]}"
    _agent(make(session), conversation_manager=NullConversationManager())("start")
    done: list[str] = []
    conflicts = [0]
    lock = threading.Lock()

    def invocations(w: int) -> None:
        for turn in range(turns):
            for _ in range(50):  # bounded
                agent = _agent(make(session), conversation_manager=NullConversationManager())
                prompt = f"w{w} t{turn}"
                try:
                    agent(prompt)
                except (SessionConflict, StashStorageConflict):
                    with lock:
                        conflicts[0] += 1
                    continue
                with lock:
                    done.append(prompt)
                break

    threads = [threading.Thread(target=invocations, args=(w,)) for w in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=1200)
    final = _agent(make(session), conversation_manager=NullConversationManager())
    replies = [
        b["text"].split(": ", 1)[0].removeprefix("answer to ")
        for m in final.messages
        if m["role"] == "assistant"
        for b in m["content"]
        if "text" in b
    ]
    lost = len(set(done) - set(replies))
    duplicated = len(replies) - len(set(replies))
    return lost, duplicated, conflicts[0]


def run(turns: int, latency: float, race_turns: int) -> None:
    """Run every configuration in one run; print the tables."""
    counts = Counts()
    opened: list[Any] = []
    with started_servers() as (s3, _), LatencyProxy(s3.endpoint, latency, counts) as proxy:
        os.environ["AWS_ENDPOINT_URL_S3"] = proxy.endpoint  # Strands' S3Storage has no option
        run_id = uuid.uuid4().hex[:8]
        url = s3.url(f"strands-{run_id}", endpoint=proxy.endpoint)

        def stash() -> Any:
            opened.append(stashpoint.open(url))
            return opened[-1]

        configurations: list[tuple[str, Manager]] = [
            (
                "S3SessionManager (Strands)",
                lambda sid: S3SessionManager(
                    sid, VERSIONED_BUCKET, prefix=f"peer-{run_id}/", endpoint_url=proxy.endpoint,
                    region_name="us-east-1",
                ),
            ),
            (
                "SnapshotSessionManager + S3Storage (Strands)",
                lambda sid: SnapshotSessionManager(
                    sid, storage=S3Storage(VERSIONED_BUCKET, prefix=f"snap-{run_id}/",
                                           region_name="us-east-1"),
                ),
            ),
            ("StashSessionManager, per message", lambda sid: StashSessionManager(sid, stash())),
            (
                "StashSessionManager, save=turn",
                lambda sid: StashSessionManager(sid, stash(), save="turn"),
            ),
            (
                "SnapshotSessionManager + StashStorage",
                lambda sid: SnapshotSessionManager(sid, storage=StashStorage(stash())),
            ),
        ]  # fmt: skip
        rows = [measure(kind, make, turns, counts) for kind, make in configurations]
        print(f"\nStrands Agents sessions, {turns} turns (~2.3 KB each), 15 ms a request")
        print("| session | requests/turn 10-30 | last 20 | KB sent/turn 10-30 | last 20 "
              "| ms/turn 10-30 | last 20 | cold load: requests | rounds | ms |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            (er, eb, ew), (lr, lb, lw), (cr, cro, cw) = r["early"], r["late"], r["cold"]
            print(f"| {r['kind']} | {er:.2f} | {lr:.2f} | {eb / 1024:.1f} | {lb / 1024:.1f} "
                  f"| {ew * 1000:.1f} | {lw * 1000:.1f} | {cr} | {cro} | {cw * 1000:.0f} |")  # fmt: skip
        print(f"\ntwo invocations of one session at once, {race_turns} turns each:")
        print("| session | turns lost | duplicated | conflicts told |")
        print("|---|---|---|---|")
        for kind, make in configurations:
            lost, duplicated, told = race(make, race_turns)
            print(f"| {kind} | {lost} | {duplicated} | {told} |")
        for opened_stash in opened:
            opened_stash.close()
