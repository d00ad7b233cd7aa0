"""A fleet map's batches as pure transitions: claim, renew, take over, finish, abandon.

Each batch of a fleet map (`runs.fleet`) is a log of its own in the `fleet` namespace
(`{map_id}:b{batch:08d}`), kept by the one log-backed state (`logs.state.LoggedState`).
Its state, stored whole with every version, is a `BatchHead`: who holds the batch, under
which epoch, until when, and how it ended. The records of the version that finishes a
batch are its items' results, in item order.

    claim      version 0: a worker takes a batch nobody took (the create is the claim)
    renew      the holder moves its lease on (a heartbeat; no record)
    take over  another worker takes a batch whose lease ran out: epoch + 1
    finish     the holder records the results (status `done`), conditional on its epoch
    abandon    a batch claimed `max_claims` times without finishing is done, every item
               failed (a batch that kills its workers must not kill the fleet)

Fencing is the log's: each transition appends after the version it read, so a worker
that lost its batch to a takeover either sees the new epoch (`Fenced`) or loses the race
and reads it. A finished batch refuses every later transition, so a batch's results are
recorded exactly once. Time is an argument (`now`), never read here: leases are judged
on whatever clock the caller passes, a fake one in tests.

Free of I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict

from stashpoint.errors import (
    Fenced,
    InvalidPayload,
    RunClaimed,
    TerminalStateConflict,
    UnsupportedFormat,
    described,
)

BATCH_KIND = "stashpoint.fleet-batch"
"""Kind of a batch's log."""
PLAN_KIND = "stashpoint.fleet-plan"
"""Kind of a map's plan log (one version: what the map is)."""
DONE_KIND = "stashpoint.fleet-done"
"""Kind of a batch's done mark (a one-version log whose id says the counts)."""
END_KIND = "stashpoint.fleet-end"
"""Kind of a map's end (a one-version log: how the map ended, once)."""
FLEET_SCHEMA = 1
"""Schema version of every fleet log's state and records."""


class BatchStatus(StrEnum):
    """Where a batch stands (new values may appear in later versions)."""

    LEASED = "leased"
    """A worker holds it under a lease."""
    DONE = "done"
    """Its results are recorded (some items may have failed)."""


class BatchHead(BaseModel):
    """The small state a batch's log stores with every version."""

    # Fields a newer minor version adds are kept and written back.
    model_config = ConfigDict(frozen=True, extra="allow")

    map_id: str
    """The fleet map (its run id)."""
    batch: int
    """The batch's number (items `batch * batch_size` onwards)."""
    status: BatchStatus
    """Leased, or done."""
    epoch: int
    """Claims before the current one: 0 for the first, one more for each takeover."""
    worker: str
    """The worker holding the batch (or that finished it)."""
    lease_seconds: float
    """How long a lease lasts without a heartbeat."""
    lease_until: datetime
    """When the lease runs out unless renewed (the holder's clock)."""
    ok: int = 0
    """Items that succeeded (done only)."""
    failed: int = 0
    """Items that failed (done only)."""
    abandoned: bool = False
    """Done because it was claimed `max_claims` times without finishing."""

    @property
    def claims(self) -> int:
        """How many times the batch was claimed."""
        return self.epoch + 1

    def document(self) -> dict[str, Any]:
        """Return the state an entry stores (JSON)."""
        return self.model_dump(mode="json")

    def lease_over(self, now: datetime, skew: timedelta) -> bool:
        """Whether the lease ran out, `skew` late (clocks of two workers may differ)."""
        return self.status is BatchStatus.LEASED and self.lease_until + skew <= now


def parse_batch(state: Any, kind: str, schema_version: int, name: str) -> BatchHead:
    """Return the typed state a batch log's version stores, or a typed error."""
    if kind != BATCH_KIND:
        raise InvalidPayload(f"not a fleet batch: kind is {kind!r}", object_name=name)
    if schema_version != FLEET_SCHEMA:
        raise UnsupportedFormat(
            f"fleet schema version {schema_version} is not the one this library reads "
            f"({FLEET_SCHEMA}); upgrade stashpoint",
            object_name=name,
        )
    try:
        return BatchHead.model_validate(state)
    except pydantic.ValidationError as exc:
        raise InvalidPayload(
            f"fleet batch state is invalid ({exc.error_count()} errors)", object_name=name
        ) from None


def claim(map_id: str, batch: int, worker: str, lease_seconds: float, now: datetime) -> BatchHead:
    """Return the state of a first claim (version 0 of the batch's log)."""
    return BatchHead(
        map_id=map_id,
        batch=batch,
        status=BatchStatus.LEASED,
        epoch=0,
        worker=worker,
        lease_seconds=lease_seconds,
        lease_until=now + timedelta(seconds=lease_seconds),
    )


def _holder(head: BatchHead, epoch: int, name: str) -> None:
    """Refuse with `Fenced` a writer that no longer holds the batch under `epoch`."""
    if head.epoch != epoch or head.status is not BatchStatus.LEASED:
        # A finished batch counts as moved on: its results are recorded, not the zombie's.
        current = head.epoch + (1 if head.status is BatchStatus.DONE else 0)
        raise Fenced(name, epoch=epoch, current_epoch=max(current, epoch + 1))


def renew(head: BatchHead, epoch: int, now: datetime, name: str) -> BatchHead:
    """Return the state after a heartbeat of the holder of `epoch`; `Fenced` if it lost it."""
    _holder(head, epoch, name)
    return head.model_copy(update={"lease_until": now + timedelta(seconds=head.lease_seconds)})


def take_over(
    head: BatchHead,
    worker: str,
    now: datetime,
    skew: timedelta,
    name: str,
) -> BatchHead:
    """Return the state after `worker` takes over a batch whose lease ran out.

    A finished batch is `TerminalStateConflict`; a lease not run out (judged `skew` late)
    is `RunClaimed`: the holder is alive, as far as clocks can tell.
    """
    if head.status is BatchStatus.DONE:
        raise TerminalStateConflict("the batch is done", object_name=name)
    if not head.lease_over(now, skew):
        raise RunClaimed(name, step=f"batch {head.batch}", until=head.lease_until)
    return head.model_copy(
        update={
            "epoch": head.epoch + 1,
            "worker": worker,
            "lease_until": now + timedelta(seconds=head.lease_seconds),
        }
    )


def finish(head: BatchHead, epoch: int, ok: int, failed: int, name: str) -> BatchHead:
    """Return the state once the holder of `epoch` recorded its results; `Fenced` if not."""
    _holder(head, epoch, name)
    return head.model_copy(update={"status": BatchStatus.DONE, "ok": ok, "failed": failed})


def abandon(head: BatchHead, worker: str, size: int, name: str) -> BatchHead:
    """Return the state of a batch given up: done, every one of its `size` items failed."""
    if head.status is BatchStatus.DONE:
        raise TerminalStateConflict("the batch is done", object_name=name)
    return head.model_copy(
        update={
            "status": BatchStatus.DONE,
            "worker": worker,
            "ok": 0,
            "failed": size,
            "abandoned": True,
        }
    )


def result_record(index: int, ok: bool, value: Any) -> dict[str, Any]:
    """Return the record of one item's result (`value` is the error text when not `ok`)."""
    return (
        {"i": index, "ok": True, "result": value}
        if ok
        else {"i": index, "ok": False, "error": value}
    )


def check_results(records: Any, first: int, size: int, head: BatchHead, name: str) -> None:
    """Refuse the records of a finished batch that are not its items' results, in order."""
    if not isinstance(records, list) or len(records) != size:
        raise InvalidPayload(
            f"a done batch holds {size} results, not {described(records)}", object_name=name
        )
    ok = 0
    for offset, record in enumerate(records):
        if (
            not isinstance(record, dict)
            or record.get("i") != first + offset
            or not isinstance(record.get("ok"), bool)
            or ("result" if record["ok"] else "error") not in record
        ):
            raise InvalidPayload(
                f"result {offset} of the batch is not item {first + offset}'s", object_name=name
            )
        ok += record["ok"]
    if ok != head.ok or size - ok != head.failed:
        raise InvalidPayload(
            "the batch's results do not add up to the counts its state says", object_name=name
        )
