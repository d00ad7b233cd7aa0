"""Durable executions under stress on real servers: worker processes killed with
`kill -9` mid-step, mid-wait and mid-callback, a frozen zombie, racing workers, and the
fault proxy on every request. Every execution completes with every result; no
at-most-once step runs twice; a zombie's checkpoints are refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("aws_durable_execution_sdk_python")

from botocore.config import Config

import stashpoint
from stashpoint import StashpointError
from stashpoint.durable_functions import DurableFunctions
from tests import servers
from tests.durable_functions.worker_app import functions as build
from tests.faultproxy import FaultPlan, FaultProxy

ROOT = Path(__file__).resolve().parents[2]


def _start(runner: DurableFunctions, marks: Path, count: int, *, callbacks: bool) -> list[str]:
    return [
        runner.start(
            "pipeline",
            {"id": f"e{n}", "steps": 3, "marks": str(marks), "callback": callbacks and n % 2 == 0},
            name=f"e{n}",
        )
        for n in range(count)
    ]


def _answer_callbacks(runner: DurableFunctions, arns: list[str], stop: threading.Event) -> None:
    """The outside system: answers each waiting callback once (bounded by `stop`)."""
    answered: set[str] = set()
    while not stop.is_set():
        for arn in arns:
            try:
                for callback in runner.callbacks(arn):
                    if callback["CallbackId"] not in answered:
                        runner.send_callback_success(callback["CallbackId"], "approved")
                        answered.add(callback["CallbackId"])
            except StashpointError:
                pass  # a callback answered by a retry, a read under faults: look again
        stop.wait(0.1)


def _check(runner: DurableFunctions, arns: list[str], marks: Path, *, callbacks: bool) -> None:
    for n, arn in enumerate(arns):
        described = runner.describe(arn)
        assert described["Status"] == "SUCCEEDED", (arn, described)
        result = json.loads(described["Result"])
        expected_alo = [0, 1, 2]
        assert result[1:6:2] == expected_alo, result
        for i, value in enumerate(result[0:6:2]):
            assert value in (i * 10, "interrupted"), result
        if callbacks and n % 2 == 0:
            assert result[-1] == "approved"
        history = [e["EventType"] for e in runner.history(arn)]
        assert history.count("ExecutionSucceeded") == 1
    for mark in marks.iterdir():
        runs = mark.read_text().split()
        assert len(runs) <= 1, f"at-most-once step {mark.name} ran {len(runs)} times"


def _worker(
    url: str, name: str, lease_s: float, env: dict[str, str] | None = None, *, wait: bool = True
) -> subprocess.Popen[str]:
    # Its stderr in a file of its own: a worker that dies on its own says why.
    errors = Path(tempfile.gettempdir()) / f"stashpoint-worker-{os.getpid()}-{name}.err"
    with errors.open("w") as err:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.durable_functions.worker_app", url, name, str(lease_s)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, **(env or {})},
        )
    assert process.stdout is not None
    if wait:  # until it has opened its stash (a cold start takes seconds on a busy machine)
        assert process.stdout.readline().strip() == "started"
    return process


def _stderr_of(process: subprocess.Popen[str]) -> str:
    """The last lines a worker wrote to stderr (its file, named by `_worker`)."""
    name = process.args[-2] if isinstance(process.args, list) else ""
    path = Path(tempfile.gettempdir()) / f"stashpoint-worker-{os.getpid()}-{name}.err"
    return path.read_text()[-3000:] if path.exists() else ""


def _wait_all_ended(runner: DurableFunctions, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while runner.pending():
        assert time.monotonic() < deadline, f"still pending: {runner.pending()}"
        time.sleep(0.2)


def _arm(holds: Path, round_: int) -> None:
    """Arm a hold: workers entering an at-most-once step wait there (`worker_app`)."""
    (holds / "armed.tmp").write_text(str(round_))
    (holds / "armed.tmp").replace(holds / "armed")


def _holders(holds: Path, round_: int, deadline_s: float = 120) -> list[tuple[int, str]]:
    """Wait for the workers holding in a step this round: their (pid, execution id)."""
    deadline = time.monotonic() + deadline_s
    while True:
        found = []
        for path in holds.glob(f"holding-{round_}-*"):
            _, _, pid, step = path.name.split("-", 3)
            found.append((int(pid), step.rsplit("-", 1)[0]))
        if found:
            return sorted(found)
        assert time.monotonic() < deadline, f"no worker entered a step in round {round_}"
        time.sleep(0.02)


def _lost(runner: DurableFunctions, arn: str) -> int:
    """How many of the execution's invocations ended without an answer (taken over)."""
    return sum(
        1
        for e in runner.history(arn)
        if e["EventType"] == "InvocationCompleted" and "Error" in e["InvocationCompletedDetails"]
    )


def test_workers_killed_and_frozen_lose_nothing_and_run_no_at_most_once_step_twice(
    seaweedfs: servers.S3Server, tmp_path: Path
) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    marks = tmp_path / "marks"
    marks.mkdir()
    holds = tmp_path / "holds"
    holds.mkdir()
    lease_s = 2.0
    rounds = 4  # three kills, then a zombie (after it the workers run free to the end)
    with stashpoint.open(url) as stash:
        runner = build(stash, "test", lease_s)
        arns = _start(runner, marks, 8, callbacks=True)
        by_id = {f"e{n}": arn for n, arn in enumerate(arns)}
        env = {"STASHPOINT_TEST_STEP_S": "0.05", "STASHPOINT_TEST_HOLDS": str(holds)}
        # Driven by what the workers do, not by the clock, so each kill lands inside an
        # invocation however loaded the machine is: a round holds the workers entering an
        # at-most-once step and kills one of them; arming the next round lets the others go
        # (and holds them at their next step: the work is not all done before the last
        # round). The test never waits on a cold start while workers hold (their leases
        # run). The last round freezes its holder past its lease.
        _arm(holds, 0)
        workers = [_worker(url, f"w{n}", lease_s, env, wait=False) for n in range(3)]
        stop = threading.Event()
        answerer = threading.Thread(target=_answer_callbacks, args=(runner, arns, stop))
        answerer.start()
        hit: dict[str, int] = {}
        kills = 0
        try:
            for round_ in range(rounds):
                holders = _holders(holds, round_)
                # The execution hit least: three lost invocations would fail it.
                pid, execution = min(holders, key=lambda h: hit.get(h[1], 0))
                hit[execution] = hit.get(execution, 0) + 1
                victim = next(n for n, w in enumerate(workers) if w.pid == pid)
                if round_ < rounds - 1:
                    os.kill(pid, signal.SIGKILL)
                    workers[victim].wait(timeout=30)
                    kills += 1
                    _arm(holds, round_ + 1)
                    workers[victim] = _worker(url, f"w{round_}-{victim}", lease_s, env, wait=False)
                    continue
                # A zombie: frozen inside its step until another worker has taken its
                # execution over, then woken; its checkpoints must be refused.
                workers[victim].send_signal(signal.SIGSTOP)
                (holds / "armed").unlink()
                deadline = time.monotonic() + 120
                while _lost(runner, by_id[execution]) < hit[execution]:
                    assert time.monotonic() < deadline, "the frozen invocation was not taken over"
                    time.sleep(0.1)
                workers[victim].send_signal(signal.SIGCONT)
            _wait_all_ended(runner, 240)
        finally:
            (holds / "armed").unlink(missing_ok=True)
            stop.set()
            answerer.join(timeout=30)
            ended = [worker for worker in workers if worker.poll() is not None]
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                worker.wait(timeout=30)
        for worker in ended:  # ended on its own: only with nothing pending, and cleanly
            assert worker.returncode == 0, _stderr_of(worker)
        _check(runner, arns, marks, callbacks=True)
        assert kills == rounds - 1
        # Every kill and the freeze landed inside an invocation: each was taken over.
        for execution, times in hit.items():
            assert _lost(runner, by_id[execution]) >= times, execution


def test_racing_workers_on_seaweedfs_share_the_executions(
    seaweedfs: servers.S3Server, tmp_path: Path
) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    marks = tmp_path / "marks"
    marks.mkdir()
    with stashpoint.open(url) as stash:
        arns = _start(build(stash, "starter", 30), marks, 12, callbacks=False)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            with stashpoint.open(url) as own:  # a process of its own: its own caches
                runner = build(own, f"w{n}", 30)
                for _ in range(400):  # bounded
                    if not runner.pending():
                        return
                    if not runner.run_due():
                        time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors and not any(t.is_alive() for t in threads), errors
    with stashpoint.open(url) as stash:
        runner = build(stash, "checker", 30)
        _check(runner, arns, marks, callbacks=False)
        # Racing never ran a step twice in one execution: no step was interrupted.
        for arn in arns:
            assert "interrupted" not in json.loads(runner.describe(arn)["Result"])


def test_the_fault_proxy_on_every_request_loses_no_checkpoint(
    seaweedfs: servers.S3Server, tmp_path: Path
) -> None:
    plan = FaultPlan(
        {"drop_response": 0.05, "drop_request": 0.04, "slowdown": 0.03, "conflict": 0.03}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    prefix = f"t-{uuid.uuid4().hex}"
    marks = tmp_path / "marks"
    marks.mkdir()
    with stashpoint.open(seaweedfs.url(prefix)) as stash:
        arns = _start(build(stash, "starter", 30), marks, 6, callbacks=True)
    seen: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            runner = build(stash, "faulty", 5)
            stop = threading.Event()
            answerer = threading.Thread(target=_answer_callbacks, args=(runner, arns, stop))
            answerer.start()
            try:
                for _ in range(600):  # bounded
                    try:
                        if not runner.pending():
                            break
                        if not runner.run_due():
                            time.sleep(0.05)
                    except StashpointError as exc:  # told "unknown": a real worker goes on
                        seen.append(exc.kind.value)
            finally:
                stop.set()
                answerer.join(timeout=60)
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        _check(build(clean, "checker", 30), arns, marks, callbacks=True)
    assert all(plan.injected[f] > 0 for f in ("drop_response", "drop_request"))
