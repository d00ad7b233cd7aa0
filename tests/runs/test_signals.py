"""External events: `run.wait_for(name)` suspends a durable run until `stash.runs.signal`
(or a redeemed `run.callback(name)` token) delivers a JSON payload, with timeouts on a fake
clock, on SQLite and on DynamoDB Local + SeaweedFS: a signal sent before the wait is kept,
a signal is idempotent by its id, finished and unknown runs are typed errors, `list_due`
finds a run whose event arrived, and of a signal and a timeout exactly one is the outcome.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import stashpoint
from stashpoint import (
    InvalidArgument,
    RunNotFound,
    RunStatus,
    RunSuspended,
    TerminalStateConflict,
    WaitTimedOut,
)
from stashpoint.runs import transitions
from stashpoint.runs.models import RunHead
from tests.runs.test_durable_waits import FakeClock


def _due(stash: stashpoint.Stash, at: datetime) -> list[str]:
    return [r.run_id for r in stash.runs.list_due(at).items]


def _approval_flow(
    url: str, options: dict[str, Any], run_id: str, clock: FakeClock, calls: list[str], **wait: Any
) -> Any:
    with stashpoint.open(url, **options) as stash:
        run = stash.runs.durable(run_id, clock=clock)
        run.step("draft", lambda: calls.append("draft") or "plan")
        answer = run.wait_for("approval", **wait)
        run.step("act", lambda: calls.append("act") or "done")
        run.complete()
        return answer


def test_wait_then_signal_suspends_makes_due_and_returns_the_payload(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    url, options = indexed
    clock, calls = FakeClock(), []
    run_id = f"sig-{stashpoint.new_id()}"
    with pytest.raises(RunSuspended) as suspended:
        _approval_flow(url, options, run_id, clock, calls)
    assert suspended.value.reason == "event" and suspended.value.until is None
    with pytest.raises(RunSuspended):  # invoked again before the event: still waiting
        _approval_flow(url, options, run_id, clock, calls)
    far = datetime.now(UTC) + timedelta(days=3650)
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run(run_id)
        assert state is not None and state.status is RunStatus.WAITING
        assert state.waiting_for == "approval" and state.wake_at is None
        assert run_id not in _due(stash, far)  # no timeout: never due without the event
        receipt = stash.runs.signal(run_id, "approval", {"ok": True, "by": "ana"}, signal_id="s1")
        assert (receipt.duplicate, receipt.woke, receipt.signal_id) == (False, True, "s1")
        assert run_id in _due(stash, far)
        again = stash.runs.signal(run_id, "approval", {"ok": False}, signal_id="s1")
        assert again.duplicate and not again.woke  # the same delivery, the first payload kept
        with pytest.raises(TerminalStateConflict):  # another delivery of a delivered event
            stash.runs.signal(run_id, "approval", {"ok": False}, signal_id="s2")
    assert _approval_flow(url, options, run_id, clock, calls) == {"ok": True, "by": "ana"}
    assert calls == ["draft", "act"]
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run(run_id)
        assert state is not None and state.status is RunStatus.COMPLETED
        assert list(state.signals) == ["approval"] and state.signals["approval"].signal_id == "s1"
        assert run_id not in _due(stash, far)
        with pytest.raises(TerminalStateConflict):  # a finished run takes no signal
            stash.runs.signal(run_id, "later", 1)
        with pytest.raises(RunNotFound):
            stash.runs.signal(f"nope-{stashpoint.new_id()}", "approval", 1)
        with pytest.raises(InvalidArgument):
            stash.runs.signal(run_id, "", 1)


def test_a_signal_sent_before_the_wait_is_kept_for_it(indexed: tuple[str, dict[str, Any]]) -> None:
    url, options = indexed
    clock, calls = FakeClock(), []
    run_id = f"early-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        stash.runs.create_run("durable", run_id=run_id)
        receipt = stash.runs.signal(run_id, "approval", [1, 2, 3])
        assert not receipt.woke and not receipt.duplicate
    assert _approval_flow(url, options, run_id, clock, calls) == [1, 2, 3]
    assert calls == ["draft", "act"]


def test_an_event_arriving_after_the_read_is_taken_not_waited_for(local_url: Any) -> None:
    url, options = local_url
    run_id = f"race-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash, stashpoint.open(url, **options) as other:
        run = stash.runs.durable(run_id)
        # The step runs after the handle read the run: the signal lands in between.
        run.step("ask", lambda: other.runs.signal(run_id, "answer", "yes").woke)
        assert run.wait_for("answer") == "yes"  # found by the append's check, not suspended
        run.complete()
        state = stash.runs.load_run(run_id)
        assert state is not None and state.status is RunStatus.COMPLETED


def test_a_timeout_resumes_the_run_with_wait_timed_out_on_every_replay(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    url, options = indexed
    clock, calls = FakeClock(), []
    run_id = f"late-{stashpoint.new_id()}"

    def flow() -> str:
        with stashpoint.open(url, **options) as stash:
            run = stash.runs.durable(run_id, clock=clock)
            try:
                run.wait_for("approval", timeout=timedelta(minutes=10))
            except WaitTimedOut as timed_out:
                calls.append(f"timed out {timed_out.name}")
                run.complete()
                return "gave up"
            run.complete()
            return "approved"

    with pytest.raises(RunSuspended) as suspended:
        flow()
    until = suspended.value.until
    assert until == clock.now + timedelta(minutes=10)
    with stashpoint.open(url, **options) as stash:
        assert run_id not in _due(stash, until - timedelta(seconds=1))
        assert run_id in _due(stash, until)
    clock.skip(minutes=5)
    with pytest.raises(RunSuspended) as again:
        flow()
    assert again.value.until == until  # the timeout counts from the first call
    clock.skip(minutes=6)
    assert flow() == "gave up"
    assert calls == ["timed out approval"]
    with stashpoint.open(url, **options) as stash:
        with pytest.raises(TerminalStateConflict):
            stash.runs.signal(run_id, "approval", True)  # the run finished
        state = stash.runs.load_run(run_id)
        assert state is not None and state.signals == {}


def test_replays_keep_the_timeout_outcome_when_a_signal_comes_later(local_url: Any) -> None:
    url, options = local_url
    clock = FakeClock()
    run_id = f"kept-{stashpoint.new_id()}"

    def flow() -> None:
        with stashpoint.open(url, **options) as stash:
            stash.runs.durable(run_id, clock=clock).wait_for("approval", timeout=1)

    with pytest.raises(RunSuspended):
        flow()
    clock.skip(seconds=2)
    with pytest.raises(WaitTimedOut) as first:
        flow()
    with stashpoint.open(url, **options) as stash:
        receipt = stash.runs.signal(run_id, "approval", True)  # kept, but too late
        assert not receipt.woke
    with pytest.raises(WaitTimedOut) as replayed:
        flow()
    assert replayed.value.timeout_at == first.value.timeout_at


def test_of_a_signal_and_a_timeout_the_first_the_log_takes_is_the_outcome() -> None:
    now = datetime.now(UTC)
    head = RunHead(run_id="r", graph_name="g", created_at=now, updated_at=now)
    waiting = transitions.await_signal(
        head, name="e", attempt_id="r~1", attempt=1, timeout_at=now, now=now
    ).head
    assert waiting.status is RunStatus.WAITING and waiting.waiting_for == "e"
    signalled = transitions.deliver_signal(
        waiting, name="e", signal_id="s", payload=1, now=now
    ).head
    assert signalled.wake_at == now  # due at once
    late = transitions.time_out_wait(
        signalled, name="e", attempt_id="r~2", attempt=2, error="x", now=now
    )
    assert late.unchanged  # the signal came first: no timeout is recorded
    timed_out = transitions.time_out_wait(
        waiting, name="e", attempt_id="r~2", attempt=2, error="x", now=now
    )
    assert not timed_out.unchanged and timed_out.head.status is RunStatus.RUNNING
    after = transitions.deliver_signal(timed_out.head, name="e", signal_id="s", payload=1, now=now)
    assert after.head.wake_at is None  # kept, wakes nothing: the wait is over
    assert transitions.await_signal(
        signalled, name="e", attempt_id="r~3", attempt=3, timeout_at=None, now=now
    ).unchanged  # an event already there is taken, not waited for


def test_callback_tokens_deliver_without_the_run_id(indexed: tuple[str, dict[str, Any]]) -> None:
    url, options = indexed
    clock = FakeClock()
    run_id = f"cb-{stashpoint.new_id()}"
    tokens: list[str] = []

    def flow() -> Any:
        with stashpoint.open(url, **options) as stash:
            run = stash.runs.durable(run_id, clock=clock)
            token = run.callback("approval")
            tokens.append(token)
            answer = run.wait_for("approval")
            run.complete()
            return answer

    with pytest.raises(RunSuspended):
        flow()
    with pytest.raises(RunSuspended):
        flow()
    assert tokens[0] == tokens[1] and run_id not in tokens[0]  # replayed, opaque
    with stashpoint.open(url, **options) as stash:
        with pytest.raises(InvalidArgument):
            stash.runs.redeem(tokens[0][:-2] + "AA", True)  # altered
        with pytest.raises(InvalidArgument):
            stash.runs.redeem("not a token", True)
        receipt = stash.runs.redeem(tokens[0], {"approved": True})
        assert receipt.woke and receipt.run_id == run_id and receipt.name == "approval"
        assert stash.runs.redeem(tokens[0], {"approved": False}).duplicate  # a retried webhook
    assert flow() == {"approved": True}


def test_concurrent_deliveries_of_one_event_record_one_signal(s3_dynamo_url: Any) -> None:
    url, options = s3_dynamo_url
    run_id = f"many-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        stash.runs.create_run("durable", run_id=run_id)
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def send(worker: int) -> None:
        with stashpoint.open(url, **options) as stash:
            barrier.wait(timeout=30)
            # Half retry one delivery id, half send deliveries of their own.
            signal_id = "same" if worker % 2 == 0 else f"own-{worker}"
            try:
                receipt = stash.runs.signal(run_id, "go", worker, signal_id=signal_id)
            except TerminalStateConflict:
                outcomes.append("refused")
            else:
                outcomes.append("duplicate" if receipt.duplicate else f"new:{signal_id}")

    threads = [threading.Thread(target=send, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(outcomes) == 8
    new = [o for o in outcomes if o.startswith("new:")]
    assert len(new) == 1
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run(run_id)
        assert state is not None and list(state.signals) == ["go"]
        winner = state.signals["go"].signal_id
    assert new == [f"new:{winner}"]
    # Every other sender of the winning id saw a duplicate; every other id was refused.
    same_senders = 4 if winner == "same" else 1
    assert outcomes.count("duplicate") == same_senders - 1
    assert outcomes.count("refused") == 8 - same_senders


def test_the_async_twin_waits_and_resumes(local_url: Any) -> None:
    url, options = local_url
    run_id = f"async-{stashpoint.new_id()}"

    async def flow() -> Any:
        async with stashpoint.open_async(url, **options) as stash:
            run = stash.runs.durable(run_id)
            answer = await run.wait_for("approval")
            await run.complete()
            return answer

    with pytest.raises(RunSuspended):
        asyncio.run(flow())
    with stashpoint.open(url, **options) as stash:
        assert stash.runs.signal(run_id, "approval", "ok").woke
    assert asyncio.run(flow()) == "ok"
