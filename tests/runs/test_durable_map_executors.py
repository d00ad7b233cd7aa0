"""`run.map(..., executor=...)`: items run on an existing engine (a process pool, a Dask
`LocalCluster`) while the run records them: each result once, in order, failures
recorded and run again on a replay, both twins."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

import stashpoint
from stashpoint import AttemptStatus, InvalidArgument


def _square_in_a_process(n: int) -> list[int]:
    return [n * n, os.getpid()]


def _fails_on_sevens(n: int) -> int:
    if n % 7 == 0 and not os.environ.get("SEVENS_FIXED"):
        raise ValueError(f"{n} is a seven")
    return n + 1


def _recorded_once(stash: stashpoint.Stash, run_id: str, name: str, count: int) -> dict[str, Any]:
    state = stash.runs.load_run(run_id)
    assert state is not None
    mapped = [a for a in state.attempts if a.node_id.startswith(f"{name}[")]
    completed = Counter(a.node_id for a in mapped if a.status is AttemptStatus.COMPLETED)
    assert set(completed) == {f"{name}[{n}]" for n in range(count)}
    assert set(completed.values()) == {1}, "an item recorded twice"
    return {a.node_id: a.output for a in mapped if a.status is AttemptStatus.COMPLETED}


def test_a_process_pool_runs_1000_items_each_recorded_once(local_url: Any) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash, ProcessPoolExecutor(4) as pool:
        run = stash.runs.durable("pooled")
        results = run.map("square", range(1000), _square_in_a_process, executor=pool,
                          max_concurrency=32)  # fmt: skip
        assert [value for value, _ in results] == [n * n for n in range(1000)]
        assert os.getpid() not in {pid for _, pid in results}  # they ran in the pool
        run.complete()
        outputs = _recorded_once(stash, "pooled", "square", 1000)
        assert outputs["square[999]"][0] == 998_001


def test_a_dask_local_cluster_runs_1000_items_each_recorded_once(local_url: Any) -> None:
    distributed = pytest.importorskip("distributed")
    url, _ = local_url
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=2, processes=True, host="127.0.0.1",
        dashboard_address=None, silence_logs=40,
    )  # fmt: skip
    try:
        with distributed.Client(cluster) as client, stashpoint.open(url) as stash:
            run = stash.runs.durable("on-dask")
            executor = client.get_executor()
            results = run.map("square", range(1000), _square_in_a_process, executor=executor,
                              max_concurrency=64)  # fmt: skip
            assert [value for value, _ in results] == [n * n for n in range(1000)]
            assert os.getpid() not in {pid for _, pid in results}
            run.complete()
            _recorded_once(stash, "on-dask", "square", 1000)
    finally:
        cluster.close()


def test_failures_on_an_executor_are_recorded_and_run_again_on_replay(
    local_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash, ProcessPoolExecutor(2) as pool:
        run = stash.runs.durable("flaky")
        with pytest.raises(ValueError, match="is a seven"):
            run.map("inc", range(30), _fails_on_sevens, executor=pool, max_concurrency=10)
    monkeypatch.setenv("SEVENS_FIXED", "1")  # the fix, deployed: a new pool sees it
    with stashpoint.open(url) as stash, ProcessPoolExecutor(2) as pool:
        run = stash.runs.durable("flaky")
        assert run.map("inc", range(30), _fails_on_sevens, executor=pool, max_concurrency=10) == [
            n + 1 for n in range(30)
        ]
        state = stash.runs.load_run("flaky")
        assert state is not None
        tries = Counter(a.node_id for a in state.attempts)
        assert tries["inc[7]"] == 2 and tries["inc[0]"] == 2 and tries["inc[1]"] == 1


def test_the_asyncio_twin_awaits_the_executor_without_blocking_its_loop(local_url: Any) -> None:
    url, _ = local_url

    async def main() -> list[Any]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        running = asyncio.create_task(ticker())
        with ProcessPoolExecutor(2) as pool:
            async with stashpoint.open_async(url) as stash:
                run = stash.runs.durable("async-pooled")
                results = await run.map("square", range(40), _square_in_a_process,
                                        executor=pool, max_concurrency=8)  # fmt: skip
        running.cancel()
        assert ticks > 0  # the loop went on while the pool worked
        return [value for value, _ in results]

    assert asyncio.run(main()) == [n * n for n in range(40)]


def test_a_bad_executor_is_refused(local_url: Any) -> None:
    with stashpoint.open(local_url[0]) as stash:
        run = stash.runs.durable("bad-executor")
        with pytest.raises(InvalidArgument):
            run.map("x", [1], str, executor="not an executor")
        pool = ProcessPoolExecutor(1)
        pool.shutdown()
        with pytest.raises(RuntimeError):  # the executor's own refusal, recorded as a failure
            run.map("y", [1], _square_in_a_process, executor=pool)
