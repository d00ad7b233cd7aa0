"""The fleet map contract: the same on every backend and driver (`stash.runs.fleet`)."""

from __future__ import annotations

from typing import Any

import pytest

from stashpoint import (
    ConfigurationError,
    InvalidArgument,
    InvalidId,
    RunNotFound,
    RunStatus,
)
from stashpoint.runs.fleet import AsyncFleetMap
from tests.contract.conftest import MECHANISMS_ONLY, backend_fixture
from tests.contract.drivers import as_coroutine

backend = backend_fixture(MECHANISMS_ONLY)  # not moto: see `backend_fixture`


def _fn(stash: Any, function: Any) -> Any:
    """`function` as the driver's users pass it: plain (sync), a coroutine one (async)."""
    handle = stash.runs.fleet("x")  # no request: a handle
    asyncio_api = isinstance(getattr(handle, "_target", None), AsyncFleetMap)
    return as_coroutine(function) if asyncio_api else function


def _all_results(fleet: Any, batches: int) -> list[Any]:
    return fleet.results_page(0, max(1, batches))


def _double_or_fail(item: int) -> int:
    if item % 97 == 13:
        raise ValueError(f"item {item} is unlucky")
    return item * 2


def test_a_map_records_every_items_result_once_in_item_order(stash: Any) -> None:
    fleet = stash.runs.fleet("photos")
    plan = fleet.start(range(250), batch_size=40, tolerated_failure_count=10)
    assert (plan.items, plan.batches, plan.batch_size) == (250, 7, 40)
    report = fleet.work(_fn(stash, _double_or_fail))
    assert report.status == "completed" and report.batches == 7
    assert (report.ok, report.failed) == (247, 3) and report.conflicts == 0
    results = _all_results(fleet, plan.batches)
    assert [r.index for r in results] == list(range(250))
    assert [r.item for r in results] == list(range(250))
    assert all(r.done for r in results)
    failed = [r.index for r in results if not r.ok]
    assert failed == [13, 110, 207]
    assert results[110].error == "ValueError: item 110 is unlucky" and results[110].value is None
    assert all(r.value == r.item * 2 for r in results if r.ok)
    progress = fleet.progress()
    assert (progress.status, progress.ok, progress.failed, progress.done_batches) == (
        "completed", 247, 3, 7,
    )  # fmt: skip
    assert progress.left == 0 and progress.leased_batches == 0 and progress.left_batches == 0
    assert stash.runs.summarize_run("photos").status is RunStatus.COMPLETED
    assert stash.runs.load_run("photos").graph_name == "fleet"
    again = fleet.work(_fn(stash, _double_or_fail))  # an ended map has nothing left
    assert again.batches == 0 and again.status == "completed"


def test_starting_again_with_the_same_items_is_the_same_map_and_other_items_are_refused(
    stash: Any,
) -> None:
    fleet = stash.runs.fleet("nightly")
    first = fleet.start(["a", "b", "c"], batch_size=2)
    assert stash.runs.fleet("nightly").start(["a", "b", "c"], batch_size=2) == first
    with pytest.raises(ConfigurationError):
        stash.runs.fleet("nightly").start(["a", "b", "d"], batch_size=2)
    with pytest.raises(ConfigurationError):
        stash.runs.fleet("nightly").start(["a", "b", "c"], batch_size=3)
    stash.runs.create_run("etl", run_id="plain-run")
    with pytest.raises(ConfigurationError):
        stash.runs.fleet("plain-run").start([1])  # a run that is no fleet map


def test_failures_beyond_the_tolerance_fail_the_map_once_with_counts(stash: Any) -> None:
    fleet = stash.runs.fleet("strict")
    fleet.start(range(100), batch_size=10, tolerated_failure_count=2)

    def fail_some(item: int) -> int:
        if item % 10 < 3:  # three failures in every batch
            raise RuntimeError("nope")
        return item

    report = fleet.work(_fn(stash, fail_some))
    assert report.status == "failed"
    assert report.batches == 1  # the first batch's three failures are more than two
    progress = fleet.progress()
    assert progress.status == "failed" and progress.failed == 3
    assert progress.reason == "3 of 100 items failed, more than tolerated (2 items)"
    summary = stash.runs.summarize_run("strict")
    assert summary.status is RunStatus.FAILED
    assert stash.runs.load_run("strict").error == progress.reason
    results = _all_results(fleet, 10)
    assert sum(r.done for r in results) == 10 and sum(not r.ok and r.done for r in results) == 3


def test_failures_within_a_percentage_complete_the_map(stash: Any) -> None:
    fleet = stash.runs.fleet("lenient")
    fleet.start(range(60), batch_size=20, tolerated_failure_count=None,
                tolerated_failure_percentage=10)  # fmt: skip
    report = fleet.work(_fn(stash, lambda i: 1 / (i % 20)))  # 3 of 60 fail: 5%
    assert report.status == "completed" and report.failed == 3
    assert fleet.progress().status == "completed"


def test_an_empty_map_ends_at_once_and_a_map_never_started_is_reported(stash: Any) -> None:
    fleet = stash.runs.fleet("empty")
    before = fleet.progress()
    assert before.status == "not_started" and before.items == 0
    with pytest.raises(RunNotFound):
        fleet.results_page(0, 1)
    with pytest.raises(RunNotFound):
        fleet.work(_fn(stash, str), wait_for_plan=0.1)
    plan = fleet.start([])
    assert plan.batches == 0 and fleet.progress().status == "completed"
    assert fleet.work(_fn(stash, str)).status == "completed"
    assert stash.runs.summarize_run("empty").status is RunStatus.COMPLETED


def test_a_result_that_is_not_json_fails_its_item_not_the_batch(stash: Any) -> None:
    fleet = stash.runs.fleet("odd-results")
    fleet.start([1, 2, 3], tolerated_failure_count=5)
    fleet.work(_fn(stash, lambda i: {i} if i == 2 else i))  # a set is not JSON
    results = _all_results(fleet, 1)
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error is not None and results[1].error.startswith("InvalidPayload")


def test_large_items_and_results_are_kept_whole(stash: Any) -> None:
    big = "x" * 100_000
    items = [{"n": n, "pad": big} for n in range(4)]  # 400 KB of items: chunks go to blobs
    fleet = stash.runs.fleet("large")
    plan = fleet.start(items, batch_size=3)
    assert all(isinstance(c, dict) for c in plan.chunks)  # references, not the items
    fleet.work(_fn(stash, lambda item: {"echo": item["pad"] * 2, "n": item["n"]}))
    results = _all_results(fleet, plan.batches)
    assert [r.value["n"] for r in results] == [0, 1, 2, 3]
    assert all(r.value["echo"] == big * 2 and r.item["pad"] == big for r in results)


def test_maps_whose_ids_share_a_start_stay_apart(stash: Any) -> None:
    one, two = stash.runs.fleet("m"), stash.runs.fleet("m:1")
    one.start(range(5), batch_size=2)
    two.start(range(3), batch_size=1)
    assert two.work(_fn(stash, lambda i: -i)).batches == 3
    assert one.progress().status == "running" and one.progress().done_batches == 0
    assert one.work(_fn(stash, lambda i: i)).batches == 3
    assert [r.value for r in _all_results(two, 3)] == [0, -1, -2]
    assert [r.value for r in _all_results(one, 3)] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 0},
        {"batch_size": 1001},
        {"batch_size": 2.5},
        {"lease": 0},
        {"lease": "60"},
        {"max_claims": 0},
        {"tolerated_failure_count": -1},
        {"tolerated_failure_percentage": 101},
        {"tolerated_failure_percentage": True},
    ],
)
def test_bad_rules_raise_invalid_argument_and_plan_nothing(
    stash: Any, kwargs: dict[str, Any]
) -> None:
    fleet = stash.runs.fleet("bad-rules")
    with pytest.raises(InvalidArgument):
        fleet.start([1, 2], **kwargs)
    assert fleet.progress().status == "not_started"


def test_bad_items_and_work_arguments_raise_typed_errors(stash: Any) -> None:
    fleet = stash.runs.fleet("bad-items")
    for items in ("abc", 5, {"a": 1}, [object()], [{"k": float("nan")}], ["x" * 300_000]):
        with pytest.raises(InvalidArgument):
            fleet.start(items)
    with pytest.raises(InvalidId):
        stash.runs.fleet("bad/id")
    fleet.start([1])
    with pytest.raises(InvalidArgument):
        fleet.work("not callable")
    with pytest.raises(InvalidArgument):
        fleet.work(str, max_concurrency=0)
    with pytest.raises(InvalidArgument):
        fleet.results_page(-1, 1)
    assert fleet.progress().status == "running"
