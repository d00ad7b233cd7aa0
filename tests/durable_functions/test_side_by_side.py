"""The same handler run by AWS's local testing runner and by stashpoint's runner.

`aws-durable-execution-sdk-python-testing` runs a handler in one process against an
in-process service (here on its SQLite store); `DurableFunctions` runs it against the
stash. For an example of each operation type, the two give the same status, the same
result and the same history: event types and ids in order, and each event's operation
id, name, parent and subtype (the operation ids are the SDK's, so they must agree).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aws_durable_execution_sdk_python_testing")

from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner
from aws_durable_execution_sdk_python_testing.stores.sqlite import SQLiteExecutionStore

import stashpoint
from stashpoint.clock import FakeClock
from stashpoint.durable_functions import DurableFunctions
from tests.durable_functions import conformance_handlers
from tests.durable_functions.conformance_handlers import HANDLERS, TARGETS

EXAMPLES = {
    "1-3": None,  # steps
    "1-11": None,  # a step retried
    "2-3": None,  # waits
    "3-6": "abc",  # nested child contexts
    "4-1": "approval",  # a callback answered from outside
    "5-1": "hi",  # a chained invoke
    "6-1": 3,  # wait_for_condition
    "7-1": "cb",  # wait_for_callback
    "8-1": None,  # parallel
    "9-1": ["World", "Kiro"],  # map
}

_COMPARED = ("EventType", "EventId", "SubType", "Name", "ParentId")


def _shape(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = []
    for event in events:
        fields = tuple(event.get(key) for key in _COMPARED)
        own = event["EventType"].startswith(("Execution", "Invocation"))
        out.append((*fields, None if own else event.get("Id")))
    return out


def _theirs(req_id: str, payload: Any, tmp_path: Path) -> tuple[str, Any, list[tuple[Any, ...]]]:
    store = SQLiteExecutionStore.create_and_initialize(tmp_path / "sdk.sqlite")
    conformance_handlers.ATTEMPTS.clear()
    with DurableFunctionTestRunner(HANDLERS[req_id], store=store) as runner:
        for name, target in TARGETS.items():
            runner.register_durable_function(name, target)
        arn = runner.run_async(input=json.dumps(payload))
        if req_id in ("4-1", "7-1"):
            callback_id = runner.wait_for_callback(arn, timeout=30)
            runner.send_callback_success(callback_id, json.dumps("answer").encode())
        result = runner.wait_for_result(arn, timeout=60)
        events = runner.get_execution_history(arn).to_dict()["Events"]
        value = None if result.result is None else json.loads(result.result)
        return result.status.value, value, _shape(events)


def _ours(req_id: str, payload: Any, url: str) -> tuple[str, Any, list[tuple[Any, ...]]]:
    conformance_handlers.ATTEMPTS.clear()
    clock = FakeClock()
    with stashpoint.open(url, clock=clock) as stash:
        functions = DurableFunctions(stash, lease=timedelta(seconds=60))
        functions.register("handler", HANDLERS[req_id])
        for name, target in TARGETS.items():
            functions.register(name, target)
        arn = functions.start("handler", payload, name="execution-name")
        for _ in range(50):  # bounded
            functions.run_due()
            if functions.service.read(arn).state.ended:
                break
            for callback in functions.callbacks(arn):
                functions.send_callback_success(callback["CallbackId"], json.dumps("answer"))
            due = functions.service.next_due_ms()
            if due is not None:
                clock.advance(max(0.001, (due - functions.service.now_ms()) / 1000))
        described = functions.describe(arn)
        value = json.loads(described["Result"]) if described.get("Result") is not None else None
        return described["Status"], value, _shape(functions.history(arn))


@pytest.mark.parametrize(("req_id", "payload"), EXAMPLES.items(), ids=list(EXAMPLES))
def test_the_sdks_runner_and_ours_agree(
    req_id: str, payload: Any, tmp_path: Path, local_url: tuple[str, dict[str, Any]]
) -> None:
    status, value, history = _theirs(req_id, payload, tmp_path)
    our_status, our_value, our_history = _ours(req_id, payload, local_url[0])
    assert (our_status, our_value) == (status, value)
    assert our_history == history
