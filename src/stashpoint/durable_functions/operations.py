"""An execution's operations and history, and the service's rules that change them.

AWS Lambda durable functions keep, per execution, a table of *operations* (the
execution itself, steps, waits, callbacks, child contexts, chained invokes) and a
*history* of events (`StepStarted`, `WaitSucceeded`, `InvocationCompleted`, ...). The
SDK sends checkpoints (batches of operation updates); the service validates each update,
changes the operation, records the events and answers with the operations it changed.
Between invocations the service resolves what the execution waits on (a wait's end, a
step's next attempt, a callback's result or timeout, a chained invoke's end) and invokes
it again.

This module is those rules, free of I/O and of the SDK: operations and events are plain
dicts in the Lambda API's wire shapes (botocore's `lambda` service model), timestamps in
epoch milliseconds. `executions` stores them in a log; `service` speaks the SDK's types.
Every change is a `Change`: the records one log append stores (the operations it changed,
the events it added) and the execution's new small state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from stashpoint.errors import InvalidDurableUpdate

EXECUTION = "EXECUTION"
CONTEXT = "CONTEXT"
STEP = "STEP"
WAIT = "WAIT"
CALLBACK = "CALLBACK"
CHAINED_INVOKE = "CHAINED_INVOKE"
OPERATION_TYPES = frozenset({EXECUTION, CONTEXT, STEP, WAIT, CALLBACK, CHAINED_INVOKE})
"""The operation types of the service's API."""

VALID_ACTIONS: Mapping[str, frozenset[str]] = {
    STEP: frozenset({"START", "SUCCEED", "FAIL", "RETRY"}),
    CONTEXT: frozenset({"START", "SUCCEED", "FAIL"}),
    WAIT: frozenset({"START", "CANCEL"}),
    CALLBACK: frozenset({"START"}),
    CHAINED_INVOKE: frozenset({"START"}),
    EXECUTION: frozenset({"SUCCEED", "FAIL"}),
}
"""Which actions an update may take on each operation type."""

TERMINAL_OPERATION = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT", "STOPPED"})
"""Operation statuses after which the operation changes no more."""

RUNNING = "RUNNING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
STOPPED = "STOPPED"
TERMINAL_EXECUTION = frozenset({SUCCEEDED, FAILED, TIMED_OUT, STOPPED})
"""Execution statuses that end it."""

MAX_ERROR_BYTES = 32_768
"""Largest error object an update may carry (the service's bound)."""


@dataclass(frozen=True, slots=True)
class Invocation:
    """The invocation that holds an execution: who, since when, under which token."""

    nonce: str
    """The random part of its checkpoint tokens: a token naming another nonce is stale."""
    worker: str
    """Who runs it (a worker id)."""
    started_ms: int
    """When it started."""
    lease_ms: int
    """Until when it holds the execution unless it checkpoints again (then another
    worker may take the execution over, and this one's tokens are refused)."""
    request_id: str
    """The invocation's request id (in `InvocationCompleted`)."""


@dataclass(frozen=True, slots=True)
class ExecutionState:
    """What each log entry of an execution stores beside its records: small, whole."""

    function: str
    """The registered function the execution runs."""
    name: str
    """The execution's name (unique per function)."""
    execution_op: str
    """The id of the execution's own operation."""
    status: str = RUNNING
    """`RUNNING`, `SUCCEEDED`, `FAILED`, `TIMED_OUT` or `STOPPED`."""
    started_ms: int = 0
    """When the execution started."""
    ended_ms: int | None = None
    """When it ended."""
    next_event: int = 1
    """The id the next event takes (events are dense from 1)."""
    invocation: Invocation | None = None
    """The invocation holding it now, if any."""
    ready: bool = True
    """Whether it should be invoked as soon as a worker can (new, or something resolved)."""
    due_ms: int | None = None
    """When the earliest thing it waits on is due (a wait's end, a retry, a timeout)."""
    invocations: int = 0
    """How many invocations it has had."""
    failed_invocations: int = 0
    """Invocations in a row that ended without an answer (a crash, a lost lease)."""
    parent: tuple[str, str] | None = None
    """For a chained invoke's target: the caller's execution id and operation id."""
    client_token: tuple[str, int] | None = None
    """The last checkpoint's client token and the version it wrote (a retried
    checkpoint whose answer was lost gets the same answer)."""
    timeout_s: int | None = None
    """The execution's timeout in seconds, if it has one."""
    parent_told: bool = False
    """For a chained invoke's target that ended: whether its caller has recorded it."""

    def document(self) -> dict[str, Any]:
        """Return the JSON form an entry stores."""
        doc: dict[str, Any] = {
            "function": self.function,
            "name": self.name,
            "execution_op": self.execution_op,
            "status": self.status,
            "started_ms": self.started_ms,
            "ended_ms": self.ended_ms,
            "next_event": self.next_event,
            "ready": self.ready,
            "due_ms": self.due_ms,
            "invocations": self.invocations,
            "failed_invocations": self.failed_invocations,
            "parent": list(self.parent) if self.parent else None,
            "client_token": list(self.client_token) if self.client_token else None,
            "timeout_s": self.timeout_s,
            "parent_told": self.parent_told,
        }
        if self.invocation is not None:
            inv = self.invocation
            doc["invocation"] = {
                "nonce": inv.nonce,
                "worker": inv.worker,
                "started_ms": inv.started_ms,
                "lease_ms": inv.lease_ms,
                "request_id": inv.request_id,
            }
        return doc

    @classmethod
    def parse(cls, doc: Any) -> ExecutionState:
        """Return the state an entry stores; `InvalidDurableUpdate` if it is not one."""
        try:
            inv = doc.get("invocation")
            parent = doc.get("parent")
            token = doc.get("client_token")
            return cls(
                function=_str(doc["function"]),
                name=_str(doc["name"]),
                execution_op=_str(doc["execution_op"]),
                status=_str(doc["status"]),
                started_ms=int(doc["started_ms"]),
                ended_ms=None if doc.get("ended_ms") is None else int(doc["ended_ms"]),
                next_event=int(doc["next_event"]),
                invocation=None
                if inv is None
                else Invocation(
                    _str(inv["nonce"]),
                    _str(inv["worker"]),
                    int(inv["started_ms"]),
                    int(inv["lease_ms"]),
                    _str(inv["request_id"]),
                ),
                ready=bool(doc["ready"]),
                due_ms=None if doc.get("due_ms") is None else int(doc["due_ms"]),
                invocations=int(doc.get("invocations", 0)),
                failed_invocations=int(doc.get("failed_invocations", 0)),
                parent=None if parent is None else (_str(parent[0]), _str(parent[1])),
                client_token=None if token is None else (_str(token[0]), int(token[1])),
                timeout_s=None if doc.get("timeout_s") is None else int(doc["timeout_s"]),
                parent_told=bool(doc.get("parent_told", False)),
            )
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise InvalidDurableUpdate(
                f"not a durable execution's state ({type(exc).__name__})"
            ) from None

    @property
    def ended(self) -> bool:
        """Whether the execution has ended."""
        return self.status in TERMINAL_EXECUTION


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


@dataclass(slots=True)
class ExecutionView:
    """An execution as read from its log: operations by id, history, state."""

    state: ExecutionState
    """The newest entry's state."""
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Operation id -> the operation's latest form (insertion order: first seen first)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """The history, oldest first."""
    callbacks: dict[str, str] = field(default_factory=dict)
    """Callback id -> the operation id holding it."""
    last_changed: list[dict[str, Any]] = field(default_factory=list)
    """The operations the last folded entry changed."""

    def apply(self, records: list[Any], state: ExecutionState) -> None:
        """Fold one entry's records (operations and events) into this view."""
        self.last_changed = []
        for record in records:
            if not isinstance(record, dict):
                raise InvalidDurableUpdate("a durable execution record is not an object")
            op = record.get("op")
            if isinstance(op, dict) and isinstance(op.get("Id"), str):
                self.operations[op["Id"]] = op
                self.last_changed.append(op)
                callback = op.get("CallbackDetails", {}).get("CallbackId")
                if isinstance(callback, str):
                    self.callbacks[callback] = op["Id"]
                continue
            event = record.get("event")
            if isinstance(event, dict):
                self.events.append(event)
                continue
            raise InvalidDurableUpdate("a durable execution record is neither operation nor event")
        self.state = state

    def copy(self) -> ExecutionView:
        """Return a view that later folds do not change."""
        return ExecutionView(
            self.state, dict(self.operations), list(self.events), dict(self.callbacks)
        )


@dataclass(slots=True)
class Change:
    """What one append stores: the operations changed, the events added, the new state."""

    state: ExecutionState
    """The execution's state after the change."""
    operations: list[dict[str, Any]] = field(default_factory=list)
    """Operations in their new form, in the order they changed (one per id)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Events added, with dense ids."""

    def records(self) -> list[dict[str, Any]]:
        """Return the log records of this change (operations first, then events)."""
        return [{"op": op} for op in self.operations] + [{"event": e} for e in self.events]

    def put(self, op: dict[str, Any]) -> None:
        """Record `op`'s new form (replacing an earlier form from this same change)."""
        for i, earlier in enumerate(self.operations):
            if earlier["Id"] == op["Id"]:
                self.operations[i] = op
                return
        self.operations.append(op)

    def event(
        self,
        event_type: str,
        now_ms: int,
        op: Mapping[str, Any] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Add an event of `event_type` about `op` (None: about the execution)."""
        event: dict[str, Any] = {"EventType": event_type}
        if op is not None:
            for key in ("SubType",):
                if op.get(key):
                    event[key] = op[key]
        event["EventId"] = self.state.next_event
        if op is not None:
            event["Id"] = op["Id"]
            for key in ("Name", "ParentId"):
                if op.get(key):
                    event[key] = op[key]
        event["EventTimestamp"] = now_ms
        event[f"{event_type}Details"] = details if details is not None else {}
        self.events.append(event)
        self.state = replace(self.state, next_event=self.state.next_event + 1)


def new_execution(
    *,
    function: str,
    name: str,
    execution_op: str,
    input_payload: str | None,
    now_ms: int,
    timeout_s: int | None = None,
    parent: tuple[str, str] | None = None,
) -> Change:
    """Return the change that creates an execution: its operation and `ExecutionStarted`."""
    state = ExecutionState(
        function=function,
        name=name,
        execution_op=execution_op,
        started_ms=now_ms,
        parent=parent,
        timeout_s=timeout_s,
    )
    op: dict[str, Any] = {
        "Id": execution_op,
        "Type": EXECUTION,
        "Status": "STARTED",
        "Name": name,
        "StartTimestamp": now_ms,
        "ExecutionDetails": {"InputPayload": input_payload},
    }
    change = Change(state)
    change.put(op)
    details: dict[str, Any] = {"Input": {"Payload": input_payload}} if input_payload else {}
    if timeout_s is not None:
        details["ExecutionTimeout"] = timeout_s
    change.event("ExecutionStarted", now_ms, {"Id": execution_op, "Name": name}, details)
    return change


def result_of(payload: str | None) -> dict[str, Any]:
    """Return an event's `Result` detail for `payload` (none when there is no payload)."""
    return {} if payload is None else {"Result": {"Payload": payload, "Truncated": False}}


def event_error(error: dict[str, Any] | None) -> dict[str, Any]:
    """Return an event's `Error` detail for `error` (an empty one when there is none)."""
    return {"Error": {"Payload": error if error is not None else {}, "Truncated": False}}


def claim(view: ExecutionView, invocation: Invocation, now_ms: int) -> Change:
    """Return the change by which `invocation` takes the execution (resolving what is due).

    Waits that ended become `WaitSucceeded`, steps whose next attempt is due become
    `READY`, callbacks past their timeout become `CallbackTimedOut`; the execution is no
    longer `ready` (this invocation sees everything resolved so far).
    """
    change = resolve_due(view, now_ms)
    change.state = replace(
        change.state,
        invocation=invocation,
        ready=False,
        invocations=change.state.invocations + 1,
    )
    return change


def resolve_due(view: ExecutionView, now_ms: int) -> Change:
    """Return the change that resolves what is due at `now_ms` (may store nothing)."""
    change = Change(view.state)
    for op in view.operations.values():
        status, op_type = op["Status"], op["Type"]
        if op_type == WAIT and status == "STARTED":
            end = op.get("WaitDetails", {}).get("ScheduledEndTimestamp")
            if isinstance(end, int) and end <= now_ms:
                done = {**op, "Status": "SUCCEEDED", "EndTimestamp": now_ms}
                change.put(done)
                change.event("WaitSucceeded", now_ms, done, {"Duration": op.get("_Duration", 0)})
        elif op_type == STEP and status == "PENDING":
            at = op.get("StepDetails", {}).get("NextAttemptTimestamp")
            if isinstance(at, int) and at <= now_ms:
                change.put({**op, "Status": "READY"})
        elif op_type == CALLBACK and status == "STARTED":
            kind = _callback_expired(op, now_ms)
            if kind is not None:
                error = {"ErrorType": kind, "ErrorMessage": f"{kind.split('.')[1]} exceeded"}
                done = {
                    **op,
                    "Status": "TIMED_OUT",
                    "EndTimestamp": now_ms,
                    "CallbackDetails": {**op["CallbackDetails"], "Error": error},
                }
                change.put(done)
                change.event("CallbackTimedOut", now_ms, done, event_error(error))
    if change.operations:
        change.state = replace(change.state, ready=True)
    return change


def _callback_expired(op: Mapping[str, Any], now_ms: int) -> str | None:
    timeouts = op.get("_Timeouts") or {}
    timeout, heartbeat = timeouts.get("Timeout") or 0, timeouts.get("Heartbeat") or 0
    if timeout and op["StartTimestamp"] + timeout * 1000 <= now_ms:
        return "Callback.Timeout"
    if heartbeat and int(timeouts.get("Beat", op["StartTimestamp"])) + heartbeat * 1000 <= now_ms:
        return "Callback.Heartbeat"
    return None


def due_of(view: ExecutionView) -> int | None:
    """Return when the earliest thing the execution waits on is due (None: nothing timed)."""
    times: list[int] = []
    for op in view.operations.values():
        status, op_type = op["Status"], op["Type"]
        if op_type == WAIT and status == "STARTED":
            times.append(int(op["WaitDetails"]["ScheduledEndTimestamp"]))
        elif op_type == STEP and status == "PENDING":
            times.append(int(op["StepDetails"]["NextAttemptTimestamp"]))
        elif op_type == CALLBACK and status == "STARTED":
            timeouts = op.get("_Timeouts") or {}
            if timeouts.get("Timeout"):
                times.append(op["StartTimestamp"] + timeouts["Timeout"] * 1000)
            if timeouts.get("Heartbeat"):
                times.append(int(timeouts.get("Beat", 0)) + timeouts["Heartbeat"] * 1000)
    return min(times) if times else None


def end_invocation(view: ExecutionView, output: Any, now_ms: int) -> Change:
    """Return the change that records an invocation's answer (`InvocationCompleted`, ...).

    `output` is what the handler returned (`{"Status": "SUCCEEDED" | "FAILED" |
    "PENDING", "Result": ..., "Error": ...}`) or None when it raised (a crash the service
    retries). A terminal answer ends the execution (`ExecutionSucceeded` / `Failed`).
    """
    state = view.state
    inv = state.invocation
    change = Change(state)
    details: dict[str, Any] = {}
    if inv is not None:
        details = {
            "StartTimestamp": inv.started_ms,
            "EndTimestamp": now_ms,
            "RequestId": inv.request_id,
        }
    status = output.get("Status") if isinstance(output, dict) else None
    if status not in ("SUCCEEDED", "FAILED", "PENDING"):
        error = {
            "ErrorType": "Runtime.ExitError",
            "ErrorMessage": "the invocation ended without an answer",
        }
        if isinstance(output, dict) and isinstance(output.get("Error"), dict):
            error = output["Error"]
        details["Error"] = {"Payload": error, "Truncated": False}
    change.event("InvocationCompleted", now_ms, None, details)
    change.state = replace(change.state, invocation=None)
    execution_op = view.operations[state.execution_op]
    if status == "SUCCEEDED":
        result = output.get("Result")
        if not result:  # a large result was checkpointed with the EXECUTION update
            result = execution_op.get("ExecutionDetails", {}).get("Result")
        return _ended(change, view, SUCCEEDED, now_ms, result=result)
    if status == "FAILED":
        error = output.get("Error")
        if not isinstance(error, dict):
            error = execution_op.get("ExecutionDetails", {}).get("Error")
        return _ended(change, view, FAILED, now_ms, error=error)
    if status == "PENDING":
        change.state = replace(change.state, failed_invocations=0)
        due = resolve_due(view, now_ms)
        for op in due.operations:
            change.put(op)
        for event in due.events:
            change.event(event["EventType"], now_ms, event, event[f"{event['EventType']}Details"])
        change.state = replace(
            change.state,
            ready=change.state.ready or bool(due.operations),
            due_ms=due_of(_after(view, change)),
        )
        return change
    change.state = replace(
        change.state, ready=True, failed_invocations=change.state.failed_invocations + 1
    )
    return change


def _after(view: ExecutionView, change: Change) -> ExecutionView:
    after = view.copy()
    for op in change.operations:
        after.operations[op["Id"]] = op
    return after


def _ended(
    change: Change,
    view: ExecutionView,
    status: str,
    now_ms: int,
    *,
    result: Any = None,
    error: Any = None,
) -> Change:
    op = dict(view.operations[view.state.execution_op])
    op["Status"] = status
    op["EndTimestamp"] = now_ms
    details: dict[str, Any]
    if status == SUCCEEDED:
        op["ExecutionDetails"] = {**op.get("ExecutionDetails", {}), "Result": result}
        details = result_of(result) or {"Result": {}}
        change.put(op)
        change.event("ExecutionSucceeded", now_ms, _own(op), details)
    else:
        error = error if isinstance(error, dict) else {}
        op["ExecutionDetails"] = {**op.get("ExecutionDetails", {}), "Error": error}
        change.put(op)
        event_type = {
            FAILED: "ExecutionFailed",
            TIMED_OUT: "ExecutionTimedOut",
            STOPPED: "ExecutionStopped",
        }[status]
        change.event(event_type, now_ms, _own(op), event_error(error))
    change.state = replace(
        change.state, status=status, ended_ms=now_ms, ready=False, due_ms=None, invocation=None
    )
    return change


def _own(op: Mapping[str, Any]) -> dict[str, Any]:
    """Return the execution's own operation as its events name it (id and name)."""
    return {"Id": op["Id"], "Name": op.get("Name")}


def end_execution(view: ExecutionView, status: str, error: dict[str, Any], now_ms: int) -> Change:
    """Return the change that ends a running execution from outside (stop, timeout, crashes)."""
    change = Change(view.state)
    return _ended(change, view, status, now_ms, error=error)


def complete_callback(
    view: ExecutionView,
    op_id: str,
    outcome: str,
    now_ms: int,
    *,
    result: str | None = None,
    error: dict[str, Any] | None = None,
) -> Change:
    """Return the change a callback's answer makes: `success`, `failure` or `heartbeat`.

    Raises `InvalidDurableUpdate` if the callback is no longer waiting.
    """
    op = view.operations[op_id]
    if op["Status"] != "STARTED" or view.state.ended:
        raise InvalidDurableUpdate("the callback is no longer waiting")
    change = Change(view.state)
    if outcome == "heartbeat":
        change.put({**op, "_Timeouts": {**(op.get("_Timeouts") or {}), "Beat": now_ms}})
        change.state = replace(change.state, due_ms=None)
        change.state = replace(change.state, due_ms=due_of(_after(view, change)))
        return change
    callback = dict(op["CallbackDetails"])
    if outcome == "success":
        callback["Result"] = result
        done = {**op, "Status": "SUCCEEDED", "EndTimestamp": now_ms, "CallbackDetails": callback}
        change.put(done)
        change.event("CallbackSucceeded", now_ms, done, result_of(result) or {"Result": {}})
    else:
        callback["Error"] = error or {}
        done = {**op, "Status": "FAILED", "EndTimestamp": now_ms, "CallbackDetails": callback}
        change.put(done)
        change.event("CallbackFailed", now_ms, done, event_error(error or {}))
    change.state = replace(change.state, ready=True)
    change.state = replace(change.state, due_ms=due_of(_after(view, change)))
    return change


def complete_invoke(view: ExecutionView, op_id: str, child: ExecutionView, now_ms: int) -> Change:
    """Return the change the end of a chained invoke's target makes in its caller."""
    op = view.operations[op_id]
    change = Change(view.state)
    if op["Status"] != "STARTED":
        return change
    child_op = child.operations[child.state.execution_op]
    details = child_op.get("ExecutionDetails") or {}
    status = child.state.status
    invoke = dict(op.get("ChainedInvokeDetails") or {})
    if status == SUCCEEDED:
        invoke["Result"] = details.get("Result")
        done = {**op, "Status": "SUCCEEDED", "EndTimestamp": now_ms, "ChainedInvokeDetails": invoke}
        change.put(done)
        change.event("ChainedInvokeSucceeded", now_ms, done, result_of(details.get("Result")))
    else:
        error = details.get("Error") or {}
        invoke["Error"] = error
        op_status = {FAILED: "FAILED", TIMED_OUT: "TIMED_OUT", STOPPED: "STOPPED"}[status]
        event_type = {
            FAILED: "ChainedInvokeFailed",
            TIMED_OUT: "ChainedInvokeTimedOut",
            STOPPED: "ChainedInvokeStopped",
        }[status]
        done = {**op, "Status": op_status, "EndTimestamp": now_ms, "ChainedInvokeDetails": invoke}
        change.put(done)
        change.event(event_type, now_ms, done, event_error(error))
    change.state = replace(change.state, ready=True)
    return change


def public_operation(op: Mapping[str, Any]) -> dict[str, Any]:
    """Return an operation without the service's private fields (those starting with `_`)."""
    return {k: v for k, v in op.items() if not k.startswith("_")}
