"""A fleet map's pure parts: the batch transitions, their checks, and the tolerance rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from stashpoint import (
    Fenced,
    InvalidPayload,
    RunClaimed,
    TerminalStateConflict,
    UnsupportedFormat,
)
from stashpoint.runs import batches
from stashpoint.runs.batches import BATCH_KIND, BatchStatus
from stashpoint.runs.fleet import FleetPlan

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SKEW = timedelta(seconds=1)


def _claimed() -> batches.BatchHead:
    return batches.claim("m", 3, "w1", 30.0, T0)


def test_a_claim_leases_the_batch_to_its_worker() -> None:
    head = _claimed()
    assert (head.status, head.epoch, head.claims, head.worker) == (BatchStatus.LEASED, 0, 1, "w1")
    assert head.lease_until == T0 + timedelta(seconds=30)


def test_the_holder_renews_and_a_former_holder_is_fenced() -> None:
    head = batches.renew(_claimed(), 0, T0 + timedelta(seconds=10), "b")
    assert head.lease_until == T0 + timedelta(seconds=40)
    taken = batches.take_over(head, "w2", T0 + timedelta(seconds=41), SKEW, "b")
    assert (taken.epoch, taken.worker) == (1, "w2")
    with pytest.raises(Fenced):
        batches.renew(taken, 0, T0, "b")
    with pytest.raises(Fenced):
        batches.finish(taken, 0, 1, 0, "b")
    done = batches.finish(taken, 1, 9, 1, "b")
    assert (done.status, done.ok, done.failed) == (BatchStatus.DONE, 9, 1)
    with pytest.raises(Fenced):
        batches.renew(done, 1, T0, "b")  # a done batch has moved on, even for its finisher
    with pytest.raises(Fenced):
        batches.finish(done, 1, 9, 1, "b")  # results are recorded once


def test_a_lease_is_taken_over_only_once_it_ran_out_with_the_skew() -> None:
    head = _claimed()
    with pytest.raises(RunClaimed):
        batches.take_over(head, "w2", T0 + timedelta(seconds=30), SKEW, "b")
    with pytest.raises(RunClaimed):
        batches.take_over(head, "w2", T0 + timedelta(seconds=30.9), SKEW, "b")
    assert batches.take_over(head, "w2", T0 + timedelta(seconds=31), SKEW, "b").epoch == 1
    done = batches.finish(head, 0, 1, 0, "b")
    with pytest.raises(TerminalStateConflict):
        batches.take_over(done, "w2", T0 + timedelta(days=1), SKEW, "b")
    assert not done.lease_over(T0 + timedelta(days=1), SKEW)


def test_a_batch_given_up_is_done_with_every_item_failed() -> None:
    given_up = batches.abandon(_claimed(), "w9", 7, "b")
    assert (given_up.status, given_up.ok, given_up.failed, given_up.abandoned) == (
        BatchStatus.DONE, 0, 7, True,
    )  # fmt: skip
    with pytest.raises(TerminalStateConflict):
        batches.abandon(given_up, "w9", 7, "b")


def test_a_batch_state_is_checked_when_read_and_keeps_newer_fields() -> None:
    document = {**_claimed().document(), "priority": "high"}  # a newer minor version's field
    head = batches.parse_batch(document, BATCH_KIND, 1, "b")
    assert head.document()["priority"] == "high"
    with pytest.raises(InvalidPayload):
        batches.parse_batch(document, "stashpoint.run-log", 1, "b")
    with pytest.raises(UnsupportedFormat):
        batches.parse_batch(document, BATCH_KIND, 2, "b")
    for bad in ({**document, "epoch": "zero"}, {"batch": 1}, [1, 2], None):
        with pytest.raises(InvalidPayload):
            batches.parse_batch(bad, BATCH_KIND, 1, "b")


def test_results_must_be_the_batches_items_in_order_and_add_up() -> None:
    head = batches.finish(_claimed(), 0, 1, 1, "b")
    good = [batches.result_record(30, True, "x"), batches.result_record(31, False, "E: e")]
    batches.check_results(good, 30, 2, head, "b")
    wrong: list[Any] = [
        good[:1],  # one missing
        [good[1], good[0]],  # out of order
        [good[0], {"i": 31, "ok": True}],  # no result
        [good[0], batches.result_record(31, True, 1)],  # counts do not add up
        "not a list",
    ]
    for records in wrong:
        with pytest.raises(InvalidPayload):
            batches.check_results(records, 30, 2, head, "b")


def _plan(count: int | None, percentage: float | None) -> FleetPlan:
    return FleetPlan(
        map_id="m", items=200, batch_size=10, batches=20, chunk_batches=16, chunks=[],
        lease_seconds=60.0, tolerated_failure_count=count,
        tolerated_failure_percentage=percentage, max_claims=3, source={}, fingerprint="",
        created_at=T0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("count", "percentage", "failed", "over"),
    [
        (0, None, 0, False),
        (0, None, 1, True),  # Step Functions' default: the first failure fails the map
        (5, None, 5, False),
        (5, None, 6, True),
        (None, 10, 20, False),  # 10% of 200
        (None, 10, 21, True),
        (None, None, 200, False),  # no bound at all
        (5, 10, 20, False),  # either bound suffices
        (5, 10, 21, True),
        (30, 10, 21, False),
    ],
)
def test_the_tolerance_counts_items_by_number_or_share(
    count: int | None, percentage: float | None, failed: int, over: bool
) -> None:
    assert _plan(count, percentage).over_tolerance(failed) is over


def test_a_plan_places_items_in_batches() -> None:
    plan = _plan(0, None).model_copy(update={"items": 95})
    assert [plan.first_item(b) for b in (0, 1, 9)] == [0, 10, 90]
    assert [plan.size_of(b) for b in (0, 9, 10)] == [10, 5, 0]
