"""What a lost race costs in the one update loop: entries read again, or taken from memory.

Sixteen threads, each with its own stash (as sixteen workers have), complete one attempt
each of one run at once on SeaweedFS + DynamoDB Local (127.0.0.1): fifteen of them lose at
least one race and read the run's head again. Counted with `Stash.intercept`: PUTs (each
an attempt to append), GETs, listings, all requests, and the slowest completion.

"read again" is a stash opened with `log_read_cache_bytes=0`, which reads a head as every
stash did before the option came (every entry from the last whole state to the top from
storage); "kept by ETag" is the default (an entry this process read or wrote is taken from
memory while the listing names the same object). Rounds alternate between the two ways in
one run.

Run: .venv/bin/python -m bench.lost_race_bench [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import stashpoint
from bench.common import real_servers

WORKERS = 16


def _fanout(url: str, options: dict[str, Any]) -> tuple[float, Counter[str]]:
    """Sixteen stashes complete an attempt each of one run: (slowest s, requests)."""
    with stashpoint.open(url, **options) as stash:
        run_id = stash.runs.create_run("fanout")
        attempts = [stash.runs.record_attempt(run_id, f"n{i}", 1, None) for i in range(WORKERS)]
    barrier = threading.Barrier(WORKERS)
    took: list[float] = []
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(request: Any, proceed: Any) -> Any:
        with lock:
            counts[type(request).__name__] += 1
        return proceed()

    def complete(i: int) -> None:
        with stashpoint.open(url, **options) as worker:
            worker.intercept(count)
            barrier.wait()
            start = time.perf_counter()
            worker.runs.complete_attempt(attempts[i], {"i": i})
            took.append(time.perf_counter() - start)

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(complete, range(WORKERS)))
    return max(took), counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, Counter[str]]]] = {"again": [], "kept": []}
    with real_servers("lost-race-bench") as (url, options):
        _fanout(url, options)  # warm up: clients, table, bucket
        for _ in range(args.rounds):
            for way in ("again", "kept"):
                cache = {"log_read_cache_bytes": 0} if way == "again" else {}
                results[way].append(_fanout(url, {**options, **cache}))
    print("| way | PUTs (attempts) | GETs | listings | all requests | GETs per attempt "
          "| requests per attempt | slowest s (median) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for way, label in (("again", "read again"), ("kept", "kept by ETag")):
        rows = results[way]
        puts = [c["PutObject"] for _, c in rows]
        gets = [c["GetObject"] for _, c in rows]
        lists = [c["ListKeys"] for _, c in rows]
        total = [sum(c.values()) for _, c in rows]
        per_get = [g / p for g, p in zip(gets, puts, strict=True)]
        per_all = [t / p for t, p in zip(total, puts, strict=True)]
        slowest = statistics.median(t for t, _ in rows)
        print(
            f"| {label} | {' / '.join(map(str, puts))} | {' / '.join(map(str, gets))} "
            f"| {' / '.join(map(str, lists))} | {' / '.join(map(str, total))} "
            f"| {min(per_get):.1f}-{max(per_get):.1f} | {min(per_all):.1f}-{max(per_all):.1f} "
            f"| {slowest:.2f} |"
        )


if __name__ == "__main__":
    main()
