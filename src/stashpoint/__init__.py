"""stashpoint: durable, versioned checkpoints for batch jobs and AI agents.

stash = stashpoint.open("local://./.stashpoint")   # or s3://bucket/prefix
env = stashpoint.Envelope.initial(stashpoint.new_id(), None, "job", 1, {"done": 0})
stash.checkpoints.compare_and_swap(env, None)

Only the error types load with the package; every other name loads on first use, so
`import stashpoint` costs a Lambda cold start next to nothing (see `bench/import_bench.py`).
"""

import importlib
from typing import TYPE_CHECKING, Any

from stashpoint.errors import (
    AmbiguousResume,
    ArchivedObject,
    AttemptNotFound,
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    ErrorKind,
    Fenced,
    GraphDriftError,
    IdentityMismatch,
    IndexDamaged,
    InvalidArgument,
    InvalidId,
    InvalidPayload,
    KeyShredded,
    KeyUnavailable,
    LimitExceeded,
    NondeterministicReplay,
    Purged,
    RetentionLocked,
    RunClaimed,
    RunNotFound,
    RunSuspended,
    SourceChanged,
    StashpointError,
    StepFailed,
    StepInterrupted,
    StorageUnavailable,
    TerminalStateConflict,
    Undecryptable,
    UnsafeStorage,
    UnsupportedFormat,
    WaitTimedOut,
)

if TYPE_CHECKING:
    from stashpoint.codec import Codec, Limits
    from stashpoint.deadline import Deadline
    from stashpoint.encryption import Encryption, KeyRule
    from stashpoint.envelope import CheckpointInfo, Envelope
    from stashpoint.ids import new_id, validate_id
    from stashpoint.logs import AsyncLogStore, LogEntry, LogHead, LogStore
    from stashpoint.purge import PurgeReceipt
    from stashpoint.retry import RetryPolicy
    from stashpoint.runs import (
        AsyncRunStore,
        CheckpointMetadata,
        Interrupt,
        RunState,
        RunStore,
        RunSummary,
        TraceContext,
    )
    from stashpoint.runs.durable import Retry, Semantics
    from stashpoint.runs.sources import Manifest, Prefix
    from stashpoint.stash import AsyncStash, OpenOptions, Options, Stash, open, open_async
    from stashpoint.status import AttemptStatus, RunStatus
    from stashpoint.stores import AsyncStore, Store

_LAZY = {
    **dict.fromkeys(("Codec", "Limits"), "stashpoint.codec"),
    **dict.fromkeys(("CheckpointInfo", "Envelope"), "stashpoint.envelope"),
    **dict.fromkeys(("new_id", "validate_id"), "stashpoint.ids"),
    "RetryPolicy": "stashpoint.retry",
    "PurgeReceipt": "stashpoint.purge",
    **dict.fromkeys(("Encryption", "KeyRule"), "stashpoint.encryption"),
    **dict.fromkeys(("AttemptStatus", "RunStatus"), "stashpoint.status"),
    "Deadline": "stashpoint.deadline",
    **dict.fromkeys(("Manifest", "Prefix"), "stashpoint.runs.sources"),
    **dict.fromkeys(("Retry", "Semantics"), "stashpoint.runs.durable"),
    **dict.fromkeys(("AsyncLogStore", "LogEntry", "LogHead", "LogStore"), "stashpoint.logs"),
    **dict.fromkeys(
        ("AsyncStash", "OpenOptions", "Options", "Stash", "open", "open_async"), "stashpoint.stash"
    ),
    **dict.fromkeys(("AsyncStore", "Store"), "stashpoint.stores"),
    **dict.fromkeys(
        (
            "AsyncRunStore",
            "CheckpointMetadata",
            "Interrupt",
            "RunState",
            "RunStore",
            "RunSummary",
            "TraceContext",
        ),
        "stashpoint.runs",
    ),
}


def __getattr__(name: str) -> Any:
    # Names load on first use: `import stashpoint` stays light for Lambda cold starts.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stashpoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AmbiguousResume",
    "ArchivedObject",
    "AsyncLogStore",
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
    "Deadline",
    "ConfigurationError",
    "Encryption",
    "Envelope",
    "ErrorKind",
    "Fenced",
    "GraphDriftError",
    "IdentityMismatch",
    "IndexDamaged",
    "Interrupt",
    "InvalidArgument",
    "InvalidId",
    "InvalidPayload",
    "KeyRule",
    "KeyShredded",
    "KeyUnavailable",
    "LimitExceeded",
    "NondeterministicReplay",
    "Limits",
    "LogEntry",
    "LogHead",
    "LogStore",
    "Manifest",
    "OpenOptions",
    "Options",
    "Prefix",
    "PurgeReceipt",
    "Purged",
    "Retry",
    "RetentionLocked",
    "RetryPolicy",
    "RunClaimed",
    "RunNotFound",
    "RunSuspended",
    "RunState",
    "RunStatus",
    "RunStore",
    "RunSummary",
    "Semantics",
    "SourceChanged",
    "Stash",
    "StashpointError",
    "StepFailed",
    "WaitTimedOut",
    "StepInterrupted",
    "Store",
    "StorageUnavailable",
    "TerminalStateConflict",
    "TraceContext",
    "Undecryptable",
    "UnsafeStorage",
    "UnsupportedFormat",
    "new_id",
    "open",
    "open_async",
    "validate_id",
]

__version__ = "0.1.0"
