"""`StashSerDes`: values beyond Lambda's 256 KB kept in the stash, under AWS's runner and ours.

The same handler passes a 1 MB step result through a wait (so the result is read back on
replay) under AWS's local testing runner (`aws-durable-execution-sdk-python-testing`, as a
durable function on Lambda would run) and under `DurableFunctions`; the checkpoint holds a
small pointer, the value lives in the stash (sealed on an encrypted stash), and a damaged,
planted or erased value is a typed error, never another value.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("aws_durable_execution_sdk_python_testing")

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import Duration, StepConfig
from aws_durable_execution_sdk_python.serdes import SerDesContext
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

import stashpoint
from stashpoint.clock import FakeClock
from stashpoint.durable_functions import DurableFunctions, StashSerDes
from stashpoint.durable_functions.serdes import POINTER_KEY
from stashpoint.errors import InvalidArgument, InvalidPayload, StorageUnavailable
from stashpoint.steps import run_sync
from stashpoint.stores.layout import DURABLE_VALUES
from stashpoint.stores.objects import Create, GetObject, PutObject, every_version

BIG = "x" * 1_000_000
"""A step result four times Lambda's limit per operation."""
ARN = "arn:aws:lambda:us-east-1:123456789012:function:f:$LATEST/durable-execution/n/1"


def _handler(serdes: StashSerDes) -> Any:
    @durable_execution
    def handler(event: Any, ctx: DurableContext) -> Any:
        value = ctx.step(lambda _: BIG + event, name="big", config=StepConfig(serdes=serdes))
        ctx.wait(Duration.from_seconds(1), name="pause")  # the result is replayed after it
        return {"length": len(value), "tail": value[-3:]}

    return handler


def _step_payload(events: list[dict[str, Any]]) -> str:
    (succeeded,) = [e for e in events if e["EventType"] == "StepSucceeded"]
    return str(succeeded["StepSucceededDetails"]["Result"]["Payload"])


def _stored(stash: stashpoint.Stash) -> list[str]:
    """The keys of the stash's durable values (every stored version)."""
    found = run_sync(every_version(stash.layout.key(DURABLE_VALUES, "")), stash.driver)
    return sorted(v.key for v in found)


def _body(stash: stashpoint.Stash, key: str) -> bytes:
    info = stash.driver(GetObject(key, None, 10**8))
    assert info is not None and info.body is not None
    return bytes(info.body)


@pytest.fixture(params=["local_url", "s3_seaweed_url"])
def stash(request: pytest.FixtureRequest) -> Any:
    """A stash on the local backend and on SeaweedFS (real conditional writes and races)."""
    url, options = request.getfixturevalue(request.param)
    with stashpoint.open(url, **options) as opened:
        yield opened


def test_aws_local_runner_passes_a_value_beyond_256_kb(stash: stashpoint.Stash) -> None:
    serdes = StashSerDes(stash)
    with DurableFunctionTestRunner(_handler(serdes), poll_interval=0.05) as runner:
        arn = runner.run_async(input=json.dumps("abc"))
        result = runner.wait_for_result(arn, timeout=60)
        events = runner.get_execution_history(arn, include_execution_data=True).to_dict()["Events"]
    assert result.status.value == "SUCCEEDED"
    assert json.loads(result.result) == {"length": len(BIG) + 3, "tail": "abc"}
    pointer = json.loads(_step_payload(events))
    assert set(pointer) == {POINTER_KEY, "sha256", "bytes"} and pointer["bytes"] > len(BIG)
    assert len(_step_payload(events)) < 300


def test_our_runner_keeps_the_same_pointer_and_an_encrypted_stash_seals_the_value(
    local_encrypted_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = local_encrypted_url
    clock = FakeClock()
    with stashpoint.open(url, clock=clock, **options) as stash:
        functions = DurableFunctions(stash, lease=timedelta(minutes=5))
        functions.register("big", _handler(StashSerDes(stash)))
        arn = functions.start("big", "xyz")
        view = functions.run(arn)
        assert view.state.status == "SUCCEEDED"
        assert json.loads(functions.describe(arn)["Result"]) == {"length": 1_000_003, "tail": "xyz"}
        assert POINTER_KEY in _step_payload(functions.history(arn))
        (stored,) = _stored(stash)
        body = _body(stash, stored)
        assert b"xxxxxxxx" not in body and b"stashpoint.durable-value" not in body  # sealed


def test_small_values_stay_in_the_checkpoint_as_the_sdk_writes_them(
    stash: stashpoint.Stash,
) -> None:
    serdes = StashSerDes(stash)
    context = SerDesContext("op-1", ARN)
    for value in (None, 3, "text", [1, 2], {"a": 1}):
        data = serdes.serialize(value, context)
        assert POINTER_KEY not in data
        assert serdes.deserialize(data, context) == value
    assert _stored(stash) == []
    always = StashSerDes(stash, always=True)
    assert POINTER_KEY in always.serialize("tiny", context)
    assert len(_stored(stash)) == 1


def test_a_value_that_looks_like_a_pointer_is_stored_not_trusted(stash: stashpoint.Stash) -> None:
    from aws_durable_execution_sdk_python.serdes import JsonSerDes

    serdes = StashSerDes(stash, serdes=JsonSerDes())
    context = SerDesContext("op-1", ARN)
    lookalike = {POINTER_KEY: "elsewhere/op/abc", "sha256": "0" * 64, "bytes": 1}
    data = serdes.serialize(lookalike, context)
    assert json.loads(data)[POINTER_KEY] != lookalike[POINTER_KEY]
    assert serdes.deserialize(data, context) == lookalike


def test_the_same_value_twice_and_racing_writers_store_one_object(
    stash: stashpoint.Stash,
) -> None:
    serdes = StashSerDes(stash, inline_limit=10)
    context = SerDesContext("op-1", ARN)
    answers: list[str] = []
    threads = [
        threading.Thread(target=lambda: answers.append(serdes.serialize(BIG[:5000], context)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(set(answers)) == 1 and len(answers) == 8
    assert len(_stored(stash)) == 1
    other = serdes.serialize(BIG[:6000], context)  # a retried step computing another value
    assert other != answers[0] and len(_stored(stash)) == 2
    assert serdes.deserialize(answers[0], context) == BIG[:5000]


def test_a_planted_object_under_the_name_is_replaced_with_ours(stash: stashpoint.Stash) -> None:
    serdes = StashSerDes(stash, inline_limit=10)
    context = SerDesContext("op-1", ARN)
    data = serdes.serialize(BIG[:5000], context)
    key = stash.layout.key(DURABLE_VALUES, json.loads(data)[POINTER_KEY])
    stash.driver(PutObject(key, b"planted", None))  # damaged or hostile, under our hash's name
    with pytest.raises(InvalidPayload) as raised:
        serdes.deserialize(data, context)
    assert "xxxxx" not in str(raised.value)
    again = serdes.serialize(BIG[:5000], context)  # the writer judges it by its content
    assert again == data and serdes.deserialize(data, context) == BIG[:5000]


def test_a_value_of_another_content_under_a_pointer_is_refused(stash: stashpoint.Stash) -> None:
    serdes = StashSerDes(stash, inline_limit=10)
    context = SerDesContext("op-1", ARN)
    first = json.loads(serdes.serialize("a" * 100, context))
    second = json.loads(serdes.serialize("b" * 100, context))
    forged = json.dumps({**first, "sha256": second["sha256"]})
    with pytest.raises(InvalidPayload):
        serdes.deserialize(forged, context)
    for malformed in ({POINTER_KEY: 3}, {POINTER_KEY: "../../etc", "sha256": "0"}):
        with pytest.raises(InvalidPayload):
            serdes.deserialize(json.dumps(malformed), context)


def test_erase_deletes_an_executions_values_and_no_other(stash: stashpoint.Stash) -> None:
    serdes = StashSerDes(stash, inline_limit=10)
    mine, theirs = SerDesContext("op-1", ARN), SerDesContext("op-1", ARN + "2")
    data = serdes.serialize("m" * 100, mine)
    kept = serdes.serialize("t" * 100, theirs)
    assert serdes.erase(ARN) == 1
    with pytest.raises(InvalidPayload):
        serdes.deserialize(data, mine)
    assert serdes.deserialize(kept, theirs) == "t" * 100
    assert serdes.erase(ARN) == 0


@pytest.mark.parametrize(
    "kwargs", [{"inline_limit": -1}, {"inline_limit": "big"}, {"owner": lambda arn: "a/b"}]
)
def test_bad_arguments_are_invalid_argument(stash: stashpoint.Stash, kwargs: Any) -> None:
    with pytest.raises(InvalidArgument):
        StashSerDes(stash, **kwargs).serialize("v" * 300_000, SerDesContext("op", ARN))


def test_a_write_that_cannot_land_is_a_typed_error(stash: stashpoint.Stash) -> None:
    serdes = StashSerDes(stash, inline_limit=10)
    context = SerDesContext("op-1", ARN)

    def refuse(request: Any, proceed: Any) -> Any:
        if isinstance(request, PutObject) and isinstance(request.condition, Create):
            raise StorageUnavailable("storage is down")
        return proceed()

    with stash.intercept(refuse), pytest.raises(stashpoint.StashpointError):
        serdes.serialize("v" * 100, context)
    assert _stored(stash) == []
