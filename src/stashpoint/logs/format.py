"""The stored form of a log: entries, sealed segments, their keys and their checks.

A log is a sequence of *versions*. Version `v` is one immutable object, the *entry*
`{prefix}/{namespace}/{log_id}/{v:020d}`, created with `If-None-Match: *`: the create is
the compare-and-swap, so two writers extending version `v - 1` cannot both succeed. An entry
carries the records appended at `v` (`first_record` is the position of the first of them
in the whole log) and the log's small *state* after `v` (an agent's phase and counters, a
run's head); the latest entry's state is the log's state. So that a save whose state barely
changed stays small, an entry may store its state as a *patch* of the previous version's
(`"patch"`: the top-level keys that changed, `"unset"`: those removed); every version that
is a multiple of `FULL_STATE_EVERY`, and every entry inside a sealed segment, stores the
whole state, so a reader folds at most 15 patches.

Every `SEGMENT_SPAN` versions are later copied, unchanged, into one immutable *sealed
segment* `{prefix}/sealed/{namespace}/{log_id}/{first:020d}-{last:020d}` (ranges aligned to
the span, so two compactors write the same key and never overlapping ones). The covered
entries are deleted once nobody can still need them (see `logs.log`). Sixteen aligned segments
of an old range may later be *packed* into one object of `PACK_SPAN` versions, the same
document under the same prefix, so that archives are few large objects. Sealed segments live
under their own prefix so that a lifecycle rule can move them to an archive tier while the
entries, the hot end of every log, stay in the standard tier.

An entry also names the write id of the version before it (`prev`), so a reader checks
that the objects it joins follow one another (a segment of another copy of the log does
not fit), and the first version of the log's current *life* (`base`): a log deleted
(`ended`) and created again, or rewritten whole by its owner (a LangGraph rebase), starts
a new life, and readers never read below its base.

A version's key is never freed while anyone could still write it. Clean-up does not
delete an entry: it *vacates* it, writing a small `vacated` marker over it (conditional on
the entry's ETag) once a sealed segment holds it, or once it falls below the base. A
writer whose head is stale, however stale, then finds the key occupied and loses its
append (`CheckpointConflict`), whatever the clocks say; no acknowledged append ever lands
where no reader looks.

Both are zstd-compressed JSON documents that name their format first, so a transcript is
recovered with nothing but the `zstd` and `jq` command-line tools (docs/logs.md).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from stashpoint.envelope import MAX_REVISION, check_bounded, check_moment, check_write_id
from stashpoint.errors import InvalidId, InvalidPayload
from stashpoint.ids import validate_id
from stashpoint.stores.layout import SEALED, Layout

LOG_FORMAT_NAME = "stashpoint.log"
"""Format name of entries and segments."""
LOG_FORMAT_VERSION = 1
"""Newest format version this library writes and reads."""
LOG_FORMAT = f"{LOG_FORMAT_NAME}/{LOG_FORMAT_VERSION}"
"""The `format` field of every entry and segment written."""
SEGMENT_SPAN = 64
"""Versions per sealed segment in format 1; segment `k` holds versions `64k .. 64k + 63`."""
PACK_SPAN = 1024
"""Versions per pack: an archive object holding `1024k .. 1024k + 1023` (sixteen segments),
the same document as a segment, written by `LogSteps.pack` so that lifecycle rules can move
a long log to an archive tier in objects of 128 KB and more (docs/logs.md, "Packing")."""
FULL_STATE_EVERY = 16
"""Versions that are a multiple of this store their whole state, never a patch."""
_SPANS = (SEGMENT_SPAN, PACK_SPAN)
_DIGITS = 20
_ENTRY_NAME = re.compile(r"\d{20}")
_SEGMENT_NAME = re.compile(r"(\d{20})-(\d{20})")
_KIND = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_ENTRY_FIELDS = frozenset(
    {"version", "first_record", "write_id", "written_at", "kind", "schema_version", "state",
     "patch", "unset", "records", "prev", "base", "ended"}
)  # fmt: skip
REASONS = ("sealed", "rebased", "deleted", "purged")
"""Why a version was vacated: a segment holds it, or it fell below a rebase, a deletion or
a purge (whose marker is all that is left of it)."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One version of a log: the records appended at it and the state after it."""

    log_id: str
    """The log this entry belongs to."""
    version: int
    """Its version (0 for the first entry)."""
    first_record: int
    """Position in the log of the first record appended here (0-based)."""
    records: list[Any]
    """The records appended at this version, in order (JSON values)."""
    state: Any
    """The log's small state after this version (a JSON value, often a dict); for an entry
    read with a patch, the whole state once `resolve` has applied it."""
    kind: str
    """What the log holds (for example `stashpoint.agent`)."""
    schema_version: int
    """Version of the state's and records' schema."""
    write_id: str
    """Random id of the append that wrote this entry; settles ambiguous writes."""
    written_at: datetime
    """When the writer made this entry (its clock)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields of a newer minor format version: kept, never dropped."""
    patch: dict[str, Any] | None = None
    """Stored instead of the state: the top-level keys that changed since the previous
    version (None: the whole state is stored)."""
    unset: tuple[str, ...] = ()
    """With a patch: top-level keys of the previous state that this version removed."""
    prev: str | None = None
    """Write id of the version before this one (None for version 0)."""
    base: int = 0
    """The first version of the log's current life: readers never read below it."""
    ended: bool = False
    """Whether this version ends the log (a deletion): its key, and every one below, stay
    occupied, so a late writer cannot bring the old life back."""

    @property
    def starts_life(self) -> bool:
        """Whether this version is the first of a life (its records start at 0 again)."""
        return self.version == self.base

    @property
    def next_record(self) -> int:
        """Position of the record that the next version's first record will take."""
        return self.first_record + len(self.records)

    def fields(self, *, whole: bool = False) -> dict[str, Any]:
        """Return this entry's stored fields (without `format`, `type` and `log`).

        `whole`: store the whole state even if the entry has a patch (sealed segments).
        """
        document: dict[str, Any] = {
            "version": self.version,
            "first_record": self.first_record,
            "write_id": self.write_id,
            "written_at": self.written_at.isoformat(),
        }
        if self.prev is not None:
            document["prev"] = self.prev
        if self.base:
            document["base"] = self.base
        if self.ended:
            document["ended"] = True
        if self.patch is None or whole:
            # Kind and schema go with a whole state; a patch inherits them with the rest.
            document["kind"] = self.kind
            document["schema_version"] = self.schema_version
            document["state"] = self.state
        else:
            document["patch"] = self.patch
            if self.unset:
                document["unset"] = list(self.unset)
        document["records"] = self.records
        for name, value in self.extra.items():
            document.setdefault(name, value)
        return document


def entries_records(entries: list[LogEntry], start: int) -> list[Any]:
    """Return the records of `entries` from record position `start` on (a life's records)."""
    return [r for e in entries for r in e.records[max(0, start - e.first_record) :]]


def entry_document(entry: LogEntry) -> dict[str, Any]:
    """Return the stored JSON document of one entry."""
    return {"format": LOG_FORMAT, "type": "entry", "log": entry.log_id, **entry.fields()}


def segment_document(log_id: str, entries: list[LogEntry]) -> dict[str, Any]:
    """Return the stored JSON document of a sealed segment holding `entries` (in order)."""
    return {
        "format": LOG_FORMAT,
        "type": "segment",
        "log": log_id,
        "first_version": entries[0].version,
        "last_version": entries[-1].version,
        "entries": [entry.fields(whole=True) for entry in entries],
    }


def entry_from_document(document: dict[str, Any], *, log_id: str, name: str) -> LogEntry:
    """Return the entry a decoded entry document holds, checked against its key.

    An entry of another log, of another type, or whose fields are malformed raises
    `InvalidPayload` naming the object.
    """
    _check_owner(document, "entry", log_id, name)
    return _entry(document, log_id, name)


def entries_from_segment(
    document: dict[str, Any], *, log_id: str, first: int, last: int, name: str
) -> list[LogEntry]:
    """Return the entries of a decoded segment, checked against the range its key names."""
    _check_owner(document, "segment", log_id, name)
    if document.get("first_version") != first or document.get("last_version") != last:
        raise InvalidPayload(
            f"segment claims versions {document.get('first_version')!r}.."
            f"{document.get('last_version')!r}, its key says {first}..{last}",
            object_name=name,
        )
    items = document.get("entries")
    if not isinstance(items, list) or len(items) != last - first + 1:
        raise InvalidPayload(
            f"segment {first}..{last} must hold {last - first + 1} entries", object_name=name
        )
    entries = []
    for offset, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidPayload(f"segment entry {offset} is not an object", object_name=name)
        entry = _entry(item, log_id, name)
        if entry.version != first + offset:
            raise InvalidPayload(
                f"segment entry {offset} has version {entry.version}, expected {first + offset}",
                object_name=name,
            )
        if entry.patch is not None:
            raise InvalidPayload(
                f"segment entry {offset} has a patch, not a state", object_name=name
            )
        entries.append(entry)
    check_chain(entries, name)
    return entries


def check_chain(entries: list[LogEntry], name: str) -> None:
    """Refuse entries whose versions, write ids or record positions do not follow.

    A version that starts a life (after a deletion) restarts its records at 0.
    """
    for before, after in itertools.pairwise(entries):
        if after.version != before.version + 1:
            raise InvalidPayload(
                f"log {after.log_id!r} jumps from version {before.version} to {after.version}",
                object_name=name,
            )
        if after.prev is not None and after.prev != before.write_id:
            raise InvalidPayload(
                f"log {after.log_id!r} version {after.version} follows write "
                f"{after.prev}, but version {before.version} is write {before.write_id}: "
                "the objects are not one log (a segment or entry of another copy?)",
                object_name=name,
            )
        if after.starts_life:
            continue
        if after.first_record != before.next_record:
            raise InvalidPayload(
                f"log {after.log_id!r} version {after.version} starts at record "
                f"{after.first_record}, but version {before.version} ends at "
                f"{before.next_record}: records are missing or repeated",
                object_name=name,
            )


UNKNOWN_STATE: Any = object()
"""Pass as `before` to `resolve` when the first entry must store its whole state."""


def make_patch(before: Any, after: Any) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """Return `(patch, unset)` turning state `before` into `after`, None if not both dicts."""
    if type(before) is not dict or type(after) is not dict:
        return None
    patch = {k: v for k, v in after.items() if k not in before or before[k] != v}
    unset = tuple(k for k in before if k not in after)
    return patch, unset


def resolve(
    entries: list[LogEntry],
    before: Any,
    name: str,
    *,
    kind_before: tuple[str, int] | None = None,
) -> list[LogEntry]:
    """Return `entries` (consecutive) with every patch applied to the state before it.

    A patch entry also takes its kind and schema version from the entry before it.
    `before` is the state of the version before the first entry (unused when that entry
    stores its whole state), and `kind_before` that version's kind and schema version. A
    patch with no whole state to apply it to is refused.
    """
    resolved: list[LogEntry] = []
    state = before
    known = before is not UNKNOWN_STATE
    kind, schema = (entries[0].kind, entries[0].schema_version) if entries else ("", 0)
    if kind_before is not None:
        kind, schema = kind_before
    for entry in entries:
        if entry.patch is None:
            state, known = entry.state, True
        else:
            if not known or type(state) is not dict:
                raise InvalidPayload(
                    f"version {entry.version} stores a state patch but the state before it "
                    "is not an object",
                    object_name=name,
                )
            state = {k: v for k, v in state.items() if k not in entry.unset}
            state.update(entry.patch)
            entry = replace(entry, state=state, kind=kind, schema_version=schema)
        kind, schema = entry.kind, entry.schema_version
        resolved.append(entry)
    return resolved


def _check_owner(document: dict[str, Any], kind: str, log_id: str, name: str) -> None:
    if document.get("type") != kind:
        raise InvalidPayload(
            f"expected a log {kind}, found type {document.get('type')!r}", object_name=name
        )
    if document.get("log") != log_id:
        raise InvalidPayload(
            f"object belongs to log {document.get('log')!r}, not {log_id!r}", object_name=name
        )


def _entry(fields: dict[str, Any], log_id: str, name: str) -> LogEntry:
    try:
        records = fields["records"]
        if not isinstance(records, list):
            raise ValueError("records must be a list")
        patch = fields.get("patch")
        unset = fields.get("unset", [])
        if ("state" in fields) == ("patch" in fields):
            raise ValueError("an entry stores either a state or a patch")
        if "patch" in fields and type(patch) is not dict:
            raise ValueError("patch must be an object")
        if not isinstance(unset, list) or not all(isinstance(k, str) for k in unset):
            raise ValueError("unset must be a list of keys")
        inherited = "patch" in fields and "kind" not in fields
        kind = "" if inherited else fields["kind"]
        if not inherited and (not isinstance(kind, str) or not _KIND.fullmatch(kind)):
            raise ValueError(f"invalid kind {kind!r}")
        schema = 0 if inherited else fields["schema_version"]
        prev = fields.get("prev")
        if prev is not None:
            check_write_id(prev, "prev")
        ended = fields.get("ended", False)
        if type(ended) is not bool:
            raise ValueError("ended must be a bool")
        version = check_bounded(fields["version"], MAX_REVISION, "version")
        base = check_bounded(fields.get("base", 0), version, "base")
        return LogEntry(
            log_id=log_id,
            version=version,
            first_record=check_bounded(fields["first_record"], MAX_REVISION, "first_record"),
            records=records,
            state=fields.get("state"),
            kind=kind,
            schema_version=check_bounded(schema, 2**32 - 1, "schema_version"),
            write_id=check_write_id(fields["write_id"]),
            written_at=check_moment(fields["written_at"], "written_at"),
            extra={
                k: v
                for k, v in fields.items()
                if k not in _ENTRY_FIELDS and k not in ("format", "type", "log")
            },
            patch=patch,
            unset=tuple(unset),
            prev=prev,
            base=base,
            ended=ended,
        )
    except KeyError as exc:
        raise InvalidPayload(f"log entry field {exc} is missing", object_name=name) from None
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"log entry is invalid: {exc}", object_name=name) from None


@dataclass(frozen=True, slots=True)
class Vacated:
    """What stands under a version's key once clean-up has vacated its entry."""

    log_id: str
    """The log."""
    version: int
    """The version whose entry this marker replaced."""
    write_id: str
    """Write id of the entry it replaced (an append that lost its answer finds it here)."""
    reason: str
    """Why: `sealed` (a segment holds the version), `rebased` or `deleted` (below base)."""
    by: int
    """The segment's first version (sealed), or the version of the rebase or deletion."""


def vacated_document(marker: Vacated) -> dict[str, Any]:
    """Return the stored JSON document of a vacated marker."""
    return {
        "format": LOG_FORMAT,
        "type": "vacated",
        "log": marker.log_id,
        "version": marker.version,
        "write_id": marker.write_id,
        "reason": marker.reason,
        "by": marker.by,
    }


def is_vacated(document: dict[str, Any]) -> bool:
    """Whether a decoded log document is a vacated marker."""
    return document.get("type") == "vacated"


def vacated_from_document(document: dict[str, Any], *, log_id: str, name: str) -> Vacated:
    """Return the marker a decoded document holds, checked against its key."""
    _check_owner(document, "vacated", log_id, name)
    try:
        reason = document["reason"]
        if reason not in REASONS:
            raise ValueError(f"unknown reason {reason!r}")
        return Vacated(
            log_id=log_id,
            version=check_bounded(document["version"], MAX_REVISION, "version"),
            write_id=check_write_id(document["write_id"]),
            reason=reason,
            by=check_bounded(document["by"], MAX_REVISION, "by"),
        )
    except KeyError as exc:
        raise InvalidPayload(f"vacated marker field {exc} is missing", object_name=name) from None
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"vacated marker is invalid: {exc}", object_name=name) from None


@dataclass(frozen=True, slots=True)
class LogKeys:
    """Where the objects of the logs of one namespace live."""

    layout: Layout
    """The store's prefix."""
    namespace: str
    """The namespace of these logs (`agents`, `logs`, ...)."""

    def entries_prefix(self, log_id: str) -> str:
        """Return the prefix of every entry of `log_id` (ends with '/')."""
        return self.layout.key(self.namespace, validate_id(log_id, what="log id")) + "/"

    def segments_prefix(self, log_id: str) -> str:
        """Return the prefix of every sealed segment of `log_id` (ends with '/')."""
        validate_id(log_id, what="log id")
        return f"{self.layout.namespace_prefix(SEALED)}{self.namespace}/{log_id}/"

    def entry(self, log_id: str, version: int) -> str:
        """Return the key of one entry."""
        return f"{self.entries_prefix(log_id)}{version:0{_DIGITS}d}"

    def segment(self, log_id: str, first: int) -> str:
        """Return the key of the sealed segment that starts at version `first`."""
        last = first + SEGMENT_SPAN - 1
        return f"{self.segments_prefix(log_id)}{first:0{_DIGITS}d}-{last:0{_DIGITS}d}"

    def pack(self, log_id: str, first: int) -> str:
        """Return the key of the pack that starts at version `first` (a multiple of 1024)."""
        last = first + PACK_SPAN - 1
        return f"{self.segments_prefix(log_id)}{first:0{_DIGITS}d}-{last:0{_DIGITS}d}"

    def ids_prefix(self) -> str:
        """Return the prefix under which every log of the namespace has its entries."""
        return self.layout.namespace_prefix(self.namespace)


def state_base(version: int, every: int = FULL_STATE_EVERY) -> int:
    """Return the latest version at or before `version` that stores its whole state.

    `every`: how often the log's writer stores the whole state (`LogSteps.full_state_every`).
    """
    return version - version % every


def segment_start(version: int) -> int:
    """Return the first version of the segment that holds `version`."""
    return version - version % SEGMENT_SPAN


def pack_start(version: int) -> int:
    """Return the first version of the pack range that holds `version`."""
    return version - version % PACK_SPAN


def parse_entry_name(name: str, key: str) -> int:
    """Return the version an entry's key names; `InvalidPayload` for a stray object."""
    if not _ENTRY_NAME.fullmatch(name):
        raise InvalidPayload("not a log entry (its name is not a version)", object_name=key)
    return int(name)


def parse_segment_name(name: str, key: str) -> tuple[int, int]:
    """Return the `(first, last)` versions a segment's or a pack's key names.

    Both ranges are aligned to their span (`SEGMENT_SPAN`, `PACK_SPAN`); any other range is
    `InvalidPayload` (not written by stashpoint).
    """
    match = _SEGMENT_NAME.fullmatch(name)
    if match is None:
        raise InvalidPayload("not a sealed segment (its name is no range)", object_name=key)
    first, last = int(match.group(1)), int(match.group(2))
    if not any(first % span == 0 and last == first + span - 1 for span in _SPANS):
        raise InvalidPayload(
            f"segment range {first}..{last} overlaps the format's {SEGMENT_SPAN}-version "
            f"segments and {PACK_SPAN}-version packs: not written by stashpoint",
            object_name=key,
        )
    return first, last


def check_log_id(log_id: str) -> str:
    """Return a valid log id or raise `InvalidId`."""
    if not isinstance(log_id, str):
        raise InvalidId(f"log id must be a str, not {type(log_id).__name__}")
    return validate_id(log_id, what="log id")
