"""stashpoint: durable, versioned checkpoints for batch jobs and AI agents.

stash = stashpoint.open("local://./.stashpoint")   # or s3://bucket/prefix
env = stashpoint.Envelope.initial(stashpoint.new_id(), None, "job", 1, {"done": 0})
stash.checkpoints.compare_and_swap(env, None)
"""

import importlib
from typing import TYPE_CHECKING, Any

from stashpoint.codec import Codec, Limits
from stashpoint.envelope import CheckpointInfo, Envelope
from stashpoint.errors import (
    AmbiguousResume,
    AttemptNotFound,
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    ErrorKind,
    GraphDriftError,
    InvalidId,
    InvalidPayload,
    LimitExceeded,
    RunNotFound,
    StashpointError,
    StorageUnavailable,
    TerminalStateConflict,
    UnsupportedFormat,
)
from stashpoint.ids import new_id, validate_id
from stashpoint.retry import RetryPolicy
from stashpoint.stash import AsyncStash, Options, Stash, open, open_async
from stashpoint.stores import AsyncStore, Store

if TYPE_CHECKING:
    from stashpoint.runs import (
        AsyncRunStore,
        AttemptStatus,
        CheckpointMetadata,
        Interrupt,
        RunState,
        RunStatus,
        RunStore,
        RunSummary,
        TraceContext,
    )

_LAZY = {
    name: "stashpoint.runs"
    for name in (
        "AsyncRunStore",
        "AttemptStatus",
        "CheckpointMetadata",
        "Interrupt",
        "RunState",
        "RunStatus",
        "RunStore",
        "RunSummary",
        "TraceContext",
    )
}


def __getattr__(name: str) -> Any:
    # The run API loads on first use: `import stashpoint` stays light for Lambda cold starts.
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'stashpoint' has no attribute {name!r}")


__all__ = [
    "AmbiguousResume",
    "AsyncRunStore",
    "AsyncStash",
    "AsyncStore",
    "AttemptNotFound",
    "AttemptStatus",
    "CheckpointConflict",
    "CheckpointInfo",
    "CheckpointMetadata",
    "CheckpointNotFound",
    "Codec",
    "ConfigurationError",
    "Envelope",
    "ErrorKind",
    "GraphDriftError",
    "Interrupt",
    "InvalidId",
    "InvalidPayload",
    "LimitExceeded",
    "Limits",
    "Options",
    "RetryPolicy",
    "RunNotFound",
    "RunState",
    "RunStatus",
    "RunStore",
    "RunSummary",
    "Stash",
    "StashpointError",
    "Store",
    "StorageUnavailable",
    "TerminalStateConflict",
    "TraceContext",
    "UnsupportedFormat",
    "new_id",
    "open",
    "open_async",
    "validate_id",
]

__version__ = "0.1.0"
