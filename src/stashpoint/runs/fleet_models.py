"""What a fleet map is and says: its plan, its end, its progress, each item's result.

The values `runs.fleet` writes (the plan, version 0 of `{map_id}:plan`; the end, of
`{map_id}:end`) and returns (`FleetProgress`, `ItemResult`, `WorkReport`), with the bounds
a map keeps to. Read `runs.fleet` for the operations and `docs/fleet.md` for the design.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from stashpoint.runs.models import JsonPayload

FLEET_GRAPH = "fleet"
"""`graph_name` of a fleet map's run."""
CHUNK_BATCHES = 16
"""Batches whose items the plan keeps together (one blob when large): a worker reads one
chunk for sixteen batches."""
INLINE_ITEMS = 256 * 1024
"""A plan whose items' JSON is at most this large keeps them inline; larger, every chunk is
a blob (a worker reads the plan once, small, and the chunks of its batches)."""
MAX_ITEM_BYTES = 256 * 1024
"""Largest JSON of one item (Step Functions' bound): items name work, they are not it."""
MAX_BATCH_SIZE = 1000
"""Largest batch: its results are one log entry."""
CLOCK_SKEW = timedelta(seconds=1)
"""How long after its expiry a lease counts as run out (clocks of workers differ this
much at most). Safety never rests on it: a worker taken over early is fenced."""
FleetStatus = Literal["not_started", "running", "completed", "failed"]
"""Where a map stands: no plan yet, batches left, ended well, ended failed."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


class FleetPlan(_Model):
    """What a fleet map is: its items (in chunks), how they are batched, its rules."""

    map_id: str
    """The map (its run id)."""
    items: int
    """Items in all."""
    batch_size: int
    """Items per batch (the last batch may hold fewer)."""
    batches: int
    """Batches in all."""
    chunk_batches: int
    """Batches per chunk of items."""
    chunks: list[JsonPayload]
    """Each chunk's items (a list), or a blob reference to it."""
    lease_seconds: float
    """How long a batch's lease lasts without a heartbeat."""
    tolerated_failure_count: int | None
    """Most failed items the map tolerates (None: no bound by count)."""
    tolerated_failure_percentage: float | None
    """Most failed items the map tolerates, in percent of all items (None: no bound)."""
    max_claims: int
    """Claims of one batch before it is given up (its workers keep dying)."""
    source: dict[str, JsonPayload]
    """Where the items came from (`{"kind": "items"}`, a prefix, a manifest)."""
    fingerprint: str
    """SHA-256 of the items and the rules: a second `start` must say the same."""
    created_at: datetime
    """When the plan was written (the planner's clock)."""

    def first_item(self, batch: int) -> int:
        """Return the index of the batch's first item."""
        return batch * self.batch_size

    def size_of(self, batch: int) -> int:
        """Return how many items the batch holds."""
        return max(0, min(self.batch_size, self.items - self.first_item(batch)))

    def over_tolerance(self, failed: int) -> bool:
        """Whether `failed` failed items are more than the map tolerates."""
        if failed == 0:
            return False
        by_count = self.tolerated_failure_count
        by_share = self.tolerated_failure_percentage
        if by_count is None and by_share is None:
            return False
        over_count = by_count is not None and failed > by_count
        over_share = by_share is not None and 100.0 * failed / max(1, self.items) > by_share
        if by_count is not None and by_share is not None:
            return over_count and over_share  # either bound tolerates them: tolerated
        return over_count or over_share


class FleetEnd(_Model):
    """How a fleet map ended (written once: of two enders, one wins)."""

    map_id: str
    """The map."""
    status: Literal["completed", "failed"]
    """Every batch done within tolerance, or more failures than tolerated."""
    ok: int
    """Items that succeeded when it ended."""
    failed: int
    """Items that failed when it ended."""
    reason: str | None = None
    """Why it failed (counts against the tolerance)."""
    ended_at: datetime
    """When it ended (the ender's clock)."""


@dataclass(frozen=True)
class FleetProgress:
    """A fleet map's progress, from one listing of its objects."""

    map_id: str
    """The map."""
    status: FleetStatus
    """Where it stands."""
    items: int
    """Items in all (0 before the plan)."""
    batches: int
    """Batches in all."""
    done_batches: int
    """Batches whose results are recorded."""
    leased_batches: int
    """Batches a worker holds (or held: a lease that ran out stays counted until taken)."""
    left_batches: int
    """Batches nobody has claimed yet."""
    ok: int
    """Items that succeeded."""
    failed: int
    """Items that failed."""
    started_at: datetime | None
    """When the plan was written."""
    ended_at: datetime | None
    """When the map ended."""
    items_per_second: float | None
    """Items done per second from the plan until the end (or now)."""
    reason: str | None = None
    """Why the map failed."""

    @property
    def done(self) -> int:
        """Items whose result is recorded (succeeded or failed)."""
        return self.ok + self.failed

    @property
    def left(self) -> int:
        """Items not done yet."""
        return self.items - self.done


@dataclass(frozen=True)
class ItemResult:
    """One item's outcome, as `results()` yields them in item order."""

    index: int
    """The item's position in the map."""
    item: Any
    """The item."""
    done: bool
    """Whether its batch is done (False: not run yet, or never: the map failed first)."""
    ok: bool
    """Whether `fn(item)` returned."""
    value: Any = None
    """What `fn(item)` returned."""
    error: str | None = None
    """The exception's type and message when it raised."""


@dataclass
class WorkReport:
    """What one `work` call did."""

    worker_id: str
    """The worker."""
    batches: int = 0
    """Batches it recorded the results of."""
    ok: int = 0
    """Items of those that succeeded."""
    failed: int = 0
    """Items of those that failed."""
    claims: int = 0
    """Free batches it claimed."""
    takeovers: int = 0
    """Batches it took over from a worker whose lease ran out."""
    abandoned: int = 0
    """Batches it gave up (claimed too often without finishing)."""
    conflicts: int = 0
    """Claims it lost to another worker."""
    fenced: int = 0
    """Batches taken from it while it ran them (their results discarded)."""
    status: FleetStatus = "running"
    """The map's status when it returned."""
