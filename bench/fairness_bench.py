"""How fair optimistic appends are: three processes transition one run as fast as they can.

Each process opens its own stash (SeaweedFS + DynamoDB Local on 127.0.0.1) and records
attempts of one run in a tight loop for `--seconds`. Printed per worker: transitions made,
the slowest single transition, and the most lost races inside one transition (PUTs sent
beyond the one that landed). `--way`: `kept` (the defaults), `again` (a stash opened with
`log_read_cache_bytes=0`: every entry read again after a lost race), `short-backoff`
(`RetryPolicy(max_delay=0.08)`).

    .venv/bin/python -m bench.fairness_bench [--seconds 15] [--way kept]
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections import Counter
from typing import Any

import stashpoint
from bench.common import real_servers

WORKERS = 3


def _work(url: str, options: dict[str, Any], run_id: str, who: int, seconds: float,
          barrier: Any, queue: Any) -> None:  # fmt: skip
    with stashpoint.open(url, **options) as stash:
        sent: Counter[str] = Counter()

        def count(request: Any, proceed: Any) -> Any:
            sent[type(request).__name__] += 1
            return proceed()

        stash.intercept(count)
        barrier.wait()
        end = time.monotonic() + seconds
        made, slowest, most = 0, 0.0, 0
        while time.monotonic() < end:
            before = sent["PutObject"]
            started = time.perf_counter()
            stash.runs.record_attempt(run_id, f"w{who}-{made}", 1)
            slowest = max(slowest, time.perf_counter() - started)
            most = max(most, sent["PutObject"] - before - 1)
            made += 1
        queue.put((who, made, round(slowest, 2), most))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--way", choices=("kept", "again", "short-backoff"), default="kept")
    parser.add_argument("--workers", type=int, default=WORKERS)
    args = parser.parse_args()
    with real_servers("fairness") as (url, options):
        if args.way == "again":
            options = {**options, "log_read_cache_bytes": 0}
        elif args.way == "short-backoff":
            options = {**options, "retry": stashpoint.RetryPolicy(max_delay=0.08)}
        with stashpoint.open(url, **options) as stash:
            run_id = stash.runs.create_run("fairness")
        context = multiprocessing.get_context("fork")
        barrier, queue = context.Barrier(args.workers), context.Queue()
        workers = [
            context.Process(
                target=_work, args=(url, options, run_id, who, args.seconds, barrier, queue)
            )
            for who in range(args.workers)
        ]
        for worker in workers:
            worker.start()
        rows = sorted(queue.get(timeout=args.seconds + 300) for _ in workers)
        for worker in workers:
            worker.join()
    print("| way | worker | transitions | slowest transition, s | most lost races in one |")
    print("|---|---|---|---|---|")
    for who, made, slowest, most in rows:
        print(f"| {args.way} | {who} | {made} | {slowest} | {most} |")


if __name__ == "__main__":
    main()
