"""Due executions found through the index: items follow each change, the sweep repairs.

On the local backend (SQLite index) and on SeaweedFS + DynamoDB Local. A poll on an indexed
stash reads no execution; an item that is late (a process died before writing it) is found
by the sweep, one that is early (a renewed lease) costs one read and is corrected; an
item planted in the table, or left by a purged execution, is dropped; a purge of an
execution erases its item and its id cannot be started again unnoticed.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("aws_durable_execution_sdk_python")

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import Duration

import stashpoint
from stashpoint.clock import FakeClock
from stashpoint.durable_functions import DurableFunctions, DurableService
from stashpoint.durable_functions.due_index import DueIndex
from stashpoint.durable_functions.service import execution_id
from stashpoint.errors import Purged, StashpointError
from stashpoint.index.requests import GetItem, PutItems, QueryItems, ReplaceItems
from stashpoint.index.schema import RUNS_BY_STATUS, execution_due_pk
from stashpoint.steps import Steps, ask, run_sync

STEP_DONE = [
    {"Id": "s1", "Type": "STEP", "Action": "START", "SubType": "Step"},
    {"Id": "s1", "Type": "STEP", "Action": "SUCCEED", "Payload": '"ok"'},
]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["local", "s3+dynamodb"])
def stash(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[stashpoint.Stash]:
    fixture = "local_url" if request.param == "local" else "s3_dynamo_url"
    url, options = request.getfixturevalue(fixture)
    with stashpoint.open(url, clock=clock, **options) as opened:
        assert opened.indexed
        yield opened


@durable_execution
def napper(event: Any, ctx: DurableContext) -> str:
    """A step, a ten-second wait, a step."""
    ctx.step(lambda _: "a", name="first")
    ctx.wait(Duration.from_seconds(10), name="nap")
    return str(ctx.step(lambda _: "b", name="second"))


@durable_execution
def waiter(event: Any, ctx: DurableContext) -> Any:
    """Waits on a callback (no timeout: never due on its own)."""
    return ctx.wait_for_callback(lambda callback_id, _: None, name="answer")


def _run(stash: stashpoint.Stash, steps: Steps[Any]) -> Any:
    return run_sync(steps, stash.driver)


def _item(stash: stashpoint.Stash, arn: str) -> dict[str, Any] | None:
    pk = execution_due_pk(stash.layout.prefix, execution_id(arn))
    found: dict[str, Any] | None = _run(stash, ask(GetItem(pk, "due")))
    return found


def _indexed_due(stash: stashpoint.Stash, service: DurableService) -> list[str]:
    assert service.due_index is not None
    return [i for _, i in _run(stash, service.due_index.due(service.now_ms(), 100))]


def _swept(service: DurableService) -> DurableService:
    """The service after its first full scan (so `due` answers from the index)."""
    service.due()
    return service


def test_items_follow_each_change_of_when_an_execution_is_due(
    stash: stashpoint.Stash, clock: FakeClock
) -> None:
    functions = DurableFunctions(stash, lease=timedelta(seconds=30))
    functions.register("napper", napper)
    functions.register("waiter", waiter)
    service = functions.service
    nap = functions.start("napper", None, name="nap")
    wait = functions.start("waiter", None, name="wait")
    assert sorted(_indexed_due(stash, service)) == sorted([execution_id(nap), execution_id(wait)])
    functions.run_due()
    # The napper sleeps ten seconds; the waiter waits on the outside: in no due partition.
    assert _indexed_due(stash, service) == []
    assert service.next_due_ms() == service.now_ms() + 10_000
    item = _item(stash, wait)
    assert item is not None and RUNS_BY_STATUS.partition_key not in item
    clock.advance(10)
    assert _indexed_due(stash, service) == [execution_id(nap)]
    functions.run_due()
    assert functions.describe(nap)["Status"] == "SUCCEEDED"
    (callback,) = functions.callbacks(wait)
    functions.send_callback_success(callback["CallbackId"], "yes")
    assert _indexed_due(stash, service) == [execution_id(wait)]
    functions.run_due()
    assert functions.describe(wait)["Status"] == "SUCCEEDED"
    assert _indexed_due(stash, service) == []
    assert service.next_due_ms() is None
    for arn in (nap, wait):  # ended: the item stays (at the last version), out of the GSI
        item = _item(stash, arn)
        assert item is not None and RUNS_BY_STATUS.partition_key not in item
        assert (
            item["revision"] == stash.logs_in("durable-executions").head(execution_id(arn)).version
        )


def test_a_poll_on_an_indexed_stash_reads_no_execution(stash: stashpoint.Stash) -> None:
    functions = DurableFunctions(stash)
    functions.register("napper", napper)
    arns = [functions.start("napper", None, name=f"n{i}") for i in range(12)]
    functions.run_due()  # the first poll scans (and repairs); each napper now sleeps
    seen: list[str] = []

    def count(request: Any, proceed: Any) -> Any:
        seen.append(type(request).__name__)
        return proceed()

    with stash.intercept(count):
        assert functions.service.due() == []
    assert "GetObject" not in seen and "ListObjects" not in seen, seen
    assert set(seen) <= {"QueryItems", "Parallel", "Now"}, seen
    assert len(arns) == 12


def test_a_lost_item_is_found_by_the_sweep(stash: stashpoint.Stash, clock: FakeClock) -> None:
    """A process that dies between the append and the item leaves the item behind: the
    start is stored, the index does not say so until the sweep scans."""
    functions = DurableFunctions(stash, sweep=timedelta(minutes=1))
    functions.register("napper", napper)
    _swept(functions.service)

    def lose_item(request: Any, proceed: Any) -> Any:
        if isinstance(request, PutItems):
            raise stashpoint.StorageUnavailable("the index write is lost")
        return proceed()

    with stash.intercept(lose_item):
        arn = functions.start("napper", None, name="late")  # acknowledged: the item is not
    assert _item(stash, arn) is None
    assert functions.service.due() == []  # the index alone does not know it yet
    clock.advance(61)
    assert functions.service.due() == [arn]  # the sweep scans, finds and writes it
    assert _item(stash, arn) is not None
    functions.run_due()
    assert functions.describe(arn)["Status"] == "RUNNING"  # its nap now
    clock.advance(10)
    functions.run_due()
    assert functions.describe(arn)["Status"] == "SUCCEEDED"


def test_an_early_item_costs_one_read_and_is_corrected(
    stash: stashpoint.Stash, clock: FakeClock
) -> None:
    """Checkpoints renew the lease without writing the item: when the old lease end comes,
    a worker finds the execution still held, and rewrites the item at the real end."""
    service = _swept(DurableService(stash, lease=timedelta(seconds=30)))
    arn = service.start("f", None)
    claimed = service.claim(arn, "w")
    assert claimed is not None
    clock.advance(20)
    service.checkpoint(arn, claimed.checkpoint_token, STEP_DONE)  # the lease now ends at 50 s
    clock.advance(15)
    assert service.due() == [arn]  # the item still says 30 s
    assert service.claim(arn, "other") is None  # held: no takeover
    assert service.due() == []  # corrected
    assert service.next_due_ms() == service.now_ms() + 15_000


def test_planted_and_orphaned_items_are_dropped(stash: stashpoint.Stash) -> None:
    functions = DurableFunctions(stash)
    service = _swept(functions.service)
    assert service.due_index is not None
    index = service.due_index
    planted = [
        index.item("no-such-function:x", 1, 0),  # an id of no execution
        index.item("not an id \u0000", 1, 0),  # not an id this service writes
        {**index.item("g:y", 1, 0), RUNS_BY_STATUS.sort_key: "soon#g:y"},  # bad due time
    ]
    _run(stash, ask(PutItems(tuple(planted))))
    assert functions.run_due() == 0  # nothing to run, nothing raised
    assert _indexed_due(stash, service) == []


def test_a_purged_execution_leaves_no_item_and_cannot_start_again_unnoticed(
    stash: stashpoint.Stash, clock: FakeClock
) -> None:
    functions = DurableFunctions(stash)
    functions.register("napper", napper)
    arn = functions.start("napper", None, name="gone")
    functions.run_due()
    log_id = execution_id(arn)
    receipt = stash.admin.purge(prefix=log_id, namespace="durable-executions")
    assert receipt.index_items == 1
    assert _item(stash, arn) is None
    assert functions.executions() == []
    clock.advance(10)
    assert functions.run_due() == 0
    with pytest.raises(Purged):
        functions.start("napper", None, name="gone")


def test_the_due_query_is_earliest_first_across_shards(stash: stashpoint.Stash) -> None:
    index = DueIndex(stash.layout.prefix)
    items = tuple(index.item(f"f:e{n}", 1, 1_000 + (n * 7919) % 500) for n in range(40))
    _run(stash, ask(PutItems(items)))
    due = _run(stash, index.due(1_300, 10))
    assert [at for at, _ in due] == sorted(at for at, _ in due)
    every = sorted(((1_000 + (n * 7919) % 500), f"f:e{n}") for n in range(40))
    assert due == [entry for entry in every if entry[0] <= 1_300][:10]
    assert _run(stash, index.next_due_ms()) == every[0][0]
    # An item moves forward only: an older version's due time does not overwrite it.
    _run(stash, index.record("f:e0", 0, 1))
    assert _run(stash, index.due(1_300, 100))[0] != (1, "f:e0")
    # Ascending pages are what the query asks for on both index engines.
    page = _run(stash, ask(QueryItems(RUNS_BY_STATUS.name, index.partition(0), 2, ascending=True)))
    keys = [str(i[RUNS_BY_STATUS.sort_key]) for i in page.items]
    assert keys == sorted(keys)


def test_a_stash_without_an_index_scans(
    s3_seaweed_url: tuple[str, dict[str, Any]], clock: FakeClock
) -> None:
    url, options = s3_seaweed_url
    with stashpoint.open(url, clock=clock, **options) as plain:
        assert not plain.indexed
        functions = DurableFunctions(plain)
        functions.register("napper", napper)
        arn = functions.start("napper", None)
        assert functions.service.due_index is None
        assert functions.service.due() == [arn]
        functions.run_due()
        clock.advance(10)
        functions.run_due()
        assert functions.describe(arn)["Status"] == "SUCCEEDED"


def test_bad_sweep_is_a_typed_error(stash: stashpoint.Stash) -> None:
    with pytest.raises(StashpointError):
        DurableService(stash, sweep=timedelta(0))


def test_a_sweep_writes_only_the_items_that_are_behind(
    stash: stashpoint.Stash, clock: FakeClock
) -> None:
    functions = DurableFunctions(stash, sweep=timedelta(minutes=1))
    functions.register("napper", napper)
    arns = [functions.start("napper", None, name=f"s{n}") for n in range(5)]
    functions.run_due()
    clock.advance(10)
    functions.run_due()  # every one ended, its item current
    behind = arns[0]
    log_id = execution_id(behind)
    stale = functions.service.due_index.item(log_id, 0, 0)  # type: ignore[union-attr]
    _run(stash, ask(ReplaceItems(((stale, _item(stash, behind)["revision"]),))))  # type: ignore[index]
    written: list[int] = []

    def count(request: Any, proceed: Any) -> Any:
        if isinstance(request, PutItems):
            written.append(len(request.items))
        return proceed()

    clock.advance(61)
    with stash.intercept(count):
        assert functions.service.due() == []  # the sweep: nothing is due
    assert written == [1]  # the one item behind, no other
    item = _item(stash, behind)
    assert item is not None and RUNS_BY_STATUS.partition_key not in item
