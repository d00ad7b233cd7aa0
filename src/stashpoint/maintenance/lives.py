"""The lives of an id: which of a log's objects belong to the lives a purge ended.

A log id can have several lives: a deletion, or a purge with `reusable=True`, ends one, and
the next create starts another right after the version that ended it (its `base`). A purge
owns the versions up to its tombstone; after a reusable purge nothing of a later life is
its own: entries above the tombstone, segments and packs whose range starts above it,
objects quarantined from above it, and large values whose document names a later life.
`purge.Purger` (the purge, its resumption, and `gc`'s sweep of leftovers) asks this module
which of the versions it listed it may remove (docs/purge.md, "The lives of an id").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stashpoint import jsontext
from stashpoint.codec import Codec
from stashpoint.errors import StashpointError
from stashpoint.logs.format import LogEntry
from stashpoint.logs.log import LogSteps, purge_of
from stashpoint.maintenance.receipts import Target
from stashpoint.steps import Parallel, Steps, ask
from stashpoint.stores.layout import NAMESPACES, QUARANTINE, Layout
from stashpoint.stores.objects import GetObject, StoredVersion

LIVES_WALKED = 64
"""Lives of a log a resumed purge walks down looking for its tombstone."""
_UNVERSIONED = "null"
"""The version id of an object written without versioning."""
_PARALLEL = 256
"""Requests sent in one `Parallel` (the driver keeps 16 in flight)."""


@dataclass
class LifeBounds:
    """Which lives of a log a purge owns: those up to its tombstone (all, unless reusable)."""

    tombstone: int | None
    reusable: bool
    guarded: dict[str, str] = field(default_factory=dict)
    """Unversioned objects judged ours by content, deleted only while their ETag holds."""


def _number(name: str) -> int | None:
    return int(name) if name.isdigit() and name.isascii() else None


def _segment_first(name: str) -> int | None:
    first, _, last = name.partition("-")
    return int(first) if _number(first) is not None and _number(last) is not None else None


def _life_of(codec: Codec, body: bytes | None, name: str) -> int:
    """Return the life a large value's document names (-1: none, or not readable)."""
    if body is None:
        return -1
    try:
        document = jsontext.parse(codec.unwrap(body, name=name))
    except (StashpointError, ValueError):
        return -1
    life = document.get("life") if isinstance(document, dict) else None
    return life if type(life) is int else -1


class Lives:
    """Judges a purge's listings by the lives rule, as steps."""

    def __init__(self, layout: Layout, codec: Codec, logs: Callable[[str], LogSteps]) -> None:
        self.layout = layout
        """Where the stash's objects live."""
        self.codec = codec
        """Decodes large values (for the life they name)."""
        self.logs = logs
        """Makes the log steps of a log namespace."""

    def own_tombstone(self, logs: LogSteps, log_id: str, purge_id: str) -> Steps[int | None]:
        """Return the version of `purge_id`'s tombstone of `log_id`, walking its lives down.

        Each life starts right after the version that ended the one before (its `base`):
        from the top, one read per life, until the purge's tombstone (its version) or a
        life this purge did not end (None: the tombstone was never written).
        """
        try:
            head = yield from logs.top(log_id)
        except StashpointError:
            return None  # no log, or one the purge ends as unreadable
        item: Any = head
        for _ in range(LIVES_WALKED):
            if purge_of(item.ended, item.extra) == purge_id:
                return int(item.version)
            if item.base == 0:
                return None
            try:
                item = yield from logs.read_version(log_id, item.base - 1)
            except StashpointError:
                return None
            if not isinstance(item, LogEntry):
                return None  # vacated, or gone: not a tombstone this purge can name
        return None

    def _first_version_of(self, target: Target, prefix: str) -> Callable[[str], int | None] | None:
        """Return how the first log version a name under `prefix` holds is read from it.

        None for the prefix of the log's large values (their names say nothing of the
        life: their documents do); a function returning None where nothing is known.
        """
        keys = self.logs(target.namespace).keys
        values_of = NAMESPACES[target.namespace].values
        if prefix == keys.entries_prefix(target.object_id):
            return _number
        if prefix == keys.segments_prefix(target.object_id):
            return _segment_first
        if prefix.startswith(self.layout.namespace_prefix(QUARANTINE)):
            return lambda name: _number(name.split(".", 1)[0])
        if values_of is not None and prefix == self.layout.key(values_of, target.object_id) + "/":
            return None
        return lambda _name: None

    def _of_life_by_content(
        self, unsure: list[StoredVersion], tombstone: int, lives: LifeBounds
    ) -> Steps[list[StoredVersion]]:
        """Return the large values of `unsure` of a life the purge ended (by their documents).

        An unversioned one is noted in `lives.guarded`: deleted only while it holds what
        was read.
        """
        ours: list[StoredVersion] = []
        for start in range(0, len(unsure), _PARALLEL):
            batch = unsure[start : start + _PARALLEL]
            infos = yield from ask(Parallel(tuple(GetObject(v.key, v.version_id) for v in batch)))
            for version, info in zip(batch, infos, strict=True):
                if info is None:
                    continue  # gone since the listing
                if _life_of(self.codec, info.body, version.key) > tombstone:
                    continue  # written for a later life
                if version.version_id == _UNVERSIONED and info.etag:
                    lives.guarded[version.key] = info.etag
                ours.append(version)
        return ours

    def of_this_life(
        self, target: Target, prefix: str, listed: list[StoredVersion], lives: LifeBounds
    ) -> Steps[list[StoredVersion]]:
        """Return the listed versions that belong to the lives this purge ended.

        After a reusable purge a create starts a new life above the tombstone: its entries
        (named by version), its segments and packs (named by their range, wholly above the
        tombstone), its quarantined objects and its large values (whose documents name the
        life they were written for) are never this purge's. A value of a later life whose
        key still holds an old life's object is judged by content and removed only if it
        still holds that object (`lives.guarded`: conditional on its ETag).
        """
        if not lives.reusable or lives.tombstone is None:
            return listed
        tombstone = lives.tombstone
        first_of = self._first_version_of(target, prefix)
        ours: list[StoredVersion] = []
        unsure: list[StoredVersion] = []
        for version in listed:
            if first_of is None and not version.is_delete_marker:
                unsure.append(version)  # a large value: its document names its life
                continue
            first = None if first_of is None else first_of(version.key[len(prefix) :])
            if first is None or first <= tombstone:
                ours.append(version)  # (one above the tombstone is a later life's)
        ours += yield from self._of_life_by_content(unsure, tombstone, lives)
        return ours
