"""The waker (`stashpoint.wake`): due runs sent to an SQS queue (moto) or a Lambda function
(its client faked at the boundary), once per window however many pollers race, again only
while still due, and the Lambda handler as deployed."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

import stashpoint
from stashpoint import ConfigurationError
from stashpoint._backends.targets import LambdaTarget, SqsTarget, target_of
from stashpoint.clock import FakeClock
from stashpoint.wake import handler, wake_due

START = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.fixture
def stash(local_url: tuple[str, dict[str, Any]]) -> Iterator[tuple[stashpoint.Stash, FakeClock]]:
    clock = FakeClock(START)
    with stashpoint.open(local_url[0], clock=clock) as opened:
        for run_id, minutes in (("due-1", -1), ("later", 60), ("due-2", -10)):
            opened.runs.create_run("agent", run_id=run_id)
            opened.runs.suspend_run(run_id, until=START + timedelta(minutes=minutes))
        yield opened, clock


def _queue(name: str) -> tuple[Any, str, str]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    return sqs, url, arn["QueueArn"]


def _received(sqs: Any, url: str) -> list[dict[str, Any]]:
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    for handled in got:  # a worker took it (a FIFO group then lets the next one through)
        sqs.delete_message(QueueUrl=url, ReceiptHandle=handled["ReceiptHandle"])
    return [json.loads(m["Body"]) for m in got]


@pytest.mark.parametrize("name", ["wake", "wake.fifo"])
def test_due_runs_go_to_a_queue_once_a_window_and_again_while_due(
    stash: tuple[stashpoint.Stash, FakeClock], name: str
) -> None:
    opened, clock = stash
    with mock_aws():
        sqs, url, arn = _queue(name)
        target = SqsTarget(arn, client=sqs)
        assert target.fifo is name.endswith(".fifo")
        report = wake_due(opened, target.send)
        assert (report.due, report.sent, report.skipped, report.failed) == (2, 2, 0, 0)
        messages = _received(sqs, url)
        assert sorted(m["run_id"] for m in messages) == ["due-1", "due-2"]
        assert {m["wake_at"] for m in messages} == {
            (START - timedelta(minutes=1)).isoformat(), (START - timedelta(minutes=10)).isoformat(),
        }  # fmt: skip
        clock.advance(60)  # a minute on: the scheduler polls again
        assert wake_due(opened, target.send).sent == 0  # sent this window already
        opened.runs.resume_run("due-1")  # its worker ran it
        clock.advance(15 * 60)
        again = wake_due(opened, target.send)
        assert (again.due, again.sent) == (1, 1)  # due-2 still waits: its wake was lost
        assert [m["run_id"] for m in _received(sqs, url)] == ["due-2"]


def test_pollers_racing_send_each_due_run_once(
    stash: tuple[stashpoint.Stash, FakeClock],
) -> None:
    opened, _ = stash
    sent: list[str] = []
    lock = threading.Lock()

    def record(messages: Sequence[dict[str, Any]]) -> list[bool]:
        with lock:
            sent.extend(m["run_id"] for m in messages)
        return [True] * len(messages)

    pollers = [threading.Thread(target=wake_due, args=(opened, record)) for _ in range(6)]
    for poller in pollers:
        poller.start()
    for poller in pollers:
        poller.join()
    assert Counter(sent) == {"due-1": 1, "due-2": 1}


def test_a_run_woken_by_its_event_is_sent_and_a_refused_send_is_retried_next_window(
    stash: tuple[stashpoint.Stash, FakeClock],
) -> None:
    opened, clock = stash
    with pytest.raises(stashpoint.RunSuspended):
        opened.runs.durable("approval").wait_for("yes", timeout=3 * 86_400)
    opened.runs.signal("approval", "yes", {"ok": True})  # its event: due now
    invocations: list[dict[str, Any]] = []

    class FakeLambda:
        """boto3's Lambda client at the boundary: accepts `invoke`, refuses the first."""

        def invoke(self, **call: Any) -> dict[str, Any]:
            invocations.append(json.loads(call["Payload"]))
            assert call["InvocationType"] == "Event"
            return {"StatusCode": 500 if len(invocations) == 1 else 202}

    target = LambdaTarget("arn:aws:lambda:us-east-1:123456789012:function:agent", FakeLambda())
    first = wake_due(opened, target.send)
    assert first.sent + first.failed == 3 and first.failed == 1
    clock.advance(15 * 60)
    second = wake_due(opened, target.send)
    assert second.sent == 3  # everything still due goes again, the refused one included
    assert {i["run_id"] for i in invocations} == {"due-1", "due-2", "approval"}


def test_the_handler_reads_its_environment(
    local_url: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = local_url[0]
    with stashpoint.open(url) as opened:
        opened.runs.create_run("agent", run_id="overdue")
        opened.runs.suspend_run("overdue", until=datetime.now(UTC) - timedelta(minutes=5))
    with mock_aws():
        sqs, queue, arn = _queue("handler")
        monkeypatch.setenv("STASHPOINT_URL", url)
        monkeypatch.setenv("STASHPOINT_WAKE_TARGET", arn)
        assert handler({}, None) == {"due": 1, "sent": 1, "skipped": 0, "failed": 0}
        assert handler({}, None)["skipped"] == 1  # the next minute's poll
        assert [m["run_id"] for m in _received(sqs, queue)] == ["overdue"]
        monkeypatch.delenv("STASHPOINT_WAKE_TARGET")
        with pytest.raises(ConfigurationError):
            handler({}, None)


def test_targets_are_checked() -> None:
    for bad in ("arn:aws:sns:us-east-1:1:topic", "queue", "arn:aws:sqs:us-east-1"):
        with pytest.raises(ConfigurationError):
            target_of(bad)
    assert isinstance(target_of("arn:aws:sqs:us-east-1:1:q"), SqsTarget)
    assert isinstance(target_of("arn:aws:lambda:us-east-1:1:function:f"), LambdaTarget)
