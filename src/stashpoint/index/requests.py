"""The index vocabulary: requests that index protocols yield and index transports execute."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from stashpoint.steps import Request

R = TypeVar("R")

Item = Mapping[str, Any]
"""One index item: string keys, values that are str, int or None (None: absent)."""


class IndexRequestBase(Request[R]):
    """Base of the requests an index transport executes (the router sends them there)."""

    __slots__ = ()

    for_index: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Malformed:
    """An expected stored revision that is not a number (a corrupt or planted item)."""


MALFORMED = Malformed()
"""Expect a stored revision that is missing or not a number."""

Expected = int | Malformed | None
"""What a conditional index write expects to find: this revision, a malformed one, or no
item (None)."""


@dataclass(frozen=True, slots=True)
class PutItems(IndexRequestBase["int"]):
    """Request: write items, each only if its stored `revision` is lower (or it is absent).

    Result: the number of items written (stale ones are skipped, not errors).
    """

    items: tuple[Item, ...]
    """Items to write, each with `pk`, `sk` and `revision`."""


@dataclass(frozen=True, slots=True)
class ReplaceItems(IndexRequestBase["int"]):
    """Request: write items over exactly what was read (stored `revision` unchanged).

    Each item is written only if its stored revision is still the one given (None: only if
    there is no item). Result: the number written. Repair and reindex use it to make the
    index equal to storage, including items with a wrong status or a revision from the
    future, without ever overwriting a concurrent writer's newer item.
    """

    items: tuple[tuple[Item, Expected], ...]
    """Pairs of (item, the stored revision it replaces: None where there was no item,
    `MALFORMED` where the stored one is not a number)."""


@dataclass(frozen=True, slots=True)
class GetPartition(IndexRequestBase["list[dict[str, Any]]"]):
    """Request: every item under one partition key (a run and its attempts), read consistently.

    Result: the items, in sort-key order.
    """

    pk: str
    """Partition key."""


@dataclass(frozen=True, slots=True)
class GetItem(IndexRequestBase["dict[str, Any] | None"]):
    """Request: read one item by key. Result: the item or None."""

    pk: str
    """Partition key."""
    sk: str
    """Sort key."""


@dataclass(frozen=True, slots=True)
class DeleteItem(IndexRequestBase["None"]):
    """Request: delete one item by key. Result: None (also when the condition refused it)."""

    pk: str
    """Partition key."""
    sk: str
    """Sort key."""
    expected: int | Malformed | None = None
    """Delete only if the stored revision is still this (`MALFORMED`: not a number);
    None deletes whatever is there."""


@dataclass(frozen=True, slots=True)
class QueryItems(IndexRequestBase["ItemPage"]):
    """Request: one page of a secondary index partition, sort key descending (or ascending).

    Result: `ItemPage`. The GSIs project keys only, so items carry their keys alone (the
    SQLite index may give more). Paging continues below the last sort key seen
    (`sort_below`): sort keys end in a unique id, so that is exact.
    """

    index: str
    """Secondary index name."""
    partition: str
    """Partition key value."""
    limit: int
    """Largest page wanted."""
    sort_at_least: str | None = None
    """Only items whose sort key is >= this (a `since` bound)."""
    sort_below: str | None = None
    """Only items whose sort key is < this (the previous page's last key, or a moment)."""
    ascending: bool = False
    """Oldest sort key first (a queue read in order of due time) instead of newest first."""


@dataclass(frozen=True, slots=True)
class GetItems(IndexRequestBase["list[dict[str, Any] | None]"]):
    """Request: read items by key, consistently (a listing's page).

    Result: the items in the order of `keys`, None where there is no item.
    """

    keys: tuple[tuple[str, str], ...]
    """(partition key, sort key) of each item."""


@dataclass(frozen=True, slots=True)
class ItemPage:
    """One page of query results."""

    items: list[dict[str, Any]]
    """Items (at least their keys), sort key descending."""
    more: bool
    """Whether the partition may hold more items below the last one."""


@dataclass(frozen=True, slots=True)
class DescribeIndex(IndexRequestBase["IndexDescription"]):
    """Request: what the index store has. Result: `IndexDescription`."""


@dataclass(frozen=True, slots=True)
class IndexDescription:
    """The shape of the index as deployed."""

    exists: bool
    """Whether the table (or file) exists."""
    secondary_indexes: tuple[str, ...]
    """Names of its secondary indexes."""
    ttl_attribute: str | None
    """The attribute TTL deletes on, None when TTL is off."""
    engine: str = "dynamodb"
    """What stores the index: `dynamodb`, or `sqlite` (the embedded default)."""


IndexRequest = (
    PutItems
    | ReplaceItems
    | GetPartition
    | GetItem
    | GetItems
    | DeleteItem
    | QueryItems
    | DescribeIndex
)
"""Every request an index transport executes."""
