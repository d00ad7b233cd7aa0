"""Mapped steps: `run.map(name, items, fn)` runs a batch at once (threads or tasks), costs
two appends per batch, replays completed items, re-runs failed ones, and survives `kill -9`
mid-batch on SeaweedFS + DynamoDB Local with every item completed exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from typing import Any

import pytest

import stashpoint
from stashpoint import AttemptStatus


def _revision(stash: stashpoint.Stash, run_id: str) -> int:
    rows = [r for r in stash.runs.list_runs(limit=1000).items if r.run_id == run_id]
    return rows[0].revision


def test_a_map_runs_batches_at_once_and_writes_twice_per_batch(local_url: Any) -> None:
    url, _ = local_url
    in_flight = 0
    most = 0
    lock = threading.Lock()

    def square(n: int) -> int:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.05)
        with lock:
            in_flight -= 1
        return n * n

    with stashpoint.open(url) as stash:
        run = stash.runs.durable("mapped")
        run.step("start", lambda: 0)
        before = _revision(stash, "mapped")
        assert run.map("square", range(20), square, max_concurrency=8) == [n * n for n in range(20)]
        assert _revision(stash, "mapped") == before + 6  # 3 batches, 2 appends each
        assert most == 8
        run.complete()
        state = stash.runs.load_run("mapped")
    assert state is not None
    mapped = [a for a in state.attempts if a.node_id.startswith("square[")]
    assert sorted(a.node_id for a in mapped) == sorted(f"square[{n}]" for n in range(20))
    assert all(a.status is AttemptStatus.COMPLETED for a in mapped)
    assert {a.node_id: a.output for a in mapped}["square[7]"] == 49


def test_failed_items_are_recorded_raised_and_run_again_on_replay(memory_url: Any) -> None:
    url, _ = memory_url
    calls: Counter[int] = Counter()
    broken = {3}

    def work(n: int) -> int:
        calls[n] += 1
        if n in broken:
            raise ValueError(f"item {n} is bad")
        return n

    with stashpoint.open(url) as stash:
        with pytest.raises(ValueError, match="item 3 is bad"):
            stash.runs.durable("partly").map("work", range(10), work, max_concurrency=4)
        assert calls == Counter(range(4))  # the first batch ran; no later batch started
        broken.clear()
        run = stash.runs.durable("partly")  # a replay: items 0-2 are stored, 3 runs again
        assert run.map("work", range(10), work, max_concurrency=4) == list(range(10))
        assert calls == Counter({n: 2 if n == 3 else 1 for n in range(10)})
        with pytest.raises(stashpoint.NondeterministicReplay):
            stash.runs.durable("partly").step("other", lambda: 1)  # the map is position 0
        with pytest.raises(stashpoint.InvalidArgument):
            stash.runs.durable("partly").map("work", range(3), work, max_concurrency=0)
        with pytest.raises(stashpoint.InvalidArgument):
            stash.runs.durable("partly").step("bad[name]", work, 1)


def test_the_async_twin_maps_coroutines_concurrently(memory_url: Any) -> None:
    url, _ = memory_url
    in_flight = 0
    most = 0

    async def slow(n: int) -> int:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return n + 1

    async def main() -> list[Any]:
        async with stashpoint.open_async(url) as stash:
            run = stash.runs.durable("async-map")
            return await run.map("slow", range(12), slow, max_concurrency=5)  # type: ignore[no-any-return]

    assert asyncio.run(main()) == [n + 1 for n in range(12)]
    assert most == 5


KILLED_MID_BATCH = textwrap.dedent(
    """
    import json, os, signal, sys, time, stashpoint
    url, options, marks = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]

    def work(n):
        with open(marks, "a") as out:
            out.write(f"{n}\\n")
        if n == 13 and os.environ.get("DIE") == "1":
            time.sleep(0.2)  # the batch's other items finish their calls
            os.kill(os.getpid(), signal.SIGKILL)
        return {"n": n, "square": n * n}

    with stashpoint.open(url, **options) as stash:
        run = stash.runs.durable("killed-map")
        results = run.map("item", range(30), work, max_concurrency=6)
        run.complete()
    print(json.dumps(results))
    """
)


def test_a_map_killed_mid_batch_completes_each_item_once(
    s3_dynamo_url: tuple[str, dict[str, Any]], tmp_path: Any
) -> None:
    url, options = s3_dynamo_url
    marks = tmp_path / "marks"
    argv = [sys.executable, "-c", KILLED_MID_BATCH, url, json.dumps(options), str(marks)]
    killed = subprocess.run(
        argv, env=dict(os.environ, DIE="1"), capture_output=True, text=True, check=False
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    called_before = Counter(int(n) for n in marks.read_text().split())
    assert called_before[13] == 1 and max(called_before) < 18  # died in the third batch
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    results = json.loads(done.stdout)
    assert results == [{"n": n, "square": n * n} for n in range(30)]
    called = Counter(int(n) for n in marks.read_text().split())
    # The killed batch (12-17) never ended: it runs again once; every other item ran once.
    assert called == Counter({n: 2 if 12 <= n < 18 else 1 for n in range(30)})
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run("killed-map")
    assert state is not None and state.status is stashpoint.RunStatus.COMPLETED
    ends = Counter((a.node_id, a.status.value) for a in state.attempts)
    assert all(ends[(f"item[{n}]", "completed")] == 1 for n in range(30))
    assert sum(v for (node, status), v in ends.items() if status == "failed") == 6  # fenced
