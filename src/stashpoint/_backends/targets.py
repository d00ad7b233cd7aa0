"""Where the waker sends due runs: an SQS queue or a Lambda function (boto3).

One message per due run, a JSON object (`stashpoint.wake.message`). An SQS FIFO queue
(its name ends in `.fifo`) gets the run id as message group and a deduplication id per run
and wake window, so SQS drops a repeat within its five-minute window too. A Lambda target
is invoked asynchronously (`InvocationType=Event`), one invocation per run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stashpoint.errors import ConfigurationError


class SqsTarget:
    """Sends each message to an SQS queue, ten at a time."""

    def __init__(self, arn: str, client: Any = None) -> None:
        parts = arn.split(":")
        if len(parts) != 6 or parts[2] != "sqs":
            raise ConfigurationError(f"not an SQS queue ARN: {arn!r}")
        self.arn = arn
        """The queue."""
        self.fifo = parts[5].endswith(".fifo")
        """Whether the queue is FIFO (message groups and deduplication ids)."""
        self._region, self._account, self._name = parts[3], parts[4], parts[5]
        self._client = client
        self._url: str | None = None

    def _sqs(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("sqs", region_name=self._region or None)
        return self._client

    def send(self, messages: Sequence[dict[str, Any]]) -> list[bool]:
        """Send the messages; return which were accepted."""
        sqs = self._sqs()
        if self._url is None:
            self._url = sqs.get_queue_url(
                QueueName=self._name, QueueOwnerAWSAccountId=self._account
            )["QueueUrl"]
        sent = [False] * len(messages)
        for start in range(0, len(messages), 10):
            entries = []
            for offset, message in enumerate(messages[start : start + 10]):
                entry: dict[str, Any] = {"Id": str(offset), "MessageBody": json.dumps(message)}
                if self.fifo:
                    entry["MessageGroupId"] = message["run_id"]
                    entry["MessageDeduplicationId"] = message["dedup"]
                entries.append(entry)
            answer = sqs.send_message_batch(QueueUrl=self._url, Entries=entries)
            for ok in answer.get("Successful", []):
                sent[start + int(ok["Id"])] = True
        return sent


class LambdaTarget:
    """Invokes a Lambda function once per message, asynchronously."""

    def __init__(self, arn: str, client: Any = None) -> None:
        parts = arn.split(":")
        if len(parts) < 7 or parts[2] != "lambda":
            raise ConfigurationError(f"not a Lambda function ARN: {arn!r}")
        self.arn = arn
        """The function."""
        self._region = parts[3]
        self._client = client

    def send(self, messages: Sequence[dict[str, Any]]) -> list[bool]:
        """Invoke the function with each message; return which invocations were queued."""
        if self._client is None:
            import boto3

            self._client = boto3.client("lambda", region_name=self._region or None)
        sent = []
        for message in messages:
            answer = self._client.invoke(
                FunctionName=self.arn, InvocationType="Event", Payload=json.dumps(message).encode()
            )
            sent.append(200 <= int(answer.get("StatusCode", 0)) < 300)
        return sent


def target_of(arn: str) -> SqsTarget | LambdaTarget:
    """Return the target an ARN names (an SQS queue or a Lambda function)."""
    service = arn.split(":")[2] if arn.count(":") >= 5 else ""
    if service == "sqs":
        return SqsTarget(arn)
    if service == "lambda":
        return LambdaTarget(arn)
    raise ConfigurationError(f"a wake target is an SQS queue or a Lambda function ARN, not {arn!r}")
