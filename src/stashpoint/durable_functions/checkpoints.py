"""An SDK's checkpoint batch, checked and applied to an execution's operations.

The SDK sends a batch of operation updates (`START`, `SUCCEED`, `FAIL`, `RETRY`,
`CANCEL` on steps, waits, callbacks, child contexts and chained invokes). The service
refuses the whole batch when one update is malformed or not allowed in the operation's
current status (`InvalidDurableUpdate`, with the service's own messages), and otherwise
changes each operation and records its event. The rules of an execution's other changes
(claims, resolving what is due, ends) are in `operations`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stashpoint.durable_functions.operations import (
    CALLBACK,
    CHAINED_INVOKE,
    CONTEXT,
    EXECUTION,
    MAX_ERROR_BYTES,
    OPERATION_TYPES,
    STEP,
    VALID_ACTIONS,
    WAIT,
    Change,
    ExecutionView,
    event_error,
    result_of,
)
from stashpoint.errors import InvalidDurableUpdate

_EVENT_OF_ACTION: Mapping[tuple[str, str], str] = {
    (STEP, "START"): "StepStarted",
    (STEP, "SUCCEED"): "StepSucceeded",
    (STEP, "FAIL"): "StepFailed",
    (CONTEXT, "START"): "ContextStarted",
    (CONTEXT, "SUCCEED"): "ContextSucceeded",
    (CONTEXT, "FAIL"): "ContextFailed",
    (WAIT, "START"): "WaitStarted",
    (WAIT, "CANCEL"): "WaitCancelled",
    (CALLBACK, "START"): "CallbackStarted",
    (CHAINED_INVOKE, "START"): "ChainedInvokeStarted",
}

_STATUS_OF_ACTION = {
    "START": "STARTED",
    "SUCCEED": "SUCCEEDED",
    "FAIL": "FAILED",
    "RETRY": "PENDING",
    "CANCEL": "CANCELLED",
}


def _error_of(update: Mapping[str, Any]) -> dict[str, Any] | None:
    error = update.get("Error")
    if error is None:
        return None
    if not isinstance(error, dict):
        raise InvalidDurableUpdate("Error must be an object")
    if len(json.dumps(error)) > MAX_ERROR_BYTES:
        raise InvalidDurableUpdate(f"Error object size must be less than {MAX_ERROR_BYTES} bytes.")
    return error


def _options(update: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    options = update.get(key)
    if options is not None and not isinstance(options, dict):
        raise InvalidDurableUpdate(f"{key} must be an object")
    return options


def _check_update(update: Any) -> tuple[str, str, str]:
    if not isinstance(update, dict):
        raise InvalidDurableUpdate("an update must be an object")
    op_id, op_type, action = update.get("Id"), update.get("Type"), update.get("Action")
    if not isinstance(op_id, str) or not op_id or len(op_id) > 64:
        raise InvalidDurableUpdate("an update's Id must be 1-64 characters")
    if op_type not in OPERATION_TYPES:
        raise InvalidDurableUpdate("Unknown operation type.")
    if action not in VALID_ACTIONS[op_type]:
        raise InvalidDurableUpdate("Invalid action for the given operation type.")
    for key in ("ParentId", "Name", "SubType", "Payload"):
        value = update.get(key)
        if value is not None and not isinstance(value, str):
            raise InvalidDurableUpdate(f"an update's {key} must be a string")
    return op_id, op_type, action


def _check_batch(updates: list[Any], view: ExecutionView) -> None:
    checked = [_check_update(u) for u in updates]
    _check_execution_last(checked)
    started: set[str] = set()
    last: dict[str, tuple[str, str]] = {}
    for update, (op_id, op_type, action) in zip(updates, checked, strict=True):
        seen = last.get(op_id)
        if seen is not None and not _starts_then_ends(seen, action):
            raise InvalidDurableUpdate("Cannot checkpoint multiple operations with the same ID.")
        _check_parent(update.get("ParentId"), started, view)
        if action == "START":
            started.add(op_id)
        last[op_id] = (op_type, action)


def _check_execution_last(checked: list[tuple[str, str, str]]) -> None:
    """Refuse a batch with more than one EXECUTION update, or one that is not last."""
    executions = [i for i, (_, op_type, _) in enumerate(checked) if op_type == EXECUTION]
    if len(executions) > 1:
        raise InvalidDurableUpdate("Cannot checkpoint multiple EXECUTION updates.")
    if executions and executions[0] != len(checked) - 1:
        raise InvalidDurableUpdate("EXECUTION checkpoint must be the last update.")


def _starts_then_ends(seen: tuple[str, str], action: str) -> bool:
    """Whether an operation seen earlier in a batch may be updated again.

    Only a step or context started there, now ended.
    """
    return seen[0] in (STEP, CONTEXT) and seen[1] == "START" and action != "START"


def _check_parent(parent: Any, started: set[str], view: ExecutionView) -> None:
    """Refuse a parent that is neither started in the batch nor an existing context."""
    if parent is None:
        return
    if parent not in started and parent not in view.operations:
        raise InvalidDurableUpdate("Invalid parent operation id.")
    if parent in view.operations and view.operations[parent]["Type"] != CONTEXT:
        raise InvalidDurableUpdate("Invalid parent operation id.")


def _check_transition(update: Mapping[str, Any], current: Mapping[str, Any] | None) -> None:
    """Refuse an update its operation's current status (or metadata) does not allow."""
    op_type, action = update["Type"], update["Action"]
    if current is not None:
        _check_consistent(update, current)
    status = None if current is None else current["Status"]
    if action == "SUCCEED" and update.get("Error") is not None:
        raise InvalidDurableUpdate("Cannot provide an Error for SUCCEED action.")
    if action == "FAIL" and update.get("Payload") is not None:
        raise InvalidDurableUpdate("Cannot provide a Payload for FAIL action.")
    if op_type == STEP:
        _check_step(update, action, status)
    else:
        _check_other(op_type, action, status, exists=current is not None)


def _check_other(op_type: str, action: str, status: str | None, *, exists: bool) -> None:
    """Refuse a wait's, callback's, invoke's or context's update its status does not allow."""
    if op_type in (WAIT, CALLBACK, CHAINED_INVOKE, CONTEXT) and action == "START":
        if exists:
            raise InvalidDurableUpdate(f"Cannot start a {op_type} that already exist.")
    elif op_type == CONTEXT and status is not None and status != "STARTED":
        raise InvalidDurableUpdate("Invalid current CONTEXT state to close.")
    elif op_type == WAIT and action == "CANCEL" and status != "STARTED":
        raise InvalidDurableUpdate(
            "Cannot cancel a WAIT that does not exist or has already completed."
        )


def _check_consistent(update: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Refuse an update whose type, subtype, name or parent differ from the operation's."""
    for key, what in (("Type", "type"), ("SubType", "subtype"), ("Name", "name")):
        if update.get(key) is not None and update.get(key) != current.get(key):
            raise InvalidDurableUpdate(f"Inconsistent operation {what}.")
    if update.get("ParentId") is not None and update["ParentId"] != current.get("ParentId"):
        raise InvalidDurableUpdate("Inconsistent parent operation id.")


def _check_step(update: Mapping[str, Any], action: str, status: str | None) -> None:
    """Refuse a step's update its status does not allow (`status` None: a new step)."""
    if action == "START" and status is not None and status != "READY":
        raise InvalidDurableUpdate("Invalid current STEP state to start.")
    open_to_close = status is None or status in ("STARTED", "READY")
    if action in ("SUCCEED", "FAIL") and not open_to_close:
        raise InvalidDurableUpdate("Invalid current STEP state to close.")
    if action == "RETRY":
        _check_retry(update, open_to_close)


def _check_retry(update: Mapping[str, Any], open_to_close: bool) -> None:
    """Refuse a step's retry unless it is open, with its options, and not both outcomes."""
    if not open_to_close:
        raise InvalidDurableUpdate("Invalid current STEP state to re-attempt.")
    if update.get("StepOptions") is None:
        raise InvalidDurableUpdate("Invalid StepOptions for the given action.")
    if update.get("Error") is not None and update.get("Payload") is not None:
        raise InvalidDurableUpdate("Cannot provide both error and payload to RETRY a STEP.")


def apply_checkpoint(
    view: ExecutionView,
    updates: list[Any],
    now_ms: int,
    *,
    new_callback_id: Callable[[str], str],
    start_invoke: Callable[[dict[str, Any]], str],
) -> Change:
    """Validate a checkpoint's `updates` against `view` and return what it changes.

    Raises `InvalidDurableUpdate` (nothing changed) for an update the service refuses:
    an unknown type or action, a transition from the wrong status, inconsistent metadata,
    a duplicate id, an unknown parent, an oversized error. `new_callback_id(op_id)` names
    a started callback; `start_invoke(op)` names the execution a chained invoke starts.
    """
    if not isinstance(updates, list):
        raise InvalidDurableUpdate("updates must be a list")
    _check_batch(updates, view)
    change = Change(view.state)
    changed: dict[str, dict[str, Any]] = {}
    for update in updates:
        op_id, op_type = update["Id"], update["Type"]
        current = changed.get(op_id, view.operations.get(op_id))
        _check_transition(update, current)
        error = _error_of(update)
        if op_type == EXECUTION:
            op = _execution_ended(view, update, error)
        else:
            applying = _Applying(
                update, _applied(update, current, now_ms, error), error, now_ms, change,
                new_callback_id, start_invoke,
            )  # fmt: skip
            details = _DETAILS[op_type](applying)
            op = applying.op
            if details is not None:
                change.event(_EVENT_OF_ACTION[(op_type, update["Action"])], now_ms, op, details)
        changed[op["Id"]] = op
        change.put(op)
    return change


@dataclass(frozen=True)
class _Applying:
    """One update being applied: what its event's details are made from."""

    update: Mapping[str, Any]
    """The update, checked."""
    op: dict[str, Any]
    """The operation as the update leaves it (details are added to it)."""
    error: Any
    """The update's error, checked (None: none)."""
    now_ms: int
    """The checkpoint's time, in milliseconds."""
    change: Change
    """The checkpoint's change (a retry records its own event)."""
    new_callback_id: Callable[[str], str]
    """Names a started callback."""
    start_invoke: Callable[[dict[str, Any]], str]
    """Starts the execution a chained invoke names; returns its ARN."""

    @property
    def action(self) -> str:
        """The update's action."""
        return str(self.update["Action"])


def _execution_ended(view: ExecutionView, update: Mapping[str, Any], error: Any) -> dict[str, Any]:
    """Return the execution's operation as an EXECUTION update ends it."""
    action = update["Action"]
    op = dict(view.operations[view.state.execution_op])
    op["Status"] = _STATUS_OF_ACTION[action]
    op["ExecutionDetails"] = dict(op.get("ExecutionDetails") or {})
    if action == "SUCCEED":
        op["ExecutionDetails"]["Result"] = update.get("Payload")
    else:
        op["ExecutionDetails"]["Error"] = error
    return op


def _step_details(applying: _Applying) -> dict[str, Any] | None:
    """Return a step's event details (None: a retry, which records its own event)."""
    op, action, error = applying.op, applying.action, applying.error
    attempt = int(op["StepDetails"].get("Attempt", 0))
    if action == "START":
        return {}
    if action == "RETRY":
        _retry_step(applying, attempt)
        return None
    if action == "SUCCEED":
        return {
            **result_of(applying.update.get("Payload")),
            "RetryDetails": {"CurrentAttempt": attempt + 1},
        }
    return {**event_error(error), "RetryDetails": {"CurrentAttempt": attempt + 1}}


def _retry_step(applying: _Applying, attempt: int) -> None:
    """Schedule a step's next attempt and record its event (a poll's new state, or a failure)."""
    op, update, now_ms = applying.op, applying.update, applying.now_ms
    delay = _delay(update.get("StepOptions"), "NextAttemptDelaySeconds")
    attempt += 1
    op["StepDetails"] = {
        **op["StepDetails"],
        "Attempt": attempt,
        "NextAttemptTimestamp": now_ms + delay * 1000,
    }
    retry = {"CurrentAttempt": attempt, "NextAttemptDelaySeconds": delay}
    if update.get("Payload") is not None:  # a condition's poll: a new state
        details = {**result_of(update.get("Payload")), "RetryDetails": retry}
        applying.change.event("StepSucceeded", now_ms, op, details)
    else:
        details = {**event_error(applying.error), "RetryDetails": retry}
        applying.change.event("StepFailed", now_ms, op, details)


def _context_details(applying: _Applying) -> dict[str, Any]:
    """Return a context's event details."""
    if applying.action == "SUCCEED":
        return result_of(applying.update.get("Payload"))
    if applying.action == "FAIL":
        return event_error(applying.error)
    return {}


def _wait_details(applying: _Applying) -> dict[str, Any]:
    """Return a wait's event details; a started wait is scheduled."""
    if applying.action != "START":
        return event_error(applying.error)
    seconds = _delay(applying.update.get("WaitOptions"), "WaitSeconds")
    end = applying.now_ms + seconds * 1000
    applying.op["WaitDetails"] = {"ScheduledEndTimestamp": end}
    applying.op["_Duration"] = seconds
    return {"Duration": seconds, "ScheduledEndTimestamp": end}


def _callback_details(applying: _Applying) -> dict[str, Any]:
    """Return a callback's event details; it is named and its timeouts kept."""
    callback_options = _options(applying.update, "CallbackOptions") or {}
    timeout = _seconds(callback_options.get("TimeoutSeconds"))
    heartbeat = _seconds(callback_options.get("HeartbeatTimeoutSeconds"))
    callback_id = applying.new_callback_id(applying.update["Id"])
    applying.op["CallbackDetails"] = {"CallbackId": callback_id}
    applying.op["_Timeouts"] = {"Timeout": timeout, "Heartbeat": heartbeat, "Beat": applying.now_ms}
    details: dict[str, Any] = {"CallbackId": callback_id}
    if timeout:
        details["Timeout"] = timeout
    if heartbeat:
        details["HeartbeatTimeout"] = heartbeat
    return details


def _invoke_details(applying: _Applying) -> dict[str, Any]:
    """Return a chained invoke's event details; the execution it names is started."""
    update, op = applying.update, applying.op
    options = _options(update, "ChainedInvokeOptions")
    if options is None or not isinstance(options.get("FunctionName"), str):
        raise InvalidDurableUpdate(
            "Update for CHAINED_INVOKE operation requires ChainedInvokeOptions."
        )
    tenant = options.get("TenantId")
    if tenant is not None and (not isinstance(tenant, str) or not tenant):
        raise InvalidDurableUpdate("TenantId must be a non-empty string.")
    op["ChainedInvokeDetails"] = {}
    op["_Invoke"] = {
        "FunctionName": options["FunctionName"],
        "TenantId": tenant,
        "Input": update.get("Payload"),
    }
    target = applying.start_invoke(op)
    op["_Invoke"]["DurableExecutionArn"] = target
    details: dict[str, Any] = {"FunctionName": options["FunctionName"]}
    if tenant is not None:
        details["TenantId"] = tenant
    if update.get("Payload") is not None:
        details["Input"] = {"Payload": update["Payload"]}
    details["ExecutedVersion"] = "$LATEST"
    details["DurableExecutionArn"] = target
    return details


_DETAILS: dict[str, Callable[[_Applying], dict[str, Any] | None]] = {
    STEP: _step_details,
    CONTEXT: _context_details,
    WAIT: _wait_details,
    CALLBACK: _callback_details,
    CHAINED_INVOKE: _invoke_details,
}
"""How each operation type's update is applied: what its event says."""


def _delay(options: Any, key: str) -> int:
    if not isinstance(options, dict):
        raise InvalidDurableUpdate(f"{key} is required")
    value = options.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidDurableUpdate(f"{key} must be a whole number of seconds >= 0")
    return value


def _seconds(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidDurableUpdate("timeouts must be whole numbers of seconds >= 0")
    return value


def _applied(
    update: Mapping[str, Any], current: Mapping[str, Any] | None, now_ms: int, error: Any
) -> dict[str, Any]:
    op: dict[str, Any] = (
        dict(current)
        if current is not None
        else {
            "Id": update["Id"],
            "Type": update["Type"],
            "StartTimestamp": now_ms,
        }
    )
    for key in ("ParentId", "Name", "SubType"):
        if update.get(key) is not None:
            op[key] = update[key]
    action = update["Action"]
    op["Status"] = _STATUS_OF_ACTION[action]
    if action in ("SUCCEED", "FAIL", "CANCEL"):
        op["EndTimestamp"] = now_ms
    if update["Type"] == STEP:
        op["StepDetails"] = _step_applied(op, update, error)
    elif update["Type"] == CONTEXT:
        op["ContextDetails"] = _context_applied(op, update, error)
    return op


def _step_applied(op: Mapping[str, Any], update: Mapping[str, Any], error: Any) -> dict[str, Any]:
    """Return a step's details as `update` leaves them."""
    action = update["Action"]
    step = dict(op.get("StepDetails") or {"Attempt": 0})
    step.pop("NextAttemptTimestamp", None)
    if action == "SUCCEED":
        step["Result"] = update.get("Payload")
    if action in ("FAIL", "RETRY") and error is not None:
        step["Error"] = error
    if action == "RETRY" and update.get("Payload") is not None:
        step["Result"] = update["Payload"]
    return step


def _context_applied(
    op: Mapping[str, Any], update: Mapping[str, Any], error: Any
) -> dict[str, Any]:
    """Return a context's details as `update` leaves them."""
    action = update["Action"]
    context = dict(op.get("ContextDetails") or {})
    options = update.get("ContextOptions")
    if isinstance(options, dict) and options.get("ReplayChildren"):
        context["ReplayChildren"] = True
    if action == "SUCCEED":
        context["Result"] = update.get("Payload")
    if action == "FAIL":
        context["Error"] = error
    return context
