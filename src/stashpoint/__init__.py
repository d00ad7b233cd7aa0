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
    AmbiguousResume as AmbiguousResume,
)
from stashpoint.errors import (
    ArchivedObject as ArchivedObject,
)
from stashpoint.errors import (
    AttemptNotFound as AttemptNotFound,
)
from stashpoint.errors import (
    CheckpointConflict as CheckpointConflict,
)
from stashpoint.errors import (
    CheckpointNotFound as CheckpointNotFound,
)
from stashpoint.errors import (
    ConfigurationError as ConfigurationError,
)
from stashpoint.errors import (
    DurableExecutionExists as DurableExecutionExists,
)
from stashpoint.errors import (
    DurableExecutionNotFound as DurableExecutionNotFound,
)
from stashpoint.errors import (
    ErrorKind,
    StashpointError,
)
from stashpoint.errors import (
    Fenced as Fenced,
)
from stashpoint.errors import (
    GraphDriftError as GraphDriftError,
)
from stashpoint.errors import (
    IdentityMismatch as IdentityMismatch,
)
from stashpoint.errors import (
    IndexDamaged as IndexDamaged,
)
from stashpoint.errors import (
    InvalidArgument as InvalidArgument,
)
from stashpoint.errors import (
    InvalidDurableUpdate as InvalidDurableUpdate,
)
from stashpoint.errors import (
    InvalidId as InvalidId,
)
from stashpoint.errors import (
    InvalidPayload as InvalidPayload,
)
from stashpoint.errors import (
    KeyShredded as KeyShredded,
)
from stashpoint.errors import (
    KeyUnavailable as KeyUnavailable,
)
from stashpoint.errors import (
    LimitExceeded as LimitExceeded,
)
from stashpoint.errors import (
    NondeterministicReplay as NondeterministicReplay,
)
from stashpoint.errors import (
    Purged as Purged,
)
from stashpoint.errors import (
    RetentionLocked as RetentionLocked,
)
from stashpoint.errors import (
    RunClaimed as RunClaimed,
)
from stashpoint.errors import (
    RunNotFound as RunNotFound,
)
from stashpoint.errors import (
    RunSuspended as RunSuspended,
)
from stashpoint.errors import (
    SourceChanged as SourceChanged,
)
from stashpoint.errors import (
    StaleCheckpointToken as StaleCheckpointToken,
)
from stashpoint.errors import (
    StepFailed as StepFailed,
)
from stashpoint.errors import (
    StepInterrupted as StepInterrupted,
)
from stashpoint.errors import (
    StorageUnavailable as StorageUnavailable,
)
from stashpoint.errors import (
    TerminalStateConflict as TerminalStateConflict,
)
from stashpoint.errors import (
    Undecryptable as Undecryptable,
)
from stashpoint.errors import (
    UnsafeStorage as UnsafeStorage,
)
from stashpoint.errors import (
    UnsupportedFormat as UnsupportedFormat,
)
from stashpoint.errors import (
    WaitTimedOut as WaitTimedOut,
)

if TYPE_CHECKING:
    from stashpoint.codec import Codec, Limits
    from stashpoint.deadline import Deadline
    from stashpoint.encryption import Encryption, KeyRule
    from stashpoint.envelope import CheckpointInfo, Envelope
    from stashpoint.ids import new_id, validate_id
    from stashpoint.logs import AsyncLogStore, LogEntry, LogHead, LogStore
    from stashpoint.maintenance.purge import PurgeReceipt
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

_ERRORS = (
    "AmbiguousResume",
    "ArchivedObject",
    "AttemptNotFound",
    "CheckpointConflict",
    "CheckpointNotFound",
    "ConfigurationError",
    "DurableExecutionExists",
    "DurableExecutionNotFound",
    "Fenced",
    "GraphDriftError",
    "IdentityMismatch",
    "IndexDamaged",
    "InvalidArgument",
    "InvalidDurableUpdate",
    "InvalidId",
    "InvalidPayload",
    "KeyShredded",
    "KeyUnavailable",
    "LimitExceeded",
    "NondeterministicReplay",
    "Purged",
    "RetentionLocked",
    "RunClaimed",
    "RunNotFound",
    "RunSuspended",
    "SourceChanged",
    "StaleCheckpointToken",
    "StepFailed",
    "StepInterrupted",
    "StorageUnavailable",
    "TerminalStateConflict",
    "Undecryptable",
    "UnsafeStorage",
    "UnsupportedFormat",
    "WaitTimedOut",
)
"""The error classes the top level still offers (not listed in `__all__`)."""

_LAZY = {
    **dict.fromkeys(("Codec", "Limits"), "stashpoint.codec"),
    **dict.fromkeys(("CheckpointInfo", "Envelope"), "stashpoint.envelope"),
    **dict.fromkeys(("new_id", "validate_id"), "stashpoint.ids"),
    "RetryPolicy": "stashpoint.retry",
    "PurgeReceipt": "stashpoint.maintenance.purge",
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
    return sorted({*__all__, *_ERRORS})


__all__ = [
    "AsyncLogStore",
    "AsyncRunStore",
    "AsyncStash",
    "AsyncStore",
    "AttemptStatus",
    "CheckpointInfo",
    "CheckpointMetadata",
    "Codec",
    "Deadline",
    "Encryption",
    "Envelope",
    "ErrorKind",
    "Interrupt",
    "KeyRule",
    "Limits",
    "LogEntry",
    "LogHead",
    "LogStore",
    "Manifest",
    "OpenOptions",
    "Options",
    "Prefix",
    "PurgeReceipt",
    "Retry",
    "RetryPolicy",
    "RunState",
    "RunStatus",
    "RunStore",
    "RunSummary",
    "Semantics",
    "Stash",
    "StashpointError",
    "Store",
    "TraceContext",
    "new_id",
    "open",
    "open_async",
    "validate_id",
]
"""The public names (`tests/test_public_names.py` pins them). Every error class is importable
from `stashpoint.errors`, and from here as before; only `StashpointError` and `ErrorKind`
are listed."""

__version__ = "0.1.0"
