"""Runs under stress on real parts: concurrent workers, a dropped index, a killed process,
and listing four hundred runs from the index alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import AttemptStatus, RunStatus
from stashpoint.index.schema import SHARDS
from tests import servers
from tests.index_items import attempt_ids

BACKENDS = ["local_url", "s3_dynamo_url"]


@pytest.fixture(params=BACKENDS, ids=lambda n: n.removesuffix("_url"))
def target(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.getfixturevalue(request.param)


def _drop_index(url: str, options: dict[str, Any]) -> None:
    """Delete the index entirely: the SQLite file, or the DynamoDB table (then recreate it)."""
    if url.startswith("local://"):
        root = Path(url.removeprefix("local://").split("?")[0])
        for suffix in ("", "-wal", "-shm"):
            path = root / f"index.sqlite3{suffix}"
            if path.exists():
                path.unlink()
        return
    from stashpoint._backends.dynamodb import create_table

    table = url.split("index=dynamodb://")[1].split("&")[0]
    client = servers.DynamoDBServer(options["index_endpoint_url"]).client()
    client.delete_table(TableName=table)  # type: ignore[attr-defined]
    create_table(client, table)


def _snapshot(stash: stashpoint.Stash, ns: str) -> tuple[list[Any], dict[str, list[str]]]:
    runs = stash.runs
    listed = [
        (r.run_id, r.status, r.revision, r.attempts, r.failed_attempts, r.running_attempts)
        for r in runs.list_runs(namespace=ns, limit=1000).items
    ]
    by_status = {
        s.value: sorted(a.attempt_id for a in runs.list_attempts(s, namespace=ns, limit=1000).items)
        for s in AttemptStatus
        if s is not AttemptStatus.COMPLETED  # in no GSI: read from each run's items
    }
    by_status["completed"] = attempt_ids(stash, [row[0] for row in listed], "completed")
    return listed, by_status


def test_sixteen_workers_complete_sixteen_attempts_of_one_run(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    ns = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        run_id = stash.runs.create_run("fanout", namespace=ns)
        attempts = [stash.runs.record_attempt(run_id, f"node-{i}", 1, {"i": i}) for i in range(16)]
        before = stash.runs.list_runs(namespace=ns).items[0].revision
    barrier = threading.Barrier(16)

    def complete(i: int) -> None:
        with stashpoint.open(url, **options) as worker:  # one process-like client each
            barrier.wait()
            worker.runs.complete_attempt(attempts[i], {"result": i * i}, {"worker": i})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(complete, range(16)))
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run(run_id)
        assert state is not None
        assert [a.status for a in state.attempts] == [AttemptStatus.COMPLETED] * 16
        assert [a.output for a in state.attempts] == [{"result": i * i} for i in range(16)]
        row = stash.runs.list_runs(namespace=ns).items[0]
        assert row.revision == before + 16, "one revision per completion, none lost"
        assert attempt_ids(stash, [run_id], "completed") == sorted(attempts)
        assert stash.runs.list_attempts(namespace=ns).items == []


def test_dropped_index_is_rebuilt_by_reindex(target: tuple[str, dict[str, Any]]) -> None:
    url, options = target
    ns = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        for n in range(6):
            run_id = stash.runs.create_run(f"g{n % 2}", namespace=ns)
            a = stash.runs.record_attempt(run_id, "x", 1, None)
            if n % 3 == 0:
                stash.runs.fail_attempt(a, "boom")
                stash.runs.fail_run(run_id, "boom")
            elif n % 3 == 1:
                stash.runs.complete_attempt(a, n)
                stash.runs.complete_run(run_id)
        before = _snapshot(stash, ns)
    assert len(before[0]) == 6
    _drop_index(url, options)
    with stashpoint.open(url, **options) as stash:
        assert stash.runs.list_runs(namespace=ns).items == []
        assert stash.runs.reindex().indexed == 6
        assert _snapshot(stash, ns) == before
        assert stash.runs.reindex().indexed == 6  # idempotent
        assert _snapshot(stash, ns) == before


KILLED_BETWEEN_WRITES = textwrap.dedent(
    """
    import os, signal, sys, json, stashpoint
    from stashpoint.index.requests import PutItems
    url, options, attempt_id = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    stash = stashpoint.open(url, **options)
    def die_on_index_write(request, proceed):
        if isinstance(request, PutItems):
            os.kill(os.getpid(), signal.SIGKILL)  # after the storage write, before the index
        return proceed()
    stash.intercept(die_on_index_write)
    stash.runs.complete_attempt(attempt_id, {"done": True})
    """
)


@pytest.mark.parametrize("repair", ["load_run", "reindex"])
def test_kill_between_storage_and_index_write_is_repaired(
    target: tuple[str, dict[str, Any]], repair: str
) -> None:
    import json

    url, options = target
    ns = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        run_id = stash.runs.create_run("g", namespace=ns)
        attempt_id = stash.runs.record_attempt(run_id, "n", 1, None)
    victim = subprocess.run(
        [sys.executable, "-c", KILLED_BETWEEN_WRITES, url, json.dumps(options), attempt_id],
        env=dict(os.environ), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert victim.returncode == -9, victim.stderr
    with stashpoint.open(url, **options) as stash:
        # Storage has the completion; the index is behind (never ahead).
        assert [a.attempt_id for a in stash.runs.list_attempts(namespace=ns).items] == [attempt_id]
        if repair == "load_run":
            state = stash.runs.load_run(run_id)
            assert state is not None and state.attempts[0].status is AttemptStatus.COMPLETED
        else:
            stash.runs.reindex()
        assert stash.runs.list_attempts(namespace=ns).items == []
        assert attempt_ids(stash, [run_id], "completed") == [attempt_id]


def test_four_hundred_runs_page_from_the_index_alone(
    s3_dynamo_url: tuple[str, dict[str, Any]],
) -> None:
    import boto3

    url, options = s3_dynamo_url
    ns = f"ns-{stashpoint.new_id()}"
    calls: Counter[str] = Counter()

    def count(service: str) -> Any:
        def on_call(model: Any, **_: Any) -> None:
            calls[f"{service}:{model.name}"] += 1

        return on_call

    session = boto3.session.Session()  # both clients are made from it (`session=`)
    session.events.register("before-call.s3", count("s3"))
    session.events.register("before-call.dynamodb", count("ddb"))
    with stashpoint.open(url, session=session, **options) as stash:
        with ThreadPoolExecutor(8) as pool:
            created = list(
                pool.map(lambda _: stash.runs.create_run("big", namespace=ns), range(400))
            )
        expected = [r.run_id for r in sorted(
            (stash.runs.load_run(i, resolve_blobs=False) for i in created),  # type: ignore[misc]
            key=lambda s: (s.created_at, s.run_id), reverse=True)]  # fmt: skip
        assert calls["s3:PutObject"] >= 400 and calls["ddb:PutItem"] >= 400
        calls.clear()
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = stash.runs.list_runs(namespace=ns, limit=20, cursor=cursor)
            seen += [r.run_id for r in page.items]
            pages += 1
            cursor = page.cursor
            if cursor is None:
                break
        assert len(seen) == 400 and len(set(seen)) == 400  # no duplicates, no gaps
        assert seen == expected  # newest first
        assert all(k.startswith("ddb:") for k in calls), calls  # no S3 request at all
        # 20 pages (+1 empty page DynamoDB may need), each one round: a query per shard at
        # once, then one batch read of the page's items.
        assert pages in (20, 21)
        assert calls["ddb:Query"] <= pages * SHARDS
        assert calls["ddb:BatchGetItem"] == 20
        assert all(r.status is RunStatus.RUNNING for r in stash.runs.list_runs(namespace=ns).items)
