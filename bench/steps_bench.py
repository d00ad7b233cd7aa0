"""Durable steps on SeaweedFS + DynamoDB Local: the cost of a step early and late in a long
run, and mapped steps against sequential ones, in the same run.

- A durable run of `--steps` small steps (`run.step(name, fn, n)`): requests, PUT body
  bytes and index items per step, and p50 time, in a window of 64 steps from step 10 and
  in the last 64; the late/early ratio of each (flat is 1.0).
- 1,000 small steps (`--mapped`) twice on fresh runs: sequential `run.step` calls, then
  one `run.map(..., max_concurrency=16)`; wall time, appends (PUTs) and requests of each,
  and the ratio.
- Opening a run of 3 steps in a new worker (a new stash) and replaying its steps: requests.

Requests are what the stash sends (`Stash.intercept`), each one round trip; AWS calls count
each index item as its own `put_item` (a transition's items go out at once).

    .venv/bin/python -m bench.steps_bench [--steps 10000] [--mapped 1000]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import stashpoint
from bench.common import real_servers
from tests.meter import Meter

WINDOW = 64
"""Steps per measured window."""


def _small(n: int) -> dict[str, int]:
    return {"n": n, "square": n * n}


def _window(meter: Meter, times: list[float]) -> dict[str, Any]:
    steps = len(times)
    requests = sum(meter.requests.values())
    aws_calls = requests - meter.requests["PutItems"] + meter.index_items
    return {
        "requests": requests / steps,
        "aws_calls": aws_calls / steps,
        "put_bytes": meter.put_bytes / steps,
        "index_items": meter.index_items / steps,
        "p50_ms": statistics.median(times) * 1000,
        "by_type": {k: round(v / steps, 2) for k, v in sorted(meter.requests.items())},
    }


def long_run(stash: stashpoint.Stash, steps: int) -> dict[str, dict[str, Any]]:
    """Run `steps` steps in one durable run; measure the early and the late window."""
    meter = Meter(stash)
    run = stash.runs.durable(f"long-{uuid.uuid4().hex[:8]}", graph_name="bench")
    found: dict[str, dict[str, Any]] = {}
    times: list[float] = []
    early = range(10, 10 + WINDOW)
    late = range(steps - WINDOW, steps)
    for n in range(steps):
        if n in (early.start, late.start):
            meter.reset()
            times = []
        start = time.perf_counter()
        run.step(f"s{n}", _small, n)
        times.append(time.perf_counter() - start)
        if n == early.stop - 1:
            found["early"] = _window(meter, times)
        if n == late.stop - 1:
            found["late"] = _window(meter, times)
        if n % 1000 == 999:
            print(f"  step {n + 1}", flush=True)
    return found


def mapped_vs_sequential(stash: stashpoint.Stash, items: int) -> dict[str, dict[str, float]]:
    """Run `items` small steps one by one, then as one map; time and count both."""
    meter = Meter(stash)
    found: dict[str, dict[str, float]] = {}
    for how in ("sequential", "mapped"):
        run = stash.runs.durable(f"{how}-{uuid.uuid4().hex[:8]}", graph_name="bench")
        run.step("open", _small, 0)  # the run exists: measure the steps alone
        meter.reset()
        start = time.perf_counter()
        if how == "sequential":
            results = [run.step(f"item-{n}", _small, n) for n in range(items)]
        else:
            results = run.map("item", range(items), _small, max_concurrency=16)
        seconds = time.perf_counter() - start
        assert results == [_small(n) for n in range(items)]
        found[how] = {
            "seconds": seconds,
            "puts": meter.requests["PutObject"],
            "requests": sum(meter.requests.values()),
            "put_bytes": meter.put_bytes,
        }
    return found


def open_in_new_worker(url: str, options: dict[str, Any]) -> dict[str, int]:
    """Run 3 steps, then open the run in a new stash and replay them: count the requests."""
    run_id = f"open-{uuid.uuid4().hex[:8]}"
    with stashpoint.open(url, **options) as stash:
        run = stash.runs.durable(run_id, graph_name="bench")
        for n in range(3):
            run.step(f"s{n}", _small, n)
    with stashpoint.open(url, **options) as stash:
        meter = Meter(stash)
        run = stash.runs.durable(run_id, graph_name="bench")
        assert [run.step(f"s{n}", _small, -1) for n in range(3)] == [_small(n) for n in range(3)]
        return dict(meter.requests)


def main() -> None:
    """Start the servers, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--mapped", type=int, default=1_000)
    args = parser.parse_args()
    with real_servers("steps") as (url, options):
        with stashpoint.open(url, **options) as stash:
            versus = mapped_vs_sequential(stash, args.mapped)
        with stashpoint.open(url, **options) as stash:
            long = long_run(stash, args.steps)
        opened = open_in_new_worker(url, options)
    print(f"\none durable run of {args.steps:,} steps, per step "
          f"(windows of {WINDOW}: from step 10, and the last)")  # fmt: skip
    for key in ("requests", "aws_calls", "put_bytes", "index_items", "p50_ms"):
        early, late = long["early"][key], long["late"][key]
        print(f"  {key:12} step 10 {early:10.2f}   step {args.steps:,} {late:10.2f}   "
              f"late/early {late / early if early else float('nan'):5.2f}")  # fmt: skip
    print(f"  requests by type, late: {long['late']['by_type']}")
    print(f"\nopening a 3-step run in a new worker and replaying it: "
          f"{sum(opened.values())} requests {opened}")  # fmt: skip
    seq, mapped = versus["sequential"], versus["mapped"]
    print(f"\n{args.mapped:,} small steps: sequential vs one map (max_concurrency=16)")
    for key in ("seconds", "puts", "requests", "put_bytes"):
        print(f"  {key:10} sequential {seq[key]:12,.2f}   mapped {mapped[key]:12,.2f}   "
              f"mapped/sequential {mapped[key] / seq[key]:5.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
