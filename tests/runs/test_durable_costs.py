"""What a durable step and opening a durable run cost, in requests, on every backend; and
what a write between the opening read and the takeover does to the replay."""

from __future__ import annotations

from typing import Any

import pytest

import stashpoint
from stashpoint import Semantics
from stashpoint.stores.objects import PutObject
from tests.meter import Meter

INDEXED = ["memory_url", "local_url", "s3_dynamo_url"]


@pytest.fixture(params=INDEXED, ids=lambda n: n.removesuffix("_url"))
def target(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.getfixturevalue(request.param)


def test_an_at_least_once_step_without_a_lease_is_one_append(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    with stashpoint.open(url, **options) as stash:
        run = stash.runs.durable(f"cost-{stashpoint.new_id()}")
        run.step("open", lambda: 0)
        meter = Meter(stash)
        for n in range(8):
            assert run.step(f"s{n}", lambda n=n: n * n) == n * n
        # One entry PUT and one index request (the run's item and the attempt's) per step.
        assert dict(meter.requests) == {"PutObject": 8, "PutItems": 8}, meter.requests
        assert meter.index_items == 16
        meter.reset()
        run.step("leased", lambda: 1, semantics=Semantics.AT_MOST_ONCE)
        assert meter.requests["PutObject"] == 2  # recorded before it runs, ended after
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run(run.run_id)
        assert state is not None
        assert [(a.node_id, a.status.value, a.output) for a in state.attempts[1:9]] == [
            (f"s{n}", "completed", n * n) for n in range(8)
        ]
        assert all(a.started_at <= a.finished_at for a in state.attempts if a.finished_at)  # type: ignore[operator]


def test_an_at_least_once_step_that_raises_is_recorded_failed_in_one_append(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    with stashpoint.open(url, **options) as stash:
        run = stash.runs.durable(f"fails-{stashpoint.new_id()}")
        run.step("open", lambda: 0)
        meter = Meter(stash)

        def boom() -> None:
            raise ValueError("no")

        with pytest.raises(ValueError):
            run.step("boom", boom)
        assert meter.requests["PutObject"] == 1
        state = stash.runs.load_run(run.run_id)
        assert state is not None
        assert (state.attempts[-1].status.value, state.attempts[-1].error) == (
            "failed", "ValueError: no"
        )  # fmt: skip


def test_opening_a_run_in_a_new_worker_reads_its_log_once(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    run_id = f"open-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        run = stash.runs.durable(run_id)
        for n in range(3):
            run.step(f"s{n}", lambda n=n: n)
    with stashpoint.open(url, **options) as stash:
        meter = Meter(stash)
        run = stash.runs.durable(run_id)
        assert [run.step(f"s{n}", lambda: "ran again") for n in range(3)] == [0, 1, 2]
        # The entries and segments listed once, each of the 4 versions read once, then the
        # takeover's append and its index write: 8 requests.
        assert meter.requests["GetObject"] == 4, meter.requests
        assert meter.requests["ListKeys"] <= 2, meter.requests
        assert meter.requests["PutObject"] == 1 and meter.requests["PutItems"] == 1
        assert sum(meter.requests.values()) <= 8
    with stashpoint.open(url, **options) as stash:
        meter = Meter(stash)
        stash.runs.durable(f"new-{stashpoint.new_id()}").step("first", lambda: 1)
        # A new run: the empty listing, its creation, its one step.
        assert meter.requests["PutObject"] == 2 and meter.requests["GetObject"] == 0


def test_a_step_ended_between_the_opening_read_and_the_takeover_is_replayed(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """The takeover finds the run moved since the read: the run is read again, so a step
    the old worker completed meanwhile is replayed, not run a second time."""
    url, options = memory_url
    with stashpoint.open(url, **options) as stash:
        old = stash.runs.durable("raced")
        old.step("a", lambda: 1)
        attempt = stash.runs.record_attempt("raced", "b", 1)  # b runs in the old worker
        fresh = stash.runs.durable("raced")
        done = []

        def hook(request: Any, proceed: Any) -> Any:
            if isinstance(request, PutObject) and not done and "run-logs" in request.key:
                done.append(True)  # just before the takeover's append: the old worker ends b
                stash.runs.complete_attempt(attempt, "b done")
            return proceed()

        with stash.intercept(hook):
            assert fresh.step("a", lambda: "again") == 1
        assert done and fresh.step("b", lambda: "again") == "b done"
        assert fresh.step("c", lambda: 3) == 3
