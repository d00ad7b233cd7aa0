"""The index is derived: `load_run` and `reindex` make it equal to what storage says.

Items left stale by a writer without the index, items with a wrong status at the right
revision, items claiming a revision from the future, and items storage does not know are
all repaired, on SQLite and on DynamoDB Local.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import stashpoint
from stashpoint import AttemptStatus, RunStatus
from stashpoint.index.requests import PutItems, ReplaceItems
from stashpoint.runs import indexing
from tests.index_items import attempt_ids


@pytest.fixture(params=["local_url", "s3_dynamo_url"], ids=["sqlite", "dynamodb"])
def indexed(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    url, options = request.getfixturevalue(request.param)
    return url, options


def without_index(url: str) -> str:
    if "index=" in url:
        return re.sub(r"index=[^&]*", "index=none", url)
    return url + ("&" if "?" in url else "?") + "index=none"


def running_ids(stash: stashpoint.Stash, namespace: str = "default") -> set[str]:
    page = stash.runs.list_attempts(AttemptStatus.RUNNING, namespace=namespace, limit=100)
    return {row.attempt_id for row in page.items}


def test_load_run_repairs_attempt_items_left_stale_by_an_unindexed_writer(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    url, options = indexed
    namespace = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        run_id = stash.runs.create_run("g", namespace=namespace)
        first = stash.runs.record_attempt(run_id, "a", 1)
        with stashpoint.open(without_index(url), **options) as blind:
            blind.runs.complete_attempt(first, {"ok": True})
        second = stash.runs.record_attempt(run_id, "b", 1)
        assert running_ids(stash, namespace) == {first, second}  # the stale item
        stash.runs.load_run(run_id)
        assert running_ids(stash, namespace) == {second}
        assert attempt_ids(stash, [run_id], "completed") == [first]


def _corrupt(stash: stashpoint.Stash, item: dict[str, Any], **changes: Any) -> None:
    stored = int(item["revision"])
    stash.driver(ReplaceItems(((dict(item, **changes), stored),)))


def _items(stash: stashpoint.Stash, run_id: str) -> dict[str, dict[str, Any]]:
    from stashpoint.index.requests import GetPartition

    found = stash.driver(GetPartition(indexing.run_pk(run_id)))
    return {str(item["sk"]): item for item in found}


def test_reindex_rewrites_wrong_status_future_revision_and_orphans(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    url, options = indexed
    namespace = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        run_id = stash.runs.create_run("g", namespace=namespace)
        attempt = stash.runs.record_attempt(run_id, "a", 1)
        stash.runs.complete_attempt(attempt, 1)
        stash.runs.complete_run(run_id)
        items = _items(stash, run_id)
        run_item = items[indexing.RUN_SORT]
        attempt_item = items[indexing.attempt_sk(attempt)]
        # Right revision, wrong status; a revision from the future; an item storage lacks.
        shard = indexing.shard_of(run_id)
        failed_partition = indexing.status_partition(namespace, RunStatus.FAILED, shard)
        _corrupt(stash, run_item, status="failed", rspk=failed_partition)
        running = indexing.attempt_status_partition(namespace, AttemptStatus.RUNNING, shard)
        _corrupt(
            stash, attempt_item, revision=10**9, status="running", aspk=running,
            assk=f"{attempt_item['started_at']}#{attempt}",
        )  # fmt: skip
        orphan = dict(attempt_item, sk=indexing.attempt_sk(f"{run_id}~ghost"))
        stash.driver(PutItems((orphan,)))
        failed = stash.runs.list_runs(namespace=namespace, status=RunStatus.FAILED)
        assert [row.run_id for row in failed.items] == [run_id]
        assert running_ids(stash, namespace) == {attempt}

        assert stash.runs.reindex(resume=False).indexed >= 1
        after = _items(stash, run_id)
        assert after[indexing.RUN_SORT]["status"] == "completed"
        assert after[indexing.attempt_sk(attempt)]["status"] == "completed"
        assert int(after[indexing.attempt_sk(attempt)]["revision"]) < 10**9
        assert set(after) == {indexing.RUN_SORT, indexing.attempt_sk(attempt)}
        assert stash.runs.list_runs(namespace=namespace, status=RunStatus.FAILED).items == []
        assert running_ids(stash, namespace) == set()


def test_a_repair_never_deletes_the_item_of_an_attempt_recorded_meanwhile(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    """Issue 23 #11: a repair read storage, then deleted as "unknown to storage" the item
    of an attempt recorded after that read; the worker dying then was never listed as
    stuck. The repair now deletes only items no newer than what it read."""
    from stashpoint.index.requests import GetPartition

    url, options = indexed
    namespace = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash, stashpoint.open(url, **options) as other:
        run_id = stash.runs.create_run("g", namespace=namespace)
        recorded: list[str] = []

        def hook(request: Any, proceed: Any) -> Any:
            # The repair has read storage and now reads the index: a concurrent worker
            # records an attempt (storage, then its item) just before that index read.
            if isinstance(request, GetPartition) and not recorded:
                recorded.append(other.runs.record_attempt(run_id, "late", 1, lease=60))
            return proceed()

        with stash.intercept(hook):
            stash.runs.load_run(run_id)  # reads storage, then repairs the index
        assert recorded
        assert running_ids(stash, namespace) == {recorded[0]}
        assert indexing.attempt_sk(recorded[0]) in _items(stash, run_id)


@pytest.mark.parametrize(
    "change",
    [{"revision": "7"}, {"revision": None}, {"attempts": "many"}, {"status": "exploded"}],
    ids=["string-revision", "no-revision", "string-count", "unknown-status"],
)
def test_one_wrongly_typed_item_never_breaks_a_run_and_is_repaired(
    indexed: tuple[str, dict[str, Any]], change: dict[str, Any]
) -> None:
    """Issue 23 #14: `list_runs` raised ValueError/KeyError on one malformed item, and a
    string revision escaped `load_run` (and durable open, and reindex) for good."""
    url, options = indexed
    namespace = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        healthy = stash.runs.create_run("g", namespace=namespace)
        run_id = stash.runs.create_run("g", namespace=namespace)
        item = _items(stash, run_id)[indexing.RUN_SORT]
        try:
            stash.driver(ReplaceItems(((dict(item, **change), int(item["revision"])),)))
        except stashpoint.StashpointError:
            pytest.skip("this index refuses such an item outright (SQLite: NOT NULL)")
        listed = stash.runs.list_runs(namespace=namespace)
        assert healthy in {row.run_id for row in listed.items}  # the listing still works
        assert stash.runs.load_run(run_id) is not None  # and repairs the item
        assert {row.run_id for row in stash.runs.list_runs(namespace=namespace).items} == {
            healthy,
            run_id,
        }
        assert _items(stash, run_id)[indexing.RUN_SORT]["revision"] == int(item["revision"])
        stash.runs.durable(run_id).step("s", lambda: 1)


def test_reindex_goes_past_an_unreadable_run_and_reports_it(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    """Issue 23 #15: reindex stopped at the first unreadable run, and a resumed reindex
    stopped there again; healthy runs after it stayed missing from listings."""
    from stashpoint.stores.objects import PutObject

    url, options = indexed
    namespace = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        broken = stash.runs.create_run("g", run_id=f"a-{stashpoint.new_id()}", namespace=namespace)
        later = [
            stash.runs.create_run("g", run_id=f"z-{n}-{stashpoint.new_id()}", namespace=namespace)
            for n in range(3)
        ]
        key = stash.log_steps("run-logs").keys.entry(broken, 0)
        stash.driver(PutObject(key, b"\x28\xb5\x2f\xfd broken", None))
        # Drop the healthy runs' items, as if the index were new.
        from stashpoint.index.requests import DeleteItem

        for run_id in later:
            for item in _items(stash, run_id).values():
                stash.driver(DeleteItem(str(item["pk"]), str(item["sk"])))
        report = stash.runs.reindex(resume=False)
        assert report.unreadable == [f"{broken}: invalid_payload"]
        assert report.indexed >= 3
        listed = {row.run_id for row in stash.runs.list_runs(namespace=namespace, limit=100).items}
        assert set(later) <= listed
