"""The service's rules, scripted: no storage, no SDK, time as an argument.

`operations` is the one engine every checkpoint, claim, wake and answer goes through;
these tests drive it with wire dicts and epoch milliseconds and check what each change
stores (operations, events, state) and what it refuses.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stashpoint.durable_functions import operations as ops
from stashpoint.durable_functions.checkpoints import apply_checkpoint
from stashpoint.durable_functions.operations import ExecutionView, Invocation
from stashpoint.errors import InvalidDurableUpdate, StashpointError

T0 = 1_767_225_600_000


def _view() -> ExecutionView:
    change = ops.new_execution(
        function="f", name="n", execution_op="exec", input_payload='"in"', now_ms=T0
    )
    view = ExecutionView(change.state)
    view.apply(change.records(), change.state)
    return view


def _held(view: ExecutionView, now: int = T0) -> ExecutionView:
    """The view with an invocation holding it."""
    change = ops.claim(view, Invocation("a" * 24, "w", now, now + 60_000, "req"), now)
    view.apply(change.records(), change.state)
    return view


def _apply(view: ExecutionView, updates: list[dict[str, Any]], now: int = T0) -> ops.Change:
    change = apply_checkpoint(
        view,
        updates,
        now,
        new_callback_id=lambda op_id: f"cb-{op_id}",
        start_invoke=lambda op: f"target-{op['Id']}",
    )
    view.apply(change.records(), change.state)
    return change


def _types(change: ops.Change) -> list[str]:
    return [e["EventType"] for e in change.events]


def test_a_new_execution_starts_with_its_operation_and_event_one() -> None:
    view = _view()
    assert view.events[0]["EventId"] == 1
    assert view.events[0]["EventType"] == "ExecutionStarted"
    assert view.events[0]["ExecutionStartedDetails"]["Input"]["Payload"] == '"in"'
    assert view.operations["exec"]["Type"] == "EXECUTION"
    assert view.state.ready and view.state.next_event == 2


def test_a_step_started_and_succeeded_in_one_batch_is_two_events_with_dense_ids() -> None:
    view = _held(_view())
    change = _apply(
        view,
        [
            {"Id": "s1", "Type": "STEP", "Action": "START", "SubType": "Step"},
            {"Id": "s1", "Type": "STEP", "Action": "SUCCEED", "Payload": '"r"'},
        ],
    )
    assert _types(change) == ["StepStarted", "StepSucceeded"]
    assert [e["EventId"] for e in change.events] == [2, 3]
    assert view.operations["s1"]["Status"] == "SUCCEEDED"
    assert view.operations["s1"]["StepDetails"]["Result"] == '"r"'
    assert change.events[1]["StepSucceededDetails"]["RetryDetails"] == {"CurrentAttempt": 1}


def test_a_retry_waits_for_its_time_then_the_step_is_ready_again() -> None:
    view = _held(_view())
    _apply(view, [{"Id": "s", "Type": "STEP", "Action": "START"}])
    change = _apply(
        view,
        [
            {
                "Id": "s",
                "Type": "STEP",
                "Action": "RETRY",
                "Error": {"ErrorType": "E", "ErrorMessage": "m"},
                "StepOptions": {"NextAttemptDelaySeconds": 5},
            }
        ],
    )
    assert _types(change) == ["StepFailed"]
    assert change.events[0]["StepFailedDetails"]["RetryDetails"] == {
        "CurrentAttempt": 1,
        "NextAttemptDelaySeconds": 5,
    }
    assert view.operations["s"]["Status"] == "PENDING"
    assert ops.due_of(view) == T0 + 5_000
    assert ops.resolve_due(view, T0 + 4_999).operations == []  # not yet
    ready = ops.resolve_due(view, T0 + 5_000)
    assert [op["Status"] for op in ready.operations] == ["READY"]
    assert ready.events == []  # a step made ready again has no event of its own
    assert ready.state.ready


def test_a_wait_ends_at_its_time_with_wait_succeeded() -> None:
    view = _held(_view())
    _apply(
        view, [{"Id": "w", "Type": "WAIT", "Action": "START", "WaitOptions": {"WaitSeconds": 3}}]
    )
    end = ops.end_invocation(view, {"Status": "PENDING"}, T0 + 10)
    assert [e["EventType"] for e in end.events] == ["InvocationCompleted"]
    assert end.state.due_ms == T0 + 3_000 and end.state.invocation is None
    view.apply(end.records(), end.state)
    woke = ops.resolve_due(view, T0 + 3_000)
    assert [e["EventType"] for e in woke.events] == ["WaitSucceeded"]
    assert woke.events[0]["WaitSucceededDetails"] == {"Duration": 3}


@pytest.mark.parametrize(
    ("options", "late", "kind"),
    [
        ({"TimeoutSeconds": 5}, 5_000, "Callback.Timeout"),
        ({"HeartbeatTimeoutSeconds": 2}, 2_000, "Callback.Heartbeat"),
    ],
)
def test_a_callback_times_out_by_its_timeout_or_its_heartbeat(
    options: dict[str, int], late: int, kind: str
) -> None:
    view = _held(_view())
    change = _apply(
        view, [{"Id": "c", "Type": "CALLBACK", "Action": "START", "CallbackOptions": options}]
    )
    assert change.events[0]["CallbackStartedDetails"]["CallbackId"] == "cb-c"
    assert ops.resolve_due(view, T0 + late - 1).events == []
    timed_out = ops.resolve_due(view, T0 + late)
    assert [e["EventType"] for e in timed_out.events] == ["CallbackTimedOut"]
    assert timed_out.events[0]["CallbackTimedOutDetails"]["Error"]["Payload"]["ErrorType"] == kind


def test_a_heartbeat_moves_the_heartbeat_deadline() -> None:
    view = _held(_view())
    _apply(
        view,
        [
            {
                "Id": "c",
                "Type": "CALLBACK",
                "Action": "START",
                "CallbackOptions": {"HeartbeatTimeoutSeconds": 2},
            }
        ],
    )
    beat = ops.complete_callback(view, "c", "heartbeat", T0 + 1_500)
    assert beat.events == [] and beat.state.due_ms == T0 + 3_500
    view.apply(beat.records(), beat.state)
    assert ops.resolve_due(view, T0 + 2_000).events == []


def test_an_answered_callback_cannot_be_answered_again() -> None:
    view = _held(_view())
    _apply(view, [{"Id": "c", "Type": "CALLBACK", "Action": "START"}])
    done = ops.complete_callback(view, "c", "success", T0, result='"yes"')
    assert [e["EventType"] for e in done.events] == ["CallbackSucceeded"] and done.state.ready
    view.apply(done.records(), done.state)
    with pytest.raises(InvalidDurableUpdate):
        ops.complete_callback(view, "c", "failure", T0, error={"ErrorType": "E"})


def test_an_invocation_without_an_answer_is_recorded_and_counted() -> None:
    view = _held(_view())
    lost = ops.end_invocation(view, None, T0 + 1)
    details = lost.events[0]["InvocationCompletedDetails"]
    assert details["Error"]["Payload"]["ErrorType"] == "Runtime.ExitError"
    assert lost.state.failed_invocations == 1 and lost.state.ready and not lost.state.ended


def test_a_terminal_answer_ends_the_execution_after_invocation_completed() -> None:
    view = _held(_view())
    done = ops.end_invocation(view, {"Status": "SUCCEEDED", "Result": '"ok"'}, T0 + 1)
    assert _types(done) == ["InvocationCompleted", "ExecutionSucceeded"]
    assert done.state.status == "SUCCEEDED" and done.state.ended
    assert done.events[1]["ExecutionSucceededDetails"]["Result"]["Payload"] == '"ok"'


HOSTILE: list[tuple[str, Any]] = [
    ("not a list", {"Id": "s"}),
    ("not an object", ["STEP"]),
    ("no id", [{"Type": "STEP", "Action": "START"}]),
    ("long id", [{"Id": "x" * 65, "Type": "STEP", "Action": "START"}]),
    ("unknown type", [{"Id": "s", "Type": "LAMBDA", "Action": "START"}]),
    ("wrong action", [{"Id": "s", "Type": "WAIT", "Action": "SUCCEED"}]),
    ("payload not text", [{"Id": "s", "Type": "STEP", "Action": "START", "Payload": 3}]),
    ("unknown parent", [{"Id": "s", "Type": "STEP", "Action": "START", "ParentId": "nope"}]),
    (
        "twice in a batch",
        [{"Id": "w", "Type": "WAIT", "Action": "START", "WaitOptions": {"WaitSeconds": 1}}] * 2,
    ),
    (
        "execution not last",
        [
            {"Id": "exec", "Type": "EXECUTION", "Action": "SUCCEED"},
            {"Id": "s", "Type": "STEP", "Action": "START"},
        ],
    ),
    ("close an unknown wait", [{"Id": "w", "Type": "WAIT", "Action": "CANCEL"}]),
    (
        "negative wait",
        [{"Id": "w", "Type": "WAIT", "Action": "START", "WaitOptions": {"WaitSeconds": -1}}],
    ),
    ("retry without options", [{"Id": "s", "Type": "STEP", "Action": "RETRY"}]),
    (
        "succeed with an error",
        [{"Id": "s", "Type": "STEP", "Action": "SUCCEED", "Error": {"ErrorType": "E"}}],
    ),
    ("fail with a payload", [{"Id": "s", "Type": "STEP", "Action": "FAIL", "Payload": "x"}]),
    (
        "error too large",
        [{"Id": "s", "Type": "STEP", "Action": "FAIL", "Error": {"ErrorMessage": "x" * 40_000}}],
    ),
    ("invoke without options", [{"Id": "i", "Type": "CHAINED_INVOKE", "Action": "START"}]),
    (
        "callback timeout not a number",
        [
            {
                "Id": "c",
                "Type": "CALLBACK",
                "Action": "START",
                "CallbackOptions": {"TimeoutSeconds": "5"},
            }
        ],
    ),
]


@pytest.mark.parametrize(("why", "updates"), HOSTILE, ids=[w for w, _ in HOSTILE])
def test_a_hostile_update_is_refused_and_changes_nothing(why: str, updates: Any) -> None:
    view = _held(_view())
    before = (dict(view.operations), list(view.events), view.state)
    with pytest.raises(InvalidDurableUpdate):
        apply_checkpoint(
            view, updates, T0, new_callback_id=lambda _: "cb", start_invoke=lambda _: "t"
        )
    assert (dict(view.operations), list(view.events), view.state) == before


def test_transitions_out_of_a_final_status_are_refused() -> None:
    view = _held(_view())
    _apply(
        view,
        [
            {"Id": "s", "Type": "STEP", "Action": "START"},
            {"Id": "s", "Type": "STEP", "Action": "SUCCEED"},
        ],
    )
    for action in ("START", "SUCCEED", "FAIL"):
        with pytest.raises(InvalidDurableUpdate):
            _apply(view, [{"Id": "s", "Type": "STEP", "Action": action}])
    with pytest.raises(InvalidDurableUpdate, match="Inconsistent"):
        _apply(
            view,
            [{"Id": "s", "Type": "WAIT", "Action": "START", "WaitOptions": {"WaitSeconds": 1}}],
        )


def test_a_state_that_is_not_an_executions_is_a_typed_error() -> None:
    for doc in (None, {}, {"function": 3}, "text", {"function": "f", "name": "n"}):
        with pytest.raises(InvalidDurableUpdate):
            ops.ExecutionState.parse(doc)


_update = st.fixed_dictionaries(
    {
        "Id": st.sampled_from(["a", "b", "c", "exec"]),
        "Type": st.sampled_from([*sorted(ops.OPERATION_TYPES), "X"]),
        "Action": st.sampled_from(["START", "SUCCEED", "FAIL", "RETRY", "CANCEL", "X"]),
    },
    optional={
        "Payload": st.one_of(st.none(), st.text(max_size=5), st.integers()),
        "ParentId": st.sampled_from(["a", "zz"]),
        "Error": st.one_of(st.none(), st.just({"ErrorType": "E"}), st.integers()),
        "StepOptions": st.one_of(
            st.just({"NextAttemptDelaySeconds": 1}), st.just({"NextAttemptDelaySeconds": -2})
        ),
        "WaitOptions": st.one_of(st.just({"WaitSeconds": 2}), st.just({})),
        "ChainedInvokeOptions": st.one_of(
            st.just({"FunctionName": "f"}), st.just({"FunctionName": 4})
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.lists(_update, max_size=4), max_size=6))
def test_any_sequence_of_updates_is_applied_or_refused_whole(
    batches: list[list[dict[str, Any]]],
) -> None:
    """Whatever the SDK (or a forger) sends: a typed refusal that changes nothing, or a
    change whose events are dense and whose operations stay well formed."""
    view = _held(_view())
    for batch in batches:
        before = (dict(view.operations), len(view.events))
        try:
            change = _apply(view, batch)
        except StashpointError:
            assert (dict(view.operations), len(view.events)) == before
            continue
        ids = [e["EventId"] for e in view.events]
        assert ids == list(range(1, len(ids) + 1))
        assert change.state.next_event == len(ids) + 1
        for op in view.operations.values():
            assert op["Type"] in ops.OPERATION_TYPES and isinstance(op["Status"], str)
