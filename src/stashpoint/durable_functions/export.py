"""An execution whole, payloads included, as one JSON document (`stashpoint durable export`).

What Lambda's `GetDurableExecution`, `GetDurableExecutionState` and
`GetDurableExecutionHistory` give together, in plain JSON (times as epoch milliseconds, as
the service's wire shapes have them): for an archive, an audit, or moving an execution's
record out of the stash before a purge. Needs no SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stashpoint.durable_functions import operations as ops
from stashpoint.durable_functions.service import DurableService

if TYPE_CHECKING:
    from stashpoint.stash import Stash


def exported(stash: Stash, arn: str) -> dict[str, Any]:
    """Return the execution `arn` names: its state, every operation and every event.

    `DurableExecutionNotFound` if there is none (or it was deleted or purged).
    """
    view = DurableService(stash).read(arn)
    state = view.state
    details = view.operations[state.execution_op].get("ExecutionDetails") or {}
    return {
        "arn": arn,
        "function": state.function,
        "name": state.name,
        "status": state.status,
        "started_ms": state.started_ms,
        "ended_ms": state.ended_ms,
        "invocations": state.invocations,
        "input": details.get("InputPayload"),
        "result": details.get("Result") if state.status == ops.SUCCEEDED else None,
        "error": details.get("Error") if state.status != ops.SUCCEEDED else None,
        "operations": [ops.public_operation(op) for op in view.operations.values()],
        "events": [dict(event) for event in view.events],
    }
