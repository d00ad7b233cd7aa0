"""When each durable execution is due, kept in the stash's index: how workers find work.

Without it a worker finds due executions by listing every execution and reading each one's
newest entry (a LIST and a GET per execution, every poll): with eight workers polling, that
and not the handlers is what the machine spends its time on. With an index (SQLite on the
embedded default, DynamoDB on S3) every execution that can become due has one item:

    pk = dx#{stash prefix}#{execution id}   sk = due   revision = the log version it describes
    rspk = dxdue#{stash prefix}#{shard}     rssk = {due, epoch ms, 15 digits}#{execution id}

in the `runs_by_status` secondary index (keys only), so "what is due now" is one query per
shard, oldest due first, all shards at once. An execution that waits on the outside (a
callback, a chained invoke's target) or has ended has the item without the GSI keys: it
leaves the GSI.

Like the run index, the items **follow** storage: the service writes one after each append
that changes when the execution is due (start, claim, an invocation's end, a callback's
answer, a stop), never inside a step's checkpoint (a checkpoint moves only the lease of the
invocation that holds the execution, and an item that says "due" early costs one read, never
a lost wake-up). Items only move forward (`PutItems` writes over a lower revision alone). An
item that is early (a lease renewed since) is corrected by the claim that finds the
execution not due. A process that dies between an append and its item leaves the item late
or absent: the workers' periodic full scan (`sweep`) finds and rewrites it.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

from stashpoint.index.requests import DeleteItem, GetItems, ItemPage, PutItems, QueryItems
from stashpoint.index.schema import RUNS_BY_STATUS, SHARDS, execution_due_pk
from stashpoint.steps import Parallel, Steps, ask

_ITEM_SORT = "due"
_DUE_PARTITION = "dxdue#"
_DIGITS = 15
"""Epoch milliseconds as fixed-width text (sorts as numbers until the year 33658)."""


class DueIndex:
    """The due times of one stash's durable executions, in its index, as steps."""

    def __init__(self, prefix: str) -> None:
        self.scope = prefix or "-"
        """The stash's prefix, in every key (`-` for none): stashes sharing a table stay apart."""

    def item(self, execution_id: str, version: int, due_ms: int | None) -> dict[str, Any]:
        """Return the item saying that at `version` the execution is due at `due_ms`."""
        item: dict[str, Any] = {
            "pk": execution_due_pk(self.scope, execution_id),
            "sk": _ITEM_SORT,
            "revision": version,
        }
        if due_ms is not None:
            shard = zlib.crc32(execution_id.encode()) % SHARDS
            item[RUNS_BY_STATUS.partition_key] = f"{_DUE_PARTITION}{self.scope}#{shard}"
            item[RUNS_BY_STATUS.sort_key] = f"{max(0, due_ms):0{_DIGITS}d}#{execution_id}"
        return item

    def record(self, execution_id: str, version: int, due_ms: int | None) -> Steps[None]:
        """Write the execution's due time as of `version` (skipped if a newer one is there)."""
        yield from self.record_many([(execution_id, version, due_ms)])

    def record_many(self, dues: Iterable[tuple[str, int, int | None]]) -> Steps[None]:
        """Write several executions' (id, version, due time) at once (one round trip)."""
        items = tuple(self.item(*due) for due in dues)
        if items:
            yield from ask(PutItems(items))

    def behind(
        self, dues: list[tuple[str, int, int | None]]
    ) -> Steps[list[tuple[str, int, int | None]]]:
        """Return the (id, version, due time) whose item is missing or of an older version."""
        keys = tuple((execution_due_pk(self.scope, i), _ITEM_SORT) for i, _, _ in dues)
        items: list[Any] = list((yield from ask(GetItems(keys)))) if keys else []
        return [
            due
            for due, item in zip(dues, items, strict=True)
            if item is None or not _revision_at_least(item, due[1])
        ]

    def forget(self, execution_id: str) -> Steps[None]:
        """Remove the execution's item (it no longer exists: purged or never written)."""
        yield from ask(DeleteItem(execution_due_pk(self.scope, execution_id), _ITEM_SORT))

    def due(self, now_ms: int, limit: int) -> Steps[list[tuple[int, str]]]:
        """Return up to `limit` (due time, execution id) due at `now_ms`, earliest first.

        One query per shard, all at once; each asks for `limit`, so the merge is the
        earliest `limit` of them all.
        """
        below = f"{max(0, now_ms):0{_DIGITS}d}$"  # `$` sorts after `#`: due exactly now is due
        pages: list[Any] = list(
            (
                yield from ask(
                    Parallel(
                        tuple(
                            QueryItems(
                                RUNS_BY_STATUS.name,
                                self.partition(shard),
                                limit,
                                sort_below=below,
                                ascending=True,
                            )
                            for shard in range(SHARDS)
                        )
                    )
                )
            )
        )
        return sorted(_entries(pages))[:limit]

    def next_due_ms(self) -> Steps[int | None]:
        """Return the earliest due time of any execution (None: none waits on time)."""
        pages: list[Any] = list(
            (
                yield from ask(
                    Parallel(
                        tuple(
                            QueryItems(
                                RUNS_BY_STATUS.name, self.partition(shard), 1, ascending=True
                            )
                            for shard in range(SHARDS)
                        )
                    )
                )
            )
        )
        found = _entries(pages)
        return min(found)[0] if found else None

    def partition(self, shard: int) -> str:
        """Return the GSI partition of one shard of the due items."""
        return f"{_DUE_PARTITION}{self.scope}#{shard}"


def _entries(pages: list[ItemPage]) -> list[tuple[int, str]]:
    """Return the (due time, execution id) of every item in the pages (malformed: skipped)."""
    out = []
    for page in pages:
        for item in page.items:
            due, sep, execution_id = str(item.get(RUNS_BY_STATUS.sort_key, "")).partition("#")
            if sep and due.isdigit() and execution_id:
                out.append((int(due), execution_id))
    return out


def _revision_at_least(item: Any, version: int) -> bool:
    revision = item.get("revision")
    return type(revision) is int and revision >= version
