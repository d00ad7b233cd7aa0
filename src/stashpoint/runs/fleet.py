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

import bisect
import contextlib
import functools
import hashlib
import inspect
import math
import os
import random
import re
import socket
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pydantic
import pydantic_core

from stashpoint.codec import check_json
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    Fenced,
    InvalidArgument,
    InvalidPayload,
    Purged,
    RunClaimed,
    RunNotFound,
    StashpointError,
    TerminalStateConflict,
    UnsupportedFormat,
    described,
)
from stashpoint.ids import new_write_id, validate_id
from stashpoint.logs.format import LogEntry
from stashpoint.logs.log import LogHead, LogSteps
from stashpoint.logs.state import Known, LoggedState
from stashpoint.runs import batches
from stashpoint.runs.batches import (
    BATCH_KIND,
    DONE_KIND,
    END_KIND,
    FLEET_SCHEMA,
    PLAN_KIND,
    BatchHead,
    BatchStatus,
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
from stashpoint.runs.sources import Source, read_items
from stashpoint.steps import Call, Now, Sleep, Steps, ask, stopped
from stashpoint.stores.blobs import Blobs
from stashpoint.stores.objects import every_key_page
from stashpoint.twins import Awaiting, Blocking, operation

if TYPE_CHECKING:
    from stashpoint.runs.operations import RunOperations

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
_PART = re.compile(
    r"(?:b(\d{8})|d(\d{8})\.(\d{1,9})\.(\d{1,9})(?:\.([A-Za-z0-9]{1,64}))?|(plan)|(end))"
    r"/(\d{20})"
)


@dataclass
class _View:
    """What one listing of a map's objects says."""

    plan: bool = False
    ended: bool = False
    tops: dict[int, int] = field(default_factory=dict)  # batch -> newest version listed
    written: dict[int, datetime] = field(default_factory=dict)  # batch -> when (storage's)
    etags: dict[int, str] = field(default_factory=dict)  # batch -> its newest version's tag
    marks: dict[int, tuple[int, int]] = field(default_factory=dict)  # batch -> (ok, failed)
    tags: dict[int, str] = field(default_factory=dict)  # batch -> the done version's, per mark
    marked_twice: set[int] = field(default_factory=set)

    def free(self, batches: int) -> list[int]:
        return [b for b in range(batches) if b not in self.tops]

    def open(self) -> list[int]:
        return sorted(b for b in self.tops if b not in self.marks)

    @property
    def ok(self) -> int:
        return sum(ok for ok, _ in self.marks.values())

    @property
    def failed(self) -> int:
        return sum(failed for _, failed in self.marks.values())


def _worker_id() -> str:
    """Return a worker id naming this process (and its Batch job, when it is one)."""
    job = os.environ.get("AWS_BATCH_JOB_ID")
    index = os.environ.get("AWS_BATCH_JOB_ARRAY_INDEX")
    where = socket.gethostname().split(".")[0] or "host"
    parts = [job or where, index, str(os.getpid()), new_write_id()[:6]]
    return re.sub(r"[^A-Za-z0-9._-]", "-", "-".join(p for p in parts if p))[:120]


def _run_items(fn: Callable[[Any], Any], items: Sequence[Any], concurrency: int) -> Any:
    """Call `fn` on each item: `[(True, result) | (False, "Type: message")]`, in order.

    Stops early (what ran is returned) once the batch was taken over (`steps.stopped`):
    nothing of it would be recorded.
    """
    if inspect.iscoroutinefunction(fn):
        return _arun_items(fn, items, concurrency)  # refused by the blocking driver: typed

    def one(item: Any) -> tuple[bool, Any]:
        try:
            return True, fn(item)
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"

    if concurrency == 1:
        out: list[tuple[bool, Any]] = []
        for item in items:
            if stopped():
                break
            out.append(one(item))
        return out
    from concurrent.futures import ThreadPoolExecutor  # here: most maps run items in turn

    with ThreadPoolExecutor(concurrency, thread_name_prefix="fleet-item") as pool:
        return list(pool.map(one, items))


async def _arun_items(fn: Callable[[Any], Any], items: Sequence[Any], concurrency: int) -> Any:
    """Run the items on asyncio: await coroutine functions, run plain ones on threads."""
    import asyncio

    gate = asyncio.Semaphore(concurrency)
    coroutine = inspect.iscoroutinefunction(fn)

    async def one(item: Any) -> tuple[bool, Any]:
        async with gate:
            try:
                if coroutine:
                    return True, await fn(item)
                return True, await asyncio.to_thread(fn, item)
            except Exception as exc:
                return False, f"{type(exc).__name__}: {exc}"

    return list(await asyncio.gather(*(one(item) for item in items)))


def _choose(free: Sequence[int], cursor: int | None, rng: random.Random) -> int:
    """Choose the free batch to claim: the next one of this worker's sweep, else a jump.

    A worker sweeps forward from where it last claimed, so workers keep to regions of
    their own; one whose next batch is taken (it met another sweep) jumps into a run of
    free batches chosen by its length, past its first batch (another sweep's next). Of
    workers listing at the same moment, few then pick the same batch: a claim seldom
    loses (`docs/fleet.md`, the arithmetic).
    """
    if cursor is not None:
        at = bisect.bisect_left(free, cursor)
        if at < len(free) and free[at] == cursor:
            return cursor
    runs: list[tuple[int, int]] = []  # (first, last) of each run of consecutive free batches
    for batch in free:
        if runs and runs[-1][1] == batch - 1:
            runs[-1] = (runs[-1][0], batch)
        else:
            runs.append((batch, batch))
    first, last = rng.choices(runs, [max(1, last - first) for first, last in runs])[0]
    return rng.randint(first + 1, last) if last > first else first


def _positive(value: Any, name: str, *, whole: bool = False, upper: float = 1e9) -> Any:
    """Return `value` if it is a number > 0 (an int when `whole`) up to `upper`."""
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or (whole and not isinstance(number, int)) or not 0 < number <= upper:
        what = "an int" if whole else "a number"
        raise InvalidArgument(
            f"{name} must be {what} > 0, at most {upper:g}, not {described(value)}"
        )
    return value


class _FleetApi:
    """A fleet map's operations, defined once; see `FleetMap`."""

    _runner: Callable[..., Any] = staticmethod(_run_items)

    def __init__(
        self,
        ops: RunOperations[Any, Any],
        logs: LogSteps,
        blobs: Blobs,
        map_id: str,
        *,
        execute: Callable[[Any], Any],
        worker_id: str | None = None,
        clock_skew: timedelta | None = None,
    ) -> None:
        self.map_id = validate_id(map_id, what="map id")
        """The map (its run id)."""
        if len(self.map_id) > 200:
            raise InvalidArgument("a map id is at most 200 characters", object_name=map_id)
        self.worker_id = worker_id or _worker_id()
        """This worker's id, in the claims it writes."""
        self.clock_skew = CLOCK_SKEW if clock_skew is None else clock_skew
        """How long after its expiry a lease counts as run out."""
        self.driver = execute
        """Runs this object's requests: what its operations' steps are driven with."""
        self._ops = ops
        self._logs = logs
        self._blobs = blobs
        self._batches = LoggedState(logs, _BatchForm(self.map_id), cache_size=256)
        self._plan: FleetPlan | None = None
        self._chunks: dict[int, list[Any]] = {}

    # -- names -----------------------------------------------------------------------------

    def _log(self, part: str) -> str:
        return f"{self.map_id}:{part}"

    def _batch_log(self, batch: int) -> str:
        return self._log(f"b{batch:08d}")

    def _listing_prefix(self) -> str:
        return f"{self._logs.keys.ids_prefix()}{self.map_id}:"

    # -- reading ---------------------------------------------------------------------------

    def _view(self) -> Steps[_View]:
        """List the map's objects once: plan, batches (newest version), marks, end."""
        prefix = self._listing_prefix()
        view = _View()
        for page in (yield from every_key_page(prefix)):
            for index, key in enumerate(page.keys):
                match = _PART.fullmatch(key[len(prefix) :])
                if match is None:
                    continue  # another map's whose id starts with ours, or not ours
                claimed, marked, ok, failed, tag, plan, end, version = match.groups()
                if claimed is not None:
                    batch = int(claimed)
                    if int(version) > view.tops.get(batch, -1):
                        view.tops[batch] = int(version)
                        if page.modified is not None:
                            view.written[batch] = page.modified[index]
                        if page.etags is not None and page.etags[index]:
                            view.etags[batch] = _tag(page.etags[index])
                elif marked is not None:
                    batch = int(marked)
                    if batch in view.marks and view.marks[batch] != (int(ok), int(failed)):
                        view.marked_twice.add(batch)  # planted, or a bug: the log decides
                    view.marks.setdefault(batch, (int(ok), int(failed)))
                    if tag is not None:
                        view.tags.setdefault(batch, tag)
                elif plan is not None:
                    view.plan = True
                elif end is not None:
                    view.ended = True
        return view

    def _read_plan(self) -> Steps[FleetPlan | None]:
        """Return the map's plan (read once per handle: it never changes), None if none."""
        if self._plan is not None:
            return self._plan
        name = self._log("plan")
        entry = yield from self._first(name)
        if entry is None:
            return None
        _check_kind(entry, PLAN_KIND, name)
        try:
            plan = FleetPlan.model_validate(entry.state)
        except pydantic.ValidationError as exc:
            raise InvalidPayload(
                f"fleet plan is invalid ({exc.error_count()} errors)", object_name=name
            ) from None
        if plan.map_id != self.map_id or plan.batches != math.ceil(plan.items / plan.batch_size):
            raise InvalidPayload("fleet plan does not describe this map", object_name=name)
        self._plan = plan
        return plan

    def _first(self, log_id: str) -> Steps[LogEntry | None]:
        """Return version 0 of a one-version log, None if there is none."""
        item = yield from self._logs.read_version(log_id, 0)
        if item is None:
            return None
        if not isinstance(item, LogEntry):
            # Vacated: the log was purged (`Purged` from its head) or deleted (not found).
            try:
                yield from self._logs.head(log_id)
            except CheckpointNotFound as exc:
                if isinstance(exc, Purged):
                    raise
                return None
            raise InvalidPayload("a fleet object was vacated", object_name=log_id)
        return item

    def _require_plan(self) -> Steps[FleetPlan]:
        plan = yield from self._read_plan()
        if plan is None:
            raise RunNotFound("no fleet map with this id (start it first)", object_name=self.map_id)
        return plan

    def _items(self, plan: FleetPlan, batch: int) -> Steps[list[Any]]:
        """Return the items of `batch`, reading its chunk once per handle."""
        number = batch // plan.chunk_batches
        chunk = self._chunks.get(number)
        if chunk is None:
            if number >= len(plan.chunks):
                raise InvalidPayload(
                    "the plan has no chunk for this batch", object_name=self.map_id
                )
            chunk = yield from self._blobs.resolve(plan.chunks[number])
            if not isinstance(chunk, list):
                raise InvalidPayload("a chunk of items is not a list", object_name=self.map_id)
            if len(self._chunks) >= 64:
                self._chunks.pop(next(iter(self._chunks)))
            self._chunks[number] = chunk
        start = plan.first_item(batch) - number * plan.chunk_batches * plan.batch_size
        items = chunk[start : start + plan.size_of(batch)]
        if len(items) != plan.size_of(batch):
            raise InvalidPayload(
                "a chunk holds fewer items than the plan says", object_name=self.map_id
            )
        return items

    def _heads(
        self, view: _View, wanted: Sequence[int]
    ) -> Steps[list[tuple[BatchHead, LogEntry] | None]]:
        """Read the newest listed version of each wanted batch (entries GET at once)."""
        items = yield from self._logs.read_versions(
            [(self._batch_log(b), view.tops[b]) for b in wanted]
        )
        out: list[tuple[BatchHead, LogEntry] | None] = []
        for batch, item in zip(wanted, items, strict=True):
            if not isinstance(item, LogEntry):
                out.append(None)  # sealed away or vacated: read the log as a whole instead
                continue
            name = self._batch_log(batch)
            head = batches.parse_batch(item.state, item.kind, item.schema_version, name)
            if head.batch != batch or head.map_id != self.map_id:
                raise InvalidPayload("a batch log holds another batch's state", object_name=name)
            out.append((head, item))
        return out

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
        _positive(batch_size, "batch_size", whole=True, upper=MAX_BATCH_SIZE)
        _positive(lease, "lease", upper=86_400)
        _positive(max_claims, "max_claims", whole=True, upper=100)
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
            yield from self._end(plan, _View(plan=True))
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

    def _wait_for_plan(self, seconds: float) -> Steps[FleetPlan]:
        """Return the plan, polling (on the stash's clock) up to `seconds` for it."""
        waited = 0.0
        delay = 0.05
        while True:
            plan = yield from self._read_plan()
            if plan is not None:
                return plan
            if waited >= seconds:
                raise RunNotFound(
                    f"no fleet map with this id after waiting {seconds:g} s for its plan "
                    "(start it first)",
                    object_name=self.map_id,
                )
            delay = min(delay * 2, 2.0, seconds - waited) or 0.05
            yield from ask(Sleep(delay))
            waited += delay

    # -- working ---------------------------------------------------------------------------

    @operation
    def work(
        self,
        fn: Callable[[Any], Any],
        *,
        max_concurrency: int = 1,
        max_batches: int | None = None,
        wait_for_plan: float = 300.0,
        stop: Callable[[], bool] | None = None,
    ) -> Steps[WorkReport]:
        """Take batches and run `fn(item)` on their items until the map has ended.

        Call it on every worker; each batch is taken by one worker at a time, under a
        lease renewed while it runs. An exception from `fn` fails that item (recorded
        with its type and message; counted against the tolerance), never the batch.
        Once no batch is free, the worker waits for the batches others hold and takes
        over any whose lease runs out, so a map ends even when workers die. Returns when
        the map has ended (or after `max_batches` batches). `max_concurrency` items of a
        batch run at once (threads; tasks for coroutine functions on the asyncio twin).
        Waits up to `wait_for_plan` seconds for `start`. `stop` is asked before each
        batch is taken: once it says True (`watcher.stopping.is_set` on a spot instance
        about to go), the worker returns with the batch in hand finished.
        """
        if not callable(fn):
            raise InvalidArgument(f"fn must be callable, not {described(fn)}")
        _positive(max_concurrency, "max_concurrency", whole=True, upper=256)
        if max_batches is not None:
            _positive(max_batches, "max_batches", whole=True)
        _positive(wait_for_plan, "wait_for_plan", upper=86_400)
        if stop is not None and not callable(stop):
            raise InvalidArgument(f"stop must be callable, not {described(stop)}")
        plan = yield from self._wait_for_plan(wait_for_plan)
        report = WorkReport(self.worker_id)
        rng = random.Random(f"{self.worker_id}:{self.map_id}")
        read: dict[int, tuple[int, BatchHead]] = {}  # batch -> (version read, its state)
        finished_last = waited_for_end = False
        cursor: int | None = None  # the batch after the last one this worker claimed
        while max_batches is None or report.batches + report.abandoned < max_batches:
            if stop is not None and stop():
                break
            just_finished, finished_last = finished_last, False
            view = yield from self._view()
            if view.ended:
                break
            if plan.over_tolerance(view.failed) and (yield from self._confirmed(plan, view)):
                yield from self._end(plan, view)
                continue
            # A held batch not written for longer than a lease (its holder's clock may be
            # off: the head decides) is taken before any free one, so a dead worker's
            # batch runs again within about a lease, not at the end of the map.
            now = yield from ask(Now())
            late = now - timedelta(seconds=plan.lease_seconds) - self.clock_skew
            silent = [b for b in view.open() if b in view.written and view.written[b] <= late]
            if silent:
                taken = yield from self._take_expired(plan, view, read, report, silent)
                if isinstance(taken, Known):
                    yield from self._run(plan, taken, fn, max_concurrency, report)
                    finished_last = True
                    continue
                if taken:
                    continue
            free = view.free(plan.batches)
            if free:
                held = len(view.open())
                if len(free) < held and rng.random() > len(free) / held:
                    # Fewer free batches than workers holding one: most who try now would
                    # collide. Look again in a moment (a LIST is cheaper than a lost claim).
                    yield from ask(Sleep(rng.uniform(0.05, min(1.0, plan.lease_seconds / 10))))
                    continue
                batch = _choose(free, cursor, rng)
                known = yield from self._claim(plan, batch, report)
                if known is None:
                    cursor = None  # another worker's sweep reached it: jump elsewhere
                else:
                    cursor = batch + 1
                    yield from self._run(plan, known, fn, max_concurrency, report)
                    finished_last = True
                continue
            taken = yield from self._take_expired(plan, view, read, report)
            if isinstance(taken, Known):
                yield from self._run(plan, taken, fn, max_concurrency, report)
                finished_last = True
                continue
            if taken:
                continue
            if not view.open():
                # Every batch is marked: the worker that marked the last one ends the map
                # (one check of every batch); the others give it one poll first, then do it.
                if just_finished or waited_for_end:
                    yield from self._conclude(plan, view)
                    continue
                waited_for_end = True
            yield from self._idle(plan, read)
        report.status = (yield from self._progress()).status
        yield from self._settle_run()
        return report

    def _claim(
        self, plan: FleetPlan, batch: int, report: WorkReport
    ) -> Steps[Known[BatchHead] | None]:
        """Claim a free batch (create its log); None if another worker got it first."""
        now = yield from ask(Now())
        head = batches.claim(self.map_id, batch, self.worker_id, plan.lease_seconds, now)
        try:
            known = yield from self._batches.append(self._batch_log(batch), None, [], head)
        except CheckpointConflict:
            report.conflicts += 1
            return None
        report.claims += 1
        return known

    def _take_expired(
        self,
        plan: FleetPlan,
        view: _View,
        read: dict[int, tuple[int, BatchHead]],
        report: WorkReport,
        among: Sequence[int] | None = None,
    ) -> Steps[Known[BatchHead] | bool | None]:
        """Take over a held batch whose lease ran out: its state; True: look again; None.

        The newest version of each held batch is read once (again when it changes: a
        heartbeat); its lease is judged on this worker's clock, `clock_skew` late; `among`:
        only these held batches (default: every one). A held
        batch found done lacks only its mark (its finisher died first): it is marked. A
        batch given up (claimed `max_claims` times) is recorded failed here.
        """
        held = view.open() if among is None else list(among)
        stale = [b for b in held if b not in read or read[b][0] != view.tops[b]]
        for batch, found in zip(stale, (yield from self._heads(view, stale)), strict=True):
            if found is None:
                known = yield from self._batches.read(self._batch_log(batch), _absent)
                read[batch] = (known.version, known.state)
            else:
                head, entry = found
                read[batch] = (entry.version, head)
                self._batches.remember(
                    self._batch_log(batch), Known(head, LogHead.of(entry, handed_over=True))
                )
        unmarked = [read[b][1] for b in held if read[b][1].status is BatchStatus.DONE]
        if unmarked:
            for head in unmarked:  # its finisher died before its mark: mark it for it
                yield from self._mark(head)
            return True
        now = yield from ask(Now())
        expired = [b for b in held if read[b][1].lease_over(now, self.clock_skew)]
        if not expired:
            return None
        batch = expired[0]
        name = self._batch_log(batch)

        def change(known: Known[BatchHead], fresh: bool) -> Steps[tuple[BatchHead, list[Any]]]:
            moment = yield from ask(Now())
            if known.state.claims >= plan.max_claims:
                size = plan.size_of(batch)
                first = plan.first_item(batch)
                error = f"abandoned: claimed {known.state.claims} times without finishing"
                head = batches.abandon(known.state, self.worker_id, size, name)
                return head, [batches.result_record(first + i, False, error) for i in range(size)]
            return batches.take_over(known.state, self.worker_id, moment, self.clock_skew, name), []

        def write(
            known: Known[BatchHead], planned: tuple[BatchHead, list[Any]]
        ) -> Steps[Known[BatchHead]]:
            return (yield from self._batches.append(name, known.log, planned[1], planned[0]))

        try:
            taken = yield from self._batches.update(name, change, write, initial=_absent)
        except (TerminalStateConflict, RunClaimed, CheckpointConflict):
            read.pop(batch, None)
            return True  # finished or renewed meanwhile: look again
        read.pop(batch, None)
        if taken.state.status is BatchStatus.DONE:
            report.abandoned += 1
            report.failed += taken.state.failed
            yield from self._mark(taken.state, None if taken.log is None else taken.log.etag)
            return True
        report.takeovers += 1
        return taken

    def _idle(self, plan: FleetPlan, read: Mapping[int, tuple[int, BatchHead]]) -> Steps[None]:
        """Wait a while: until the first lease read runs out, at most a quarter lease."""
        now = yield from ask(Now())
        wait = min(plan.lease_seconds / 4, 2.0)
        for _, head in read.values():
            if head.status is BatchStatus.LEASED:
                left = (head.lease_until + self.clock_skew - now).total_seconds()
                wait = min(wait, max(left, 0.0) + 0.05)
        yield from ask(Sleep(max(0.05, wait)))

    def _run(
        self,
        plan: FleetPlan,
        known: Known[BatchHead],
        fn: Callable[[Any], Any],
        concurrency: int,
        report: WorkReport,
    ) -> Steps[None]:
        """Run a batch this worker holds and record its results (unless it is fenced)."""
        head = known.state
        batch, epoch, name = head.batch, head.epoch, self._batch_log(head.batch)
        items = yield from self._items(plan, batch)
        beat = functools.partial(self._renew, name, epoch)
        call = Call(
            self._runner, (fn, items, concurrency),
            beat=beat, every=plan.lease_seconds / 3, fatal=(Fenced,),
        )  # fmt: skip
        try:
            outcomes = yield from ask(call)
        except Fenced:
            report.fenced += 1  # taken over while it ran: the new holder's to record
            return
        first = plan.first_item(batch)
        records = []
        ok = 0
        for offset, (good, value) in enumerate(outcomes):
            index = first + offset
            if good:
                try:
                    value = yield from self._blobs.offload(
                        value, f"result of item {index}", owner=self.map_id
                    )
                except StashpointError as exc:
                    good, value = False, f"{type(exc).__name__}: {exc}"
            ok += good
            records.append(batches.result_record(index, good, value))
        failed = len(records) - ok

        def change(known: Known[BatchHead], fresh: bool) -> Steps[BatchHead]:
            return batches.finish(known.state, epoch, ok, failed, name)
            yield  # a generator: finishing needs no request

        def write(known: Known[BatchHead], head: BatchHead) -> Steps[Known[BatchHead]]:
            return (yield from self._batches.append(name, known.log, records, head))

        try:
            done = yield from self._batches.update(name, change, write, initial=_absent)
        except Fenced:
            report.fenced += 1
            return
        report.batches += 1
        report.ok += ok
        report.failed += failed
        yield from self._mark(done.state, None if done.log is None else done.log.etag)

    def _renew(self, name: str, epoch: int) -> Steps[None]:
        """Renew the lease of a batch this worker holds (a heartbeat); `Fenced` if lost."""

        def change(known: Known[BatchHead], fresh: bool) -> Steps[BatchHead]:
            now = yield from ask(Now())
            return batches.renew(known.state, epoch, now, name)

        def write(known: Known[BatchHead], head: BatchHead) -> Steps[None]:
            yield from self._batches.append(name, known.log, [], head)

        yield from self._batches.update(name, change, write, initial=_absent)

    def _mark(self, head: BatchHead, etag: str | None = None) -> Steps[None]:
        """Create the batch's done mark; one there already stays.

        Its name says the counts and, when known, the done version's ETag: a listing that
        shows the same ETag for the batch's newest version shows the done version itself,
        so the map's end checks the batch without reading it.
        """
        name = f"d{head.batch:08d}.{head.ok}.{head.failed}"
        if etag:
            name += f".{_tag(etag)}"
        log_id = self._log(name)
        state = {"map_id": self.map_id, "batch": head.batch, "ok": head.ok, "failed": head.failed}
        # Marked already (by the worker that finished it, or a repair): the same mark.
        with contextlib.suppress(CheckpointConflict):
            yield from self._logs.append(
                log_id, [], after=None, state=state, kind=DONE_KIND,
                schema_version=FLEET_SCHEMA, handed_over=True,
            )  # fmt: skip

    def _confirmed(self, plan: FleetPlan, view: _View) -> Steps[bool]:
        """Whether the failures the marks count are real: more than tolerated, by the logs.

        Only the marks that count failures are checked (their batches' newest versions,
        read at once); a mark its batch's log does not bear out is dropped from `view`.
        """
        suspects = {b for b, (_, failed) in view.marks.items() if failed} | view.marked_twice
        for batch in suspects - set(view.tops):
            view.marks.pop(batch, None)  # a mark of a batch nobody claimed: not a real one
        claimed = sorted(suspects & set(view.tops))
        for batch, found in zip(claimed, (yield from self._heads(view, claimed)), strict=True):
            head = found[0] if found is not None else None
            if head is None or head.status is not BatchStatus.DONE:
                view.marks.pop(batch, None)
            else:
                view.marks[batch] = (head.ok, head.failed)
        view.marked_twice.clear()
        return plan.over_tolerance(view.failed)

    def _conclude(self, plan: FleetPlan, view: _View) -> Steps[None]:
        """Every batch is marked done: check each against its log, then end the map.

        The marks are a listing's shorthand; the batches' logs are the truth. A mark
        whose batch is not done (planted, or left by a bug) is ignored, and that batch is
        worked like any held one: its holder's lease runs out and it is taken over.
        """
        every = list(range(plan.batches))
        # A mark naming the ETag the listing shows for its batch's newest version is that
        # version's own: trusted as it is. Every other batch is read.
        shown = {
            b for b in every
            if b not in view.marked_twice and b in view.tags and view.tags[b] == view.etags.get(b)
        }  # fmt: skip
        unread = [b for b in every if b not in shown]
        found = dict(zip(unread, (yield from self._heads(view, unread)), strict=True))
        ok = failed = 0
        for batch in every:
            if batch in shown:
                ok += view.marks[batch][0]
                failed += view.marks[batch][1]
                continue
            item = found[batch]
            if item is None:
                known = yield from self._batches.read(self._batch_log(batch), _absent)
                head = known.state
            else:
                head = item[0]
            if head.status is not BatchStatus.DONE:
                view.marks.pop(batch, None)
                return  # not done after all: the work loop goes on
            ok += head.ok
            failed += head.failed
        view.marks = {b: (0, 0) for b in every}
        yield from self._end(plan, view, counts=(ok, failed))

    def _end(
        self, plan: FleetPlan, view: _View, counts: tuple[int, int] | None = None
    ) -> Steps[None]:
        """End the map once (the end log's create decides), then its run."""
        ok, failed = counts if counts is not None else (view.ok, view.failed)
        over = plan.over_tolerance(failed)
        reason = None
        if over:
            bounds = [
                f"{plan.tolerated_failure_count} items"
                if plan.tolerated_failure_count is not None
                else None,
                f"{plan.tolerated_failure_percentage:g}%"
                if plan.tolerated_failure_percentage is not None
                else None,
            ]
            reason = (
                f"{failed} of {plan.items} items failed, more than tolerated "
                f"({' or '.join(b for b in bounds if b)})"
            )
        end = FleetEnd(
            map_id=self.map_id,
            status="failed" if over else "completed",
            ok=ok,
            failed=failed,
            reason=reason,
            ended_at=(yield from ask(Now())),
        )
        try:
            yield from self._logs.append(
                self._log("end"), [], after=None, state=end.model_dump(mode="json"),
                kind=END_KIND, schema_version=FLEET_SCHEMA, handed_over=True,
            )  # fmt: skip
        except CheckpointConflict:
            return  # another worker ended it first: its end is the map's
        yield from self._settle_run(end)

    def _read_end(self) -> Steps[FleetEnd | None]:
        name = self._log("end")
        entry = yield from self._first(name)
        if entry is None:
            return None
        _check_kind(entry, END_KIND, name)
        try:
            return FleetEnd.model_validate(entry.state)
        except pydantic.ValidationError as exc:
            raise InvalidPayload(
                f"fleet end is invalid ({exc.error_count()} errors)", object_name=name
            ) from None

    def _settle_run(self, end: FleetEnd | None = None) -> Steps[None]:
        """Bring the map's run to its end (after a crash between the two, too)."""
        if end is None:
            end = yield from self._read_end()
            if end is None:
                return
        try:
            if end.status == "completed":
                yield from self._ops.complete_run(self.map_id)
            else:
                yield from self._ops.fail_run(self.map_id, end.reason or "fleet map failed")
        except (TerminalStateConflict, RunNotFound):
            pass  # ended already (by another worker), or its run was deleted

    # -- progress and results --------------------------------------------------------------

    @operation
    def progress(self) -> Steps[FleetProgress]:
        """Return the map's progress: one listing (a request per ~330 batches).

        Counts come from the batches' done marks; a map that ended reads its end too.
        """
        return (yield from self._progress())

    def _progress(self) -> Steps[FleetProgress]:
        view = yield from self._view()
        plan = (yield from self._read_plan()) if view.plan else None
        if plan is None:
            return FleetProgress(self.map_id, "not_started", 0, 0, 0, 0, 0, 0, 0, None, None, None)
        end = (yield from self._read_end()) if view.ended else None
        ok, failed = view.ok, view.failed
        if end is not None and end.status == "completed":
            ok, failed = max(ok, end.ok), max(failed, end.failed)
        now = end.ended_at if end is not None else (yield from ask(Now()))
        seconds = (now - plan.created_at).total_seconds()
        done = len(view.marks)
        return FleetProgress(
            map_id=self.map_id,
            status="running" if end is None else end.status,
            items=plan.items,
            batches=plan.batches,
            done_batches=done,
            leased_batches=len(view.tops) - len([b for b in view.tops if b in view.marks]),
            left_batches=plan.batches - len(view.tops),
            ok=ok,
            failed=failed,
            started_at=plan.created_at,
            ended_at=None if end is None else end.ended_at,
            items_per_second=(ok + failed) / seconds if seconds > 0 else None,
            reason=None if end is None else end.reason,
        )

    @operation
    def results_page(self, first_batch: int, batches_wanted: int) -> Steps[list[ItemResult]]:
        """Return the results of `batches_wanted` batches from `first_batch`, in item order.

        Items of batches not done yet come back with `done` False. `results()` pages
        through every batch the same way, from one listing.
        """
        if type(first_batch) is not int or first_batch < 0:
            raise InvalidArgument(f"first_batch must be an int >= 0, not {described(first_batch)}")
        _positive(batches_wanted, "batches_wanted", whole=True, upper=1024)
        plan = yield from self._require_plan()
        view = yield from self._view()
        return (yield from self._results(plan, view, first_batch, batches_wanted))

    def _results(
        self, plan: FleetPlan, view: _View, first_batch: int, count: int
    ) -> Steps[list[ItemResult]]:
        wanted = list(range(first_batch, min(plan.batches, first_batch + count)))
        listed = [b for b in wanted if b in view.tops]
        entries = dict(zip(listed, (yield from self._heads(view, listed)), strict=True))
        out: list[ItemResult] = []
        for batch in wanted:
            items = yield from self._items(plan, batch)
            first = plan.first_item(batch)
            found = entries.get(batch)
            if found is None and batch in view.tops:
                known = yield from self._batches.read(self._batch_log(batch), _absent)
                if known.state.status is BatchStatus.DONE:
                    found = (known.state, (yield from self._done_entry(batch, known)))
            if found is None or found[0].status is not BatchStatus.DONE:
                out += [ItemResult(first + i, item, False, False) for i, item in enumerate(items)]
                continue
            head, entry = found
            batches.check_results(entry.records, first, len(items), head, self._batch_log(batch))
            for item, record in zip(items, entry.records, strict=True):
                if record["ok"]:
                    value = yield from self._blobs.resolve(record["result"])
                    out.append(ItemResult(record["i"], item, True, True, value))
                else:
                    error = str(record["error"])
                    out.append(ItemResult(record["i"], item, True, False, None, error))
        return out

    def _done_entry(self, batch: int, known: Known[BatchHead]) -> Steps[LogEntry]:
        item = yield from self._logs.read_version(self._batch_log(batch), known.version)
        if not isinstance(item, LogEntry):
            raise InvalidPayload(
                "a done batch's results are gone", object_name=self._batch_log(batch)
            )
        return item


def _tag(etag: str) -> str:
    """Return an ETag as a mark's name carries it: its letters and digits, at most 64."""
    return re.sub(r"[^A-Za-z0-9]", "", etag)[:64]


def _absent() -> BatchHead:
    raise CheckpointNotFound("no such batch log")


def _check_kind(entry: LogEntry, kind: str, name: str) -> None:
    if entry.kind != kind:
        raise InvalidPayload(f"not a {kind}: kind is {entry.kind!r}", object_name=name)
    if entry.schema_version != FLEET_SCHEMA:
        raise UnsupportedFormat(
            f"fleet schema version {entry.schema_version} is not the one this library reads "
            f"({FLEET_SCHEMA}); upgrade stashpoint",
            object_name=name,
        )


class _BatchForm:
    """How a batch's state is kept in its log (`logs.state.StateForm`)."""

    kind = BATCH_KIND
    schema_version = FLEET_SCHEMA

    def __init__(self, map_id: str) -> None:
        self.map_id = map_id

    def parse(self, head: LogHead) -> BatchHead:
        """Return the typed state of a batch log's head."""
        state = batches.parse_batch(head.state, head.kind, head.schema_version, head.log_id)
        if state.map_id != self.map_id:
            raise InvalidPayload("a batch log of another map", object_name=head.log_id)
        return state

    def document(self, state: BatchHead) -> dict[str, Any]:
        """Return what an entry stores of the state."""
        return state.document()


class FleetMap(Blocking, _FleetApi):
    """A durable map across a fleet (`stash.runs.fleet(run_id)`): start, work, results."""

    def results(self, *, window: int = _RESULTS_WINDOW) -> Iterator[ItemResult]:
        """Yield every item's result in item order, `window` batches read at a time.

        One listing first: batches done after it come back with `done` False.
        """
        from stashpoint.steps import run_sync

        _positive(window, "window", whole=True, upper=1024)
        plan = run_sync(self._require_plan(), self.driver)
        view = run_sync(self._view(), self.driver)
        for first in range(0, plan.batches, window):
            yield from run_sync(self._results(plan, view, first, window), self.driver)


class AsyncFleetMap(Awaiting, _FleetApi):
    """The asyncio twin of `FleetMap`; `fn` may be a coroutine function."""

    _runner = staticmethod(_arun_items)

    async def results(self, *, window: int = _RESULTS_WINDOW) -> AsyncIterator[ItemResult]:
        """Yield every item's result in item order, `window` batches read at a time.

        One listing first: batches done after it come back with `done` False.
        """
        from stashpoint.steps import run_async

        _positive(window, "window", whole=True, upper=1024)
        plan = await run_async(self._require_plan(), self.driver)
        view = await run_async(self._view(), self.driver)
        for first in range(0, plan.batches, window):
            for result in await run_async(self._results(plan, view, first, window), self.driver):
                yield result
