"""The domain-neutral, versioned checkpoint envelope that every store moves.

Stores move envelopes and never look inside `payload`; typed layers (agent, runs) own the
payload shapes and validate `kind` and `schema_version` on load.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from stashpoint.errors import InvalidId, InvalidPayload, LimitExceeded, UnsupportedFormat, described
from stashpoint.ids import new_write_id, validate_id

if TYPE_CHECKING:
    from pydantic import BaseModel

MAX_REVISION = 2**63 - 1
"""The largest revision an envelope can carry (a signed 64-bit integer, as in the Rust format)."""

LINEAGE_DEPTH = 32
"""How many `(revision, write_id)` pairs a head remembers, its own included."""

WRITERS_DEPTH = 32
"""How many writers' last saves a head remembers (`Envelope.writers`)."""

MAX_SCHEMA_VERSION = 2**32 - 1
"""The largest payload schema version an envelope can carry."""

_KIND_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_WRITE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_REQUIRED = ("id", "kind", "schema_version", "revision", "write_id", "created_at", "updated_at")


def utc_now() -> datetime:
    """Return the current time, timezone-aware in UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """One revision of a checkpoint: identity, version bookkeeping and an opaque payload.

    Every field is checked when an envelope is made (`InvalidId` for ids and kind,
    `InvalidPayload` for the rest), however it is made. A plain dataclass rather than a
    pydantic model: the envelope is on every save and load, and building a pydantic model
    at a Lambda cold start costs more than the whole save; typed payloads stay pydantic.
    """

    id: str
    """Stable checkpoint identity; also the object's name in storage."""
    run_id: str | None = None
    """The run this checkpoint belongs to, if any."""
    kind: str
    """What the payload is (for example `stashpoint.agent`); typed layers check it on load."""
    schema_version: int
    """Version of the payload's schema for this kind; typed layers check it on load."""
    revision: int
    """Monotonic revision: 0 when created, +1 on every save."""
    write_id: str
    """Random identity of the save that wrote this revision, used to resolve ambiguous writes."""
    lineage: tuple[str, ...] = ()
    """Write ids of the preceding revisions, newest first (`revision - 1`, `revision - 2`, ...)."""
    created_at: datetime
    """When revision 0 was written."""
    updated_at: datetime
    """When this revision was written."""
    payload: Any
    """The state itself: any JSON value. Not walked here (payloads can be megabytes); the
    codec rejects what JSON cannot carry when the envelope is encoded."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields written by a newer minor format version, kept and written back unchanged."""
    writers: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    """The last save of each recent writer, most recent first: `(writer, write_id)`. A
    writer is one thread or asyncio task of one process, which saves one revision at a
    time, so a writer whose save's answer was lost reads here whether it landed however
    far the head has moved since (`stores.cas`, `writer_token`). Set by the store as it
    saves; not part of an envelope's equality."""
    writers_since: int = field(default=0, compare=False)
    """The revision from which `writers` is complete: every save from this revision up to
    this one is its writer's entry there, so a writer missing from it saved none of them.
    Restarts at the saving revision when the ledger drops a writer (more than
    `WRITERS_DEPTH` of them) or finds a save that did not record itself (an older release)."""

    def __post_init__(self) -> None:
        try:
            checked = _checked_fields(self)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidId):
                raise
            raise InvalidPayload(
                f"envelope fields are invalid: {exc}", object_name=_name(self.id)
            ) from None
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def initial(
        cls,
        id: str,
        run_id: str | None,
        kind: str,
        schema_version: int,
        payload: Any,
        *,
        at: datetime | None = None,
        write_id: str | None = None,
    ) -> Envelope:
        """Return revision 0 of a new checkpoint; a bad id or kind raises `InvalidId`.

        `at`: when it is written (its `created_at` and `updated_at`); default the wall
        clock. `write_id`: its write id; default a fresh random one. The library's own
        saves pass their stash's clock and source of ids (`stashpoint.randomness`).
        """
        now = utc_now() if at is None else at
        return cls(
            id=id,
            run_id=run_id,
            kind=kind,
            schema_version=schema_version,
            revision=0,
            write_id=new_write_id() if write_id is None else write_id,
            created_at=now,
            updated_at=now,
            payload=payload,
        )

    @classmethod
    def from_fields(cls, **fields: Any) -> Envelope:
        """Return the envelope of these stored fields; unknown fields go to `extra`.

        Used by loads (the codec): a timestamp may be an ISO 8601 string with a zone, as
        stored; a missing field or an invalid one raises `InvalidPayload` (`InvalidId` for
        ids and kind).
        """
        missing = [name for name in (*_REQUIRED, "payload") if name not in fields]
        if missing:
            raise InvalidPayload(
                f"envelope field {missing[0]!r} is missing", object_name=_name(fields.get("id"))
            )
        known = {name: fields[name] for name in _FIELDS if name in fields}
        extra = {name: value for name, value in fields.items() if name not in _FIELDS}
        return cls(**known, extra=extra)

    def next(
        self, payload: Any, *, at: datetime | None = None, write_id: str | None = None
    ) -> Envelope:
        """Return the following revision carrying `payload`, with a fresh write id.

        Identity (`id`, `run_id`, `kind`, `schema_version`, `created_at`) is kept; the
        current write id joins the lineage. `at`: its `updated_at` (default the wall
        clock; the library's own saves pass their stash's clock). `write_id`: its write id
        (default a fresh random one; the library's saves pass their stash's). Raises
        `LimitExceeded` past `MAX_REVISION`, `InvalidPayload` for an `at` without a time
        zone or a malformed `write_id`.
        """
        if at is not None and (not isinstance(at, datetime) or at.tzinfo is None):
            raise InvalidPayload(
                f"at must be a timezone-aware datetime, not {type(at).__name__}",
                object_name=_name(self.id),
            )
        if self.revision >= MAX_REVISION:
            raise LimitExceeded(
                f"revision overflow: {self.revision} is the largest revision", object_name=self.id
            )
        # Every field is valid by construction (this envelope was checked, the write id is
        # fresh, the revision is in range), so the copy skips `__post_init__`: a save with a
        # full lineage would otherwise spend most of its CPU re-checking 31 write ids.
        following = object.__new__(Envelope)
        for name in _ALL_FIELDS:
            object.__setattr__(following, name, getattr(self, name))
        for name, value in (
            ("revision", self.revision + 1),
            ("write_id", new_write_id() if write_id is None else self._checked(write_id)),
            ("lineage", (self.write_id, *self.lineage[: LINEAGE_DEPTH - 2])),
            ("updated_at", utc_now() if at is None else at),
            ("payload", payload),
        ):
            object.__setattr__(following, name, value)
        return following

    def _checked(self, write_id: str) -> str:
        try:
            return check_write_id(write_id)
        except ValueError as exc:
            raise InvalidPayload(str(exc), object_name=_name(self.id)) from None

    def saved_by(self, writer: str) -> Envelope:
        """Return this envelope as `writer` stores it: first among `writers` (the store's)."""
        check_writer(writer)
        others = [pair for pair in self.writers if pair[0] != writer]
        # The ledger stays complete while the revision this one follows recorded itself
        # at its top and nobody is dropped; otherwise it is complete from this save on.
        recorded = bool(self.writers) and self.lineage[:1] == (self.writers[0][1],)
        complete = recorded and len(others) < WRITERS_DEPTH
        stored = object.__new__(Envelope)
        for name in _ALL_FIELDS:
            object.__setattr__(stored, name, getattr(self, name))
        writers = ((writer, self.write_id), *others[: WRITERS_DEPTH - 1])
        object.__setattr__(stored, "writers", writers)
        since = min(self.writers_since, self.revision) if complete else self.revision
        object.__setattr__(stored, "writers_since", since)
        return stored

    def missing_writer_saved_nothing(self, revision: int) -> bool:
        """Whether a writer missing from `writers` saved no revision from `revision` on.

        True when this head recorded its own save and its ledger is complete back to
        `revision` (`writers_since`); a head from an older release is never trusted so.
        """
        recorded = bool(self.writers) and self.writers[0][1] == self.write_id
        return recorded and self.writers_since <= revision

    def lineage_pairs(self) -> list[tuple[int, str]]:
        """Return the `(revision, write_id)` pairs this head remembers, newest first."""
        pairs = [(self.revision, self.write_id)]
        pairs.extend((self.revision - 1 - i, w) for i, w in enumerate(self.lineage))
        return [(r, w) for r, w in pairs if r >= 0]

    def with_timestamps(self, created_at: datetime, updated_at: datetime) -> Envelope:
        """Return a copy with the given timestamps (used when restoring archives)."""
        return dataclasses.replace(self, created_at=created_at, updated_at=updated_at)

    def fields(self) -> dict[str, Any]:
        """Return the envelope as the JSON object it is stored as, without `format`.

        Timestamps are ISO 8601 strings; `extra` fields follow, never replacing ours.
        """
        document: dict[str, Any] = {
            "id": self.id,
            "run_id": self.run_id,
            "kind": self.kind,
            "schema_version": self.schema_version,
            "revision": self.revision,
            "write_id": self.write_id,
            "lineage": list(self.lineage),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "payload": self.payload,
        }
        if self.writers:  # absent until a store saves it: older heads stay byte for byte
            document["writers"] = [list(pair) for pair in self.writers]
            document["writers_since"] = self.writers_since
        for name, value in self.extra.items():
            document.setdefault(name, value)
        return document


_ALL_FIELDS = tuple(f.name for f in dataclasses.fields(Envelope))
_FIELDS = frozenset(_ALL_FIELDS) - {"extra"}


def _checked_fields(envelope: Envelope) -> dict[str, Any]:
    """Check every field of `envelope`; return those whose stored form was normalised."""
    validate_id(envelope.id)
    if envelope.run_id is not None:
        validate_id(envelope.run_id, what="run id")
    if not isinstance(envelope.kind, str) or not _KIND_PATTERN.fullmatch(envelope.kind):
        raise InvalidId(f"invalid kind {envelope.kind!r}: use 1-128 characters of [A-Za-z0-9._:-]")
    check_bounded(envelope.schema_version, MAX_SCHEMA_VERSION, "schema_version")
    check_bounded(envelope.revision, MAX_REVISION, "revision")
    check_write_id(envelope.write_id)
    lineage = envelope.lineage
    if not isinstance(lineage, list | tuple) or len(lineage) > LINEAGE_DEPTH - 1:
        raise ValueError(f"lineage must be at most {LINEAGE_DEPTH - 1} write ids")
    for write_id in lineage:
        check_write_id(write_id, "lineage")
    if not isinstance(envelope.extra, Mapping):
        raise TypeError(f"extra must be a mapping, not {envelope.extra!r}")
    changed: dict[str, Any] = {}
    if type(lineage) is not tuple:
        changed["lineage"] = tuple(lineage)
    writers = envelope.writers
    if not isinstance(writers, list | tuple) or len(writers) > WRITERS_DEPTH:
        raise ValueError(f"writers must be at most {WRITERS_DEPTH} (writer, write id) pairs")
    pairs = []
    for pair in writers:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError("writers must be (writer, write id) pairs")
        pairs.append((check_writer(pair[0]), check_write_id(pair[1], "writers")))
    if len({writer for writer, _ in pairs}) != len(pairs):
        raise ValueError("writers names a writer twice")
    check_bounded(envelope.writers_since, envelope.revision, "writers_since")
    if type(writers) is not tuple or any(type(p) is not tuple for p in writers):
        changed["writers"] = tuple(pairs)
    for name in ("created_at", "updated_at"):
        value = getattr(envelope, name)
        moment = check_moment(value, name)
        if moment is not value:
            changed[name] = moment
    return changed


def _name(value: object) -> str | None:
    return value if isinstance(value, str) else None


def check_bounded(value: Any, top: int, name: str) -> int:
    """Return `value` if it is an int (not a bool) from 0 to `top`; else `ValueError`."""
    if type(value) is not int or not 0 <= value <= top:
        raise ValueError(f"{name} must be an int from 0 to {top}, not {described(value)}")
    return value


def check_write_id(value: Any, name: str = "write_id") -> str:
    """Return `value` if it is a valid write id; else `ValueError` naming field `name`."""
    if not isinstance(value, str) or not _WRITE_ID.fullmatch(value):
        raise ValueError(f"{name}: invalid write id {value!r}")
    return value


_WRITER = re.compile(r"[A-Za-z0-9_-]{1,32}")


def check_writer(value: Any) -> str:
    """Return `value` if it is a valid writer token; else `ValueError`."""
    if not isinstance(value, str) or not _WRITER.fullmatch(value):
        raise ValueError(f"writers: invalid writer {value!r}")
    return value


def check_moment(value: Any, name: str) -> datetime:
    """Return `value` (or the ISO 8601 string it is) as a zone-aware time; else `ValueError`."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{name} is not an ISO 8601 time: {value!r}") from None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{name} must be a time with a zone, not {described(value)}")
    return value


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What a head says about itself without its payload (on S3: one HEAD request)."""

    id: str
    """The checkpoint id."""
    kind: str
    """The envelope's kind."""
    revision: int
    """The head's revision."""
    run_id: str | None
    """The run the checkpoint belongs to, if any."""
    stored_bytes: int | None
    """Size of the stored (compressed) head, where the backend says."""
    updated_at: datetime | None
    """When the head was written: the storage's clock where it says, else the envelope's."""


ModelT = TypeVar("ModelT", bound="BaseModel")


def typed_payload(
    envelope: Envelope,
    model: type[ModelT],
    *,
    kind: str | tuple[str, ...],
    schema_version: int,
    what: str,
) -> ModelT:
    """Return the payload of `envelope` validated as `model`; never a half-parsed one.

    The typed layers' one check (as the Rust format's `load`): another `kind` is `InvalidPayload`,
    another `schema_version` `UnsupportedFormat`, a payload that does not validate
    `InvalidPayload`. `what` names the state in messages ("agent checkpoint", "run").
    """
    if envelope.kind not in ((kind,) if isinstance(kind, str) else kind):
        raise InvalidPayload(f"not a {what}: kind is {envelope.kind!r}", object_name=envelope.id)
    if envelope.schema_version != schema_version:
        newer = envelope.schema_version > schema_version
        raise UnsupportedFormat(
            f"{what} schema version {envelope.schema_version} is "
            f"{'newer than this library reads' if newer else 'not supported'} "
            f"(this library reads {schema_version})",
            object_name=envelope.id,
        )
    import pydantic  # the typed layers that call this have already paid for it

    try:
        return model.model_validate(envelope.payload)
    except pydantic.ValidationError as exc:
        raise InvalidPayload(f"{what} state is invalid: {exc}", object_name=envelope.id) from exc
