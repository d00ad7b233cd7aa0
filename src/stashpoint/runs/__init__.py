"""Graph runs: per-attempt recording , durable, indexed."""

from stashpoint.runs.heads import RunRead, TakenOver
from stashpoint.runs.models import (
    AttemptRecord,
    AttemptRow,
    CheckpointMetadata,
    Interrupt,
    Page,
    ReindexReport,
    RunRow,
    RunState,
    RunSummary,
    TraceContext,
)
from stashpoint.runs.store import AsyncRunStore, RunStore
from stashpoint.status import AttemptStatus, RunStatus

__all__ = [
    "AsyncRunStore",
    "AttemptRecord",
    "AttemptRow",
    "AttemptStatus",
    "CheckpointMetadata",
    "Interrupt",
    "Page",
    "ReindexReport",
    "RunRead",
    "RunRow",
    "RunState",
    "RunStatus",
    "RunSummary",
    "RunStore",
    "TakenOver",
    "TraceContext",
]
