"""`stashpoint.spot`: the spot watcher against a fake IMDSv2 on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import stashpoint
from stashpoint.spot import SpotWatcher, compute_identity
from tests.fake_imds import FakeImds

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _wait(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_notice_and_rebalance_are_seen_through_the_token_protocol() -> None:
    seen = []
    with (
        FakeImds() as imds,
        SpotWatcher(
            interval=0.02, endpoint=imds.endpoint, on_notice=seen.append, catch_sigterm=False
        ) as watcher,
    ):
        _wait(lambda: watcher.on_ec2 is True and watcher.instance_id is not None)
        assert watcher.instance_id == imds.instance_id
        time.sleep(0.1)
        assert not watcher.stopping.is_set() and watcher.rebalance is None
        imds.rebalance = {"noticeTime": "2026-11-30T10:00:00Z"}
        _wait(lambda: watcher.rebalance is not None)
        assert watcher.rebalance == datetime(2026, 11, 30, 10, tzinfo=UTC)
        assert not watcher.stopping.is_set()  # a recommendation is not a notice
        when = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=2)
        imds.action = {"action": "terminate", "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
        assert watcher.stopping.wait(5)
    assert watcher.notice is not None and watcher.notice.source == "spot"
    assert (watcher.notice.action, watcher.notice.deadline) == ("terminate", when)
    assert seen == [watcher.notice]
    # Every metadata read carried a valid session token.
    assert all(valid for method, _, valid in imds.requests if method == "GET")


def test_an_expired_token_is_replaced() -> None:
    with (
        FakeImds() as imds,
        SpotWatcher(interval=0.02, endpoint=imds.endpoint, catch_sigterm=False) as watcher,
    ):
        _wait(lambda: watcher.on_ec2 is True)
        imds.tokens.clear()  # every token expires
        imds.action = {"action": "stop", "time": "2026-11-30T10:02:00Z"}
        assert watcher.stopping.wait(5)
    assert watcher.notice is not None and watcher.notice.action == "stop"
    assert sum(1 for method, _, _ in imds.requests if method == "PUT") >= 2


def test_off_ec2_there_is_no_delay_and_polling_stops() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    started = time.perf_counter()
    watcher = SpotWatcher(endpoint=f"http://127.0.0.1:{port}", catch_sigterm=False).start()
    assert time.perf_counter() - started < 0.05  # the caller never waits for the service
    _wait(lambda: watcher.on_ec2 is False)
    watcher.close()
    assert not watcher.stopping.is_set()


def test_metadata_disabled_starts_no_poller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with FakeImds() as imds:
        watcher = SpotWatcher(interval=0.01, endpoint=imds.endpoint, catch_sigterm=False)
        with watcher:
            time.sleep(0.1)
        assert imds.requests == [] and watcher.on_ec2 is None


def test_endpoint_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9/")
    assert SpotWatcher().endpoint == "http://127.0.0.1:9"


def test_compute_identity_reads_batch_ecs_and_lambda() -> None:
    env = {"AWS_BATCH_JOB_ID": "job-1", "AWS_BATCH_JOB_ATTEMPT": "2",
           "AWS_BATCH_JOB_ARRAY_INDEX": "7", "AWS_LAMBDA_FUNCTION_NAME": "", "PATH": "/bin"}  # fmt: skip
    assert compute_identity(env) == {
        "batch_job_id": "job-1", "batch_job_attempt": "2", "batch_array_index": "7"
    }  # fmt: skip


def test_spot_example_flushes_within_the_notice_window(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with FakeImds() as imds:
        env = {**os.environ, "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.endpoint}
        worker = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "spot_worker.py"), "--url", url, "--id", "spot",
             "--items", "1000000", "--every", "500", "--delay", "0.0005", "--poll", "0.05"],
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert worker.stdout is not None
        assert worker.stdout.readline().startswith("worker starts at item 0")
        assert worker.stdout.readline().startswith("checkpoint at item 500")
        imds.rebalance = {"noticeTime": "2026-11-30T10:00:00Z"}
        line = worker.stdout.readline()
        while line.startswith("checkpoint at item"):
            line = worker.stdout.readline()
        assert line.startswith("rebalance recommended: checkpoint at item")
        notified = time.monotonic()
        imds.action = {"action": "terminate", "time": "2026-11-30T10:02:00Z"}
        out, _ = worker.communicate(timeout=60)
        took = time.monotonic() - notified
    assert worker.returncode == 0
    last = out.strip().splitlines()[-1]
    assert last.startswith("spot terminate notice: flushed at item")
    assert took < 10  # well inside the two-minute window
    with stashpoint.open(url) as stash:
        run = stash.runs.load_run("spot")
    assert run is not None and run.state_snapshot["cursor"] == int(last.split()[-1])
    assert run.attempts[-1].worker == {"instance_id": imds.instance_id}  # where it ran
