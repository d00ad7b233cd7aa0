"""The object-storage vocabulary that protocols speak and transports execute.

A transport (S3 through boto3 or aiobotocore, a local folder, memory) turns each request
below into real I/O and answers with the result types below. Transports hold no logic about
envelopes, revisions or retries; that lives once in `stores.cas`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from itertools import pairwise
from typing import Protocol

from stashpoint.errors import InvalidArgument, StorageUnavailable, described
from stashpoint.steps import Parallel, Request, Steps, ask


@dataclass(frozen=True, slots=True)
class Create:
    """Write condition: only if no object exists under the key (`If-None-Match: *`)."""


@dataclass(frozen=True, slots=True)
class Match:
    """Write condition: only if the current object has this ETag (`If-Match`)."""

    etag: str
    """ETag of the revision the writer read."""


Condition = Create | Match | None
"""A write's precondition; None writes unconditionally (never used for heads)."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a read returned about one object."""

    etag: str
    """Opaque token naming this exact content; the CAS token for `Match`."""
    metadata: Mapping[str, str] | None = None
    """User metadata, or None where the backend keeps none (then the body answers)."""
    body: bytes | None = None
    """The stored bytes, when the request asked for them (or the backend returns them)."""
    version_id: str | None = None
    """Storage version id, where the backend versions objects."""
    last_modified: datetime | None = None
    """When the object was written, where the backend says."""
    size: int | None = None
    """Stored size in bytes, where the backend says without the body."""
    retain_until: datetime | None = None
    """S3 Object Lock: the version may not be deleted before this moment (None: no
    retention, or the backend has no Object Lock)."""
    lock_mode: str | None = None
    """S3 Object Lock: the retention's mode, `GOVERNANCE` or `COMPLIANCE`."""
    legal_hold: bool = False
    """S3 Object Lock: whether a legal hold keeps the version (until it is cleared)."""


@dataclass(frozen=True, slots=True)
class VersionRef:
    """One entry of an object's version history."""

    version_id: str
    """Id to read this version with."""
    is_latest: bool
    """Whether this is the current version."""
    is_delete_marker: bool = False
    """Whether this version records a deletion."""


@dataclass(frozen=True, slots=True)
class KeyPage:
    """One page of a key listing."""

    keys: list[str]
    """Keys on this page, in ascending order."""
    next_token: str | None
    """Token for the next page, None on the last."""
    modified: list[datetime] | None = None
    """When each key's object was written (same order as `keys`), where the backend says."""
    sizes: list[int] | None = None
    """Each key's stored size in bytes (same order as `keys`), where the backend says."""
    etags: list[str] | None = None
    """Each key's ETag (same order as `keys`), where the listing says (S3, memory); the
    local folder computes none (it would read every file)."""
    prefixes: list[str] = field(default_factory=list)
    """With a `delimiter`: the common prefixes that stand for the keys rolled up in them
    (each ends with the delimiter; S3's `CommonPrefixes`)."""


class WriteOutcome(Enum):
    """How a conditional write or delete ended, as far as the transport can tell."""

    STORED = "stored"
    """The server acknowledged the write."""
    PRECONDITION_FAILED = "precondition_failed"
    """HTTP 412: the condition did not hold (possibly because our own retry landed first)."""
    NOT_FOUND = "not_found"
    """HTTP 404 on an If-Match write or delete: the object is gone."""
    CONDITION_CONFLICT = "condition_conflict"
    """HTTP 409 ConditionalRequestConflict: a concurrent conditional write; retry."""
    AMBIGUOUS = "ambiguous"
    """Timeout, reset or 5xx: the write may or may not have landed."""


@dataclass(frozen=True, slots=True)
class WriteResult:
    """The result of a `PutObject` or `DeleteObject`."""

    outcome: WriteOutcome
    """How the write ended."""
    etag: str | None = None
    """The new ETag when stored."""
    detail: str = ""
    """What the transport saw, for error messages."""
    retried: bool = True
    """Whether the client may have sent the request more than once (its own retries), so a
    412/404 might answer a repeat of a write that landed. False only when known."""


@dataclass(frozen=True, slots=True)
class GetObject(Request["ObjectInfo | None"]):
    """Request: read an object's bytes. Result: `ObjectInfo` or None if absent.

    An object larger than `max_bytes` raises `LimitExceeded` before its body is read.
    """

    key: str
    """Object key."""
    version_id: str | None = None
    """A specific version, or None for the current one."""
    max_bytes: int | None = None
    """Refuse, from its size alone, an object larger than this."""


@dataclass(frozen=True, slots=True)
class HeadObject(Request["ObjectInfo | None"]):
    """Request: read an object's ETag and metadata. Result: `ObjectInfo` or None if absent.

    Transports without metadata return the body instead (metadata None).
    """

    key: str
    """Object key."""
    version_id: str | None = None
    """A specific version, or None for the current one."""


@dataclass(frozen=True, slots=True)
class PutObject(Request["WriteResult"]):
    """Request: write an object under a condition. Result: `WriteResult`."""

    key: str
    """Object key."""
    body: bytes
    """The bytes to store."""
    condition: Condition
    """The precondition."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """User metadata (ASCII), stored with the object."""
    content_type: str = "application/json"
    """Content-Type header."""
    content_encoding: str | None = "zstd"
    """Content-Encoding header, None for raw bytes."""


@dataclass(frozen=True, slots=True)
class DeleteObject(Request["WriteResult"]):
    """Request: delete an object, optionally only if its ETag matches. Result: `WriteResult`."""

    key: str
    """Object key."""
    etag: str | None = None
    """Delete only if the current ETag is this one."""
    version_id: str | None = None
    """Delete this stored version for good (history included), not the current object."""


@dataclass(frozen=True, slots=True)
class ListVersions(Request["list[VersionRef]"]):
    """Request: an object's versions, newest first. Result: `list[VersionRef]`.

    Raises `ConfigurationError` where the backend keeps no versions.
    """

    key: str
    """Object key."""


LIST_PAGE = 1000
"""Keys a listing page holds unless asked for fewer (S3's most)."""


@dataclass(frozen=True, slots=True)
class ListKeys(Request["KeyPage"]):
    """Request: one page of keys under a prefix. Result: `KeyPage`."""

    prefix: str
    """Key prefix."""
    token: str | None = None
    """Continuation token from the previous page."""
    page_size: int = LIST_PAGE
    """Largest page wanted."""
    start_after: str | None = None
    """Only keys after this one (ascending), for resuming a walk."""
    delimiter: str | None = None
    """Roll the keys that hold this string after the prefix up into one common prefix
    each (up to and with its first occurrence), as S3's `Delimiter` does: where storage
    honours it (`Provider.any_delimiter`), a listing of many keys under few such prefixes
    is a page per 1,000 prefixes, not per 1,000 keys."""

    @property
    def after(self) -> str:
        """The key a store whose token is the last key listed resumes after ("": the start).

        The later of the token and `start_after`: what memory and a local folder list from.
        """
        return max(self.token or "", self.start_after or "")


class RestoreState(Enum):
    """Where an object stands with respect to the archive tiers."""

    NOT_ARCHIVED = "not_archived"
    """The object is readable as it is (or the backend has no archive tier)."""
    STARTED = "started"
    """A restore was requested just now."""
    IN_PROGRESS = "in_progress"
    """A restore is under way (Glacier: minutes to hours; Deep Archive: up to 48 hours)."""
    RESTORED = "restored"
    """A restored copy is readable until it expires."""


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """Where the archived objects of one checkpoint or log stand (`restore`)."""

    objects: int
    """Objects looked at."""
    not_archived: int
    """Readable as they are."""
    started: int
    """Restores requested by this call."""
    in_progress: int
    """Restores requested earlier and still under way."""
    restored: int
    """Restored copies, readable now."""

    @classmethod
    def of(cls, states: list[RestoreState]) -> RestoreReport:
        """Count `states`."""
        return cls(
            objects=len(states),
            not_archived=states.count(RestoreState.NOT_ARCHIVED),
            started=states.count(RestoreState.STARTED),
            in_progress=states.count(RestoreState.IN_PROGRESS),
            restored=states.count(RestoreState.RESTORED),
        )

    @property
    def readable(self) -> bool:
        """Whether every object can be read now."""
        return self.started == 0 and self.in_progress == 0


RESTORE_TIERS = ("Expedited", "Standard", "Bulk")
"""S3's retrieval tiers, fastest (and dearest) first."""


def check_restore(days: int, tier: str) -> None:
    """Refuse restore arguments S3 would refuse, before any request."""
    if type(days) is not int or not 1 <= days <= 36500:
        raise InvalidArgument(f"days must be an int from 1 to 36500, not {described(days)}")
    if tier not in RESTORE_TIERS:
        raise InvalidArgument(
            f"tier must be one of {', '.join(RESTORE_TIERS)}, not {described(tier)}"
        )


@dataclass(frozen=True, slots=True)
class RestoreObject(Request["RestoreState"]):
    """Request: make an archived object readable for `days` (S3 RestoreObject).

    Result: the object's `RestoreState`; a restore is requested only when none is under way
    or done, so asking again reports progress.
    """

    key: str
    """Object key."""
    days: int
    """How long the restored copy stays readable."""
    tier: str = "Standard"
    """Retrieval tier: `Expedited`, `Standard` or `Bulk`."""
    version_id: str | None = None
    """A specific version (an old revision of an envelope checkpoint)."""


@dataclass(frozen=True, slots=True)
class LifecycleRule:
    """One bucket lifecycle rule, as far as stashpoint cares."""

    rule_id: str
    """The rule's id."""
    prefix: str
    """The key prefix it applies to ('' for the whole bucket)."""
    enabled: bool
    """Whether it is enabled."""
    transitions: tuple[tuple[int, str], ...]
    """(days, storage class) of current versions."""
    noncurrent_transitions: tuple[tuple[int, str], ...]
    """(days, storage class) of noncurrent versions."""
    larger_than: int | None = None
    """Only objects larger than this many bytes (`ObjectSizeGreaterThan`), None: any size."""
    noncurrent_expire_days: int | None = None
    """Days after which noncurrent versions are deleted, None: never."""
    expires_delete_markers: bool = False
    """Whether delete markers left with no older version are removed."""


@dataclass(frozen=True, slots=True)
class GetLifecycle(Request["list[LifecycleRule] | None"]):
    """Request: the bucket's lifecycle rules.

    Result: the rules, None where the backend has no lifecycle (memory, local folder).
    """


@dataclass(frozen=True, slots=True)
class ObjectLock:
    """A bucket's S3 Object Lock configuration, as far as stashpoint cares."""

    enabled: bool
    """Whether the bucket has Object Lock (set when the bucket is created, never undone)."""
    mode: str | None = None
    """The default retention's mode, `GOVERNANCE` or `COMPLIANCE` (None: no default)."""
    days: int | None = None
    """The default retention in days (or `years`)."""
    years: int | None = None
    """The default retention in years (or `days`)."""
    rules: tuple[str, ...] = ()
    """The retentions this stash's own writes ask for, per namespace (`stores.retention`)."""


@dataclass(frozen=True, slots=True)
class GetObjectLock(Request["ObjectLock | None"]):
    """Request: the bucket's Object Lock configuration.

    Result: it (`enabled=False` for a bucket without), None where the backend has no
    Object Lock (memory, local folder).
    """


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """One stored version of some key under a prefix (`ListVersionPage`)."""

    key: str
    """The object key."""
    version_id: str
    """The version's id (S3 says `null` for an object written while versioning was off)."""
    is_latest: bool
    """Whether it is the key's current version."""
    is_delete_marker: bool = False
    """Whether it records a deletion (it holds no bytes)."""
    size: int = 0
    """Stored bytes (0 for a delete marker)."""
    etag: str | None = None
    """The version's ETag, where the listing says."""
    last_modified: datetime | None = None
    """When it was written, where the listing says."""


@dataclass(frozen=True, slots=True)
class VersionPage:
    """One page of a versions listing."""

    versions: list[StoredVersion]
    """Versions on this page, by key ascending, each key's newest first."""
    next_marker: tuple[str, str] | None
    """(key, version id) to continue after, None on the last page."""


@dataclass(frozen=True, slots=True)
class ListVersionPage(Request["VersionPage"]):
    """Request: one page of every stored version (and delete marker) under a prefix.

    Result: `VersionPage`. Where storage keeps no versions, each object is its one version.
    """

    prefix: str
    """Key prefix."""
    marker: tuple[str, str] | None = None
    """The previous page's `next_marker`."""
    page_size: int = 1000
    """Largest page wanted."""


ROLLED_UP = "\U0010ffff"
"""Appended to a common prefix, the continuation of a listing that rolled keys up into it
(memory and a local folder): after every key the prefix holds."""


def delimited(
    ordered: Iterable[str], prefix: str, delimiter: str, page_size: int
) -> tuple[list[str], list[str], str | None]:
    """Roll keys listed in order up by `delimiter`, as S3 does: one page's keys and prefixes.

    For storage that computes its listings (memory, a local folder). Each common prefix
    counts as one entry of the page, as on S3. Returns the keys, the common prefixes and
    where the next page starts after (None: the last page).
    """
    keys: list[str] = []
    prefixes: list[str] = []
    last = ""
    rolled: str | None = None
    for key in ordered:
        if rolled is not None and key.startswith(rolled):
            continue
        if len(keys) + len(prefixes) == page_size:
            return keys, prefixes, last
        cut = key.find(delimiter, len(prefix))
        if cut < 0:
            keys.append(key)
            last = key
        else:
            rolled = key[: cut + len(delimiter)]
            prefixes.append(rolled)
            last = rolled + ROLLED_UP
    return keys, prefixes, None


def every_key_page(
    prefix: str,
    *,
    page_size: int = LIST_PAGE,
    first: KeyPage | None = None,
    starts: Sequence[str] = (),
    delimiter: str | None = None,
) -> Steps[list[KeyPage]]:
    """Return every page of the keys under `prefix`, in order (the one key-listing loop).

    `first`: the listing's first page, where it was listed already (beside another request).
    `starts`: keys after which an index of these keys says later pages begin (the LangGraph
    store's catalogs), for storage that lists in order and from a key (`Provider.seeks`):
    the pages from each start are listed at once, in one round, and each run of pages is
    listed on with its continuation token until it reaches the next run's start. Keys
    written since lengthen a run; deleted ones make runs overlap (a key may be listed
    twice), never leave a gap. Without `starts`, pages are listed one after another.
    `delimiter`: keys rolled up into common prefixes (`ListKeys.delimiter`; not with
    `starts`). A continuation token a run was given already is `StorageUnavailable`
    (a server that repeats one would be listed forever).
    """
    if delimiter is not None and starts:
        raise InvalidArgument("a listing from starts rolls no keys up")
    if first is not None and first.next_token is None:
        return [first]
    after = first.keys[-1] if first is not None and first.keys else ""
    begins = sorted({s for s in starts if s.startswith(prefix) and s > after})
    runs = [_Run(None, [] if first is None else [first], delimiter=delimiter)]
    if first is not None and first.next_token is not None:
        runs[0].tokens.add(first.next_token)
    runs += [_Run(start, []) for start in begins]
    for run, following in pairwise(runs):
        run.end = following.start
    while True:
        going = [run for run in runs if run.going]
        if not going:
            return [page for run in runs for page in run.pages]
        requests = tuple(run.next_request(prefix, page_size) for run in going)
        if len(requests) == 1:
            pages: list[KeyPage] = [(yield from ask(requests[0]))]
        else:
            pages = yield from ask(Parallel(requests))
        for run, page in zip(going, pages, strict=True):
            if page.next_token is not None and page.next_token in run.tokens:
                raise StorageUnavailable(
                    "storage repeated a listing's continuation token", object_name=prefix
                )
            run.pages.append(page)
            if page.next_token is not None:
                run.tokens.add(page.next_token)


@dataclass(slots=True)
class _Run:
    """Pages of a listing from one start (after `start`; None: the prefix's first key)."""

    start: str | None
    pages: list[KeyPage]
    end: str | None = None
    """The next run's start: this run is listed until it reaches it (None: to the end)."""
    delimiter: str | None = None
    """As `ListKeys.delimiter`."""
    tokens: set[str] = field(default_factory=set)
    """The continuation tokens this run was given (one given twice would list forever)."""

    @property
    def going(self) -> bool:
        """Whether this run has another page to list."""
        if not self.pages:
            return True
        last = self.pages[-1]
        if last.next_token is None:
            return False
        return self.end is None or not last.keys or last.keys[-1] < self.end

    def next_request(self, prefix: str, page_size: int) -> ListKeys:
        """Return the request of this run's next page."""
        token = self.pages[-1].next_token if self.pages else None
        return ListKeys(
            prefix,
            token,
            page_size,
            start_after=None if token else self.start,
            delimiter=self.delimiter,
        )


def every_version(prefix: str, *, exact: bool = False) -> Steps[list[StoredVersion]]:
    """Return every stored version under `prefix` (`exact`: of that one key), page by page."""
    found: list[StoredVersion] = []
    marker: tuple[str, str] | None = None
    while True:
        page = yield from ask(ListVersionPage(prefix, marker))
        found += [v for v in page.versions if not exact or v.key == prefix]
        marker = page.next_marker
        if marker is None:
            return found


@dataclass(frozen=True, slots=True)
class DeleteFailure:
    """One version a `DeleteVersions` (or one key a `DeleteKeys`) could not delete."""

    key: str
    """The object key."""
    version_id: str
    """The version ("" for a `DeleteKeys` key)."""
    code: str
    """Storage's error code (`AccessDenied` for a version a retention or legal hold keeps)."""


MAX_DELETE_BATCH = 1000
"""Most versions one `DeleteVersions` request names (S3 DeleteObjects' limit)."""


@dataclass(frozen=True, slots=True)
class DeleteVersions(Request["list[DeleteFailure]"]):
    """Request: delete stored versions for good, up to `MAX_DELETE_BATCH` in one request.

    Result: the versions that could not be deleted (empty: all gone). Deleting a version
    that is gone already succeeds, so a repeat of the request is harmless.
    """

    targets: tuple[tuple[str, str], ...]
    """(key, version id) of each version."""


@dataclass(frozen=True, slots=True)
class DeleteKeys(Request["list[DeleteFailure]"]):
    """Request: delete the current objects of up to `MAX_DELETE_BATCH` keys in one request.

    Unconditional, as `DeleteObject(key)` is (on a versioned bucket each key gets a delete
    marker; its versions stay for `purge`): for objects no later write can name again.
    Result: the keys that could not be deleted (empty: all gone; a key already gone counts
    as deleted, so a repeat is harmless).
    """

    keys: tuple[str, ...]
    """The object keys."""


def delete_every_version(prefix: str) -> Steps[tuple[int, list[DeleteFailure]]]:
    """Delete every stored version under `prefix` for good, `MAX_DELETE_BATCH` a request.

    Returns how many versions were found and those storage did not delete (a retention
    or legal hold keeps them): the caller decides whether what is left is an error.
    """
    found = yield from every_version(prefix)
    doomed = [(v.key, v.version_id) for v in found]
    failures: list[DeleteFailure] = []
    for start in range(0, len(doomed), MAX_DELETE_BATCH):
        failures += yield from ask(DeleteVersions(tuple(doomed[start : start + MAX_DELETE_BATCH])))
    return len(doomed), failures


def delete_keys(keys: Sequence[str], *, best_effort: bool = False) -> Steps[None]:
    """Delete the current objects of `keys`, unconditionally, in as few requests as it takes.

    One `DeleteObject` for a single key, otherwise `DeleteKeys` batches of up to
    `MAX_DELETE_BATCH` sent together (the one batch-delete helper). A key storage did not
    delete raises `StorageUnavailable` naming it; a repeat deletes what is left.
    `best_effort`: clean-up after a write that has already landed, whose caller must not
    see an error for it: what is left stays for the next clean-up.
    """
    try:
        failures: list[DeleteFailure] = []
        if len(keys) == 1:
            result = yield from ask(DeleteObject(keys[0]))
            if result.outcome not in (WriteOutcome.STORED, WriteOutcome.NOT_FOUND):
                failures.append(DeleteFailure(keys[0], "", result.outcome.value))
        elif keys:
            batches = tuple(
                DeleteKeys(tuple(keys[start : start + MAX_DELETE_BATCH]))
                for start in range(0, len(keys), MAX_DELETE_BATCH)
            )
            results = yield from ask(Parallel(batches))
            failures = [failure for result in results for failure in result]
        if failures:
            raise StorageUnavailable(
                f"storage did not delete {len(failures)} object(s) ({failures[0].code}); "
                "deleting again deletes what is left",
                object_name=failures[0].key,
            )
    except StorageUnavailable:
        if not best_effort:
            raise


@dataclass(frozen=True, slots=True)
class SetLegalHold(Request["None"]):
    """Request: set or clear an S3 Object Lock legal hold on one version.

    Raises `ConfigurationError` where storage has no Object Lock (memory, local folder).
    """

    key: str
    """The object key."""
    version_id: str | None
    """The version (None: the current one)."""
    on: bool
    """Set (True) or clear (False)."""


@dataclass(frozen=True, slots=True)
class ListSource(Request["KeyPage"]):
    """Request: one page of the objects under a source prefix. Result: `KeyPage`.

    A source is where a fleet map's items come from: a bucket or folder the stash does not
    own (`s3://bucket/prefix`, `file:///folder/`), only ever read. Its keys are the
    objects' keys in their bucket (S3) or paths relative to the folder (`file://`).
    """

    url: str
    """`s3://bucket/prefix` or `file:///absolute/folder/`."""
    token: str | None = None
    """Continuation token from the previous page."""
    page_size: int = 1000
    """Largest page wanted."""


@dataclass(frozen=True, slots=True)
class ReadSource(Request["ObjectInfo | None"]):
    """Request: bytes of a source object (a manifest). Result: `ObjectInfo` or None.

    The result's `size` is the whole object's. With `etag`, an object that no longer has
    it raises `SourceChanged` (S3: `If-Match`), so a manifest read in parts is one version.
    """

    url: str
    """`s3://bucket/key` or `file:///absolute/path`."""
    start: int = 0
    """First byte wanted."""
    length: int | None = None
    """Bytes wanted (None: to the end)."""
    etag: str | None = None
    """The ETag the object must still have (from the first part read)."""


def source_parts(url: str) -> tuple[str, str, str]:
    """Return `(scheme, bucket or "", key or path)` of a source URL; `InvalidArgument` else."""
    scheme, sep, rest = url.partition("://") if isinstance(url, str) else ("", "", "")
    if scheme == "s3" and sep:
        bucket, _, key = rest.partition("/")
        if bucket:
            return scheme, bucket, key
    if scheme == "file" and sep and rest.startswith("/"):
        return scheme, "", rest
    raise InvalidArgument(
        f"a source is s3://bucket/prefix or file:///absolute/path, not {described(url)}"
    )


ObjectRequest = (
    GetObject | HeadObject | PutObject | DeleteObject | ListVersions | ListKeys | RestoreObject
    | GetLifecycle | GetObjectLock | ListVersionPage | DeleteVersions | DeleteKeys
    | SetLegalHold | ListSource | ReadSource
)  # fmt: skip
"""Every request an object transport executes."""


class ObjectTransport(Protocol):
    """Executes object requests with blocking I/O."""

    def execute(self, request: ObjectRequest) -> object:
        """Execute one request and return its result."""
        ...

    def close(self) -> None:
        """Release clients and files."""
        ...


class AsyncObjectTransport(Protocol):
    """Executes object requests with asyncio."""

    def execute(self, request: ObjectRequest) -> Awaitable[object]:
        """Execute one request and return its result."""
        ...

    async def close(self) -> None:
        """Release clients and files."""
        ...
