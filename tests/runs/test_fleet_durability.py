"""Fleet maps under stress: the fault proxy on claims and results (SeaweedFS), a crash at
every request of a worker (local, a fake clock for the leases left behind), and real
worker processes killed with `kill -9` or frozen with SIGSTOP (SeaweedFS). Every item's
result is recorded exactly once, in order; a frozen worker that wakes is fenced."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
from botocore.config import Config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stashpoint
from stashpoint import CheckpointNotFound, StashpointError
from stashpoint.clock import FakeClock
from tests import servers
from tests.crashes import Crash, crash_at
from tests.faultproxy import FaultPlan, FaultProxy


def _check_once(stash: stashpoint.Stash, map_id: str, items: int, batch_size: int) -> None:
    """Every item's result is there once, in order, from the one done version of its batch."""
    fleet = stash.runs.fleet(map_id)
    assert fleet.progress().status == "completed"
    results = list(fleet.results())
    assert [r.index for r in results] == list(range(items))
    assert all(r.done and r.ok and r.value == r.item * 2 for r in results)
    logs = stash.logs_in("fleet")
    for batch in range(-(-items // batch_size)):
        entries = logs.entries(f"{map_id}:b{batch:08d}")
        done = [e for e in entries if e.state["status"] == "done"]
        assert len(done) == 1 and done[-1] is entries[-1], f"batch {batch} recorded twice"
        assert sum(len(e.records) for e in entries) == len(done[0].records)


def _double(item: int) -> int:
    return item * 2


def test_fault_proxy_loses_and_duplicates_no_result(seaweedfs: servers.S3Server) -> None:
    plan = FaultPlan(
        {"drop_response": 0.06, "drop_request": 0.04, "slowdown": 0.04, "conflict": 0.04}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    prefix = f"t-{uuid.uuid4().hex}"
    with stashpoint.open(seaweedfs.url(prefix)) as stash:
        stash.runs.fleet("faults").start(range(300), batch_size=10, lease=3)
    errors: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:

            def worker(n: int) -> None:
                fleet = stash.runs.fleet("faults", worker_id=f"w{n}")
                for _ in range(50):  # a worker told "unknown" starts over, as a real one would
                    try:
                        fleet.work(_double)
                        return
                    except StashpointError as exc:
                        errors.append(exc.kind.value)
                raise AssertionError("a worker never got through")

            threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=240)
            assert not any(t.is_alive() for t in threads)
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        _check_once(clean, "faults", 300, 10)
    assert all(plan.injected[f] > 0 for f in ("drop_response", "drop_request", "conflict"))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(step=st.integers(0, 45), after=st.booleans())
def test_a_crash_at_any_request_of_a_worker_loses_and_duplicates_nothing(
    step: int, after: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A worker dies at request `step` (before it, or after it took effect: claims, item
    chunk reads, heartbeats, results, marks, the end); a new one goes on and finishes."""
    url = f"local://{tmp_path_factory.mktemp('fleet-crash')}?fsync=false"
    clock = FakeClock()  # the dead worker's lease runs out as soon as the next one waits
    with stashpoint.open(url, clock=clock) as stash:
        stash.runs.fleet("crash").start(range(12), batch_size=3, lease=30)
        with crash_at(stash, step, after), contextlib.suppress(Crash):
            stash.runs.fleet("crash", worker_id="first").work(_double)  # may get to its end
    with stashpoint.open(url, clock=clock) as stash:
        report = stash.runs.fleet("crash", worker_id="second").work(_double)
        assert report.status == "completed"
        _check_once(stash, "crash", 12, 3)


WORKER = textwrap.dedent(
    """
    import dataclasses, json, pathlib, sys, time
    import stashpoint
    url, map_id, worker, status = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

    def double(item):
        pathlib.Path(status).write_text(str(item))  # the item this worker is on, for the test
        time.sleep(0.004)
        return item * 2

    with stashpoint.open(url) as stash:
        print("started", flush=True)
        report = stash.runs.fleet(map_id, worker_id=worker).work(double)
    print(json.dumps(dataclasses.asdict(report)), flush=True)
    """
)


def _freeze_holding(
    worker: subprocess.Popen[str],
    stash: stashpoint.Stash,
    map_id: str,
    worker_id: str,
    status: Path,
) -> str:
    """SIGSTOP `worker` while it holds a batch (as storage says); return that batch's log."""
    logs = stash.logs_in("fleet")
    for _ in range(50):
        worker.send_signal(signal.SIGSTOP)
        text = status.read_text() if status.exists() else ""
        if text:  # written whole, unless stopped mid-write
            log_id = f"{map_id}:b{int(text) // 20:08d}"
            with contextlib.suppress(CheckpointNotFound):
                state = logs.head(log_id).state
                if state["worker"] == worker_id and state["status"] == "leased":
                    return log_id
        worker.send_signal(signal.SIGCONT)  # stopped between two batches: try again
        time.sleep(0.02)
    raise AssertionError("the worker never held a batch when stopped")


def test_workers_killed_or_frozen_mid_map_record_every_result_once(
    seaweedfs: servers.S3Server, tmp_path: Path
) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    items, batch_size = 1600, 20
    with stashpoint.open(url) as stash:
        stash.runs.fleet("kills").start(range(items), batch_size=batch_size, lease=2)
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, url, "kills", f"w{n}", str(tmp_path / f"w{n}")],
                stdout=subprocess.PIPE,
                text=True,
                env=dict(os.environ),
            )
            for n in range(4)
        ]
        try:
            for worker in workers:
                assert worker.stdout is not None and worker.stdout.readline() == "started\n"
            fleet = stash.runs.fleet("kills")
            deadline = time.monotonic() + 120
            while fleet.progress().done_batches < 12:  # a sixth of the map done
                assert time.monotonic() < deadline
                time.sleep(0.1)
            _freeze_holding(workers[0], stash, "kills", "w0", tmp_path / "w0")
            workers[0].send_signal(signal.SIGKILL)  # dies mid-batch
            assert workers[0].wait(timeout=30) == -signal.SIGKILL
            held = _freeze_holding(workers[1], stash, "kills", "w1", tmp_path / "w1")  # a zombie
            logs = stash.logs_in("fleet")
            while logs.head(held).state["worker"] == "w1":  # until another worker takes it
                assert time.monotonic() < deadline
                time.sleep(0.1)
            workers[1].send_signal(signal.SIGCONT)
            reports = []
            for worker in workers[1:]:
                out, _ = worker.communicate(timeout=180)
                assert worker.returncode == 0, out
                reports.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.send_signal(signal.SIGCONT)
                    worker.kill()
        zombie = reports[0]
        assert zombie["fenced"] >= 1, zombie  # it woke to find its batch taken: nothing stored
        assert sum(r["takeovers"] for r in reports) >= 2  # the dead worker's and the zombie's
        assert all(r["status"] == "completed" for r in reports)
        _check_once(stash, "kills", items, batch_size)
