"""The SDK's side: `DurableServiceClient` over `DurableService`, and a handler's invocation.

`aws-durable-execution-sdk-python` talks to its service through two calls, `checkpoint`
and `get_execution_state`; a handler given a `DurableExecutionInvocationInputWithClient`
uses the client it carries. `StashClient` is that client: it turns the SDK's objects
into the service's wire dicts and back, and the service's typed errors into the SDK's
(`CheckpointError`: a refused update fails the execution as Lambda's 4xx does; a stale
token or an unreachable store ends the invocation, which is retried).

Imported only where the SDK is installed (`pip install 'stashpoint[lambda-durable]'`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from aws_durable_execution_sdk_python.exceptions import (
    CheckpointError,
    DurableApiErrorCategory,
    GetExecutionStateError,
)
from aws_durable_execution_sdk_python.execution import (
    DurableExecutionInvocationInputWithClient,
    InitialExecutionState,
)
from aws_durable_execution_sdk_python.lambda_service import (
    CheckpointOutput,
    CheckpointUpdatedExecutionState,
    Operation,
    OperationUpdate,
    StateOutput,
)

from stashpoint.durable_functions.service import Claimed, DurableService
from stashpoint.errors import InvalidDurableUpdate, StashpointError

_TIMESTAMPS = (
    ("StartTimestamp",),
    ("EndTimestamp",),
    ("StepDetails", "NextAttemptTimestamp"),
    ("WaitDetails", "ScheduledEndTimestamp"),
)


def to_datetime(ms: int) -> datetime.datetime:
    """Return the aware UTC datetime of epoch milliseconds."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def sdk_operation(op: dict[str, Any]) -> Operation:
    """Return the SDK's `Operation` of a wire operation (timestamps as datetimes)."""
    data: dict[str, Any] = dict(op)
    for path in _TIMESTAMPS:
        holder = data
        for key in path[:-1]:
            inner = holder.get(key)
            if not isinstance(inner, dict):
                holder = {}
                break
            holder[key] = dict(inner)
            holder = holder[key]
        value = holder.get(path[-1])
        if isinstance(value, int):
            holder[path[-1]] = to_datetime(value)
    return Operation.from_dict(data)


def _sdk_error(
    exc: StashpointError, kind: type[CheckpointError] | type[GetExecutionStateError]
) -> Exception:
    category = (
        DurableApiErrorCategory.EXECUTION
        if isinstance(exc, InvalidDurableUpdate)
        else DurableApiErrorCategory.INVOCATION
    )
    code = (
        "InvalidParameterValueException"
        if isinstance(exc, InvalidDurableUpdate)
        else type(exc).__name__
    )
    return kind(str(exc), category, {"Code": code, "Message": str(exc)})


class StashClient:
    """The SDK's `DurableServiceClient`, answered by a `DurableService`."""

    def __init__(self, service: DurableService) -> None:
        self.service = service
        """The service the SDK's calls go to."""

    def checkpoint(
        self,
        durable_execution_arn: str,
        checkpoint_token: str,
        updates: list[OperationUpdate],
        client_token: str | None,
    ) -> CheckpointOutput:
        """Apply a checkpoint (the SDK's call)."""
        try:
            token, changed = self.service.checkpoint(
                durable_execution_arn,
                checkpoint_token,
                [dict(update.to_dict()) for update in updates],
                client_token,
            )
        except StashpointError as exc:
            raise _sdk_error(exc, CheckpointError) from None
        return CheckpointOutput(
            checkpoint_token=token,
            new_execution_state=CheckpointUpdatedExecutionState(
                operations=[sdk_operation(op) for op in changed]
            ),
        )

    def get_execution_state(
        self,
        durable_execution_arn: str,
        checkpoint_token: str,
        next_marker: str,
        max_items: int = 1000,
    ) -> StateOutput:
        """Return a page of the execution's operations (the SDK's call)."""
        try:
            page, marker = self.service.state(
                durable_execution_arn, checkpoint_token, next_marker or None, max_items
            )
        except StashpointError as exc:
            raise _sdk_error(exc, GetExecutionStateError) from None
        return StateOutput(operations=[sdk_operation(op) for op in page], next_marker=marker)


@dataclass
class LambdaContext:
    """The Lambda context a handler run off Lambda is given."""

    aws_request_id: str
    """The invocation's request id."""
    function_name: str | None = None
    """The registered function's name."""
    deadline_ms: int | None = None
    """When the invocation's lease runs out (epoch milliseconds)."""
    now_ms: Callable[[], int] | None = None
    """The clock `get_remaining_time_in_millis` reads."""
    log_group_name: str | None = None
    log_stream_name: str | None = None
    memory_limit_in_mb: str | None = None
    function_version: str | None = "$LATEST"
    invoked_function_arn: str | None = None
    tenant_id: str | None = None
    client_context: Any | None = None
    identity: Any | None = None

    def get_remaining_time_in_millis(self) -> int:
        """Return how long the invocation may still run."""
        if self.deadline_ms is None or self.now_ms is None:
            return 900_000
        return max(0, self.deadline_ms - self.now_ms())

    def log(self, msg: str) -> None:
        """Lambda's `context.log`: to the `stashpoint.durable_functions` logger."""
        import logging

        logging.getLogger("stashpoint.durable_functions").info("%s", msg)


def invoke(
    handler: Callable[[Any, Any], Any],
    claimed: Claimed,
    client: StashClient,
    *,
    deadline_ms: int | None = None,
) -> MutableMapping[str, Any]:
    """Run one invocation of `handler` (a `@durable_execution` function) for `claimed`."""
    event = DurableExecutionInvocationInputWithClient(
        durable_execution_arn=claimed.arn,
        checkpoint_token=claimed.checkpoint_token,
        initial_execution_state=InitialExecutionState(
            operations=[sdk_operation(op) for op in claimed.operations], next_marker=""
        ),
        service_client=client,
    )
    context = LambdaContext(
        aws_request_id=claimed.request_id,
        function_name=claimed.function,
        deadline_ms=deadline_ms,
        now_ms=client.service.now_ms,
    )
    output: MutableMapping[str, Any] = handler(event, context)
    return output
