"""Durable waits, retries with durable backoff, and deadlines, with a fake clock: a run
waiting an hour completes, `list_due` finds it when due and not before (SQLite and
DynamoDB Local), a retry delay survives a new process, and a step that would not fit the
time left is not started."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import stashpoint
from stashpoint import Deadline, Retry, RunStatus, RunSuspended, StepFailed


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def skip(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def _due(stash: stashpoint.Stash, at: datetime, ns: str = "default") -> list[str]:
    return [r.run_id for r in stash.runs.list_due(at, namespace=ns).items]


def test_a_run_waiting_an_hour_completes_and_is_due_at_the_right_time(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    url, options = indexed
    clock = FakeClock()
    run_id = f"wait-{stashpoint.new_id()}"
    calls: list[str] = []

    def handler() -> str:
        with stashpoint.open(url, **options) as stash:
            run = stash.runs.durable(run_id, clock=clock)
            first = run.step("before", lambda: calls.append("before") or 1)
            run.wait("an-hour", seconds=3600)
            second = run.step("after", lambda: calls.append("after") or 2)
            run.complete()
            return f"{first}+{second}"

    with pytest.raises(RunSuspended) as suspended:
        handler()
    wake = suspended.value.until
    assert suspended.value.reason == "wait" and wake == clock.now + timedelta(hours=1)
    with stashpoint.open(url, **options) as stash:
        row = stash.runs.list_runs(status=RunStatus.WAITING).items
        assert [(r.run_id, r.wake_at) for r in row if r.run_id == run_id] == [(run_id, wake)]
        assert run_id not in _due(stash, wake - timedelta(seconds=1))
        assert run_id in _due(stash, wake)
    clock.skip(minutes=30)
    with pytest.raises(RunSuspended) as again:  # woken early: waits for the same moment
        handler()
    assert again.value.until == wake
    clock.skip(minutes=30)
    assert handler() == "1+2"
    assert calls == ["before", "after"]  # each step ran once
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run(run_id)
        assert state is not None and state.status is RunStatus.COMPLETED
        assert state.wake_at is None
        assert run_id not in _due(stash, wake + timedelta(days=1))


def test_due_runs_page_latest_wake_first_without_reading_later_ones(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    url, options = indexed
    ns = f"ns-{stashpoint.new_id()}"
    start = datetime.now(UTC)
    with stashpoint.open(url, **options) as stash:
        wakes = {}
        for n in range(9):
            run_id = stash.runs.create_run("g", namespace=ns)
            wakes[run_id] = start + timedelta(minutes=n)
            stash.runs.suspend_run(run_id, until=wakes[run_id])
        at = start + timedelta(minutes=5)
        seen: list[str] = []
        cursor = None
        while True:
            page = stash.runs.list_due(at, namespace=ns, limit=2, cursor=cursor)
            seen += [r.run_id for r in page.items]
            cursor = page.cursor
            if cursor is None:
                break
        due = sorted((w, r) for r, w in wakes.items() if w <= at)
        assert seen == [r for _, r in reversed(due)]  # latest wake first, each once
        stash.runs.resume_run(seen[0])
        assert seen[0] not in _due(stash, at, ns)
        with pytest.raises(stashpoint.TerminalStateConflict):
            stash.runs.resume_run(seen[0])  # not waiting any more


def test_a_retry_delay_is_durable_and_a_long_one_suspends(local_url: Any) -> None:
    url, _ = local_url
    clock = FakeClock()
    failures = iter([True, True, False])
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        if next(failures):
            raise ConnectionError("the API is down")
        return "ok"

    policy = Retry(attempts=3, delay=120, backoff=2, sleep_up_to=10)
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("retried", clock=clock)
        with pytest.raises(RunSuspended) as first:
            run.step("call", flaky, retry=policy)
        assert first.value.reason == "retry" and calls == 1
    failed_at = first.value.until - timedelta(seconds=120)  # type: ignore[operator]
    clock.skip(seconds=100)
    with stashpoint.open(url) as stash:  # a new process: the delay is still 20 s away
        with pytest.raises(RunSuspended) as early:
            stash.runs.durable("retried", clock=clock).step("call", flaky, retry=policy)
        # Counted from the failure as recorded (the store's clock: the same moment here).
        assert early.value.until is not None and first.value.until is not None
        assert abs(early.value.until - first.value.until) < timedelta(seconds=1)
        assert calls == 1
    clock.skip(seconds=20)
    with stashpoint.open(url) as stash:  # due: try 2 fails, try 3 is 240 s later
        with pytest.raises(RunSuspended) as second:
            stash.runs.durable("retried", clock=clock).step("call", flaky, retry=policy)
        assert calls == 2
        assert second.value.until is not None and second.value.until > failed_at
    clock.skip(seconds=240)
    with stashpoint.open(url) as stash:
        assert stash.runs.durable("retried", clock=clock).step("call", flaky, retry=policy) == "ok"
        state = stash.runs.load_run("retried")
    assert calls == 3 and state is not None
    assert [a.status.value for a in state.attempts] == ["failed", "failed", "completed"]


def test_short_retry_delays_are_slept_and_exhausted_retries_are_step_failed(
    memory_url: Any,
) -> None:
    url, _ = memory_url
    calls = 0

    def broken() -> None:
        nonlocal calls
        calls += 1
        raise ValueError(f"bad input {calls}")

    with stashpoint.open(url) as stash:
        run = stash.runs.durable("exhausted")
        with pytest.raises(ValueError, match="bad input 3"):
            run.step("parse", broken, retry=Retry(attempts=3, delay=0.01))
        assert calls == 3
        with pytest.raises(StepFailed) as replayed:  # a replay does not try a fourth time
            stash.runs.durable("exhausted").step("parse", broken, retry=Retry(attempts=3))
    assert replayed.value.kind == "step_failed" and calls == 3
    with pytest.raises(stashpoint.InvalidArgument):
        Retry(attempts=0)


def test_a_step_that_would_not_fit_the_time_left_is_not_started(local_url: Any) -> None:
    url, _ = local_url
    seconds = iter([0.0, 0.2, 0.2, 0.6])  # monotonic readings around each step
    left = [10.0]
    deadline = Deadline(lambda: left[0], clock=lambda: next(seconds), margin=0.5)
    ran: list[int] = []

    def work(n: int) -> int:
        ran.append(n)
        return n

    with stashpoint.open(url) as stash:
        run = stash.runs.durable("lambda", deadline=deadline)
        assert run.step("s1", work, 1) == 1
        left[0] = 1.0  # a step needs about 0.2 s x 2 headroom + 0.5 margin = 0.9 s
        assert run.step("s2", work, 2) == 2
        left[0] = 0.8
        with pytest.raises(RunSuspended) as stopped:
            run.step("s3", work, 3)
    assert stopped.value.reason == "deadline" and stopped.value.until is None
    assert ran == [1, 2]
    with stashpoint.open(url) as stash:  # the next invocation goes on where it stopped
        run = stash.runs.durable("lambda")
        assert [run.step(f"s{n}", work, n) for n in (1, 2, 3)] == [1, 2, 3]
    assert ran == [1, 2, 3]


def test_the_async_twin_waits_too(memory_url: Any) -> None:
    url, _ = memory_url
    clock = FakeClock()

    async def main() -> str:
        async with stashpoint.open_async(url) as stash:
            run = stash.runs.durable("async-wait", clock=clock)
            await run.wait("a-minute", seconds=60)
            await run.complete()
            return "done"

    with pytest.raises(RunSuspended):
        asyncio.run(main())
    clock.skip(seconds=60)
    assert asyncio.run(main()) == "done"


def test_bad_wait_arguments_are_invalid(memory_url: Any) -> None:
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("bad-wait")
        for kwargs in ({}, {"seconds": -1}, {"until": datetime(2030, 1, 1)}, {"seconds": 1,
                       "until": datetime.now(UTC)}):  # fmt: skip
            with pytest.raises(stashpoint.InvalidArgument):
                run.wait("w", **kwargs)
        with pytest.raises(stashpoint.InvalidArgument):
            stash.runs.suspend_run("bad-wait", until=datetime(2030, 1, 1))  # type: ignore[arg-type]


def test_a_swallowed_suspension_stops_the_handle_loudly(memory_url: Any) -> None:
    """Issue 24 #9: `except StashpointError` around a wait swallowed `RunSuspended`, and the
    handler ran the next steps and completed a run that was to wait an hour."""
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("swallowed")
        with contextlib.suppress(stashpoint.StashpointError):  # the mistake: a broad handler
            run.wait("an-hour", seconds=3600)
        ran: list[int] = []
        with pytest.raises(RunSuspended):
            run.step("next", lambda: ran.append(1))
        with pytest.raises(RunSuspended):
            run.complete()
        assert ran == []
        state = stash.runs.load_run("swallowed")
        assert state is not None and state.status is RunStatus.WAITING
        # The next invocation (a new handle) is the way on, and it waits too.
        with pytest.raises(RunSuspended):
            stash.runs.durable("swallowed").wait("an-hour", seconds=3600)
