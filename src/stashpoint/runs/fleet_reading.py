"""What a fleet map's objects say: one listing, the plan, the batches' heads, the report.

The base of a map's operations (`fleet.FleetMap`): the worker (`fleet_worker`) builds on it.
Free of I/O: every read is steps.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pydantic

from stashpoint.errors import (
    CheckpointNotFound,
    InvalidArgument,
    InvalidPayload,
    Purged,
    RunNotFound,
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
    END_KIND,
    FLEET_SCHEMA,
    PLAN_KIND,
    BatchHead,
    BatchStatus,
)
from stashpoint.runs.fleet_models import (
    CLOCK_SKEW,
    FleetEnd,
    FleetPlan,
    FleetProgress,
    ItemResult,
)
from stashpoint.steps import Now, Steps, ask
from stashpoint.stores.blobs import Blobs
from stashpoint.stores.objects import every_key_page
from stashpoint.twins import operation

if TYPE_CHECKING:
    from stashpoint.runs.operations import RunOperations

MAP_PART = re.compile(
    r"(?:b(\d{8})|d(\d{8})\.(\d{1,9})\.(\d{1,9})(?:\.([A-Za-z0-9]{1,64}))?|(plan)|(end))"
    r"/(\d{20})"
)

"""A map's object under its listing prefix: a batch, a mark, the plan or the end."""


@dataclass
class FleetView:
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
        """Return the batches of `batches` no worker has claimed yet."""
        return [b for b in range(batches) if b not in self.tops]

    def open(self) -> list[int]:
        """Return the claimed batches without a done mark."""
        return sorted(b for b in self.tops if b not in self.marks)

    @property
    def ok(self) -> int:
        """Items the done marks count as succeeded."""
        return sum(ok for ok, _ in self.marks.values())

    @property
    def failed(self) -> int:
        """Items the done marks count as failed."""
        return sum(failed for _, failed in self.marks.values())


def positive(value: Any, name: str, *, whole: bool = False, upper: float = 1e9) -> Any:
    """Return `value` if it is a number > 0 (an int when `whole`) up to `upper`."""
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or (whole and not isinstance(number, int)) or not 0 < number <= upper:
        what = "an int" if whole else "a number"
        raise InvalidArgument(
            f"{name} must be {what} > 0, at most {upper:g}, not {described(value)}"
        )
    return value


def mark_tag(etag: str) -> str:
    """Return an ETag as a mark's name carries it: its letters and digits, at most 64."""
    return re.sub(r"[^A-Za-z0-9]", "", etag)[:64]


def absent_batch() -> BatchHead:
    """Refuse to start a batch's state from nothing: a batch log exists once claimed."""
    raise CheckpointNotFound("no such batch log")


def check_kind(entry: LogEntry, kind: str, name: str) -> None:
    """Refuse an entry that is not a `kind` of the fleet schema this library reads."""
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


def default_worker_id() -> str:
    """Return a worker id naming this process (and its Batch job, when it is one)."""
    job = os.environ.get("AWS_BATCH_JOB_ID")
    index = os.environ.get("AWS_BATCH_JOB_ARRAY_INDEX")
    where = socket.gethostname().split(".")[0] or "host"
    parts = [job or where, index, str(os.getpid()), new_write_id()[:6]]
    return re.sub(r"[^A-Za-z0-9._-]", "-", "-".join(p for p in parts if p))[:120]


class FleetReader:
    """A map's reads, defined once: its objects, plan, heads, progress and results."""

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
        self.worker_id = worker_id or default_worker_id()
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

    def _view(self) -> Steps[FleetView]:
        """List the map's objects once: plan, batches (newest version), marks, end."""
        prefix = self._listing_prefix()
        view = FleetView()
        for page in (yield from every_key_page(prefix)):
            for index, key in enumerate(page.keys):
                match = MAP_PART.fullmatch(key[len(prefix) :])
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
                            view.etags[batch] = mark_tag(page.etags[index])
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
        check_kind(entry, PLAN_KIND, name)
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
        self, view: FleetView, wanted: Sequence[int]
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

    def _read_end(self) -> Steps[FleetEnd | None]:
        name = self._log("end")
        entry = yield from self._first(name)
        if entry is None:
            return None
        check_kind(entry, END_KIND, name)
        try:
            return FleetEnd.model_validate(entry.state)
        except pydantic.ValidationError as exc:
            raise InvalidPayload(
                f"fleet end is invalid ({exc.error_count()} errors)", object_name=name
            ) from None

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
        positive(batches_wanted, "batches_wanted", whole=True, upper=1024)
        plan = yield from self._require_plan()
        view = yield from self._view()
        return (yield from self._results(plan, view, first_batch, batches_wanted))

    def _results(
        self, plan: FleetPlan, view: FleetView, first_batch: int, count: int
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
                known = yield from self._batches.read(self._batch_log(batch), absent_batch)
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
