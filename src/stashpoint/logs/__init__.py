"""Append-only logs: O(delta) appends, sealed segments, history without versioning.

`stash.logs` is a `LogStore` (`AsyncLogStore` on an `AsyncStash`); agent checkpoints keep
their transcripts in logs of their own. The stored form is in `logs.format`, the protocol
in `logs.log`, the public operations in `logs.store`.
"""

from stashpoint.logs.format import LOG_FORMAT, SEGMENT_SPAN, LogEntry
from stashpoint.logs.log import LogHead
from stashpoint.logs.store import AsyncLogStore, LogStore

__all__ = ["LOG_FORMAT", "SEGMENT_SPAN", "AsyncLogStore", "LogEntry", "LogHead", "LogStore"]
