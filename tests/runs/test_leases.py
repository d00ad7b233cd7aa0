"""Reclaimed workers on SeaweedFS + DynamoDB Local: a worker killed with `kill -9` mid-attempt
is listed abandoned once its lease runs out and another takes the run over; a worker frozen
(SIGSTOP) past its lease is taken over, then resumed (SIGCONT), and is fenced on its next
write, which stores nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from typing import Any

import stashpoint
from stashpoint import AttemptStatus

WORKER = textwrap.dedent(
    """
    import json, sys
    import stashpoint
    url, options, run_id, who = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    with stashpoint.open(url, **options) as stash:
        runs = stash.runs
        for line in sys.stdin:
            command, _, argument = line.strip().partition(" ")
            try:
                if command == "create":
                    runs.create_run("spot", run_id=run_id)
                    print("epoch 0", flush=True)
                elif command == "takeover":
                    print("epoch", runs.takeover(run_id), flush=True)
                elif command == "record":
                    attempt = runs.record_attempt(run_id, argument, 1, lease=1.0,
                                                  worker={"who": who})
                    print("recorded", attempt, flush=True)
                elif command == "complete":
                    runs.complete_attempt(argument, {"by": who})
                    print("completed", flush=True)
            except stashpoint.Fenced as exc:
                print("fenced", exc.epoch, exc.current_epoch, flush=True)
    """
)


class _Worker:
    """A worker process driven line by line."""

    def __init__(self, url: str, options: dict[str, Any], run_id: str, who: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, url, json.dumps(options), run_id, who],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ),
        )  # fmt: skip

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def ask(self, command: str) -> list[str]:
        self.send(command)
        assert self.process.stdout is not None
        return self.process.stdout.readline().split()


def _until_abandoned(stash: stashpoint.Stash, attempt_id: str, timeout: float = 30) -> float:
    """Poll the index until the attempt is listed abandoned; return how long it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        listed = stash.runs.list_attempts(abandoned=True).items
        if attempt_id in [row.attempt_id for row in listed]:
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"{attempt_id} was never listed abandoned")


def test_killed_then_frozen_workers_are_taken_over_and_the_zombie_is_fenced(
    s3_dynamo_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = s3_dynamo_url
    run_id = f"run-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        stash.runs.clock_skew = timedelta(0)  # one machine: no skew between the clocks
        # 1. Worker A creates the run, finishes item-0, starts item-1, and is killed -9.
        a = _Worker(url, options, run_id, "a")
        assert a.ask("create") == ["epoch", "0"]
        _, item0 = a.ask("record item-0")
        assert a.ask(f"complete {item0}") == ["completed"]
        _, killed = a.ask("record item-1")
        a.process.send_signal(signal.SIGKILL)
        assert a.process.wait(timeout=30) == -signal.SIGKILL
        assert stash.runs.list_attempts().items[0].attempt_id == killed  # still "running"
        waited = _until_abandoned(stash, killed)
        assert waited < 10
        # 2. Worker B takes the run over: item-1 ends as failed, B runs it again.
        b = _Worker(url, options, run_id, "b")
        assert b.ask("takeover") == ["epoch", "1"]
        assert stash.runs.list_attempts(abandoned=True).items == []
        _, retried = b.ask("record item-1")
        assert b.ask(f"complete {retried}") == ["completed"]
        # 3. B starts item-2 and freezes (SIGSTOP) past its lease: C takes over.
        _, frozen = b.ask("record item-2")
        b.process.send_signal(signal.SIGSTOP)
        _until_abandoned(stash, frozen)
        c = _Worker(url, options, run_id, "c")
        assert c.ask("takeover") == ["epoch", "2"]
        _, again = c.ask("record item-2")
        assert c.ask(f"complete {again}") == ["completed"]
        before = stash.runs.load_run(run_id)
        # 4. B wakes up and tries to finish its stale attempt, then to start another.
        b.process.send_signal(signal.SIGCONT)
        assert b.ask(f"complete {frozen}") == ["fenced", "1", "2"]
        assert b.ask("record item-3") == ["fenced", "1", "2"]
        after = stash.runs.load_run(run_id)
        assert after == before  # nothing of the zombie is stored
        for worker in (b, c):
            assert worker.process.stdin is not None
            worker.process.stdin.close()
            assert worker.process.wait(timeout=30) == 0
    assert after is not None
    outcome = [(a.node_id, a.status, a.output, a.worker.get("who")) for a in after.attempts]
    assert outcome == [
        ("item-0", AttemptStatus.COMPLETED, {"by": "a"}, "a"),
        ("item-1", AttemptStatus.FAILED, None, "a"),
        ("item-1", AttemptStatus.COMPLETED, {"by": "b"}, "b"),
        ("item-2", AttemptStatus.FAILED, None, "b"),
        ("item-2", AttemptStatus.COMPLETED, {"by": "c"}, "c"),
    ]
    assert [a.epoch for a in after.attempts] == [0, 0, 1, 1, 2]
