"""Append-only logs: `LogStore` (blocking) and `AsyncLogStore` (asyncio).

The operations are defined once, in `_LogApi`, over the steps of `logs.log`; the twins
differ only in their driver (`stashpoint.twins`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stashpoint.errors import whole
from stashpoint.logs.format import LogEntry
from stashpoint.logs.log import LogHead, LogSteps, PackReport
from stashpoint.steps import Steps
from stashpoint.stores.objects import RestoreReport
from stashpoint.twins import Awaiting, Blocking, operation


class _LogApi:
    """The log operations, each returning its steps."""

    def __init__(self, steps: LogSteps, execute: Callable[[Any], Any]) -> None:
        self.steps = steps
        """The log steps behind these operations (what other logic composes)."""
        self.driver = execute
        """Runs this object's requests: what its operations' steps are driven with."""

    @operation
    def append(
        self,
        log_id: str,
        records: list[Any],
        *,
        after: LogHead | None,
        state: Any = None,
        kind: str | None = None,
        schema_version: int | None = None,
    ) -> Steps[LogHead]:
        """Append `records` and the log's new `state` after the head `after`.

        `after=None` creates the log (version 0). Of two appends after the same head exactly
        one succeeds; the other raises `CheckpointConflict` whose `actual_revision` is the
        winner's version. Sends only the new records and the state (one PUT). Returns the
        new head, to append after next.
        """
        return self.steps.append(
            log_id, records, after=after, state=state, kind=kind, schema_version=schema_version
        )

    @operation
    def head(self, log_id: str) -> Steps[LogHead]:
        """Return the latest version of a log; `CheckpointNotFound` if it has none."""
        return self.steps.head(log_id)

    @operation
    def entries(
        self, log_id: str, start: int = 0, stop: int | None = None
    ) -> Steps[list[LogEntry]]:
        """Return versions `start` to `stop` (inclusive; default the latest) in order.

        Any earlier version, with its state, reads like the latest: a log is its own history.
        """
        return self.steps.entries(log_id, start, stop)

    @operation
    def records(self, log_id: str, start: int = 0) -> Steps[list[Any]]:
        """Return every record from position `start` on, in order."""
        return _records(self.steps, log_id, start)

    @operation
    def tail(self, log_id: str, count: int) -> Steps[tuple[LogHead, list[Any]]]:
        """Return the head and the last `count` records, reading only the newest objects."""
        return _tail(self.steps, log_id, count)

    @operation
    def seal(self, log_id: str) -> Steps[int]:
        """Seal complete segments and clean up sealed entries; return segments written.

        Appends seal on their own; this is for maintenance (`stashpoint gc`).
        """
        return self.steps.seal(log_id)

    @operation
    def pack(self, log_id: str) -> Steps[PackReport]:
        """Pack the log's old sealed segments into archive objects of 1,024 versions.

        For a long or finished log kept for years: sixteen segments become one object a
        lifecycle rule moves to an archive tier, and every sealed entry is vacated (a
        small marker keeps its key). Idempotent and safe beside writers; `stashpoint gc
        --pack` packs every log. Stashpoint releases before packs refuse to read a packed
        log (a typed `InvalidPayload`): upgrade readers first.
        """
        return self.steps.pack(log_id)

    @operation
    def restore(self, log_id: str, days: int = 7, tier: str = "Standard") -> Steps[RestoreReport]:
        """Restore the log's archived sealed segments for `days`; call again for progress.

        `tier`: `Expedited`, `Standard` or `Bulk` (S3 Glacier retrieval tiers). Reading an
        archived segment raises `ArchivedObject` until its restore is done.
        """
        return self.steps.restore(log_id, days, tier)

    @operation
    def delete(self, log_id: str) -> Steps[int]:
        """Delete every object of a log; return how many."""
        return self.steps.delete(log_id)

    @operation
    def list_page(
        self, prefix: str = "", limit: int = 100, cursor: str | None = None
    ) -> Steps[tuple[list[str], str | None]]:
        """Return a page of log ids starting with `prefix` after `cursor`, and a cursor.

        Ids ascend; the returned cursor names the next page (None at the end).
        """
        return self.steps.list_page(prefix, limit, cursor)

    @operation
    def list_ids(self, prefix: str = "") -> Steps[list[str]]:
        """Return the ids of the logs whose id starts with `prefix`, ascending."""
        return self.steps.list_ids(prefix)


def _records(logs: LogSteps, log_id: str, start: int) -> Steps[list[Any]]:
    whole(start, "start", object_name=log_id)
    entries = yield from logs.entries(log_id)
    out: list[Any] = []
    for entry in entries:
        if entry.next_record > start:
            out.extend(entry.records[max(0, start - entry.first_record) :])
    return out


def _tail(logs: LogSteps, log_id: str, count: int) -> Steps[tuple[LogHead, list[Any]]]:
    head, entries = yield from logs.tail(log_id, count)
    floor = max(0, head.next_record - count)
    out: list[Any] = []
    for entry in entries:
        out.extend(entry.records[max(0, floor - entry.first_record) :])
    return head, out


class LogStore(Blocking, _LogApi):
    """Append-only logs of JSON records with a small state, each append one conditional PUT."""


class AsyncLogStore(Awaiting, _LogApi):
    """The asyncio twin of `LogStore`."""
