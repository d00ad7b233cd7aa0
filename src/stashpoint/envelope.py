"""The domain-neutral, versioned checkpoint envelope that every store moves.

Stores move envelopes and never look inside `payload`; typed layers (agent, runs) own the
payload shapes and validate `kind` and `schema_version` on load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field, SkipValidation, field_validator

from stashpoint.errors import InvalidId, InvalidPayload, LimitExceeded, UnsupportedFormat
from stashpoint.ids import new_write_id, validate_id

MAX_REVISION = 2**63 - 1
"""The largest revision an envelope can carry (a signed 64-bit integer, as in the seed)."""

LINEAGE_DEPTH = 32
"""How many `(revision, write_id)` pairs a head remembers, its own included."""

_KIND_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_WRITE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

JsonPayload = Annotated[Any, SkipValidation]
"""Any JSON value. Not walked on construction (payloads can be megabytes); the codec
rejects what JSON cannot carry when the envelope is encoded."""


def utc_now() -> datetime:
    """Return the current time, timezone-aware in UTC."""
    return datetime.now(UTC)


class Envelope(BaseModel):
    """One revision of a checkpoint: identity, version bookkeeping and an opaque payload."""

    # Unknown fields (written by a newer minor version) are kept and written back. The
    # validator is built on first use only: saves and loads check fields themselves
    # (`from_fields`), so a Lambda cold start never pays for building it.
    model_config = ConfigDict(frozen=True, extra="allow", strict=False, defer_build=True)

    id: str
    """Stable checkpoint identity; also the object's name in storage."""
    run_id: str | None = None
    """The run this checkpoint belongs to, if any."""
    kind: str
    """What the payload is (for example `stashpoint.agent`); typed layers check it on load."""
    schema_version: int = Field(ge=0, le=2**32 - 1)
    """Version of the payload's schema for this kind; typed layers check it on load."""
    revision: int = Field(ge=0, le=MAX_REVISION)
    """Monotonic revision: 0 when created, +1 on every save."""
    write_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    """Random identity of the save that wrote this revision, used to resolve ambiguous writes."""
    lineage: tuple[str, ...] = Field(default=(), max_length=LINEAGE_DEPTH - 1)
    """Write ids of the preceding revisions, newest first (`revision - 1`, `revision - 2`, ...)."""
    created_at: datetime
    """When revision 0 was written."""
    updated_at: datetime
    """When this revision was written."""
    payload: JsonPayload
    """The state itself: any JSON value."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()[:5]
            )
            raise InvalidPayload(
                f"envelope fields are invalid: {problems}", object_name=str(data.get("id"))
            ) from None

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        return validate_id(value)

    @field_validator("run_id")
    @classmethod
    def _check_run_id(cls, value: str | None) -> str | None:
        return None if value is None else validate_id(value, what="run id")

    @field_validator("kind")
    @classmethod
    def _check_kind(cls, value: str) -> str:
        if not _KIND_PATTERN.fullmatch(value):
            raise InvalidId(f"invalid kind {value!r}: use 1-128 characters of [A-Za-z0-9._:-]")
        return value

    @field_validator("lineage")
    @classmethod
    def _check_lineage(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for write_id in value:
            if not write_id or len(write_id) > 64 or not re.fullmatch(r"[A-Za-z0-9_-]+", write_id):
                raise ValueError(f"invalid write id in lineage: {write_id!r}")
        return value

    @classmethod
    def initial(
        cls,
        id: str,
        run_id: str | None,
        kind: str,
        schema_version: int,
        payload: Any,
    ) -> Envelope:
        """Return revision 0 of a new checkpoint; a bad id or kind raises `InvalidId`."""
        now = utc_now()
        return cls.from_fields(
            id=id,
            run_id=run_id,
            kind=kind,
            schema_version=schema_version,
            revision=0,
            write_id=new_write_id(),
            created_at=now,
            updated_at=now,
            payload=payload,
        )

    @classmethod
    def from_fields(cls, **fields: Any) -> Envelope:
        """Return an envelope of these fields after checking each as the model would.

        The one check of an envelope's own fields, used by saves (`initial`) and loads (the
        codec): ids and kind by their patterns, numbers and timestamps by range and type
        (a timestamp may be an ISO 8601 string with a zone, as stored). Raises `InvalidId`
        or `InvalidPayload`; unknown fields are kept.
        """
        try:
            checked = dict(fields)
            checked["id"] = validate_id(fields["id"])
            run_id = fields.get("run_id")
            checked["run_id"] = None if run_id is None else validate_id(run_id, what="run id")
            checked["kind"] = cls._check_kind(fields["kind"])
            checked["schema_version"] = check_bounded(
                fields["schema_version"], 2**32 - 1, "schema_version"
            )
            checked["revision"] = check_bounded(fields["revision"], MAX_REVISION, "revision")
            checked["write_id"] = check_write_id(fields["write_id"])
            lineage = fields.get("lineage", ())
            if not isinstance(lineage, list | tuple) or len(lineage) > LINEAGE_DEPTH - 1:
                raise ValueError(f"lineage must be at most {LINEAGE_DEPTH - 1} write ids")
            checked["lineage"] = tuple(check_write_id(w) for w in lineage)
            checked["created_at"] = check_moment(fields["created_at"], "created_at")
            checked["updated_at"] = check_moment(fields["updated_at"], "updated_at")
            checked["payload"] = fields["payload"]
        except KeyError as exc:
            raise InvalidPayload(
                f"envelope field {exc} is missing", object_name=_name(fields)
            ) from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidId):
                raise
            raise InvalidPayload(
                f"envelope fields are invalid: {exc}", object_name=_name(fields)
            ) from None
        return cls.model_construct(**checked)

    def next(self, payload: Any) -> Envelope:
        """Return the following revision carrying `payload`, with a fresh write id.

        Identity (`id`, `run_id`, `kind`, `schema_version`, `created_at`) is kept; the
        current write id joins the lineage. Raises `LimitExceeded` past `MAX_REVISION`.
        """
        if self.revision >= MAX_REVISION:
            raise LimitExceeded(
                f"revision overflow: {self.revision} is the largest revision", object_name=self.id
            )
        return self.model_copy(
            update={
                "revision": self.revision + 1,
                "write_id": new_write_id(),
                "lineage": (self.write_id, *self.lineage[: LINEAGE_DEPTH - 2]),
                "updated_at": utc_now(),
                "payload": payload,
            }
        )

    def lineage_pairs(self) -> list[tuple[int, str]]:
        """Return the `(revision, write_id)` pairs this head remembers, newest first."""
        pairs = [(self.revision, self.write_id)]
        pairs.extend((self.revision - 1 - i, w) for i, w in enumerate(self.lineage))
        return [(r, w) for r, w in pairs if r >= 0]

    def with_timestamps(self, created_at: datetime, updated_at: datetime) -> Envelope:
        """Return a copy with the given timestamps (used when restoring archives)."""
        return self.model_copy(update={"created_at": created_at, "updated_at": updated_at})


def _name(fields: dict[str, Any]) -> str | None:
    value = fields.get("id")
    return value if isinstance(value, str) else None


def check_bounded(value: Any, top: int, name: str) -> int:
    """Return `value` if it is an int (not a bool) from 0 to `top`; else `ValueError`."""
    if type(value) is not int or not 0 <= value <= top:
        raise ValueError(f"{name} must be an int from 0 to {top}, not {value!r}")
    return value


def check_write_id(value: Any) -> str:
    """Return `value` if it is a valid write id; else `ValueError`."""
    if not isinstance(value, str) or not _WRITE_ID.fullmatch(value):
        raise ValueError(f"invalid write id {value!r}")
    return value


def check_moment(value: Any, name: str) -> datetime:
    """Return `value` (or the ISO 8601 string it is) as a zone-aware time; else `ValueError`."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{name} is not an ISO 8601 time: {value!r}") from None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{name} must be a time with a zone, not {value!r}")
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


ModelT = TypeVar("ModelT", bound=BaseModel)


def typed_payload(
    envelope: Envelope,
    model: type[ModelT],
    *,
    kind: str | tuple[str, ...],
    schema_version: int,
    what: str,
) -> ModelT:
    """Return the payload of `envelope` validated as `model`; never a half-parsed one.

    The typed layers' one check (seed 000's `load`): another `kind` is `InvalidPayload`,
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
    try:
        return model.model_validate(envelope.payload)
    except pydantic.ValidationError as exc:
        raise InvalidPayload(f"{what} state is invalid: {exc}", object_name=envelope.id) from exc
