"""A fleet map on real worker processes (SeaweedFS + DynamoDB Local on 127.0.0.1).

Issue 28 #1's figures, one run:

1. items/s with 8 worker processes / with 1 (10 ms items, 20,000 items, batch 100);
2. requests per item (every request of every worker, counted by `Stash.intercept`);
3. conflicts per claim with 16 workers;
4. the overhead of a one-worker fleet map against the same items in this process: an
   in-process `run.map` (one item at a time, as one worker) and a plain loop (the floor);
5. 20,000 items, 8 workers, 2 killed with `kill -9` and 1 frozen (SIGSTOP) mid-map: the
   time until each killed worker's batch runs again (its takeover) against the lease, the
   zombie fenced, every result exactly once and in order;
6. 10 rounds of killing a quarter of the workers: items whose result was recorded twice.

    .venv/bin/python -m bench.fleet_bench [--items 20000] [--rounds 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import stashpoint
from bench.common import real_servers

ITEM_SECONDS = 0.01
LEASE = 5.0


def _item(n: int) -> int:
    time.sleep(ITEM_SECONDS)
    return n * 2


def worker(url: str, options: dict[str, Any], map_id: str, worker_id: str, status: str) -> None:
    """One worker process: work the map, count its requests, print its report as JSON."""
    requests: Counter[str] = Counter()

    def count(request: Any, proceed: Any) -> Any:
        requests[type(request).__name__] += 1
        return proceed()

    def item(n: int) -> int:
        if status:
            Path(status).write_text(str(n))
        return _item(n)

    with stashpoint.open(url, **options) as stash, stash.intercept(count):
        fleet = stash.runs.fleet(map_id, worker_id=worker_id)
        print("started", flush=True)
        report = fleet.work(item)
    print(json.dumps({**dataclasses.asdict(report), "requests": dict(requests)}), flush=True)


def _spawn(url: str, options: dict[str, Any], map_id: str, n: int, status: Path | None = None
           ) -> subprocess.Popen[str]:  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "bench.fleet_bench", "--worker", url, json.dumps(options), map_id,
         f"w{n}", str(status or "")],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip


def _run(url: str, options: dict[str, Any], map_id: str, items: int, workers: int,
         batch_size: int = 100) -> tuple[float, list[dict[str, Any]]]:  # fmt: skip
    with stashpoint.open(url, **options) as stash:
        stash.runs.fleet(map_id).start(range(items), batch_size=batch_size, lease=LEASE)
    procs = [_spawn(url, options, map_id, n) for n in range(workers)]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"
    start = time.perf_counter()
    reports = []
    for proc in procs:
        out, _ = proc.communicate(timeout=3600)
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return time.perf_counter() - start, reports


def _check_once(stash: stashpoint.Stash, map_id: str, items: int) -> int:
    """Return how many items' results are missing, wrong or recorded twice (0 is the goal)."""
    fleet = stash.runs.fleet(map_id)
    results = list(fleet.results())
    bad = sum(1 for i, r in enumerate(results) if r.index != i or r.value != i * 2)
    logs = stash.logs_in("fleet")
    recorded: Counter[int] = Counter()
    for log_id in logs.list_ids(f"{map_id}:b"):
        for entry in logs.entries(log_id):
            recorded.update(r["i"] for r in entry.records)
    twice = sum(1 for count in recorded.values() if count > 1)
    return bad + twice + (items - len(results)) + (items - len(recorded))


def _holding(stash: stashpoint.Stash, map_id: str, proc: subprocess.Popen[str], worker_id: str,
             status: Path) -> str:  # fmt: skip
    """Freeze `proc` while it holds a batch; return that batch's log id."""
    logs = stash.logs_in("fleet")
    while True:
        proc.send_signal(signal.SIGSTOP)
        text = status.read_text() if status.exists() else ""
        if text:
            log_id = f"{map_id}:b{int(text) // 100:08d}"
            try:
                state = logs.head(log_id).state
            except stashpoint.CheckpointNotFound:
                state = {}
            if state.get("worker") == worker_id and state.get("status") == "leased":
                return log_id
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)


def _killed_mid_map(url: str, options: dict[str, Any], items: int) -> dict[str, Any]:
    map_id = f"kills-{uuid.uuid4().hex[:6]}"
    folder = Path(tempfile.mkdtemp())
    with stashpoint.open(url, **options) as stash:
        fleet = stash.runs.fleet(map_id)
        fleet.start(range(items), batch_size=100, lease=LEASE)
        procs = [_spawn(url, options, map_id, n, folder / f"w{n}") for n in range(8)]
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "started\n"
        while fleet.progress().done < items // 4:
            time.sleep(0.2)
        victims = {}
        for n in (0, 1):
            held = _holding(stash, map_id, procs[n], f"w{n}", folder / f"w{n}")
            procs[n].send_signal(signal.SIGKILL)
            victims[held] = datetime.now(UTC)
        frozen = _holding(stash, map_id, procs[2], "w2", folder / "w2")
        logs = stash.logs_in("fleet")
        recovered = {}
        deadline = time.monotonic() + 120
        while len(recovered) < len(victims) or logs.head(frozen).state["worker"] == "w2":
            for held, killed_at in victims.items():
                head = logs.head(held)
                if held not in recovered and head.state["worker"] not in ("w0", "w1"):
                    recovered[held] = (head.written_at - killed_at).total_seconds()
            assert time.monotonic() < deadline, "a killed worker's batch never ran again"
            time.sleep(0.05)
        procs[2].send_signal(signal.SIGCONT)
        reports = []
        for proc in procs[2:]:
            out, _ = proc.communicate(timeout=600)
            reports.append(json.loads(out.strip().splitlines()[-1]))
        for proc in procs[:2]:
            proc.wait()
        return {
            "recovery_seconds": sorted(recovered.values()),
            "zombie_fenced": reports[0]["fenced"],
            "status": fleet.progress().status,
            "wrong_or_twice": _check_once(stash, map_id, items),
        }


def _rounds_of_kills(url: str, options: dict[str, Any], rounds: int) -> int:
    twice = 0
    for round_ in range(rounds):
        map_id = f"round-{round_}-{uuid.uuid4().hex[:6]}"
        with stashpoint.open(url, **options) as stash:
            stash.runs.fleet(map_id).start(range(2000), batch_size=50, lease=2)
            procs = [_spawn(url, options, map_id, n) for n in range(8)]
            for proc in procs:
                assert proc.stdout is not None
                assert proc.stdout.readline() == "started\n"
            time.sleep(0.5 + 0.2 * round_)  # mid-map, at a different point each round
            for proc in procs[:2]:
                proc.send_signal(signal.SIGKILL)
            for proc in procs:
                proc.wait(timeout=600)
            assert stash.runs.fleet(map_id).progress().status == "completed"
            twice += _check_once(stash, map_id, 2000)
    return twice


def _in_process(url: str, options: dict[str, Any], items: int) -> tuple[float, float]:
    """Seconds per item of an in-process run.map (one at a time) and of a plain loop."""
    with stashpoint.open(url, **options) as stash:
        run = stash.runs.durable(f"inproc-{uuid.uuid4().hex[:6]}")
        start = time.perf_counter()
        run.map("items", range(items), _item, max_concurrency=1)
        mapped = (time.perf_counter() - start) / items
    start = time.perf_counter()
    for n in range(items):
        _item(n)
    return mapped, (time.perf_counter() - start) / items


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--worker", nargs=5, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, options, map_id, worker_id, status = args.worker
        worker(url, json.loads(options), map_id, worker_id, status)
        return
    with real_servers("fleet") as (url, options):
        one, _ = _run(url, options, "one", args.items, 1)
        eight, eight_reports = _run(url, options, "eight", args.items, 8)
        _, sixteen_reports = _run(url, options, "sixteen", args.items, 16, batch_size=50)
        requests = sum(sum(r["requests"].values()) for r in eight_reports)
        claims = sum(r["claims"] for r in sixteen_reports)
        conflicts = sum(r["conflicts"] for r in sixteen_reports)
        mapped, loop = _in_process(url, options, 2000)
        killed = _killed_mid_map(url, options, args.items)
        twice = _rounds_of_kills(url, options, args.rounds)
    print(f"\n{args.items} items of {ITEM_SECONDS * 1000:.0f} ms, batch 100, lease {LEASE:g} s\n")
    print("| figure | value | goal |\n|---|---|---|")
    print(f"| items/s, 8 workers / 1 worker | {args.items / eight:,.0f} / {args.items / one:,.0f}"
          f" = **{one / eight:.2f}x** | >= 6x |")  # fmt: skip
    print(f"| requests per item (8 workers; {dict(sum((Counter(r['requests']) for r in eight_reports), Counter()))}) "
          f"| **{requests / args.items:.4f}** | <= 0.05 |")  # fmt: skip
    print(f"| conflicts per claim, 16 workers (batch 50) | {conflicts} / {claims} = "
          f"**{conflicts / max(1, claims):.3f}** | <= 0.1 |")  # fmt: skip
    print(f"| one-worker fleet, s per item / in-process run.map (1 at a time) | "
          f"{one / args.items * 1000:.2f} ms / {mapped * 1000:.2f} ms = "
          f"**{one / args.items / mapped:.2f}x** | <= 1.2x |")  # fmt: skip
    print(f"| one-worker fleet / a plain loop (the floor) | {one / args.items * 1000:.2f} ms / "
          f"{loop * 1000:.2f} ms = {one / args.items / loop:.2f}x | |")  # fmt: skip
    print(f"| kill -9 mid-batch: until its batch runs again (lease {LEASE:g} s) | "
          f"{', '.join(f'{s:.2f} s' for s in killed['recovery_seconds'])} | <= lease + 2 s |")  # fmt: skip
    print(f"| 2 killed + 1 frozen of 8: status, zombie fenced, results wrong or twice | "
          f"{killed['status']}, {killed['zombie_fenced']}, **{killed['wrong_or_twice']}** | 0 |")  # fmt: skip
    print(f"| {args.rounds} rounds killing 2 of 8 workers: results wrong or twice | "
          f"**{twice}** | 0 |")  # fmt: skip


if __name__ == "__main__":
    main()
