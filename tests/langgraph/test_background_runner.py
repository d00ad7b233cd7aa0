"""The saver's background runner (`stashpoint.background`): work after the calls, never lost
to a poke that comes while it runs, never waited for forever."""

from __future__ import annotations

import asyncio
import threading

import pytest

from stashpoint.background import TaskBackground, ThreadBackground


class _Died(BaseException):
    """What ends a thread without an Exception (a test's simulated crash)."""


def test_a_poke_while_the_work_runs_runs_it_again() -> None:
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def work() -> None:
        runs.append(1)
        if len(runs) == 1:
            started.set()
            assert release.wait(30)

    background = ThreadBackground(work)
    background.poke()
    assert started.wait(30)
    background.poke()  # while the first run is under way
    release.set()
    assert background.flush(timeout=30)
    assert len(runs) == 2


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_ended_by_a_crash_is_not_waited_for_and_the_next_poke_starts_one() -> None:
    runs: list[int] = []

    def work() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise _Died

    background = ThreadBackground(work)
    background.poke()
    assert background.flush(timeout=30)  # returns: the dead thread is not waited for again
    background.poke()
    assert background.flush(timeout=30)
    assert len(runs) == 2


# The thread the test above crashed may finish dying during this one (pytest reports its
# exception where it lands); this test's own failure is caught and logged, never raised.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failure_of_the_work_is_logged_by_type_and_later_work_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs: list[int] = []

    def work() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("secret payload")

    background = ThreadBackground(work)
    background.poke()
    assert background.flush(timeout=30)
    background.poke()
    assert background.flush(timeout=30)
    assert len(runs) == 2
    assert "RuntimeError" in caplog.text and "secret payload" not in caplog.text


def test_without_a_thread_the_work_waits_for_flush() -> None:
    runs: list[str] = []
    background = ThreadBackground(lambda: runs.append(threading.current_thread().name),
                                  threaded=False)  # fmt: skip
    background.poke()
    assert runs == []
    assert background.flush()
    assert runs == [threading.current_thread().name]
    assert background.flush() and len(runs) == 1  # nothing asked since


def test_the_task_runner_runs_after_the_call_and_at_flush_when_not_tasked() -> None:
    async def main() -> tuple[list[int], list[int]]:
        tasked: list[int] = []
        untasked: list[int] = []

        async def work_tasked() -> None:
            tasked.append(1)

        async def work_untasked() -> None:
            untasked.append(1)

        one, two = TaskBackground(work_tasked), TaskBackground(work_untasked, tasked=False)
        one.poke()
        two.poke()
        await asyncio.sleep(0)
        assert untasked == []
        await one.flush()
        await two.flush()
        return tasked, untasked

    assert asyncio.run(main()) == ([1], [1])
