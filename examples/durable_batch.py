"""A 50-item batch that survives a crash: each item is a durable step.

Run it, kill it (`kill -9`) anywhere, run it again: items already done are not run again
(their stored results are returned), the item in flight runs again (at least once; use
`run.key(name)` as an idempotency key for its side effects), and the run completes. A
second worker started on the same run takes it over: the first is fenced and stores
nothing more.

    python examples/durable_batch.py --id nightly-2026-11-30

The user code is the 10 lines between the markers.
"""

from __future__ import annotations

import argparse
import sys
import time

import stashpoint


# --- user code: begin
def process(item: int) -> int:
    return item * item  # the work: an API call, a file, a model


def batch(url: str | None, run_id: str, items: int = 50) -> int:
    with stashpoint.open(url) as stash:
        run = stash.runs.durable(run_id, graph_name="batch")
        results = [run.step(f"item-{i}", process, i) for i in range(items)]
        run.complete()
    return sum(results)


# --- user code: end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None)
    parser.add_argument("--id", required=True)
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--delay", type=float, default=0.0, help="Seconds per item (tests).")
    parser.add_argument("--trace", default=None, help="Append each item processed here.")
    args = parser.parse_args(argv)
    global process
    work = process

    def traced(item: int) -> int:
        if args.trace:
            with open(args.trace, "a") as trace:
                trace.write(f"{item}\n")
        time.sleep(args.delay)
        return work(item)

    process = traced
    print(f"sum {batch(args.url, args.id, args.items)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
