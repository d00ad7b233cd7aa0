"""stashpoint: durable, versioned checkpoints for batch jobs and AI agents.

stash = stashpoint.open("local://./.stashpoint")   # or s3://bucket/prefix
env = stashpoint.Envelope.initial(stashpoint.new_id(), None, "job", 1, {"done": 0})
stash.checkpoints.compare_and_swap(env, None)
"""

from stashpoint.codec import Codec, Limits
from stashpoint.envelope import Envelope
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    ErrorKind,
    InvalidId,
    InvalidPayload,
    LimitExceeded,
    StashpointError,
    StorageUnavailable,
    UnsupportedFormat,
)
from stashpoint.ids import new_id, validate_id
from stashpoint.retry import RetryPolicy
from stashpoint.stash import AsyncStash, Options, Stash, open, open_async
from stashpoint.stores import AsyncStore, Store

__all__ = [
    "AsyncStash",
    "AsyncStore",
    "CheckpointConflict",
    "CheckpointNotFound",
    "Codec",
    "ConfigurationError",
    "Envelope",
    "ErrorKind",
    "InvalidId",
    "InvalidPayload",
    "LimitExceeded",
    "Limits",
    "Options",
    "RetryPolicy",
    "Stash",
    "StashpointError",
    "Store",
    "StorageUnavailable",
    "UnsupportedFormat",
    "new_id",
    "open",
    "open_async",
    "validate_id",
]

__version__ = "0.1.0"
