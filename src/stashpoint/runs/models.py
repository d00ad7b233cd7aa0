"""Graph-run records: runs, attempts, interrupts, summaries.

Status enums may gain variants in later versions: keep a default branch when matching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from stashpoint.envelope import utc_now
from stashpoint.status import AttemptStatus, RunStatus

T = TypeVar("T")

JsonPayload = Annotated[Any, SkipValidation]
"""Any JSON value, not walked on construction; the codec refuses what JSON cannot carry."""

RUN_KIND = "stashpoint.run"
"""Envelope kind of a run's state."""
RUN_SCHEMA_VERSION = 1
"""Schema version of `RunState` payloads this library writes and reads."""
RUN_LOG_KIND = "stashpoint.run-log"
"""Kind of a run's log: records are attempts and their endings, the state a `RunHead`."""
RUN_LOG_SCHEMA_VERSION = 1
"""Schema version of run-log records and heads this library writes and reads."""


class _Model(BaseModel):
    # Fields a newer minor version added are kept, not refused: an archive stays readable
    # by older readers, and a read-modify-write carries the fields through unchanged.
    model_config = ConfigDict(frozen=True, extra="allow")


class TraceContext(_Model):
    """W3C-style trace context carried with an attempt or a run."""

    trace_id: str
    """Trace the attempt belongs to."""
    span_id: str | None = None
    """Span of the attempt, when known."""
    parent_span_id: str | None = None
    """Parent span, when known."""
    baggage: dict[str, str] = Field(default_factory=dict)
    """Propagated key-value context."""


class Interrupt(_Model):
    """Why a run paused: a node asked for outside input or approval."""

    node_id: str | None = None
    """Node that raised the interrupt."""
    reason: str = ""
    """Human-readable reason."""
    value: JsonPayload = None
    """Data the interrupt carries (the question, the proposed action...)."""
    created_at: datetime = Field(default_factory=utc_now)
    """When the interrupt was recorded."""


class CheckpointMetadata(_Model):
    """Metadata stored with a state snapshot, for validation and auditing."""

    graph_hash: str
    """Hash of the graph definition at snapshot time, to detect drift on resume."""
    run_id: str
    """The run this snapshot belongs to."""
    node_id: str
    """Node active when the snapshot was taken."""
    step: int = Field(ge=0)
    """Superstep number."""
    created_at: datetime = Field(default_factory=utc_now)
    """When the snapshot was taken."""


class AttemptRecord(_Model):
    """Record of one node execution attempt."""

    attempt_id: str
    """Opaque id; it embeds the run id so an attempt is found without a scan."""
    run_id: str
    """The run the attempt belongs to."""
    node_id: str
    """The graph node executed."""
    attempt: int = Field(ge=0)
    """Attempt number of this node (retries count up)."""
    input: JsonPayload = None
    """Input given to the node (or a blob reference when large)."""
    output: JsonPayload = None
    """Output of a completed attempt (or a blob reference when large)."""
    status: AttemptStatus = AttemptStatus.RUNNING
    """Current status."""
    error: str | None = None
    """Error message of a failed attempt."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Caller metadata recorded at completion (for example `trace_id`)."""
    trace_ctx: TraceContext | None = None
    """Trace context of the attempt."""
    started_at: datetime = Field(default_factory=utc_now)
    """When the attempt was recorded."""
    finished_at: datetime | None = None
    """When the attempt reached a final status."""
    lease_seconds: float | None = None
    """The lease the worker asked for: it promised a heartbeat at least this often (None:
    no lease, the attempt is never reported abandoned)."""
    worker: dict[str, str] = Field(default_factory=dict)
    """Where the attempt ran (`stashpoint.spot.compute_identity()`: AWS Batch job id,
    attempt and array index, ECS task ARN, instance id, Lambda request id, host)."""
    epoch: int = 0
    """The run's owner epoch the attempt was recorded under."""


class _Run(_Model):
    """What a run is besides its attempts: shared by `RunState` and `RunHead`."""

    run_id: str
    """Run identity."""
    graph_name: str
    """Name of the graph being run."""
    namespace: str = "default"
    """Isolation namespace (tenant, environment) for listings."""
    status: RunStatus = RunStatus.RUNNING
    """Overall status."""
    state_snapshot: dict[str, Any] = Field(default_factory=dict)
    """Latest graph state snapshot (values may be blob references when large)."""
    checkpoint: CheckpointMetadata | None = None
    """Metadata of the latest snapshot."""
    graph_hash: str | None = None
    """Hash of the graph definition the run was recorded with."""
    interrupted: Interrupt | None = None
    """The pending interrupt of an interrupted run."""
    error: str | None = None
    """Error of a failed run."""
    trace_ctx: TraceContext | None = None
    """Trace context of the run."""
    wake_at: datetime | None = None
    """When a waiting run is due (None unless it is waiting, or waits for an event
    without a timeout)."""
    waiting_for: str | None = None
    """The event (signal name) a waiting run waits for (`DurableRun.wait_for`), else None."""
    created_at: datetime = Field(default_factory=utc_now)
    """When the run was created."""
    updated_at: datetime = Field(default_factory=utc_now)
    """When the run last changed."""


class Signal(_Model):
    """An event delivered to a run from outside (`RunStore.signal`), kept in its log."""

    name: str
    """The event's name: what `DurableRun.wait_for(name)` waits for."""
    signal_id: str
    """The sender's id of the delivery: the same id again is the same signal."""
    payload: JsonPayload = None
    """The JSON value sent (a blob reference when large)."""
    received_at: datetime
    """When the run recorded it."""


class RunState(_Run):
    """Persisted state of a run, sufficient to resume it."""

    attempts: tuple[AttemptRecord, ...] = ()
    """Attempts in the order they were recorded."""
    signals: dict[str, Signal] = Field(default_factory=dict)
    """Events delivered to the run, by name (one per name), kept until a wait takes them."""

    def attempt(self, attempt_id: str) -> AttemptRecord | None:
        """Return the attempt with this id, if recorded."""
        return next((a for a in self.attempts if a.attempt_id == attempt_id), None)


class RunningAttempt(_Model):
    """A running attempt as the run head keeps it: enough to end it, index it, judge it."""

    node_id: str
    """The graph node executed."""
    attempt: int = Field(ge=0)
    """Attempt number of this node."""
    started_at: datetime
    """When the attempt was recorded."""
    lease_seconds: float | None = None
    """Its lease (None: none)."""
    heartbeat_at: datetime | None = None
    """When the worker last said it is alive (recording counts as the first heartbeat)."""
    epoch: int = 0
    """The owner epoch it was recorded under."""

    @property
    def lease_expires_at(self) -> datetime | None:
        """When the lease runs out unless a heartbeat renews it (None: no lease)."""
        if self.lease_seconds is None:
            return None
        return (self.heartbeat_at or self.started_at) + timedelta(seconds=self.lease_seconds)


class RunHead(_Run):
    """The small state a run's log stores with every version: the run without its attempts.

    Attempts live in the log's records (one when recorded, one when they end); the head
    keeps only the running ones and counts, so a transition writes O(1) bytes however many
    attempts the run has (`stashpoint.runs.journal`).
    """

    running: dict[str, RunningAttempt] = Field(default_factory=dict)
    """Attempts not ended yet, by attempt id."""
    attempt_count: int = Field(default=0, ge=0)
    """Attempts recorded in all."""
    failed_count: int = Field(default=0, ge=0)
    """Attempts that failed."""
    signal_ids: dict[str, str] = Field(default_factory=dict)
    """The signals delivered, by name: their ids (payloads live in the records)."""
    epoch: int = Field(default=0, ge=0)
    """The owner epoch: `takeover` raises it, and a store that wrote under an older one is
    refused with `Fenced` (SlateDB's writer epochs over the same compare-and-swap)."""
    revision_base: int = Field(default=0, ge=0)
    """Added to the log version to give the run's revision. Format v1 keeps the field and
    this version writes 0 (runs are born as logs); a reader adds whatever is stored."""


@dataclass(frozen=True)
class SignalReceipt:
    """What `RunStore.signal` did."""

    run_id: str
    """The run signalled."""
    name: str
    """The event's name."""
    signal_id: str
    """The delivery's id (the one given, or a new one)."""
    duplicate: bool
    """True: this id was delivered before; nothing was written."""
    woke: bool
    """True: the run was waiting for this event and is due now (`list_due`)."""


class RunSummary(_Model):
    """Summary of a run: what ran, how often, how it ended."""

    run_id: str
    """Run identity."""
    graph_name: str
    """Name of the graph."""
    status: RunStatus
    """Overall status."""
    total_nodes_executed: int
    """Distinct nodes with at least one attempt."""
    total_attempts: int
    """Attempts recorded."""
    failed_attempts: int
    """Attempts that failed."""
    trace_id: str | None = None
    """First `trace_id` found in attempt metadata (compatibility with older tracing)."""
    trace_ctx: TraceContext | None = None
    """First trace context found on an attempt, else the run's."""
    started_at: datetime
    """When the run was created."""
    finished_at: datetime | None = None
    """When the run reached a status other than running, else None."""


class RunRow(_Model):
    """A run as the index lists it: no payloads, only what a listing shows."""

    run_id: str
    """Run identity."""
    graph_name: str
    """Name of the graph."""
    namespace: str
    """Isolation namespace."""
    status: RunStatus
    """Overall status."""
    revision: int
    """Revision of the run state this row describes."""
    attempts: int
    """Attempts recorded."""
    failed_attempts: int
    """Attempts that failed."""
    running_attempts: int
    """Attempts still running."""
    error: str | None = None
    """Short error of a failed run."""
    created_at: datetime
    """When the run was created."""
    updated_at: datetime
    """When the run last changed."""
    wake_at: datetime | None = None
    """When a waiting run is due."""


class AttemptRow(_Model):
    """An attempt as the index lists it."""

    attempt_id: str
    """Attempt identity."""
    run_id: str
    """Run identity."""
    node_id: str
    """Node executed."""
    attempt: int
    """Attempt number."""
    status: AttemptStatus
    """Status."""
    error: str | None = None
    """Short error of a failed attempt."""
    started_at: datetime
    """When the attempt was recorded."""
    finished_at: datetime | None = None
    """When it finished."""
    lease_expires_at: datetime | None = None
    """When a running attempt's lease runs out without a heartbeat (None: no lease)."""


@dataclass(frozen=True)
class ReindexReport:
    """What `RunStore.reindex` did."""

    indexed: int
    """Runs whose index items were compared with storage (and fixed where they differed)."""
    unreadable: list[str] = field(default_factory=list)
    """Runs that could not be read (`run_id: kind`), skipped: their items stay as they were.
    Repair or remove them and run `reindex` again."""


class Page(BaseModel, Generic[T]):
    """One page of a listing, newest first, with an opaque cursor for the next page."""

    items: list[T]
    """The rows of this page."""
    cursor: str | None = None
    """Pass to the same listing for the next page; None on the last page."""
