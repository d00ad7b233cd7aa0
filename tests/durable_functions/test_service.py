"""The checkpoint service over a real stash: tokens, fencing, callbacks, hostile input.

Each test drives `DurableService` (wire dicts) or `DurableFunctions` (the SDK) on the local
backend and checks what is stored: a refused call stores nothing, a zombie's checkpoint
is refused, a retried checkpoint is answered once, a planted object is a typed error.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import zstandard

pytest.importorskip("aws_durable_execution_sdk_python")

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import Duration

import stashpoint
from stashpoint.clock import FakeClock
from stashpoint.durable_functions import DurableFunctions, DurableService
from stashpoint.durable_functions.service import execution_id
from stashpoint.errors import (
    DurableExecutionExists,
    DurableExecutionNotFound,
    InvalidArgument,
    InvalidDurableUpdate,
    StaleCheckpointToken,
    StashpointError,
)
from stashpoint.stores.layout import DURABLE_EXECUTIONS
from stashpoint.stores.objects import PutObject
from tests.durable_functions.conformance_handlers import SimulatedCrash


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def stash(local_url: tuple[str, dict[str, Any]], clock: FakeClock) -> Iterator[stashpoint.Stash]:
    url, options = local_url
    with stashpoint.open(url, clock=clock, **options) as opened:
        yield opened


def _service(stash: stashpoint.Stash, lease: int = 30) -> DurableService:
    return DurableService(stash, lease=timedelta(seconds=lease))


def _stored(stash: stashpoint.Stash, arn: str) -> int:
    """How many versions the execution's log has (what any write would add to)."""
    return int(stash.logs_in(DURABLE_EXECUTIONS).head(execution_id(arn)).version)


STEP_DONE = [
    {"Id": "s1", "Type": "STEP", "Action": "START", "SubType": "Step"},
    {"Id": "s1", "Type": "STEP", "Action": "SUCCEED", "Payload": '"ok"'},
]


def test_a_checkpoint_costs_one_request(stash: stashpoint.Stash) -> None:
    service = _service(stash)
    arn = service.start("f", '"in"')
    claimed = service.claim(arn, "w")
    assert claimed is not None
    requests: list[str] = []
    with stash.intercept(
        lambda request, proceed: (requests.append(type(request).__name__), proceed())[1]
    ):
        token, changed = service.checkpoint(arn, claimed.checkpoint_token, STEP_DONE)
        service.checkpoint(
            arn,
            token,
            [{"Id": "w", "Type": "WAIT", "Action": "START", "WaitOptions": {"WaitSeconds": 1}}],
        )
    assert requests == ["PutObject", "PutObject"]
    assert [op["Status"] for op in changed] == ["SUCCEEDED"]


def test_a_zombies_checkpoint_is_refused_after_a_takeover(
    stash: stashpoint.Stash, clock: FakeClock
) -> None:
    service = _service(stash, lease=30)
    arn = service.start("f", None)
    first = service.claim(arn, "zombie")
    assert first is not None
    assert service.claim(arn, "other") is None  # held: nobody else may take it
    clock.advance(31)  # the zombie froze past its lease
    second = _service(stash).claim(arn, "other")  # another process takes it over
    assert second is not None
    before = _stored(stash, arn)
    with pytest.raises(StaleCheckpointToken):
        service.checkpoint(arn, first.checkpoint_token, STEP_DONE)
    with pytest.raises(StaleCheckpointToken):
        service.finish(arn, first.checkpoint_token, {"Status": "SUCCEEDED", "Result": "1"})
    assert _stored(stash, arn) == before  # nothing of the zombie's was stored
    history = [e["EventType"] for e in service.read(arn).events]
    assert history == ["ExecutionStarted", "InvocationCompleted"]  # the lost invocation
    service.checkpoint(arn, second.checkpoint_token, STEP_DONE)  # the new holder goes on


@pytest.mark.parametrize(
    "token",
    ["", "garbage", "1.zz", "0." + "g" * 24, "-1." + "a" * 24, None, 7, "9" * 400 + "." + "a" * 24],
)
def test_a_forged_token_is_refused(stash: stashpoint.Stash, token: Any) -> None:
    service = _service(stash)
    arn = service.start("f", None)
    assert service.claim(arn, "w") is not None
    before = _stored(stash, arn)
    with pytest.raises(StaleCheckpointToken):
        service.checkpoint(arn, token, STEP_DONE)
    with pytest.raises(StaleCheckpointToken):
        service.state(arn, token)
    assert _stored(stash, arn) == before


def test_a_token_of_another_execution_is_refused(stash: stashpoint.Stash) -> None:
    service = _service(stash)
    a, b = service.start("f", None), service.start("f", None)
    claimed = service.claim(a, "w")
    assert claimed is not None and service.claim(b, "w") is not None
    with pytest.raises(StaleCheckpointToken):
        service.checkpoint(b, claimed.checkpoint_token, STEP_DONE)


def test_a_retried_checkpoint_with_its_client_token_is_answered_once(
    stash: stashpoint.Stash,
) -> None:
    service = _service(stash)
    arn = service.start("f", None)
    claimed = service.claim(arn, "w")
    assert claimed is not None
    token, changed = service.checkpoint(arn, claimed.checkpoint_token, STEP_DONE, "ct-1")
    stored = _stored(stash, arn)
    # The answer was lost; the SDK sends the same checkpoint again with the old token.
    again, changed_again = service.checkpoint(arn, claimed.checkpoint_token, STEP_DONE, "ct-1")
    assert again == token and changed_again == changed
    assert _stored(stash, arn) == stored  # not applied twice
    with pytest.raises(InvalidDurableUpdate):  # without the client token it is a new batch
        service.checkpoint(arn, claimed.checkpoint_token, STEP_DONE)


def test_a_refused_checkpoint_stores_nothing_and_names_no_payload(stash: stashpoint.Stash) -> None:
    service = _service(stash)
    arn = service.start("f", None)
    claimed = service.claim(arn, "w")
    assert claimed is not None
    before = _stored(stash, arn)
    secret = "s3cr3t-payload"
    with pytest.raises(InvalidDurableUpdate) as info:
        service.checkpoint(
            arn,
            claimed.checkpoint_token,
            [{"Id": "s", "Type": "STEP", "Action": "FAIL", "Payload": secret}],
        )
    assert secret not in str(info.value)
    assert _stored(stash, arn) == before


def test_starting_again_is_idempotent_and_a_taken_name_is_refused(stash: stashpoint.Stash) -> None:
    service = _service(stash)
    arn = service.start("f", '{"a": 1}', name="order-7")
    assert service.start("f", '{"a": 1}', name="order-7") == arn
    with pytest.raises(DurableExecutionExists):
        service.start("f", '{"a": 2}', name="order-7")
    assert service.arns("f") == [arn]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.start("bad name", None),
        lambda s: s.start("f", None, name="x/y"),
        lambda s: s.start("f", {"not": "text"}),
        lambda s: s.callback("x", "maybe"),
        lambda s: DurableService(s.stash, lease=timedelta(0)),
    ],
)
def test_bad_arguments_are_invalid_argument(stash: stashpoint.Stash, call: Any) -> None:
    with pytest.raises(InvalidArgument):
        call(_service(stash))


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:lambda:us-east-1:1:function:f",
        "arn:stashpoint:lambda-durable:f:n/0000",
        "arn:stashpoint:lambda-durable:f:/x",
        42,
    ],
)
def test_an_unknown_arn_is_not_found(stash: stashpoint.Stash, arn: Any) -> None:
    service = _service(stash)
    with pytest.raises(DurableExecutionNotFound):
        service.read(arn)
    with pytest.raises(DurableExecutionNotFound):
        service.claim(arn, "w")


def test_unknown_forged_and_answered_callbacks_are_not_found(stash: stashpoint.Stash) -> None:
    service = _service(stash)
    arn = service.start("f", None)
    claimed = service.claim(arn, "w")
    assert claimed is not None
    _, changed = service.checkpoint(
        arn, claimed.checkpoint_token, [{"Id": "c", "Type": "CALLBACK", "Action": "START"}]
    )
    callback_id = changed[0]["CallbackDetails"]["CallbackId"]
    import base64

    log_id, op_id, _ = json.loads(
        base64.urlsafe_b64decode(callback_id + "=" * (-len(callback_id) % 4))
    )
    forged = base64.urlsafe_b64encode(json.dumps([log_id, op_id, "0" * 16]).encode()).decode()
    for bad in (
        "nope",
        "",
        forged,
        "a" * 5000,
        base64.urlsafe_b64encode(b'["x:y", "c", "1"]').decode(),
    ):
        with pytest.raises(DurableExecutionNotFound):
            service.callback(bad, "success", result='"x"')
    before = _stored(stash, arn)
    service.callback(callback_id, "success", result='"yes"')
    assert _stored(stash, arn) == before + 1
    with pytest.raises(DurableExecutionNotFound):
        service.callback(callback_id, "success", result='"again"')


@pytest.mark.parametrize(
    "planted",
    [
        b"not zstd",
        zstandard.compress(b"{}"),
        zstandard.compress(b'{"format": "stashpoint.log-entry/1"}'),
    ],
)
def test_a_planted_execution_object_is_a_typed_error(
    stash: stashpoint.Stash, planted: bytes
) -> None:
    service = _service(stash)
    arn = service.start("f", None)
    logs = stash.logs_in(DURABLE_EXECUTIONS)
    key = logs.steps.keys.entry(execution_id(arn), 1)
    stash.driver(PutObject(key, planted, None))
    service.executions.forget(execution_id(arn))
    with pytest.raises(StashpointError):
        service.read(arn)
    with pytest.raises(StashpointError):
        service.claim(arn, "w")


@pytest.mark.parametrize(
    "state",
    [{"function": 3}, {"function": "f"}, "text", None],
)
def test_a_planted_entry_with_a_foreign_state_is_a_typed_error(
    stash: stashpoint.Stash, state: Any
) -> None:
    logs = stash.logs_in(DURABLE_EXECUTIONS)
    logs.append("f:planted", [{"op": {"Id": "x"}}], after=None, state=state)
    service = _service(stash)
    arn = "arn:stashpoint:lambda-durable:f:planted/" + __import__(
        "stashpoint.durable_functions.service", fromlist=["execution_op_of"]
    ).execution_op_of("planted")
    with pytest.raises(StashpointError):
        service.read(arn)
    with pytest.raises(StashpointError):  # a worker's scan names it, never crashes on it
        service.due()


# Through the SDK.


@durable_execution
def _two_steps_and_a_wait(event: Any, ctx: DurableContext) -> Any:
    first = ctx.step(lambda _: f"{event}-1", name="one")
    ctx.wait(Duration.from_seconds(10))
    return [first, ctx.step(lambda _: f"{event}-2", name="two")]


CRASHES = {"n": 0}


@durable_execution
def _crashes(event: Any, ctx: DurableContext) -> Any:
    CRASHES["n"] += 1
    ctx.step(lambda _: "done before the crash", name="first")
    raise SimulatedCrash  # the process dies: no answer reaches the service


@pytest.fixture
def functions(stash: stashpoint.Stash) -> DurableFunctions:
    functions = DurableFunctions(stash, lease=timedelta(seconds=30))
    functions.register("two", _two_steps_and_a_wait)
    return functions


def test_a_wait_is_kept_on_the_stash_clock(functions: DurableFunctions, clock: FakeClock) -> None:
    arn = functions.start("two", "x")
    assert functions.run_due() == 1
    assert functions.describe(arn)["Status"] == "RUNNING"
    clock.advance(9)
    assert functions.run_due() == 0  # not due yet
    clock.advance(1)
    assert functions.run_due() == 1
    described = functions.describe(arn)
    assert described["Status"] == "SUCCEEDED" and json.loads(described["Result"]) == ["x-1", "x-2"]


def test_an_execution_past_its_timeout_times_out(
    functions: DurableFunctions, clock: FakeClock
) -> None:
    arn = functions.start("two", "x", timeout=5)
    functions.run_due()
    clock.advance(11)
    functions.run_due()
    assert functions.describe(arn)["Status"] == "TIMED_OUT"
    assert functions.history(arn)[-1]["EventType"] == "ExecutionTimedOut"


def test_an_unregistered_function_fails_its_execution(functions: DurableFunctions) -> None:
    arn = functions.start("missing", None)
    functions.run_due()
    described = functions.describe(arn)
    assert described["Status"] == "FAILED"
    assert described["Error"]["ErrorType"] == "ResourceNotFoundException"


def test_invocations_that_keep_dying_fail_the_execution(
    stash: stashpoint.Stash, clock: FakeClock
) -> None:
    functions = DurableFunctions(stash, lease=timedelta(seconds=30), max_invocation_failures=3)
    functions.register("crash", _crashes)
    CRASHES["n"] = 0
    arn = functions.start("crash", None)
    for _ in range(6):
        with contextlib.suppress(SimulatedCrash):
            functions.run_due()
        clock.advance(31)  # each dead invocation's lease runs out
    described = functions.describe(arn)
    assert described["Status"] == "FAILED" and CRASHES["n"] == 3
    types = [e["EventType"] for e in functions.history(arn)]
    assert types.count("StepSucceeded") == 1  # the step's checkpoint survived every death
    lost = [e for e in functions.history(arn) if e["EventType"] == "InvocationCompleted"]
    assert len(lost) == 3 and all("Error" in e["InvocationCompletedDetails"] for e in lost)


def test_stop_ends_a_waiting_execution(functions: DurableFunctions) -> None:
    arn = functions.start("two", "x")
    functions.run_due()
    functions.stop(arn)
    assert functions.describe(arn)["Status"] == "STOPPED"
    functions.stop(arn)  # stopping a stopped one changes nothing
    assert functions.history(arn)[-1]["EventType"] == "ExecutionStopped"


class Dead(Exception):
    """The process died at a request: it and every request after it never happen."""


@contextlib.contextmanager
def _dies_at(stash: stashpoint.Stash, step: int, after: bool) -> Iterator[list[str]]:
    """From the `step`-th request on, nothing reaches storage (the one at `step` does if
    `after`, and its answer is lost). An `Exception`, so the SDK's threads unwind rather
    than wait forever for a dead process."""
    calls: list[str] = []
    lock = threading.Lock()

    def hook(request: Any, proceed: Any) -> Any:
        with lock:
            calls.append(type(request).__name__)
            mine = len(calls) - 1
        if mine < step:
            return proceed()
        if mine == step and after:
            proceed()
        raise Dead(type(request).__name__)

    with stash.intercept(hook):
        yield calls


def test_a_crash_at_any_request_loses_no_checkpoint(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The process dies at each request of a run in turn (before it, or after it took
    effect); a new process goes on and the execution completes with each step's result
    checkpointed once."""
    step = 0
    while True:
        finished = []
        for after in (False, True):
            url = f"local://{tmp_path_factory.mktemp('durable-crash')}?fsync=false"
            clock = FakeClock()
            with stashpoint.open(url, clock=clock) as stash:
                functions = DurableFunctions(stash, lease=timedelta(seconds=30))
                functions.register("two", _two_steps_and_a_wait)
                arn = functions.start("two", "x")
                with _dies_at(stash, step, after):
                    try:
                        for _ in range(4):
                            functions.run_due()
                            clock.advance(11)
                        finished.append(True)
                    except Dead:
                        pass
            with stashpoint.open(url, clock=clock) as stash:
                functions = DurableFunctions(stash, lease=timedelta(seconds=30))
                functions.register("two", _two_steps_and_a_wait)
                for _ in range(4):
                    clock.advance(31)  # the dead process's lease runs out
                    functions.run_due()
                described = functions.describe(arn)
                assert described["Status"] == "SUCCEEDED", (step, after, described)
                assert json.loads(described["Result"]) == ["x-1", "x-2"]
                types = [e["EventType"] for e in functions.history(arn)]
                assert types.count("ExecutionSucceeded") == 1, (step, after, types)
                assert types.count("WaitSucceeded") == 1, (step, after, types)
                assert types.count("StepSucceeded") == 2, (step, after, types)
        if finished == [True, True]:
            assert step > 10  # the run made requests to die at
            return
        step += 1
        assert step < 200
