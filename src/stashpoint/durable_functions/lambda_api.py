"""Lambda's durable execution API calls, answered from a stash: boto3's shapes, no AWS.

Code written against boto3's `lambda` client for durable executions (a callback sender,
a status page, AWS's conformance validator) takes a `LambdaApi` instead: the same method
names and keyword arguments, the same response shapes, over `DurableFunctions`.
"""

from __future__ import annotations

from typing import Any

from stashpoint.durable_functions.runner import DurableFunctions, describe, history
from stashpoint.errors import InvalidArgument, described


class LambdaApi:
    """The durable execution calls of boto3's `lambda` client, over `DurableFunctions`."""

    def __init__(self, functions: DurableFunctions) -> None:
        self.functions = functions
        """The runner whose executions these calls read and answer."""

    def get_durable_execution(self, *, DurableExecutionArn: str) -> dict[str, Any]:
        """`GetDurableExecution`."""
        view = self.functions.service.read(DurableExecutionArn)
        return describe(view, DurableExecutionArn)

    def get_durable_execution_history(
        self,
        *,
        DurableExecutionArn: str,
        IncludeExecutionData: bool = True,
        **_: Any,
    ) -> dict[str, Any]:
        """`GetDurableExecutionHistory` (every event, in one page)."""
        return {"Events": history(self.functions.service.read(DurableExecutionArn))}

    def send_durable_execution_callback_success(
        self,
        *,
        CallbackId: str,
        Result: bytes | str | None = None,
    ) -> dict[str, Any]:
        """`SendDurableExecutionCallbackSuccess`."""
        self.functions.send_callback_success(CallbackId, _text(Result))
        return {}

    def send_durable_execution_callback_failure(
        self,
        *,
        CallbackId: str,
        Error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`SendDurableExecutionCallbackFailure`."""
        error = dict(Error or {})
        self.functions.service.callback(CallbackId, "failure", error=error)
        return {}

    def send_durable_execution_callback_heartbeat(self, *, CallbackId: str) -> dict[str, Any]:
        """`SendDurableExecutionCallbackHeartbeat`."""
        self.functions.send_callback_heartbeat(CallbackId)
        return {}

    def stop_durable_execution(self, *, DurableExecutionArn: str, **_: Any) -> dict[str, Any]:
        """`StopDurableExecution`."""
        view = self.functions.stop(DurableExecutionArn)
        return {"StopTimestamp": describe(view, DurableExecutionArn).get("EndTimestamp")}

    def list_durable_executions_by_function(self, *, FunctionName: str, **_: Any) -> dict[str, Any]:
        """`ListDurableExecutionsByFunction` (every execution, in one page)."""
        out = []
        for arn in self.functions.executions(FunctionName):
            shown = describe(self.functions.service.read(arn), arn)
            out.append(
                {
                    k: shown[k]
                    for k in (
                        "DurableExecutionArn",
                        "DurableExecutionName",
                        "Status",
                        "StartTimestamp",
                    )
                    if k in shown
                }
            )
        return {"DurableExecutions": out}


def _text(value: bytes | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument("Result must be UTF-8 text") from None
    raise InvalidArgument(f"Result must be bytes or text, not {described(value)}")
