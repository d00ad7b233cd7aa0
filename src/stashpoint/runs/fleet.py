"""A durable map across a fleet: any number of workers share one run's items.

    with stashpoint.open("s3://bucket/jobs?index=dynamodb://stashpoint") as stash:
        fleet = stash.runs.fleet("thumbnails-2026-12-03")
        fleet.start(stashpoint.Prefix("s3://photos/raw/"), batch_size=100)  # once, anywhere
        fleet.work(make_thumbnail)       # on every worker: processes, Batch array jobs, Lambdas
        for result in fleet.results():   # item order, a few batches in memory at a time
            ...

The map is a run (`graph_name` "fleet"): `start` writes its plan, every worker calls
`work(fn)` and takes batches under leases until none is left, and the map ends once, as
`completed` or `failed` (more failures than tolerated), which ends the run the same way.
`docs/fleet.md` has the design and its arithmetic; in short, everything lives in the `fleet`
log namespace under `{map_id}:`, and no object is written by more than the one worker
holding a batch (no hot object):

    {map_id}:plan                  version 0: the plan (items in chunks, blobs when large)
    {map_id}:b{batch:08d}          a batch's log: claim, heartbeats, takeovers, results
    {map_id}:d{batch:08d}.{ok}.{failed}   the batch's done mark: its counts in its name
    {map_id}:end                   version 0: how the map ended (created once)

One listing of `{map_id}:` tells a worker which batches are free and which are done (the
marks), and tells anyone the map's progress. A worker claims a free batch by creating its
log (the create is the claim: of two workers, one wins), renews its lease three times per
lease while the batch runs, and records the results in one append conditional on its
claim: a worker whose batch was taken over (its lease ran out: killed, frozen, cut off) is
`Fenced` and records nothing, so each item's result is recorded once. A batch whose
workers keep dying is given up after `max_claims` claims, its items failed.

Free of I/O: every operation is steps (`FleetMap` and `AsyncFleetMap` drive them).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import pydantic_core

from stashpoint.codec import check_json
from stashpoint.errors import (
    CheckpointConflict,
    ConfigurationError,
    InvalidArgument,
    InvalidPayload,
    described,
)
from stashpoint.runs.batches import (
    FLEET_SCHEMA,
    PLAN_KIND,
)
from stashpoint.runs.fleet_models import (
    CHUNK_BATCHES,
    CLOCK_SKEW,
    FLEET_GRAPH,
    INLINE_ITEMS,
    MAX_BATCH_SIZE,
    MAX_ITEM_BYTES,
    FleetEnd,
    FleetPlan,
    FleetProgress,
    FleetStatus,
    ItemResult,
    WorkReport,
)
from stashpoint.runs.fleet_reading import FleetView, positive
from stashpoint.runs.fleet_worker import FleetWorker, arun_items
from stashpoint.runs.sources import Source, read_items
from stashpoint.steps import Now, Steps, ask
from stashpoint.twins import Awaiting, Blocking, operation

__all__ = [
    "CHUNK_BATCHES",
    "CLOCK_SKEW",
    "FLEET_GRAPH",
    "INLINE_ITEMS",
    "MAX_BATCH_SIZE",
    "MAX_ITEM_BYTES",
    "AsyncFleetMap",
    "FleetEnd",
    "FleetMap",
    "FleetPlan",
    "FleetProgress",
    "FleetStatus",
    "ItemResult",
    "WorkReport",
]

_RESULTS_WINDOW = 16


class _FleetApi(FleetWorker):
    """A fleet map's operations, defined once; see `FleetMap`."""

    # -- starting --------------------------------------------------------------------------

    @operation
    def start(
        self,
        items: Iterable[Any] | Source,
        *,
        batch_size: int = 100,
        lease: float = 60.0,
        tolerated_failure_count: int | None = 0,
        tolerated_failure_percentage: float | None = None,
        max_claims: int = 3,
    ) -> Steps[FleetPlan]:
        """Plan the map: write its items and rules once; return the plan.

        `items` is any iterable of JSON values, or a source read now: a `Prefix` (every
        object under an S3 prefix or a folder) or a `Manifest` (a JSON Lines or CSV
        object). The map also becomes a run (`graph_name` "fleet"), listed and shown like
        any other. Starting again with the same items and rules returns the same plan
        (idempotent: every worker of a Batch array job may call it); anything else is
        `ConfigurationError`. As in Step Functions, no failure is tolerated by default:
        the first failed item ends the map as failed (`tolerated_failure_count` and
        `tolerated_failure_percentage` allow some; with both, either one suffices).
        """
        positive(batch_size, "batch_size", whole=True, upper=MAX_BATCH_SIZE)
        positive(lease, "lease", upper=86_400)
        positive(max_claims, "max_claims", whole=True, upper=100)
        if tolerated_failure_count is not None and (
            type(tolerated_failure_count) is not int or tolerated_failure_count < 0
        ):
            raise InvalidArgument(
                f"tolerated_failure_count must be an int >= 0 or None, not "
                f"{described(tolerated_failure_count)}"
            )
        if tolerated_failure_percentage is not None and (
            isinstance(tolerated_failure_percentage, bool)
            or not isinstance(tolerated_failure_percentage, int | float)
            or not 0 <= tolerated_failure_percentage <= 100
        ):
            raise InvalidArgument(
                f"tolerated_failure_percentage must be a number from 0 to 100 or None, not "
                f"{described(tolerated_failure_percentage)}"
            )
        if isinstance(items, Source):
            values, source = yield from read_items(items)
        elif isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise InvalidArgument(
                f"items must be an iterable of JSON values, a Prefix or a Manifest, not "
                f"{described(items)}"
            )
        else:
            values, source = list(items), {"kind": "items"}
        depth = self._logs.codec.limits.max_depth
        sizes = 0
        for index, value in enumerate(values):
            try:
                check_json(value, depth, start_depth=4, root=f"item {index}")
            except InvalidPayload as exc:
                raise InvalidArgument(f"items must be JSON values: {exc}") from None
            size = len(pydantic_core.to_json(value))
            if size > MAX_ITEM_BYTES:
                raise InvalidArgument(
                    f"item {index} is {size} bytes of JSON; an item is at most "
                    f"{MAX_ITEM_BYTES} (put the work in S3 and map over its keys)"
                )
            sizes += size
        rules = {
            "batch_size": batch_size,
            "lease_seconds": float(lease),
            "tolerated_failure_count": tolerated_failure_count,
            "tolerated_failure_percentage": tolerated_failure_percentage,
            "max_claims": max_claims,
        }
        digest = hashlib.sha256(pydantic_core.to_json(rules))
        digest.update(pydantic_core.to_json(values))
        fingerprint = digest.hexdigest()
        existing = yield from self._read_plan()
        if existing is not None:
            return self._same(existing, fingerprint)
        yield from self._own_run()
        per_chunk = CHUNK_BATCHES * batch_size
        threshold = None if sizes <= INLINE_ITEMS else 0
        chunks = []
        for start in range(0, len(values), per_chunk):
            chunk = values[start : start + per_chunk]
            where = f"items {start}..{start + len(chunk) - 1}"
            chunks.append(
                (
                    yield from self._blobs.offload(
                        chunk, where, owner=self.map_id, threshold=threshold
                    )
                )
            )
        plan = FleetPlan(
            map_id=self.map_id,
            items=len(values),
            batches=math.ceil(len(values) / batch_size),
            chunk_batches=CHUNK_BATCHES,
            chunks=chunks,
            source=source,
            fingerprint=fingerprint,
            created_at=(yield from ask(Now())),
            **rules,
        )
        try:
            yield from self._logs.append(
                self._log("plan"),
                [],
                after=None,
                state=plan.model_dump(mode="json"),
                kind=PLAN_KIND,
                schema_version=FLEET_SCHEMA,
                handed_over=True,
            )
        except CheckpointConflict:
            self._plan = None  # another planner won: its plan is the map's
            existing = yield from self._require_plan()
            return self._same(existing, fingerprint)
        self._plan = plan
        if plan.batches == 0:
            yield from self._end(plan, FleetView(plan=True))
        return plan

    def _same(self, existing: FleetPlan, fingerprint: str) -> FleetPlan:
        if existing.fingerprint != fingerprint:
            raise ConfigurationError(
                "a fleet map with this id was started with other items or rules; use "
                "another id, or start it with the same ones",
                object_name=self.map_id,
            )
        return existing

    def _own_run(self) -> Steps[None]:
        """Create the map's run, or accept the fleet run a crashed `start` left."""
        try:
            yield from self._ops.create_run(FLEET_GRAPH, run_id=self.map_id)
        except CheckpointConflict:
            summary = yield from self._ops.summarize_run(self.map_id)
            if summary is None or summary.graph_name != FLEET_GRAPH:
                raise ConfigurationError(
                    "a run with this id exists and is not a fleet map: use another id",
                    object_name=self.map_id,
                ) from None


class FleetMap(Blocking, _FleetApi):
    """A durable map across a fleet (`stash.runs.fleet(run_id)`): start, work, results."""

    def results(self, *, window: int = _RESULTS_WINDOW) -> Iterator[ItemResult]:
        """Yield every item's result in item order, `window` batches read at a time.

        One listing first: batches done after it come back with `done` False.
        """
        from stashpoint.steps import run_sync

        positive(window, "window", whole=True, upper=1024)
        plan = run_sync(self._require_plan(), self.driver)
        view = run_sync(self._view(), self.driver)
        for first in range(0, plan.batches, window):
            yield from run_sync(self._results(plan, view, first, window), self.driver)


class AsyncFleetMap(Awaiting, _FleetApi):
    """The asyncio twin of `FleetMap`; `fn` may be a coroutine function."""

    _runner = staticmethod(arun_items)

    async def results(self, *, window: int = _RESULTS_WINDOW) -> AsyncIterator[ItemResult]:
        """Yield every item's result in item order, `window` batches read at a time.

        One listing first: batches done after it come back with `done` False.
        """
        from stashpoint.steps import run_async

        positive(window, "window", whole=True, upper=1024)
        plan = await run_async(self._require_plan(), self.driver)
        view = await run_async(self._view(), self.driver)
        for first in range(0, plan.batches, window):
            for result in await run_async(self._results(plan, view, first, window), self.driver):
                yield result
