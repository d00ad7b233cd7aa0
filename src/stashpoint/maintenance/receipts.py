"""Erasure receipts: what a purge erased, and the log it keeps its progress in.

A receipt is a log in the `purges` namespace, one per purge (the one log-backed state):
its first entry holds the plan (targets, who asked, when, the seal of `receipt_seal`),
and every later entry the state so far plus the versions about to be removed, written
before they are. So a finished receipt lists every version removed, whichever process
removed it, and a crash leaves one that `purge.Purger.resume` carries on. It holds ids,
keys, version ids, sizes and times, never a payload. Its state is parsed strictly
(`ReceiptState.parse`): a damaged or planted one is `InvalidPayload`, never obeyed.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    InvalidPayload,
    StashpointError,
    StorageUnavailable,
)
from stashpoint.ids import validate_id
from stashpoint.logs.log import LogHead, LogSteps
from stashpoint.steps import Steps
from stashpoint.stores.layout import NAMESPACES, Namespace, Shape
from stashpoint.stores.objects import MAX_DELETE_BATCH, StoredVersion

RECEIPT_KIND = "stashpoint.maintenance.purge"
"""Kind of a receipt log's entries."""


@dataclass(frozen=True, slots=True)
class Target:
    """One id a purge erases: a head or a log, by namespace."""

    namespace: str
    """The namespace (`checkpoints`, `agents`, `run-logs`, `langgraph`, ...)."""
    object_id: str
    """The id in it (a LangGraph thread's log id, a conversation's key)."""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.object_id}"


@dataclass(frozen=True, slots=True)
class RemovedVersion:
    """One stored version a purge removed (or, in a dry run, would remove)."""

    key: str
    """The object key."""
    version_id: str
    """The version's id (`null` where the bucket keeps no versions)."""
    bytes: int
    """Its stored size."""


@dataclass(frozen=True)
class PurgeReceipt:
    """What a purge erased: ids, keys, version ids, sizes and times, never a payload."""

    purge_id: str
    """The purge (the receipt's id: `stashpoint receipts show PURGE_ID`)."""
    status: str
    """`complete`, `in_progress` (a crash or a failure left it: resume it) or `dry_run`."""
    actor: str
    """Who asked: the caller's identity (STS on AWS, `user@host` elsewhere)."""
    started_at: datetime
    """When the purge started (its receipt was opened)."""
    finished_at: datetime | None
    """When it finished (None until then)."""
    selector: dict[str, Any]
    """What the caller asked to purge (the arguments, as given)."""
    targets: list[Target]
    """Every id erased."""
    removed: list[RemovedVersion]
    """Every version removed (a dry run: every version that would be)."""
    index_items: int = 0
    """Index items deleted (runs)."""
    blobs: list[str] = field(default_factory=list)
    """Blobs removed (their digests)."""
    kept_blobs: list[str] = field(default_factory=list)
    """Blobs what was purged referenced that stay: another head or log references them,
    a writer may be about to (too young), or some head cannot be read."""
    kept: int = 0
    """Versions left in place: one tombstone per id and one marker per log version (no
    payload: ids and write ids alone), so no key is ever freed."""
    verified: bool = False
    """Whether a listing after the last deletion found nothing left to remove."""
    reusable: bool = False
    """Whether the ids may be created again (else writes to them are refused)."""
    unreadable: list[str] = field(default_factory=list)
    """Erased objects that could not be decoded, so their blob references are unknown."""
    shredded: list[str] = field(default_factory=list)
    """A shred (`tenant=..., shred=True`): what the key service did with each master key
    (a KMS deletion scheduled, a keyring entry removed)."""
    spared: list[str] = field(default_factory=list)
    """A retention purge (`older_than`): the ids it chose that were written again before
    it reached them, so no longer old enough; they were left whole."""
    keyless: list[str] = field(default_factory=list)
    """Ids of a shredded tenant: erased whole without being read, and with no tombstone
    (the tenant's shred mark refuses every write sealed for it)."""
    beyond_reach: str = ""
    """Copies the object store keeps where no purge reaches (snapshots, replicas), as its
    profile says (`Provider.beyond_purge`): to be erased there."""

    @property
    def objects(self) -> int:
        """How many versions were removed."""
        return len(self.removed)

    @property
    def bytes(self) -> int:
        """How many stored bytes were removed."""
        return sum(v.bytes for v in self.removed)


@dataclass
class ReceiptState:
    """A receipt's state as its log stores it (every entry stores it whole)."""

    purge_id: str
    actor: str
    started_at: str
    selector: dict[str, Any]
    targets: list[list[str]]
    reusable: bool
    swept: list[int] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    index_items: int = 0
    blobs: list[str] = field(default_factory=list)
    kept_blobs: list[str] = field(default_factory=list)
    kept: int = 0
    unreadable: list[str] = field(default_factory=list)
    shredded: list[str] = field(default_factory=list)
    cutoff: str | None = None
    spared: list[str] = field(default_factory=list)
    keyless: list[str] = field(default_factory=list)
    beyond_reach: str = ""
    seal: str | None = None
    """The plan's seal under the erasure key (`receipt_seal`): obeyed by maintenance only
    when it verifies."""
    ends: dict[str, int] = field(default_factory=dict)
    """The version of each log target's tombstone, by the target's index (the lives rule:
    what lies above it belongs to later lives of a reusable id, never to this purge)."""
    status: str = "in_progress"
    verified: bool = False
    finished_at: str | None = None

    def document(self) -> dict[str, Any]:
        """Return the state as the receipt's log stores it."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def parse(cls, document: Any, name: str) -> ReceiptState:
        """Return the state a receipt's entry stores; `InvalidPayload` for anything else.

        Strict: every field of its type, every target a known namespace and a valid id,
        times that parse, so nothing planted or damaged reaches the purge engine.
        """
        import pydantic

        try:
            _check_strictly(cls, document)
            state = cls(**document)
            _check_state(state)
        except (pydantic.ValidationError, ValueError, TypeError, StashpointError) as exc:
            problem = str(exc).splitlines()[0][:200]
            raise InvalidPayload(f"not a purge receipt ({problem})", object_name=name) from None
        if state.purge_id != name:
            raise InvalidPayload("a receipt names another purge", object_name=name)
        return state

    def target_list(self) -> list[Target]:
        """Return the targets, typed."""
        return [Target(ns, object_id) for ns, object_id in self.targets]

    def cutoff_time(self) -> datetime | None:
        """Return a retention purge's bound: only ids last written before it are erased."""
        return None if self.cutoff is None else datetime.fromisoformat(self.cutoff)


class ReceiptLog:
    """Appends a purge's progress to its receipt log."""

    def __init__(self, logs: LogSteps, head: LogHead, state: ReceiptState) -> None:
        self.logs = logs
        self.head = head
        self.state = state

    def intend(self, doomed: list[StoredVersion]) -> Steps[None]:
        """Write what is about to be removed (before it is), 1,000 versions an entry."""
        for start in range(0, len(doomed), MAX_DELETE_BATCH):
            batch = doomed[start : start + MAX_DELETE_BATCH]
            yield from self.write(
                [{"key": v.key, "version_id": v.version_id, "bytes": v.size} for v in batch]
            )

    def write(self, records: list[dict[str, Any]]) -> Steps[None]:
        """Append `records` and the state so far; another process carrying it on wins."""
        try:
            self.head = yield from self.logs.append(
                self.head.log_id, records, after=self.head, state=self.state.document()
            )
        except CheckpointConflict:
            raise StorageUnavailable(
                "another process is carrying this purge on (its receipt moved): leave it "
                "to that one, or resume later",
                object_name=self.head.log_id,
            ) from None
        except CheckpointNotFound:
            raise


def _check_strictly(cls: type[ReceiptState], document: Any) -> None:
    """Raise unless `document` holds only the state's fields, each of its type.

    Strict: a value of another type is refused, never coerced.
    """
    import pydantic

    if not isinstance(document, dict):
        raise ValueError("a receipt's state is an object")
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(document) - set(hints))
    if unknown:
        raise ValueError(f"unknown fields {unknown}")
    for field_name, value in document.items():
        pydantic.TypeAdapter(hints[field_name]).validate_python(value, strict=True)


def _check_target(pair: list[str]) -> None:
    namespace, object_id = pair  # a pair, or ValueError
    if namespace not in NAMESPACES or not _erasable(NAMESPACES[namespace]):
        raise ValueError(f"unknown namespace {namespace!r}")
    validate_id(object_id, what="purge target")


def _erasable(namespace: Namespace) -> bool:
    """Whether a purge can name an id of `namespace` as a target."""
    return namespace.shape in (Shape.HEADS, Shape.LOGS, Shape.KEYS) or namespace.owned


def _check_state(state: ReceiptState) -> None:
    """Raise `ValueError` unless the state's values make sense together."""
    for pair in state.targets:
        _check_target(pair)
    if state.status not in ("in_progress", "complete"):
        raise ValueError(f"unknown status {state.status!r}")
    for moment in (state.started_at, state.finished_at, state.cutoff):
        if moment is not None:
            datetime.fromisoformat(moment)
    if any(not 0 <= i < len(state.targets) for i in state.swept):
        raise ValueError("a swept index names no target")
    if any(not k.isdigit() or int(k) >= len(state.targets) for k in state.ends):
        raise ValueError("a tombstone names no target")
