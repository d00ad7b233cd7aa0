"""Run transitions on logs under stress: a fault proxy on the wire (SeaweedFS + DynamoDB
Local), a crash at every request of a transition (local), and `kill -9` of racing workers
(SeaweedFS + DynamoDB Local). Every acknowledged transition is stored once, nothing twice,
and the index agrees with storage once a read has repaired it."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.config import Config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stashpoint
from stashpoint import AttemptStatus, StashpointError
from tests import servers
from tests.crashes import Crash, crash_at
from tests.faultproxy import FaultPlan, FaultProxy


def _now() -> datetime:
    return datetime.now(UTC)


class _Ledger:
    """What workers were told: attempts acknowledged as recorded or completed, and ones of
    unknown outcome (an error, a crash), by node label."""

    def __init__(self) -> None:
        self.recorded: set[str] = set()
        self.completed: set[str] = set()
        self.unknown: set[str] = set()
        self.lock = threading.Lock()

    def check(self, stash: stashpoint.Stash, run_id: str, namespace: str = "default") -> None:
        state = stash.runs.load_run(run_id)  # also repairs the index
        assert state is not None
        labels = Counter(a.node_id for a in state.attempts)
        assert all(labels[n] == 1 for n in self.recorded), "an acknowledged attempt lost or twice"
        assert all(labels[n] <= 1 for n in self.unknown), "an attempt stored twice"
        assert set(labels) <= self.recorded | self.unknown, "an attempt nobody recorded"
        status = {a.node_id: a.status for a in state.attempts}
        assert all(status[n] is AttemptStatus.COMPLETED for n in self.completed), "lost completion"
        running = {a.attempt_id for a in state.attempts if a.status is AttemptStatus.RUNNING}
        listed = stash.runs.list_attempts(namespace=namespace, limit=1000).items
        assert {row.attempt_id for row in listed if row.run_id == run_id} == running
        row = next(r for r in stash.runs.list_runs(namespace=namespace).items if r.run_id == run_id)
        assert (row.attempts, row.running_attempts) == (len(state.attempts), len(running))


def _work(stash: stashpoint.Stash, run_id: str, who: str, times: int, ledger: _Ledger) -> None:
    for n in range(times):
        label = f"{who}-{n}"
        ended = n % 3 == 2  # an attempt that already ran, recorded ended in one append
        try:
            if ended:
                stash.runs.record_ended_attempt(
                    run_id, label, 1, {"n": n}, started_at=_now(), output={"done": label}
                )
            else:
                attempt_id = stash.runs.record_attempt(run_id, label, 1, {"n": n})
        except StashpointError:
            with ledger.lock:
                ledger.unknown.add(label)
            continue
        with ledger.lock:
            ledger.recorded.add(label)
            if ended:
                ledger.completed.add(label)
        if ended:
            continue
        try:
            stash.runs.complete_attempt(attempt_id, {"done": label})
        except StashpointError:
            continue
        with ledger.lock:
            ledger.completed.add(label)


def test_fault_proxy_loses_and_duplicates_no_transition(
    seaweedfs: servers.S3Server, dynamodb_local: servers.DynamoDBServer, dynamodb_table: str
) -> None:
    plan = FaultPlan(
        {"drop_response": 0.08, "drop_request": 0.05, "slowdown": 0.05, "conflict": 0.05}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    prefix = f"t-{uuid.uuid4().hex}"
    index = f"&index=dynamodb://{dynamodb_table}"
    options = {"index_endpoint_url": dynamodb_local.endpoint}
    with stashpoint.open(seaweedfs.url(prefix) + index, **options) as stash:
        run_id = stash.runs.create_run("faults")
    ledger = _Ledger()
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint) + index
        with stashpoint.open(url, client_config=config, **options) as stash:
            threads = [
                threading.Thread(target=_work, args=(stash, run_id, f"t{i}", 8, ledger))
                for i in range(6)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    with stashpoint.open(seaweedfs.url(prefix) + index, **options) as clean:
        ledger.check(clean, run_id)
    assert len(ledger.recorded) > 25 and len(ledger.completed) > 20
    assert all(plan.injected[f] > 0 for f in ("drop_response", "drop_request", "conflict"))


# --- a crash at every request of a transition -------------------------------------------------


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(
        st.tuples(st.integers(0, 20), st.integers(0, 80), st.booleans(), st.integers(0, 2)),
        min_size=1,
        max_size=4,
    )
)
def test_crash_at_any_request_of_a_transition_keeps_every_acknowledged_one(
    plan: list[tuple[int, int, bool, int]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Record and complete `n` attempts, then crash at request `step` of the next record,
    complete or record-ended (`mode` 0, 1, 2; each may seal 64 versions: entry PUT,
    listings, GETs, segment PUT, deletes, index write), before or after that request; a
    new process checks and goes on."""
    url = f"local://{tmp_path_factory.mktemp('crashes')}?fsync=false"
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("crashes")
    ledger = _Ledger()
    counter = 0
    for transitions, step, after, mode in plan:
        while_completing = mode == 1
        with stashpoint.open(url, log_delete_after=timedelta(0)) as stash:
            ledger.check(stash, run_id)
            for _ in range(transitions):
                counter += 1
                label = f"n{counter}"
                attempt_id = stash.runs.record_attempt(run_id, label, 1)
                ledger.recorded.add(label)
                stash.runs.complete_attempt(attempt_id, {"done": label})
                ledger.completed.add(label)
            counter += 1
            label = f"n{counter}"
            if while_completing:
                attempt_id = stash.runs.record_attempt(run_id, label, 1)
                ledger.recorded.add(label)
            with crash_at(stash, step, after):
                try:
                    if mode == 2:
                        stash.runs.record_ended_attempt(
                            run_id, label, 1, started_at=_now(), output={"done": label}
                        )
                        ledger.recorded.add(label)
                        ledger.completed.add(label)
                    elif while_completing:
                        stash.runs.complete_attempt(attempt_id, {"done": label})
                        ledger.completed.add(label)
                    else:
                        stash.runs.record_attempt(run_id, label, 1)
                        ledger.recorded.add(label)
                except Crash:
                    if not while_completing:
                        ledger.unknown.add(label)
    with stashpoint.open(url, log_delete_after=timedelta(0)) as stash:
        ledger.check(stash, run_id)
        stash.runs.complete_run(run_id)  # and the run goes on to its end


# --- kill -9 of racing workers ----------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import json, sys
    from datetime import UTC, datetime
    import stashpoint
    url, options, run_id, who = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    with stashpoint.open(url, **options) as stash:
        for n in range(10_000):
            label = f"{who}-{n}"
            print("try", label, flush=True)
            if n % 3 == 2:  # an attempt that already ran, recorded ended in one append
                stash.runs.record_ended_attempt(
                    run_id, label, 1, {"n": n}, started_at=datetime.now(UTC),
                    output={"done": label},
                )
                print("recorded", label, flush=True)
                print("completed", label, flush=True)
                continue
            attempt_id = stash.runs.record_attempt(run_id, label, 1, {"n": n})
            print("recorded", label, flush=True)
            stash.runs.complete_attempt(attempt_id, {"done": label})
            print("completed", label, flush=True)
    """
)


def _drain(worker: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    """Put each line a worker prints on `lines`, until its pipe closes (it was killed)."""
    assert worker.stdout is not None
    for line in worker.stdout:
        lines.put(line)
    worker.stdout.close()


def _told(lines: list[str], ledger: _Ledger) -> None:
    """Fill the ledger from a killed worker's output: what it was told before it died."""
    for line in lines:
        word, _, label = line.strip().partition(" ")
        if word == "try":
            ledger.unknown.add(label)
        elif word == "recorded":
            ledger.recorded.add(label)
        elif word == "completed":
            ledger.completed.add(label)
    ledger.unknown -= ledger.recorded


def test_workers_killed_mid_transition_lose_and_duplicate_nothing(
    s3_dynamo_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = s3_dynamo_url
    with stashpoint.open(url, **options) as stash:
        run_id = stash.runs.create_run("kills")
    ledger = _Ledger()
    for round_ in range(2):
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, url, json.dumps(options), run_id, f"r{round_}w{i}"],
                stdout=subprocess.PIPE,
                text=True,
                env=dict(os.environ),
            )
            for i in range(3)
        ]
        lines: queue.Queue[str] = queue.Queue()
        readers = [threading.Thread(target=_drain, args=(w, lines)) for w in workers]
        for reader in readers:
            reader.start()
        # Killed one by one as the workers' completions together reach 3, 10 and 21: each
        # mid-flight, at a point set by the run's progress rather than by one worker's
        # (three writers racing on one log do not take turns fairly, so one of them may
        # wait for long while the others append).
        told: list[str] = []
        completed = 0
        deadline = time.monotonic() + 90
        for worker, wanted in zip(workers, (3, 10, 21), strict=True):
            while completed < wanted and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    line = lines.get(timeout=1)
                    told.append(line)
                    completed += line.startswith("completed")
            worker.send_signal(signal.SIGKILL)
        for worker, reader in zip(workers, readers, strict=True):
            assert worker.wait(timeout=60) == -signal.SIGKILL
            reader.join(timeout=60)
        while not lines.empty():
            told.append(lines.get())
        _told(told, ledger)
        with stashpoint.open(url, **options) as stash:
            ledger.check(stash, run_id)  # after every round: a new worker sees it all
    assert len(ledger.completed) >= 2 * 21
    with stashpoint.open(url, **options) as stash:
        stash.runs.record_attempt(run_id, "after", 1)  # the run goes on
        stash.runs.complete_run(run_id)
