"""Executions are logs like any other: sealed, packed, under Object Lock, purged.

A long execution packed while it waits is resumed by a new process from its packed
versions and completes with the same history; on a bucket with Object Lock a purge of an
execution is refused before anything is erased, naming the versions kept.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("aws_durable_execution_sdk_python")

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import Duration

import stashpoint
from stashpoint.clock import FakeClock
from stashpoint.durable_functions import DurableFunctions
from stashpoint.durable_functions.service import execution_id
from stashpoint.stores.layout import DURABLE_EXECUTIONS

STEPS = 1_100
"""More than one pack's span (1,024 versions): one step is one version."""


@durable_execution
def long_one(event: Any, ctx: DurableContext) -> int:
    """`STEPS` steps, a wait of a day, one more step."""
    total = 0
    for n in range(int(event["steps"])):
        total += ctx.step(lambda _, n=n: n, name=f"s{n}")
    ctx.wait(Duration.from_days(1), name="overnight")
    return total + ctx.step(lambda _: 1, name="last")


def test_a_packed_execution_resumes_in_a_new_process(tmp_path: Any) -> None:
    clock = FakeClock()
    url = f"local://{tmp_path / 'stash'}?fsync=false"
    with stashpoint.open(url, clock=clock) as stash:
        functions = DurableFunctions(stash)
        functions.register("long", long_one)
        arn = functions.start("long", {"steps": STEPS})
        functions.run_due()
        assert functions.describe(arn)["Status"] == "RUNNING"  # overnight
        before = functions.history(arn)
        logs = stash.logs_in(DURABLE_EXECUTIONS)
        logs.seal(execution_id(arn))
        report = logs.pack(execution_id(arn))
        assert report.packed >= 1 and report.vacated >= 1024
    clock.advance(86_400)
    with stashpoint.open(url, clock=clock) as stash:  # a new process: nothing cached
        functions = DurableFunctions(stash)
        functions.register("long", long_one)
        assert functions.history(arn) == before
        functions.run_due()
        done = functions.describe(arn)
        assert done["Status"] == "SUCCEEDED"
        assert int(done["Result"]) == sum(range(STEPS)) + 1
        history = functions.history(arn)
        assert history[: len(before)] == before
        steps_started = [e for e in history if e["EventType"] == "StepStarted"]
        assert len(steps_started) == STEPS + 1  # no step ran again after the pack


@durable_execution
def short_one(event: Any, ctx: DurableContext) -> str:
    """Two steps."""
    ctx.step(lambda _: "a", name="a")
    return str(ctx.step(lambda _: "b", name="b"))


def test_object_lock_keeps_an_execution_from_a_purge(retained_bucket: Any) -> None:
    with stashpoint.open("s3://locked-bucket/p?index=none") as stash:
        functions = DurableFunctions(stash)
        functions.register("short", short_one)
        arn = functions.start("short", None, name="kept")
        functions.run_due()
        history = functions.history(arn)
        with pytest.raises(stashpoint.RetentionLocked) as refused:
            stash.admin.purge(prefix=execution_id(arn), namespace="durable-executions")
        assert refused.value.locked and "durable-executions/short:kept/" in str(refused.value)
        assert functions.history(arn) == history  # nothing erased
        assert functions.describe(arn)["Status"] == "SUCCEEDED"
