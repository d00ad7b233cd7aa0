"""The sharded index (layout 2) on SQLite and DynamoDB Local: listings merged from every
shard page newest first with no duplicate and no gap, cursors stay put while runs are
created, a transition writes at most two items (a heartbeat one), and older layouts are
upgraded (SQLite on open, DynamoDB by `stashpoint reindex`)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import AttemptStatus, RunStatus
from stashpoint.errors import UnsupportedFormat
from stashpoint.index.requests import PutItems
from stashpoint.index.schema import SHARDS
from stashpoint.runs import indexing
from tests import servers
from tests.index_items import LEGACY_KEY_ATTRIBUTES, legacy_item, run_items


@pytest.fixture(params=["local_url", "s3_dynamo_url"], ids=["sqlite", "dynamodb"])
def indexed(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    url, options = request.getfixturevalue(request.param)
    return url, options


def _all_pages(
    list_page: Callable[[str | None], Any], cursor: str | None = None
) -> tuple[list[str], int]:
    seen: list[str] = []
    pages = 0
    while True:
        page = list_page(cursor)
        seen += [row.run_id for row in page.items]
        pages += 1
        cursor = page.cursor
        if cursor is None:
            return seen, pages


def test_every_listing_pages_newest_first_across_shards(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    url, options = indexed
    ns = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        runs = stash.runs
        made = []
        for n in range(40):
            run_id = runs.create_run("etl" if n % 3 else "train", namespace=ns)
            if n % 4 == 1:
                runs.complete_run(run_id)
            elif n % 4 == 2:
                runs.fail_run(run_id, "boom")
            made.append(run_id)
        states = {i: runs.load_run(i, resolve_blobs=False) for i in made}
        assert len({indexing.shard_of(i) for i in made}) >= SHARDS // 2  # spread out

        def expected(keep: Callable[[Any], bool]) -> list[str]:
            chosen = [s for s in states.values() if s is not None and keep(s)]
            return [s.run_id for s in sorted(chosen, key=lambda s: (s.created_at, s.run_id))][::-1]

        cases: list[tuple[dict[str, Any], Callable[[Any], bool]]] = [
            ({}, lambda s: True),
            ({"status": RunStatus.RUNNING}, lambda s: s.status is RunStatus.RUNNING),
            ({"graph_name": "etl"}, lambda s: s.graph_name == "etl"),
            (
                {"graph_name": "etl", "status": RunStatus.FAILED},
                lambda s: s.graph_name == "etl" and s.status is RunStatus.FAILED,
            ),
        ]
        for filters, keep in cases:
            want = expected(keep)
            seen, pages = _all_pages(
                lambda c, f=filters: runs.list_runs(namespace=ns, limit=7, cursor=c, **f)  # type: ignore[misc]
            )
            assert seen == want, filters  # newest first, no duplicate, no gap
            assert pages in (-(-len(want) // 7), -(-len(want) // 7) + 1), filters


def test_a_cursor_stays_put_while_runs_are_created_and_change_status(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    url, options = indexed
    ns = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        runs = stash.runs
        older = [runs.create_run("g", namespace=ns) for _ in range(12)]
        first = runs.list_runs(namespace=ns, limit=5)
        newer = [runs.create_run("g", namespace=ns) for _ in range(4)]
        runs.complete_run(older[0])  # changes status, stays in the namespace listing
        assert first.cursor is not None
        rest, _ = _all_pages(
            lambda c: runs.list_runs(namespace=ns, limit=5, cursor=c), first.cursor
        )
        assert [r.run_id for r in first.items] + rest == older[::-1]
        assert not set(newer) & set(rest)
        # A running listing drops a run that left "running" since the index answered.
        running, _ = _all_pages(
            lambda c: runs.list_runs(namespace=ns, status=RunStatus.RUNNING, limit=50, cursor=c)
        )
        assert older[0] not in running and set(running) == set(older[1:] + newer)


def test_a_cursor_of_another_listing_and_completed_attempts_are_refused(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = memory_url
    with stashpoint.open(url, **options) as stash:
        for _ in range(3):
            stash.runs.create_run("g")
        page = stash.runs.list_runs(limit=1)
        assert page.cursor is not None
        with pytest.raises(stashpoint.InvalidArgument, match="another listing"):
            stash.runs.list_runs(graph_name="g", limit=1, cursor=page.cursor)
        with pytest.raises(stashpoint.InvalidArgument, match="not indexed"):
            stash.runs.list_attempts(AttemptStatus.COMPLETED)


def test_a_transition_writes_at_most_two_items_and_a_heartbeat_one(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    url, options = indexed
    with stashpoint.open(url, **options) as stash:
        written: list[int] = []

        def counting(request: Any, proceed: Any) -> Any:
            if isinstance(request, PutItems):
                written.append(len(request.items))
            return proceed()

        stash.intercept(counting)
        run_id = stash.runs.create_run("g")
        attempt = stash.runs.record_attempt(run_id, "n", 1, lease=60)
        stash.runs.heartbeat(attempt)
        stash.runs.complete_attempt(attempt, {"ok": True})
        stash.runs.complete_run(run_id)
        assert written == [1, 2, 1, 2, 1]
        items = run_items(stash, run_id)
        attempt_item = items[indexing.attempt_sk(attempt)]
        assert attempt_item.get("aspk") is None  # completed: in no GSI
        assert stash.runs.list_attempts(abandoned=True).items == []


def _made(stash: stashpoint.Stash, ns: str) -> tuple[list[str], str, list[dict[str, Any]]]:
    runs = [stash.runs.create_run("g", namespace=ns) for _ in range(5)]
    stash.runs.complete_run(runs[0])
    running = stash.runs.record_attempt(runs[1], "n", 1)
    items = [item for run_id in runs for item in run_items(stash, run_id).values()]
    return runs, running, items


def test_a_sqlite_file_of_an_earlier_layout_is_refused_and_rebuilt_by_reindex(
    tmp_path: Path,
) -> None:
    url = f"local://{tmp_path / 'stash'}"
    ns = "old"
    with stashpoint.open(url) as stash:
        runs, running, items = _made(stash, ns)
    database = tmp_path / "stash" / "index.sqlite3"
    database.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    db = sqlite3.connect(database)
    old_keys = ", ".join(f"{k} TEXT" for k in LEGACY_KEY_ATTRIBUTES)
    db.execute(
        f"CREATE TABLE items (pk TEXT NOT NULL, sk TEXT NOT NULL, {old_keys}, "
        "revision INTEGER NOT NULL, expires_at INTEGER, item TEXT NOT NULL, "
        "PRIMARY KEY (pk, sk)) WITHOUT ROWID"
    )
    for name, (pk, sk) in {"by_graph": ("gpk", "gsk"), "by_status": ("spk", "ssk")}.items():
        db.execute(f"CREATE INDEX {name} ON items ({pk}, {sk})")
    for item in map(legacy_item, items):
        values = [item["pk"], item["sk"], *(item.get(k) for k in LEGACY_KEY_ATTRIBUTES)]
        db.execute(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [*values, item["revision"], None, json.dumps(item)],
        )
    db.commit()
    db.close()
    with stashpoint.open(url) as stash:
        # Format v1 has layout 2 only: an earlier file is named, with what to do.
        with pytest.raises(UnsupportedFormat, match="reindex") as refused:
            stash.runs.list_runs(namespace=ns)
        assert refused.value.object_name == str(database)
    with sqlite3.connect(database) as db:  # untouched: not even switched to WAL
        assert db.execute("SELECT COUNT(*) FROM items").fetchone()[0] == len(items)
        assert db.execute("PRAGMA journal_mode").fetchone()[0] != "wal"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    with stashpoint.open(url) as stash:
        assert stash.runs.reindex().indexed == len(runs)
        assert [r.run_id for r in stash.runs.list_runs(namespace=ns).items] == runs[::-1]
        done = stash.runs.list_runs(namespace=ns, status=RunStatus.COMPLETED).items
        assert [r.run_id for r in done] == [runs[0]]
        listed = stash.runs.list_attempts(namespace=ns).items
        assert [a.attempt_id for a in listed] == [running]
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2


def test_reindex_moves_a_dynamodb_table_from_layout_1(
    s3_dynamo_url: tuple[str, dict[str, Any]], dynamodb_local: servers.DynamoDBServer
) -> None:
    from stashpoint._backends.dynamodb import to_attributes

    url, options = s3_dynamo_url
    table = url.split("index=dynamodb://")[1]
    ns = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        runs, running, items = _made(stash, ns)
    client: Any = dynamodb_local.client()
    for item in map(legacy_item, items):  # the table as layout 1 left it
        client.put_item(TableName=table, Item=to_attributes(item))
    with stashpoint.open(url, **options) as stash:
        assert stash.runs.list_runs(namespace=ns).items == []  # old keys: in no new GSI
        assert stash.runs.reindex().indexed >= len(runs)
        assert [r.run_id for r in stash.runs.list_runs(namespace=ns).items] == runs[::-1]
        assert [a.attempt_id for a in stash.runs.list_attempts(namespace=ns).items] == [running]
        left = Counter(k for r in runs for i in run_items(stash, r).values() for k in i)
        assert not set(LEGACY_KEY_ATTRIBUTES) & set(left)  # layout 1's keys are gone
