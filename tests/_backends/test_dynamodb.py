"""The DynamoDB call mapping: a transition's index items go out at once, each judged alone."""

from __future__ import annotations

import threading
from typing import Any

import botocore.exceptions
import pytest

from stashpoint._backends.dynamodb import DynamoDBSettings, dynamodb_transport
from stashpoint.errors import StorageUnavailable
from stashpoint.index.requests import PutItems


def _item(n: int, revision: int = 1) -> dict[str, Any]:
    return {"pk": f"run#{n}", "sk": "run", "revision": revision, "status": "running"}


class _Client:
    """A DynamoDB client whose `put_item` calls meet at a barrier (or answer as told)."""

    def __init__(self, parties: int, answers: dict[str, str] | None = None) -> None:
        self.barrier = threading.Barrier(parties, timeout=10)
        self.answers = answers or {}
        self.threads: set[str] = set()

    def put_item(self, **params: Any) -> dict[str, Any]:
        self.threads.add(threading.current_thread().name)
        self.barrier.wait()  # times out (BrokenBarrierError) if the calls go one by one
        code = self.answers.get(params["Item"]["pk"]["S"])
        if code is not None:
            error = {"Error": {"Code": code, "Message": "no"}}
            raise botocore.exceptions.ClientError(error, "PutItem")  # type: ignore[arg-type]
        assert params["ConditionExpression"] and params["ExpressionAttributeValues"]
        return {}


def _transport(client: _Client) -> Any:
    transport = dynamodb_transport(DynamoDBSettings(table="t", region_name="us-east-1"))
    transport.client.instance = client
    return transport


def test_the_items_of_one_transition_are_sent_at_once() -> None:
    client = _Client(2)
    assert _transport(client).execute(PutItems((_item(1), _item(2)))) == 2
    assert len(client.threads) == 2


def test_a_refused_item_counts_nothing_and_keeps_the_other_written() -> None:
    client = _Client(2, {"run#1": "ConditionalCheckFailedException"})
    assert _transport(client).execute(PutItems((_item(1), _item(2)))) == 1


def test_a_failed_call_fails_the_request_after_every_call_ended() -> None:
    client = _Client(2, {"run#2": "InternalServerError"})
    with pytest.raises(StorageUnavailable):
        _transport(client).execute(PutItems((_item(1), _item(2))))
    assert client.barrier.n_waiting == 0 and not client.barrier.broken


def test_one_item_is_one_call_on_the_caller_thread() -> None:
    client = _Client(1)
    assert _transport(client).execute(PutItems((_item(1),))) == 1
    assert client.threads == {threading.current_thread().name}
