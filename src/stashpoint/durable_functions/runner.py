"""Run `@durable_execution` handlers anywhere: a laptop, a spot fleet, ECS, AWS Batch.

`DurableFunctions` is what the Lambda service is to a durable function, over a stash:
register handlers by name, `start` executions, and run invocations while executions are
due (`run_due`, `run`, `work`). An invocation takes its execution under a lease
(`DurableService.claim`): any number of workers in any processes share the executions,
and a worker that dies mid-invocation loses nothing: the lease runs out, another worker
takes the execution over, replays its checkpoints and goes on, while the dead worker's
checkpoints (if it was only frozen) are refused. Waits, retries and callback timeouts
are kept on the stash's clock (a `FakeClock` in tests).
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import zlib
from collections.abc import Callable
from typing import Any

from stashpoint.durable_functions import operations as ops
from stashpoint.durable_functions.client import StashClient, invoke, to_datetime
from stashpoint.durable_functions.operations import ExecutionView
from stashpoint.durable_functions.service import (
    DEFAULT_LEASE,
    DEFAULT_SWEEP,
    DurableService,
    execution_id,
)
from stashpoint.errors import (
    DurableExecutionNotFound,
    InvalidArgument,
    StaleCheckpointToken,
    described,
)
from stashpoint.steps import Sleep, ask, run_sync

log = logging.getLogger("stashpoint.durable_functions")

Handler = Callable[[Any, Any], Any]
"""A `@durable_execution`-decorated function: `(event, lambda_context) -> output`."""


def _default_worker() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class DurableFunctions:
    """Registered durable function handlers and the executions they run, over a stash."""

    def __init__(
        self,
        stash: Any,
        *,
        worker_id: str | None = None,
        lease: Any = DEFAULT_LEASE,
        max_invocation_failures: int = 3,
        sweep: Any = DEFAULT_SWEEP,
    ) -> None:
        self.service = DurableService(
            stash, lease=lease, max_invocation_failures=max_invocation_failures, sweep=sweep
        )
        """The checkpoint service the handlers talk to."""
        self.client = StashClient(self.service)
        """The SDK's client of that service."""
        self.worker_id = worker_id or _default_worker()
        """Who this runner's invocations say they are."""
        # Workers that read the same due list take it in different orders, so they do not
        # all race for the same execution first (a lost race costs a write and a read).
        self._order = random.Random(zlib.crc32(self.worker_id.encode()))
        self._handlers: dict[str, Handler] = {}

    # Registry.

    def register(self, name: str, handler: Handler) -> Handler:
        """Register `handler` (a `@durable_execution` function) under the function `name`."""
        if not callable(handler):
            raise InvalidArgument(f"handler must be callable, not {described(handler)}")
        from stashpoint.durable_functions.service import _check_name

        self._handlers[_check_name(name, "function")] = handler
        return handler

    def function(self, name: str) -> Callable[[Handler], Handler]:
        """Return a decorator that registers its handler under `name`."""

        def decorate(handler: Handler) -> Handler:
            return self.register(name, handler)

        return decorate

    @property
    def functions(self) -> list[str]:
        """The registered function names."""
        return sorted(self._handlers)

    # Executions.

    def start(
        self,
        function: str,
        input: Any = None,
        *,
        name: str | None = None,
        timeout: int | None = None,
    ) -> str:
        """Start an execution of `function` with `input` (JSON-able); return its ARN."""
        try:
            payload = None if input is None else json.dumps(input)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"input must be JSON-able ({type(exc).__name__})") from None
        if timeout is not None and (type(timeout) is not int or timeout < 1):
            raise InvalidArgument(
                f"timeout must be an int >= 1 (seconds), not {described(timeout)}"
            )
        return self.service.start(function, payload, name=name, timeout_s=timeout)

    def invoke_once(self, arn: str) -> bool:
        """Run one invocation of the execution if it is due and free; return whether it ran."""
        claimed = self.service.claim(arn, self.worker_id)
        if claimed is None:
            return False
        handler = self._handlers.get(claimed.function)
        if handler is None:
            output: Any = {
                "Status": "FAILED",
                "Error": {
                    "ErrorType": "ResourceNotFoundException",
                    "ErrorMessage": f"no handler is registered for {claimed.function!r}",
                },
            }
        else:
            lease_end = self.service.now_ms() + int(self.service.lease.total_seconds() * 1000)
            try:
                output = invoke(handler, claimed, self.client, deadline_ms=lease_end)
            except Exception as exc:  # the handler crashed: the invocation is retried
                log.warning(
                    "invocation of %s ended without an answer (%s)", claimed.arn, type(exc).__name__
                )
                output = None
        try:
            self.service.finish(claimed.arn, claimed.checkpoint_token, output)
        except StaleCheckpointToken:
            log.warning("invocation of %s was taken over; its answer is dropped", claimed.arn)
        return True

    def run_due(self, *, max_invocations: int = 10_000) -> int:
        """Run invocations while executions are due now; return how many ran."""
        ran = 0
        seen: set[str] | None = None
        while ran < max_invocations:
            due = self.service.due()
            order = list(due)
            if len(order) > 1 and len(order) > max_invocations - ran:
                # Fewer than listed will run: the earliest due first, each worker its own way.
                order = order[: max_invocations - ran]
            self._order.shuffle(order)
            progressed = False
            for arn in order:
                if ran >= max_invocations:
                    break
                try:
                    taken = self.invoke_once(arn)
                except DurableExecutionNotFound:
                    self.service.forget_due(arn)  # deleted or purged: its index item goes too
                    continue
                if taken:
                    ran += 1
                    progressed = True
            # Claims that ran nothing may still have changed what is due (a timeout, a
            # chained invoke's end told to its caller): look again until nothing changes.
            if not progressed and (not due or set(due) == seen):
                return ran
            seen = set(due)
        return ran

    def run(
        self, arn: str, *, max_invocations: int = 10_000, max_wait: float = 3600.0
    ) -> ExecutionView:
        """Run until the execution ends or waits on the outside (a callback); return it.

        Sleeps on the stash's clock until the next wait, retry or timeout is due (at most
        `max_wait` seconds at a time).
        """
        ran = 0
        while ran < max_invocations:
            ran += self.run_due(max_invocations=max_invocations - ran)
            view = self.service.read(arn)
            if view.state.ended:
                return view
            next_due = self.service.next_due_ms()
            if next_due is None:
                return view  # waits on a callback or another execution's outside answer
            delay = max(0.0, (next_due - self.service.now_ms()) / 1000)
            if delay > max_wait:
                return view
            run_sync(ask(Sleep(delay + 0.001)), self.service.stash.driver)
        return self.service.read(arn)

    def work(self, *, stop: Callable[[], bool], idle: float = 1.0) -> int:
        """Run due invocations until `stop()` says so, sleeping `idle` seconds when none is due."""
        ran = 0
        while not stop():
            done = self.run_due()
            ran += done
            if not done:
                run_sync(ask(Sleep(idle)), self.service.stash.driver)
        return ran

    # Outside answers.

    def send_callback_success(self, callback_id: str, result: Any = None) -> None:
        """Complete a callback with `result` (text as is; anything else as JSON)."""
        self.service.callback(callback_id, "success", result=_text(result))

    def send_callback_failure(
        self,
        callback_id: str,
        error_type: str = "Error",
        message: str = "",
        data: str | None = None,
    ) -> None:
        """Fail a callback with an error."""
        error: dict[str, Any] = {"ErrorType": error_type, "ErrorMessage": message}
        if data is not None:
            error["ErrorData"] = data
        self.service.callback(callback_id, "failure", error=error)

    def send_callback_heartbeat(self, callback_id: str) -> None:
        """Tell a callback its answer is still coming (resets its heartbeat timeout)."""
        self.service.callback(callback_id, "heartbeat")

    def stop(self, arn: str) -> ExecutionView:
        """Stop a running execution."""
        return self.service.stop(arn)

    # Reading.

    def describe(self, arn: str) -> dict[str, Any]:
        """Return the execution as Lambda's `GetDurableExecution` does."""
        return describe(self.service.read(arn), arn)

    def history(self, arn: str) -> list[dict[str, Any]]:
        """Return the execution's events as Lambda's `GetDurableExecutionHistory` does."""
        return history(self.service.read(arn))

    def executions(self, function: str | None = None) -> list[str]:
        """Return the ARNs of the executions (of `function`); a deleted or purged one is not."""
        return [arn for arn, _ in self.service.states(function)]

    def pending(self, function: str | None = None) -> list[str]:
        """Return the ARNs of the executions that have not ended (of `function`)."""
        return [arn for arn, state in self.service.states(function) if not state.ended]

    def callbacks(self, arn: str) -> list[dict[str, Any]]:
        """Return the execution's callbacks that wait for an answer (id, name, operation)."""
        view = self.service.read(arn)
        return [
            {
                "CallbackId": op["CallbackDetails"]["CallbackId"],
                "Name": op.get("Name"),
                "Id": op["Id"],
            }
            for op in view.operations.values()
            if op["Type"] == ops.CALLBACK and op["Status"] == "STARTED"
        ]


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"result must be text or JSON-able ({type(exc).__name__})") from None


def describe(view: ExecutionView, arn: str) -> dict[str, Any]:
    """Return a view as Lambda's `GetDurableExecution` response."""
    state = view.state
    op = view.operations[state.execution_op]
    details = op.get("ExecutionDetails") or {}
    out: dict[str, Any] = {
        "DurableExecutionArn": arn,
        "DurableExecutionName": state.name,
        "FunctionArn": f"function:{state.function}",
        "InputPayload": details.get("InputPayload"),
        "Status": state.status,
        "StartTimestamp": to_datetime(state.started_ms),
        "Version": "$LATEST",
    }
    if state.ended_ms is not None:
        out["EndTimestamp"] = to_datetime(state.ended_ms)
    if state.status == ops.SUCCEEDED and details.get("Result") is not None:
        out["Result"] = details["Result"]
    if state.status != ops.SUCCEEDED and details.get("Error"):
        out["Error"] = details["Error"]
    return out


def history(view: ExecutionView) -> list[dict[str, Any]]:
    """Return a view's events as Lambda's history (timestamps as datetimes)."""
    out = []
    for event in view.events:
        shown = dict(event)
        shown["EventTimestamp"] = to_datetime(int(event["EventTimestamp"]))
        out.append(shown)
    return out


__all__ = ["DurableFunctions", "Handler", "describe", "execution_id", "history"]
