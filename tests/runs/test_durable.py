"""Durable steps: replay returns stored results, a reordered replay is refused, at-most-once
steps cut off mid-function are reported, a second worker fences the first, and the
50-item batch example survives `kill -9` on SeaweedFS + DynamoDB Local."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import Fenced, NondeterministicReplay, RunClaimed, StepInterrupted
from stashpoint.clock import FakeClock
from stashpoint.runs.durable import Semantics

EXAMPLES = Path(__file__).parents[2] / "examples"


class Crash(BaseException):
    """The process died inside the step's function."""


_LATER = datetime.now(UTC) + timedelta(days=1)
"""A moment past any lease a test's crashed worker left."""


def test_a_replay_returns_stored_results_without_running_the_steps(local_url: Any) -> None:
    url, _ = local_url
    calls: Counter[str] = Counter()

    def work(name: str, value: int) -> dict[str, int]:
        calls[name] += 1
        return {name: value * 10}

    with stashpoint.open(url) as stash:
        run = stash.runs.durable("r1")
        assert run.step("a", work, "a", 1) == {"a": 10}
        assert run.step("b", work, "b", 2) == {"b": 20}
    with stashpoint.open(url) as stash:  # the next process: replays, then goes on
        run = stash.runs.durable("r1")
        assert run.step("a", work, "a", 1) == {"a": 10}
        assert run.step("b", work, "b", 2) == {"b": 20}
        assert run.step("c", work, "c", 3) == {"c": 30}
        run.complete()
        assert calls == {"a": 1, "b": 1, "c": 1}
        state = stash.runs.load_run("r1")
    assert state is not None and state.status is stashpoint.RunStatus.COMPLETED
    assert [(a.node_id, a.status.value) for a in state.attempts] == [
        ("a", "completed"), ("b", "completed"), ("c", "completed"),
    ]  # fmt: skip
    assert state.attempts[0].input == {"key": "r1:a"}  # the idempotency key, recorded


def test_a_reordered_replay_is_refused_naming_both_steps(local_url: Any) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("r2")
        run.step("fetch", lambda: 1)
        run.step("store", lambda: 2)
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("r2")
        with pytest.raises(NondeterministicReplay) as caught:
            run.step("store", lambda: 2)
    assert (caught.value.position, caught.value.recorded, caught.value.asked) == (
        0, "fetch", "store",
    )  # fmt: skip
    assert caught.value.kind is stashpoint.ErrorKind.NONDETERMINISTIC


def test_a_step_cut_off_mid_function_runs_again_or_is_reported(local_url: Any) -> None:
    url, _ = local_url
    calls: Counter[str] = Counter()

    def dies(name: str) -> None:
        calls[name] += 1
        raise Crash(name)

    with stashpoint.open(url) as stash:
        run = stash.runs.durable("r3")
        with pytest.raises(Crash):
            run.step("charge-card", dies, "charge-card", semantics=Semantics.AT_MOST_ONCE)
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("r3")
        with pytest.raises(StepInterrupted, match="charge-card"):
            run.step("charge-card", dies, "charge-card", semantics=Semantics.AT_MOST_ONCE)
    assert calls == {"charge-card": 1}  # never run a second time
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("r4")
        with pytest.raises(Crash):
            run.step("send", dies, "send")
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("r4")
        assert run.step("send", lambda: "sent") == "sent"  # at least once: again
        state = stash.runs.load_run("r4")
    assert state is not None
    # An at-least-once step without a lease is recorded once it ran (one append): the try
    # cut off mid-function left nothing, and the try that ran is the first recorded.
    assert [(a.attempt, a.status.value) for a in state.attempts] == [(1, "completed")]
    with stashpoint.open(url) as stash:  # under a lease it is recorded first, then ended
        run = stash.runs.durable("r5", lease=60.0)
        with pytest.raises(Crash):
            run.step("send", dies, "send")
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("r5", lease=60.0, clock=lambda: _LATER)
        assert run.step("send", lambda: "sent") == "sent"
        state = stash.runs.load_run("r5")
    assert state is not None
    assert [(a.attempt, a.status.value) for a in state.attempts] == [
        (1, "failed"),
        (2, "completed"),
    ]
    assert "taken over" in (state.attempts[0].error or "")


def test_an_error_in_a_step_is_recorded_and_raised(local_url: Any) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("r5")
        with pytest.raises(ZeroDivisionError):
            run.step("divide", lambda: 1 / 0)
        assert run.step("divide", lambda: 0.5) == 0.5  # a retry, same step
        assert run.step("next", lambda: "n") == "n"
        with pytest.raises(stashpoint.InvalidArgument):
            run.step("odd", lambda: 0, semantics="exactly_once")
        state = stash.runs.load_run("r5")
    with stashpoint.open(url) as stash:  # a replay sees two steps, in that order
        replay = stash.runs.durable("r5")
        assert replay.step("divide", lambda: 9) == 0.5
        assert replay.step("next", lambda: "x") == "n"
    assert state is not None
    assert [(a.node_id, a.attempt, a.status.value) for a in state.attempts] == [
        ("divide", 1, "failed"), ("divide", 2, "completed"), ("next", 1, "completed"),
    ]  # fmt: skip
    assert "ZeroDivisionError" in (state.attempts[0].error or "")


def test_a_second_worker_fences_the_first(s3_dynamo_url: Any) -> None:
    url, options = s3_dynamo_url
    with stashpoint.open(url, **options) as first, stashpoint.open(url, **options) as second:
        zombie = first.runs.durable("r6")
        zombie.step("one", lambda: 1)
        taker = second.runs.durable("r6")
        assert taker.step("one", lambda: 99) == 1  # replayed, and the run taken over
        with pytest.raises(Fenced):
            zombie.step("two", lambda: 2)
        assert taker.step("two", lambda: 22) == 22
        taker.complete()
        state = second.runs.load_run("r6")
    assert state is not None
    assert [(a.node_id, a.output) for a in state.attempts] == [("one", 1), ("two", 22)]


def test_the_async_twin_awaits_coroutine_steps(memory_url: Any) -> None:
    url, _ = memory_url

    async def main() -> list[int]:
        async with stashpoint.open_async(url) as stash:
            run = stash.runs.durable("r7")

            async def double(x: int) -> int:
                await asyncio.sleep(0)
                return 2 * x

            values = [await run.step(f"s{i}", double, i) for i in range(3)]
            again = stash.runs.durable("r7")
            values.append(await again.step("s0", double, 100))  # replayed: not 200
            return values

    assert asyncio.run(main()) == [0, 2, 4, 0]


def test_the_batch_example_survives_kill_9_and_runs_each_item_once_per_claim(
    s3_dynamo_url: Any, tmp_path: Path
) -> None:
    url, options = s3_dynamo_url
    url += f"&index_endpoint_url={options['index_endpoint_url']}"
    trace = tmp_path / "trace"
    command = [sys.executable, str(EXAMPLES / "durable_batch.py"), "--url", url, "--id", "batch",
               "--trace", str(trace)]  # fmt: skip
    for kills in range(2):
        worker = subprocess.Popen([*command, "--delay", "0.05"], stdout=subprocess.PIPE)
        while not trace.exists() or len(trace.read_text().split()) < 12 * (kills + 1):
            assert worker.poll() is None
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(timeout=30) == -signal.SIGKILL
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == f"sum {sum(i * i for i in range(50))}"
    runs = Counter(int(line) for line in trace.read_text().split())
    assert set(runs) == set(range(50))
    assert max(runs.values()) <= 2  # at most the item in flight at each kill ran again
    assert sum(runs.values()) <= 50 + 2
    again = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    assert again.stdout == done.stdout  # a completed run: replayed from its results only
    assert Counter(int(line) for line in trace.read_text().split()) == runs


def test_the_agent_example_waits_and_refuses_a_turn_cut_off_until_it_is_resolved(
    s3_dynamo_url: Any, tmp_path: Path
) -> None:
    url, options = s3_dynamo_url
    url += f"&index_endpoint_url={options['index_endpoint_url']}"
    trace = tmp_path / "trace"
    command = [sys.executable, str(EXAMPLES / "durable_agent.py"), "--url", url, "--local",
               "--id", "agent", "--trace", str(trace)]  # fmt: skip
    worker = subprocess.Popen([*command, "--delay", "2"], stdout=subprocess.PIPE, text=True)
    while not trace.exists() or len(trace.read_text().split()) < 2:  # turn 2 in flight
        assert worker.poll() is None
    worker.send_signal(signal.SIGKILL)
    assert worker.wait(timeout=30) == -signal.SIGKILL
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 3, refused.stderr
    assert "turn-2" in refused.stderr and "runs resolve" in refused.stderr
    assert trace.read_text().split() == ["1", "2"]  # the model was not called again
    with stashpoint.open(url) as stash:
        assert stash.runs.durable("agent").resolve("turn-2", retry=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert "suspended (wait)" in done.stdout  # turn 3 asked to wait; the driver slept
    calls = Counter(trace.read_text().split())
    assert calls == {"1": 1, "2": 2, "3": 1, "4": 1, "5": 1}  # turn 2: once cut off, once run
    clean = subprocess.run(
        [*command[:-4], "--id", "agent-clean"], capture_output=True, text=True, timeout=120,
        check=True,
    )  # fmt: skip
    assert clean.stdout.splitlines()[-1] == done.stdout.splitlines()[-1]  # same final reply
    with stashpoint.open(url) as stash:
        state = stash.runs.load_run("agent")
    assert state is not None and state.status is stashpoint.RunStatus.COMPLETED
    turns = [a.node_id for a in state.attempts if a.status.value == "completed"]
    assert [t for t in turns if t.startswith("turn-")] == [f"turn-{n}" for n in range(1, 6)]


class _HeldStep:
    """Worker A, on a thread: runs step `long` of a durable run until `release` is set."""

    def __init__(self, url: str, options: dict[str, Any], run_id: str, lease: float) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.calls: Counter[str] = Counter()

        def worker_a() -> None:
            with stashpoint.open(url, **options) as stash:
                run = stash.runs.durable(run_id, lease=lease)
                run.step("long", self.long_step)
                run.complete()

        self.holder = threading.Thread(target=worker_a)

    def long_step(self) -> str:
        """The step's function (any worker that runs it counts)."""
        self.calls["long"] += 1
        self.started.set()
        assert self.release.wait(60)
        return "worker A's result"

    def __enter__(self) -> _HeldStep:
        self.holder.start()
        assert self.started.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.holder.join(30)


def test_a_step_running_under_a_live_lease_holds_the_run(local_url: Any) -> None:
    url, options = local_url
    with _HeldStep(url, options, "held", lease=60) as held, stashpoint.open(url) as stash:
        with pytest.raises(RunClaimed) as claimed:
            stash.runs.durable("held").step("long", held.long_step)
        assert claimed.value.kind == "claimed" and claimed.value.step == "long"
        threading.Timer(0.5, held.release.set).start()
        waiter = stash.runs.durable("held", claim_wait=True)
        assert waiter.step("long", held.long_step) == "worker A's result"  # waited, replayed
    assert held.calls == {"long": 1}


def test_two_workers_racing_on_the_batch_store_each_item_once(
    s3_dynamo_url: Any, tmp_path: Path
) -> None:
    url, options = s3_dynamo_url
    url += f"&index_endpoint_url={options['index_endpoint_url']}"
    trace = tmp_path / "trace"
    command = [sys.executable, str(EXAMPLES / "durable_batch.py"), "--url", url, "--id", "race",
               "--trace", str(trace)]  # fmt: skip
    # The first is slow (12 s left when the second starts), so it is still running when
    # the second opens the run and takes it over.
    first = subprocess.Popen(
        [*command, "--delay", "0.3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    while not trace.exists() or len(trace.read_text().split()) < 10:
        assert first.poll() is None
    second = subprocess.run(
        [*command, "--delay", "0.01"], capture_output=True, text=True, timeout=300, check=True
    )
    _, first_err = first.communicate(timeout=60)
    assert first.returncode != 0 and "Fenced" in first_err  # taken over: it stopped
    assert second.stdout.strip() == f"sum {sum(i * i for i in range(50))}"
    runs = Counter(int(line) for line in trace.read_text().split())
    assert set(runs) == set(range(50))
    assert sum(runs.values()) <= 50 + 1  # only the item in flight at the takeover ran twice
    with stashpoint.open(url) as stash:
        state = stash.runs.load_run("race")
    assert state is not None and state.status is stashpoint.RunStatus.COMPLETED
    done = Counter(a.node_id for a in state.attempts if a.status.value == "completed")
    assert done == Counter(f"item-{i}" for i in range(50))  # the fenced worker stored nothing


def _lease_expiry(stash: stashpoint.Stash, run_id: str) -> Any:
    (running,) = stash.runs.running_attempts(run_id)
    return running.lease_expires_at


def test_a_step_longer_than_its_lease_keeps_the_run_while_its_worker_lives(
    s3_dynamo_url: Any,
) -> None:
    """The real-clock test of lease renewal (the others run on a fake clock): a busy
    machine may delay a beat, so the lease leaves room for three missed ones."""
    url, options = s3_dynamo_url
    lease = 3.0
    with _HeldStep(url, options, "beats", lease) as held, stashpoint.open(url, **options) as stash:
        stash.runs.clock_skew = timedelta(seconds=1)
        first = _lease_expiry(stash, "beats")
        began = time.monotonic()
        # Two and a half leases: without renewal the lease ran out long ago and this
        # opener would take the run over; renewed, every try finds the step held.
        while time.monotonic() - began < 2.5 * lease:
            with pytest.raises(RunClaimed):
                stash.runs.durable("beats").step("long", held.long_step)
            time.sleep(0.25)
        assert _lease_expiry(stash, "beats") > first + timedelta(seconds=lease)
        held.release.set()
        held.holder.join(30)
        state = stash.runs.load_run("beats")
    assert held.calls == {"long": 1}
    assert state is not None and [(a.node_id, a.output) for a in state.attempts] == [
        ("long", "worker A's result")
    ]


def test_a_step_ten_leases_long_keeps_its_run_on_a_fake_clock(memory_url: Any) -> None:
    """Lease renewal on a fake clock: the step's function advances time half a lease at a
    time, and between every advance another worker finds the run held."""
    url, _ = memory_url
    clock = FakeClock()
    lease = 4.0
    with stashpoint.open(url, clock=clock) as worker, stashpoint.open(url, clock=clock) as other:
        other.runs.clock_skew = timedelta(0)  # one clock: leases judged exactly
        claimed: list[bool] = []

        def long_step() -> str:
            for _ in range(20):  # ten leases of fake time
                clock.advance(lease / 2)
                time.sleep(0.01)  # let the driver beat (it waits on the clock)
                try:
                    other.runs.durable("fake-beats").step("long", long_step)
                except RunClaimed:
                    claimed.append(True)
                else:
                    claimed.append(False)
            return "done"

        run = worker.runs.durable("fake-beats", lease=lease)
        assert run.step("long", long_step) == "done"
        assert claimed == [True] * 20


def test_a_map_batch_longer_than_its_lease_keeps_its_run(memory_url: Any) -> None:
    """Issue 23 #13: `run.map` sent its items without beats, so a healthy worker's long
    batch was taken over (and ran twice). A batch now renews every item's lease in one
    append, three times a lease."""
    url, _ = memory_url
    clock = FakeClock()
    lease = 3.0
    with stashpoint.open(url, clock=clock) as worker, stashpoint.open(url, clock=clock) as other:
        other.runs.clock_skew = timedelta(0)
        ran: Counter[int] = Counter()
        lock = threading.Lock()
        seen_held: list[bool] = []

        def item(n: int) -> int:
            with lock:
                ran[n] += 1
            if n == 0:  # one item drives the clock; the others wait for it
                for _ in range(12):
                    clock.advance(lease / 3)
                    time.sleep(0.01)
                    abandoned = other.runs.list_attempts(abandoned=True, limit=10).items
                    seen_held.append(not abandoned)
            return n * n

        run = worker.runs.durable("long-map", lease=lease)
        assert run.map("items", range(4), item) == [0, 1, 4, 9]
        assert seen_held == [True] * 12  # never listed as abandoned while it ran
        assert ran == Counter(range(4))


def test_a_step_whose_heartbeat_is_fenced_does_not_report_success(memory_url: Any) -> None:
    """Issue 24: a heartbeat that found the worker fenced was ignored, so the step ran to
    its end and stored its result. Now the step's function can see it was stopped, and
    its result is never stored: the step raises `Fenced`."""
    from stashpoint.steps import stopped

    url, _ = memory_url
    clock = FakeClock()
    lease = 3.0
    with stashpoint.open(url, clock=clock) as worker, stashpoint.open(url, clock=clock) as other:
        noticed: list[bool] = []

        def long_step() -> str:
            clock.advance(lease / 2)
            time.sleep(0.01)
            other.runs.takeover("fenced-beat")  # another worker takes the run over
            for _ in range(50):
                clock.advance(lease / 3)
                time.sleep(0.01)
                if stopped():
                    noticed.append(True)
                    break
            return "result nobody may store"

        run = worker.runs.durable("fenced-beat", lease=lease)
        with pytest.raises(Fenced):
            run.step("long", long_step)
        assert noticed == [True]
        state = other.runs.load_run("fenced-beat")
        assert state is not None
        assert all(a.output != "result nobody may store" for a in state.attempts)


def test_the_async_twin_renews_the_lease_of_a_coroutine_step(memory_url: Any) -> None:
    url, _ = memory_url
    lease = 2.0

    async def main() -> list[str]:
        clock = FakeClock()
        release = asyncio.Event()
        started = asyncio.Event()

        async def long_step() -> str:
            started.set()
            await release.wait()
            return "done"

        async with (
            stashpoint.open_async(url, clock=clock) as worker,
            stashpoint.open_async(url, clock=clock) as other,
        ):
            other.runs.clock_skew = timedelta(0)
            run = worker.runs.durable("beats", lease=lease)
            stepping = asyncio.ensure_future(run.step("long", long_step))
            await started.wait()
            (held,) = await other.runs.running_attempts("beats")
            for _ in range(15):  # two and a half leases of fake time
                await clock.async_sleep(lease / 6)
                await asyncio.sleep(0.01)  # the driver beats as the clock passes
            with pytest.raises(RunClaimed):
                await other.runs.durable("beats").step("long", long_step)
            (renewed,) = await other.runs.running_attempts("beats")
            assert renewed.lease_expires_at > held.lease_expires_at + timedelta(seconds=lease)
            release.set()
            return [await stepping]

    assert asyncio.run(main()) == ["done"]


def test_two_handles_of_one_run_on_one_stash_fence_each_other(memory_url: Any) -> None:
    """Issue 23 #12: fencing was per run store, so two durable handles of one run on one
    stash (one process, two tasks) both ran and completed steps."""
    url, options = memory_url
    with stashpoint.open(url, **options) as stash:
        first = stash.runs.durable("shared")
        assert first.step("one", lambda: 1) == 1
        second = stash.runs.durable("shared")  # takes the run over
        assert second.step("one", lambda: 1) == 1  # replayed
        with pytest.raises(Fenced):
            first.step("two", lambda: 2)
        assert second.step("two", lambda: 2) == 2
        state = stash.runs.load_run("shared")
        assert [a.node_id for a in state.attempts if a.status.value == "completed"] == [
            "one",
            "two",
        ]
