"""Which threads may hold checkpoints of a run: the index `delete_for_runs` reads.

LangGraph's `delete_for_runs(run_ids)` and `list(None, filter={"run_id": ...})` ask for the
checkpoints of given runs across every thread. Without an index that is a walk of every
thread (thousands of requests at a thousand threads). Where the stash has an index (SQLite
on the embedded default, DynamoDB on S3), the saver keeps one item per (run, thread):

    pk = lgrun#{stash prefix}#{run_id}   sk = thread#{thread log id}
    revision = the thread log version the put planned at

(The prefix keeps two stashes sharing a table apart: LangGraph's run and thread ids are
chosen by the application, not unique ids.)

Unlike the run index, which follows storage (a crash leaves it behind), these items go
**ahead** of storage: a put writes its run's item before the append that stores the
checkpoint, so the items are always a superset of the threads that hold a run. An item whose
thread no longer holds the run (the put lost, the thread was deleted or purged) costs one
thread read at the next `delete_for_runs`, which then removes it. A put writes the item only
when the thread's head does not already name its run (`ThreadState.run`): one index write
per run per thread, not per step.

A stash whose threads were written before these items existed (an older stashpoint, or an
index added later) is not covered: `complete` is the marker that every thread was walked
once and its runs written (`delete_for_runs` walks and writes them when the marker is
absent; `setup()` does it on purpose). The marker lives in the same index, so an index
rebuilt empty loses it and is walked again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from stashpoint.errors import InvalidId
from stashpoint.ids import validate_id
from stashpoint.index.requests import MALFORMED, DeleteItem, GetItem, GetPartition, PutItems
from stashpoint.steps import Parallel, Steps, ask

_RUN_PARTITION = "lgrun#"
_THREAD_SORT = "thread#"
_MARKER_PK = "meta#langgraph"
_MARKER_SK = "run-threads:"
_PROGRESS_SK = "run-threads-walked:"
_MARKER_LAYOUT = 1
"""What the marker's revision says: every thread's runs were written by this layout."""
_LONGEST_RUN_ID = 256
"""Run ids up to this many UTF-8 bytes are kept readable in their partition key; longer
ones are hashed (DynamoDB keys are bounded; a collision only widens the superset)."""


class RunThreads:
    """The (run, thread) items of one stash's index, as steps."""

    def __init__(self, prefix: str) -> None:
        self.scope = prefix or "-"
        """The stash's prefix, in every key (`-` for none)."""

    def run_partition(self, run_id: str) -> str:
        """Return the partition key of a run's items."""
        if len(run_id.encode()) > _LONGEST_RUN_ID:
            run_id = "~sha256-" + hashlib.sha256(run_id.encode()).hexdigest()
        return f"{_RUN_PARTITION}{self.scope}#{run_id}"

    @property
    def _marker(self) -> str:
        return _MARKER_SK + self.scope

    @property
    def _progress(self) -> str:
        return _PROGRESS_SK + self.scope

    def thread_item(self, run_id: str, thread_key: str, revision: int) -> dict[str, Any]:
        """Return the item saying that thread `thread_key` may hold checkpoints of `run_id`."""
        return {
            "pk": self.run_partition(run_id),
            "sk": _THREAD_SORT + thread_key,
            "revision": revision,
        }

    def note(self, run_ids: Iterable[str], thread_key: str, revision: int) -> Steps[None]:
        """Record that a thread may hold checkpoints of these runs (before it does).

        `revision`: the thread log version the write that stores them plans at. An item is
        written only over a lower revision, so a later put's item survives a conditional
        `forget` of an earlier one.
        """
        items = tuple(
            self.thread_item(run_id, thread_key, revision) for run_id in sorted(set(run_ids))
        )
        if items:
            yield from ask(PutItems(items))

    def threads_of(self, run_ids: Sequence[str]) -> Steps[dict[str, dict[str, int]] | None]:
        """Return, by thread log id, the runs (and item revisions) that may be in it.

        None when the items cannot be trusted to cover every thread (no `complete` marker):
        the caller walks every thread. One request for the marker, then one per run, sent
        together.
        """
        marker = yield from ask(GetItem(_MARKER_PK, self._marker))
        if marker is None or _revision(marker) < _MARKER_LAYOUT:
            return None
        runs = sorted(set(run_ids))
        pages: list[Any] = list(
            (yield from ask(Parallel(tuple(GetPartition(self.run_partition(r)) for r in runs))))
        )
        found: dict[str, dict[str, int]] = {}
        for run_id, items in zip(runs, pages, strict=True):
            for item in items:
                key = _thread_key_of(item)
                if key is not None:
                    found.setdefault(key, {})[run_id] = _revision(item)
        return found

    def forget(self, run_id: str, thread_key: str, revision: int) -> Steps[None]:
        """Remove a (run, thread) item, unless a put rewrote it since it was read."""
        expected = MALFORMED if revision < 0 else revision
        yield from ask(
            DeleteItem(self.run_partition(run_id), _THREAD_SORT + thread_key, expected=expected)
        )

    def complete(self) -> Steps[None]:
        """Record that every thread's runs are written (after a walk of every thread)."""
        marker = {"pk": _MARKER_PK, "sk": self._marker, "revision": _MARKER_LAYOUT}
        yield from ask(PutItems((marker,)))
        yield from ask(DeleteItem(_MARKER_PK, self._progress))

    def walked(self) -> Steps[tuple[str | None, int]]:
        """Return where an unfinished walk of every thread got to, and its count of threads.

        The position is a page cursor of the thread listing (None: from the start).
        """
        item = yield from ask(GetItem(_MARKER_PK, self._progress))
        position = item.get("position") if isinstance(item, dict) else None
        if not isinstance(position, str):
            return None, 0
        try:
            # A cursor is a thread's log id; anything else (planted) starts the walk over.
            return validate_id(position), max(_revision(item), 0)
        except InvalidId:
            return None, 0

    def walking(self, position: str, walked: int) -> Steps[None]:
        """Record how far a walk of every thread got, so that the next one goes on from it.

        Written over a lower count only: of two walks at once, the further one's stays.
        """
        item = {"pk": _MARKER_PK, "sk": self._progress, "revision": walked, "position": position}
        yield from ask(PutItems((item,)))

    def is_complete(self) -> Steps[bool]:
        """Whether every thread's runs were written once (the marker is there)."""
        marker = yield from ask(GetItem(_MARKER_PK, self._marker))
        return marker is not None and _revision(marker) >= _MARKER_LAYOUT


def _thread_key_of(item: Any) -> str | None:
    """Return the thread log id an item names; None for one planted with no valid id."""
    sort_key = item.get("sk") if isinstance(item, dict) else None
    if not isinstance(sort_key, str) or not sort_key.startswith(_THREAD_SORT):
        return None
    try:
        return validate_id(sort_key[len(_THREAD_SORT) :])
    except InvalidId:
        return None


def _revision(item: Any) -> int:
    """Return an item's revision; a planted item without a number counts as none."""
    value = item.get("revision") if isinstance(item, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else -1
