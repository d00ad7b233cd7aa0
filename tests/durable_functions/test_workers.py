"""Durable executions under stress on real servers: worker processes killed with
`kill -9` mid-step, mid-wait and mid-callback, a frozen zombie, racing workers, and the
fault proxy on every request. Every execution completes with every result; no
at-most-once step runs twice; a zombie's checkpoints are refused."""

from __future__ import annotations

import json
import os
import random
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
    url: str, name: str, lease_s: float, env: dict[str, str] | None = None
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


def test_workers_killed_and_frozen_lose_nothing_and_run_no_at_most_once_step_twice(
    seaweedfs: servers.S3Server, tmp_path: Path
) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    marks = tmp_path / "marks"
    marks.mkdir()
    status = tmp_path / "status"
    rng = random.Random(7)
    lease_s = 2.0
    with stashpoint.open(url) as stash:
        runner = build(stash, "test", lease_s)
        arns = _start(runner, marks, 8, callbacks=True)
        env = {"STASHPOINT_TEST_STEP_S": "0.15", "STASHPOINT_TEST_STATUS": str(status)}
        workers = [_worker(url, f"w{n}", lease_s, env) for n in range(3)]
        stop = threading.Event()
        answerer = threading.Thread(target=_answer_callbacks, args=(runner, arns, stop))
        answerer.start()
        try:
            kills = 0
            for round_ in range(8):  # bounded: eight deaths, then the survivors finish
                time.sleep(rng.uniform(0.3, 0.9))
                victim = rng.randrange(len(workers))
                if round_ == 3:
                    # A zombie: frozen in a step past its lease, then woken.
                    workers[victim].send_signal(signal.SIGSTOP)
                    time.sleep(lease_s * 2)
                    workers[victim].send_signal(signal.SIGCONT)
                    continue
                if workers[victim].poll() is not None:
                    # It ended on its own: only because nothing was pending any more (the
                    # workers are fast enough to finish while one is frozen).
                    assert workers[victim].returncode == 0, _stderr_of(workers[victim])
                    assert not runner.pending()
                    continue
                os.kill(workers[victim].pid, signal.SIGKILL)
                workers[victim].wait(timeout=30)
                kills += 1
                workers[victim] = _worker(url, f"w{round_}-{victim}", lease_s, env)
            _wait_all_ended(runner, 240)
        finally:
            stop.set()
            answerer.join(timeout=30)
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                worker.wait(timeout=30)
        _check(runner, arns, marks, callbacks=True)
        lost = sum(
            1
            for arn in arns
            for e in runner.history(arn)
            if e["EventType"] == "InvocationCompleted"
            and "Error" in e["InvocationCompletedDetails"]
        )
        assert kills >= 3 and lost >= 1  # the kills landed inside invocations


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
