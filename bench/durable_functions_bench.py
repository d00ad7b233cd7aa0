"""Lambda durable functions on the stash: sequential steps and a fan-out across workers.

**Sequential steps** (`--steps`): one `@durable_execution` handler runs that many small
at-least-once `context.step` calls in one invocation. The time between one step's return
and the next's is what a user waits per step; measured three ways in the same run:

- `stashpoint`: `DurableFunctions` on SeaweedFS + DynamoDB Local behind a latency proxy
  (`--latency`, 15 ms a request by default: what a Lambda in a region sees of S3);
- `sdk-local-sqlite`: the same handler under AWS's own local testing runner
  (`aws-durable-execution-sdk-python-testing`, SQLite store, in process, no network): the
  SDK's own cost per step, the floor any service adds to;
- `run.step`: stashpoint's own durable steps (`stash.runs.durable`) behind the same proxy.

Per step: p50 and p99 milliseconds, requests and rounds (counted at the proxy), and CPU
per step in an early window (from step 100) and the last one (flat is 1.0).
`--cpu-steps` runs a longer execution straight to the servers (no proxy) for the CPU
ratio alone.

**Fan-out** (`--items`, `--workers`): a parent execution maps its items in chunks of
`--chunk`, each chunk a chained `context.invoke` of a child function whose `context.map`
runs one step per item (a 10 ms I/O wait each); `--workers` worker processes
(`DurableFunctions.work`) share the executions. Wall time against one worker process in
the same run.

    .venv/bin/python -m bench.durable_functions_bench [--steps 1000] [--cpu-steps 10000]
        [--items 2000 --chunk 100 --workers 8]
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import MapConfig

import stashpoint
from bench.common import started_servers
from bench.latency_proxy import Counts, LatencyProxy
from stashpoint.durable_functions import DurableFunctions

WINDOW = 64
"""Steps per CPU window."""
MARKS: list[tuple[float, float]] = []
"""(wall, CPU) after each step of the running handler."""
ITEM_WAIT = 0.010
"""Seconds of I/O each fan-out item waits (what a real item would spend on a call)."""


@durable_execution
def sequential(event: Any, ctx: DurableContext) -> int:
    """`event["steps"]` small steps, one after another."""
    for n in range(int(event["steps"])):
        ctx.step(lambda _, n=n: n * n, name=f"s{n}")
        MARKS.append((time.perf_counter(), time.process_time()))
    return int(event["steps"])


@durable_execution
def fan_out(event: Any, ctx: DurableContext) -> int:
    """Map the items in chunks, each chunk an execution of `chunk` (any worker runs it)."""
    items, size = int(event["items"]), int(event["chunk"])
    wait = float(event.get("wait", ITEM_WAIT))
    chunks = [list(range(start, min(items, start + size))) for start in range(0, items, size)]
    done = ctx.map(
        chunks,
        lambda c, chunk, i, _: c.invoke("chunk", {"items": chunk, "wait": wait}, name=f"chunk-{i}"),
        name="chunks",
    )
    return sum(done.get_results())


@durable_execution
def chunk(event: Any, ctx: DurableContext) -> int:
    """One step per item, eight at a time (each waits `wait` seconds as an I/O call would)."""
    wait = float(event["wait"])

    def item(c: DurableContext, n: int, i: int, _: Any) -> int:
        return c.step(lambda _: time.sleep(wait) or 1, name=f"item-{n}")

    done = ctx.map(event["items"], item, name="items", config=MapConfig(max_concurrency=8))
    return sum(done.get_results())


def _intervals(start: float) -> tuple[list[float], list[float]]:
    walls = [start] + [wall for wall, _ in MARKS]
    cpus = [cpu for _, cpu in MARKS]
    return [b - a for a, b in itertools.pairwise(walls)], cpus


def _cpu_ratio(cpus: list[float]) -> tuple[float, float]:
    early = (cpus[100 + WINDOW] - cpus[100]) / WINDOW
    late = (cpus[-1] - cpus[-1 - WINDOW]) / WINDOW
    return early, late


def _summary(kind: str, steps: int, wall: float, gaps: list[float], cpus: list[float],
             counts: Counts | None) -> dict[str, Any]:  # fmt: skip
    ordered = sorted(gaps)
    early, late = _cpu_ratio(cpus) if len(cpus) > 100 + 2 * WINDOW else (0.0, 0.0)
    return {
        "kind": kind,
        "steps_per_s": steps / wall,
        "p50_ms": statistics.median(gaps) * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99) - 1] * 1000,
        "requests": counts.requests / steps if counts else 0.0,
        "rounds": counts.rounds / steps if counts else 0.0,
        "cpu_early_ms": early * 1000,
        "cpu_late_ms": late * 1000,
    }


def ours(url: str, options: dict[str, Any], steps: int, counts: Counts | None) -> dict[str, Any]:
    """The handler on `DurableFunctions` over the stash at `url`."""
    with stashpoint.open(url, **options) as stash:
        functions = DurableFunctions(stash, lease=timedelta(minutes=30))
        functions.register("sequential", sequential)
        arn = functions.start("sequential", {"steps": steps})
        MARKS.clear()
        if counts:
            counts.reset()
        start = time.perf_counter()
        view = functions.run(arn)
        wall = time.perf_counter() - start
        assert view.state.status == "SUCCEEDED", view.state.status
    gaps, cpus = _intervals(start)
    return _summary("stashpoint", steps, wall, gaps, cpus, counts)


def sdk_local(steps: int) -> dict[str, Any]:
    """The handler under AWS's local testing runner on its SQLite store."""
    from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner
    from aws_durable_execution_sdk_python_testing.stores.sqlite import SQLiteExecutionStore

    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as folder:
        store = SQLiteExecutionStore.create_and_initialize(Path(folder) / "sdk.sqlite")
        with DurableFunctionTestRunner(sequential, store=store) as runner:
            MARKS.clear()
            start = time.perf_counter()
            result = runner.run(input=json.dumps({"steps": steps}), execution_timeout=3600)
            wall = time.perf_counter() - start
            assert result.status.value == "SUCCEEDED", result.status
    gaps, cpus = _intervals(start)
    return _summary("sdk-local-sqlite", steps, wall, gaps, cpus, None)


def run_steps(url: str, options: dict[str, Any], steps: int, counts: Counts) -> dict[str, Any]:
    """The same steps as stashpoint's own durable run (`run.step`)."""
    with stashpoint.open(url, **options) as stash:
        run = stash.runs.durable(f"steps-{uuid.uuid4().hex[:8]}", graph_name="bench")
        MARKS.clear()
        counts.reset()
        start = time.perf_counter()
        for n in range(steps):
            run.step(f"s{n}", lambda n: n * n, n)
            MARKS.append((time.perf_counter(), time.process_time()))
        wall = time.perf_counter() - start
    gaps, cpus = _intervals(start)
    return _summary("run.step", steps, wall, gaps, cpus, counts)


def _worker(url: str, options: dict[str, Any], ready: Any, go: Any, done: Any, cpu: Any) -> None:
    """A worker process: once told to go, run due executions until told the map is done."""
    with stashpoint.open(url, **options) as stash:
        functions = DurableFunctions(stash, lease=timedelta(minutes=5), worker_id=str(os.getpid()))
        for name, handler in (("fan-out", fan_out), ("chunk", chunk)):
            functions.register(name, handler)
        ready.release()
        go.wait(600)
        start = time.process_time()
        functions.work(stop=done.is_set, idle=0.1)
        cpu.put(time.process_time() - start)


def fan_out_run(
    url: str, options: dict[str, Any], items: int, size: int, workers: int, wait: float = ITEM_WAIT
) -> tuple[float, float]:
    """Run a fan-out with `workers` warm processes; return wall and their CPU seconds.

    Timed from the moment the workers (started, imported, stash open) are told to go to
    the moment the parent execution has ended.
    """
    target = _fresh(url, workers)
    context = multiprocessing.get_context("spawn")
    ready, go, done, cpu = context.Semaphore(0), context.Event(), context.Event(), context.Queue()
    processes = [
        context.Process(target=_worker, args=(target, options, ready, go, done, cpu))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        assert ready.acquire(timeout=600)
    with stashpoint.open(target, **options) as stash:
        functions = DurableFunctions(stash)
        arn = functions.start("fan-out", {"items": items, "chunk": size, "wait": wait})
        start = time.perf_counter()
        go.set()
        deadline = time.monotonic() + 1800
        while functions.describe(arn)["Status"] == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.1)
        wall = time.perf_counter() - start
        done.set()
        used = sum(cpu.get(timeout=600) for _ in processes)
        for process in processes:
            process.join(timeout=600)
        assert functions.describe(arn)["Status"] == "SUCCEEDED"
        result = json.loads(functions.describe(arn)["Result"])
        assert result == items, result
    return wall, used


def _fresh(url: str, workers: int) -> str:
    """A stash URL of its own for each fan-out (a new bucket prefix)."""
    base, _, query = url.partition("?")
    return f"{base}-w{workers}-{uuid.uuid4().hex[:6]}" + (f"?{query}" if query else "")


def _row(r: dict[str, Any]) -> str:
    flat = r["cpu_late_ms"] / r["cpu_early_ms"] if r["cpu_early_ms"] else float("nan")
    return (f"| {r['kind']} | {r['steps_per_s']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
            f"| {r['requests']:.2f} | {r['rounds']:.2f} | {r['cpu_early_ms']:.2f} "
            f"| {r['cpu_late_ms']:.2f} | {flat:.2f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Run the benches; print a markdown table of each."""
    from stashpoint._backends.dynamodb import create_table

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--cpu-steps", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.015)
    parser.add_argument("--items", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--item-wait", type=float, default=ITEM_WAIT, help="Seconds of I/O each item waits."
    )
    args = parser.parse_args(argv)
    counts = Counts()
    with (
        started_servers() as (s3, dynamo),
        LatencyProxy(s3.endpoint, args.latency, counts) as s3_proxy,
        LatencyProxy(dynamo.endpoint, args.latency, counts) as dynamo_proxy,
    ):
        table = f"bench-{uuid.uuid4().hex[:8]}"
        create_table(dynamo.client(), table)
        prefix = f"durable-{uuid.uuid4().hex[:8]}"

        def at(name: str, proxied: bool) -> tuple[str, dict[str, Any]]:
            endpoint = s3_proxy.endpoint if proxied else s3.endpoint
            index = dynamo_proxy.endpoint if proxied else dynamo.endpoint
            url = s3.url(f"{prefix}-{name}", endpoint=endpoint) + f"&index=dynamodb://{table}"
            return url, {"index_endpoint_url": index}

        rows: list[dict[str, Any]] = []
        if args.steps:
            rows.append(ours(*at("ours", True), args.steps, counts))
            rows.append(sdk_local(args.steps))
            rows.append(run_steps(*at("runstep", True), args.steps, counts))
            print(f"\n{args.steps} sequential steps, {args.latency * 1000:.0f} ms a request")
            print(
                "| runner | steps/s | p50 ms | p99 ms | requests/step | rounds/step "
                "| CPU ms/step early | late | late/early |"
            )
            print("|---|---|---|---|---|---|---|---|---|")
            for row in rows:
                print(_row(row))
        if args.cpu_steps:
            long = ours(*at("long", False), args.cpu_steps, None)
            print(f"\n{args.cpu_steps} steps straight to the servers (no proxy): CPU per step "
                  f"{long['cpu_early_ms']:.2f} ms from step 100, {long['cpu_late_ms']:.2f} ms "
                  f"at the end ({long['cpu_late_ms'] / long['cpu_early_ms']:.2f}x), "
                  f"p50 {long['p50_ms']:.1f} ms")  # fmt: skip
        if args.items:
            url, options = at("fan", True)
            one, one_cpu = fan_out_run(url, options, args.items, args.chunk, 1, args.item_wait)
            many, many_cpu = fan_out_run(
                url, options, args.items, args.chunk, args.workers, args.item_wait
            )
            print(
                f"\nfan-out of {args.items} items ({args.item_wait * 1000:.0f} ms of I/O each) "
                f"in chunks of {args.chunk} on "
                f"{os.cpu_count()} cores: 1 worker {one:.1f} s ({one_cpu:.1f} s CPU), "
                f"{args.workers} workers {many:.1f} s ({many_cpu:.1f} s CPU): {one / many:.2f}x"
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
