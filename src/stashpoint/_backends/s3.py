"""S3 (and S3-compatible stores) as object storage: boto3 and aiobotocore drivers.

What each object request means in S3 calls, how answers and errors map back, pagination and
the versioning check are written once, as a small protocol (`s3_calls`) that yields
`AwsCall`s; the generic AWS transports (boto3, aiobotocore) only perform the calls.

Clients are created on first use, never in a constructor, and reused for the life of the
transport; endpoint, region and credentials come from the standard AWS environment
(`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, `AWS_PROFILE`, roles...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import botocore.config
import botocore.exceptions

from stashpoint._backends.aws import (
    NEVER_SENT,
    AsyncAwsTransport,
    AwsCall,
    AwsClientSettings,
    AwsTransport,
    as_config,
    setup_error,
)
from stashpoint.errors import (
    ArchivedObject,
    ConfigurationError,
    SourceChanged,
    StashpointError,
    StorageUnavailable,
)
from stashpoint.steps import Steps, ask
from stashpoint.stores.objects import (
    Create,
    DeleteFailure,
    DeleteKeys,
    DeleteObject,
    DeleteVersions,
    GetLifecycle,
    GetObject,
    GetObjectLock,
    HeadObject,
    KeyPage,
    LifecycleRule,
    ListKeys,
    ListSource,
    ListVersionPage,
    ListVersions,
    Match,
    ObjectInfo,
    ObjectLock,
    ObjectRequest,
    PutObject,
    ReadSource,
    RestoreObject,
    RestoreState,
    SetLegalHold,
    StoredVersion,
    VersionPage,
    VersionRef,
    WriteOutcome,
    WriteResult,
    source_parts,
)
from stashpoint.stores.retention import RetentionRule, rule_for

DEFAULT_CLIENT_CONFIG = botocore.config.Config(
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=64,
    tcp_keepalive=True,
)
"""Client settings used unless the caller's `client_config` says otherwise."""
DEFAULT_RETRIES = {"mode": "standard", "max_attempts": 4}
"""Retries unless `client_config`, `AWS_MAX_ATTEMPTS` / `AWS_RETRY_MODE` or the profile
say otherwise."""

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404", "NoSuchVersion"})
_CONFLICT_CODES = frozenset({"ConditionalRequestConflict", "OperationAborted"})
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
    }
)


@dataclass(frozen=True, kw_only=True)
class S3Settings(AwsClientSettings):
    """Everything an S3 transport needs to make its client and its requests."""

    bucket: str
    """The bucket holding the stash."""
    client_config: botocore.config.Config = DEFAULT_CLIENT_CONFIG
    """botocore client settings: timeouts, retries, pool size, addressing style."""
    sse: str | None = None
    """Server-side encryption: `AES256` (SSE-S3) or `aws:kms` (SSE-KMS)."""
    kms_key_id: str | None = None
    """KMS key id or ARN for SSE-KMS."""
    storage_class: str | None = None
    """Storage class for new objects (for example `STANDARD_IA`)."""
    extra_put: Mapping[str, Any] = field(default_factory=dict)
    """Further PutObject parameters passed through unchanged."""
    retention: tuple[RetentionRule, ...] = ()
    """Object Lock retentions the writes of some namespaces carry (`stores.retention`)."""
    versioning: bool = True
    """Whether the provider lists and reads object versions (`Provider.versioning`);
    without, a version listing is the current objects', each its one `null` version."""

    @classmethod
    def from_options(
        cls, bucket: str, params: Mapping[str, str], options: Mapping[str, Any]
    ) -> S3Settings:
        """Build settings from URL query parameters and keyword options (keywords win)."""
        merged: dict[str, Any] = {**params, **options}
        config = DEFAULT_CLIENT_CONFIG
        user_config = as_config(merged.pop("client_config", None), "client_config")
        if user_config is not None:
            config = config.merge(user_config)
        style = merged.pop("addressing_style", None)
        if style not in (None, "auto", "virtual", "path"):
            raise ConfigurationError(
                f"addressing_style must be auto, virtual or path, not {style!r}"
            )
        if style is not None:
            config = config.merge(botocore.config.Config(s3={"addressing_style": style}))
        known = {
            "endpoint_url",
            "region_name",
            "profile_name",
            "session",
            "client",
            "sse",
            "kms_key_id",
            "storage_class",
            "extra_put",
        }
        unknown = set(merged) - known
        if unknown:
            from stashpoint.url import unknown_options

            accepted = {*known, "client_config", "addressing_style", "retention"}
            raise unknown_options("S3", unknown, accepted)
        if merged.get("kms_key_id") and merged.get("sse") in (None, "aws:kms"):
            merged["sse"] = "aws:kms"
        return cls(bucket=bucket, client_config=config, default_retries=DEFAULT_RETRIES, **merged)


def _error_code(exc: botocore.exceptions.ClientError) -> tuple[str, int]:
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return str(error.get("Code", "")), int(status)


def _definite_error(exc: botocore.exceptions.ClientError, key: str) -> StashpointError:
    code, status = _error_code(exc)
    if code == "NoSuchBucket":
        bucket = exc.response.get("Error", {}).get("BucketName")
        named = f"bucket {bucket!r}" if bucket else "the bucket"
        return ConfigurationError(
            f"{named} does not exist (check the URL s3://BUCKET/PREFIX and the region): {exc}",
            object_name=key,
        )
    if code in _DENIED_CODES or status == 403:
        return ConfigurationError(
            f"S3 refused the credentials or the permission ({code or status}): check the AWS "
            f"credentials and the IAM policy: {exc}",
            object_name=key,
        )
    return StorageUnavailable(f"S3 {code or status}: {exc}", object_name=key)


def _classify_write(exc: Exception, key: str) -> WriteResult:
    if isinstance(exc, botocore.exceptions.ClientError):
        code, status = _error_code(exc)
        if code == "NoSuchBucket" or code in _DENIED_CODES or status == 403:
            raise _definite_error(exc, key) from exc  # certain, and no retry will help
        # botocore counts its own resends: with none, a 412/404 answers our only copy.
        retried = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 1) != 0
        detail = f"HTTP {status} {code}" + (" after client retries" if retried else "")
        if status == 412 or code == "PreconditionFailed":
            return WriteResult(WriteOutcome.PRECONDITION_FAILED, detail=detail, retried=retried)
        if status == 404 or code in _NOT_FOUND_CODES:
            return WriteResult(WriteOutcome.NOT_FOUND, detail=detail, retried=retried)
        if status == 409 or code in _CONFLICT_CODES:
            return WriteResult(WriteOutcome.CONDITION_CONFLICT, detail=detail, retried=retried)
        if status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout", "Throttling"):
            return WriteResult(WriteOutcome.AMBIGUOUS, detail=detail)
        raise _definite_error(exc, key) from exc
    if isinstance(exc, NEVER_SENT):
        raise setup_error(exc, key) from exc
    # Timeouts, resets and anything else on the wire: the request may have been applied.
    return WriteResult(WriteOutcome.AMBIGUOUS, detail=f"{type(exc).__name__}: {exc}")


_ARCHIVE_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})
"""Storage classes whose objects must be restored before a GET (Glacier Instant Retrieval
and the Intelligent-Tiering access tiers read directly)."""


def _read_failed(exc: Exception, key: str) -> StashpointError:
    if isinstance(exc, StashpointError):
        return exc  # already typed (an object refused from its size)
    if isinstance(exc, botocore.exceptions.ClientError):
        code, _ = _error_code(exc)
        if code == "InvalidObjectState":
            return ArchivedObject(
                "object is in an archive storage class; restore it with `stashpoint restore "
                "ID` (the checkpoint or log id), then read it again",
                object_name=key,
            )
        return _definite_error(exc, key)
    if isinstance(exc, NEVER_SENT):
        return setup_error(exc, key)
    return StorageUnavailable(f"S3 unreachable: {type(exc).__name__}: {exc}", object_name=key)


def _is_absent(exc: Exception) -> bool:
    if not isinstance(exc, botocore.exceptions.ClientError):
        return False
    code, status = _error_code(exc)
    if code == "NoSuchBucket":
        return False  # a missing bucket is a configuration error, not a missing checkpoint
    # 405: the version asked for is a delete marker.
    return status in (404, 405) or code in _NOT_FOUND_CODES


def s3_calls(request: ObjectRequest, settings: S3Settings) -> Steps[Any]:
    """Carry out one object request as S3 calls; return the object request's result."""
    call = _CALLS.get(type(request))
    if call is None:
        raise TypeError(f"S3 storage cannot execute {request!r}")
    return (yield from call(request, settings))


def _read(request: GetObject | HeadObject, settings: S3Settings) -> Steps[ObjectInfo | None]:
    """GET or HEAD one object (a version of it when asked); None: there is none."""
    key = request.key
    params: dict[str, Any] = {"Bucket": settings.bucket, "Key": key}
    is_get = isinstance(request, GetObject)
    if request.version_id is not None and (settings.versioning or request.version_id != "null"):
        params["VersionId"] = request.version_id
    try:
        method = "get_object" if is_get else "head_object"
        limit = request.max_bytes if isinstance(request, GetObject) else None
        response = yield from ask(AwsCall(method, params, is_get, limit))
    except Exception as exc:
        if _is_absent(exc):
            return None
        raise _read_failed(exc, key) from exc
    return ObjectInfo(
        etag=response["ETag"],
        metadata=dict(response.get("Metadata") or {}),
        body=response.get("Body") if is_get else None,
        version_id=response.get("VersionId"),
        last_modified=response.get("LastModified"),
        size=response.get("ContentLength"),
        retain_until=response.get("ObjectLockRetainUntilDate"),
        lock_mode=response.get("ObjectLockMode"),
        legal_hold=response.get("ObjectLockLegalHoldStatus") == "ON",
    )


def _put(request: PutObject, settings: S3Settings) -> Steps[WriteResult]:
    try:
        response = yield from ask(AwsCall("put_object", _put_params(request, settings)))
    except Exception as exc:
        return _classify_write(exc, request.key)
    return WriteResult(WriteOutcome.STORED, etag=response.get("ETag"))


def _delete(request: DeleteObject, settings: S3Settings) -> Steps[WriteResult]:
    params: dict[str, Any] = {"Bucket": settings.bucket, "Key": request.key}
    if request.etag is not None:
        params["IfMatch"] = request.etag
    if request.version_id is not None:
        params["VersionId"] = request.version_id
    try:
        yield from ask(AwsCall("delete_object", params))
    except Exception as exc:
        return _classify_write(exc, request.key)
    return WriteResult(WriteOutcome.STORED)


def _key_page(
    bucket: str,
    prefix: str,
    token: str | None,
    page_size: int,
    start_after: str | None,
    name: str,
    delimiter: str | None = None,
) -> Steps[KeyPage]:
    """One page of a bucket's keys under `prefix` (`name`: what a failure is reported on)."""
    params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": page_size}
    if token:
        params["ContinuationToken"] = token
    elif start_after:
        params["StartAfter"] = start_after
    if delimiter:
        params["Delimiter"] = delimiter
    try:
        response = yield from ask(AwsCall("list_objects_v2", params))
    except Exception as exc:
        raise _read_failed(exc, name) from exc
    contents = response.get("Contents", [])
    more = response.get("IsTruncated") and response.get("NextContinuationToken")
    return KeyPage(
        [item["Key"] for item in contents],
        more or None,
        [item["LastModified"] for item in contents],
        [int(item.get("Size", 0)) for item in contents],
        [str(item.get("ETag", "")) for item in contents],
        [str(item["Prefix"]) for item in response.get("CommonPrefixes", [])],
    )


def _list_keys(request: ListKeys, settings: S3Settings) -> Steps[KeyPage]:
    return (
        yield from _key_page(
            settings.bucket,
            request.prefix,
            request.token,
            request.page_size,
            request.start_after,
            request.prefix,
            request.delimiter,
        )
    )


def _list_source(request: ListSource, settings: S3Settings) -> Steps[KeyPage]:
    _, source_bucket, prefix = source_parts(request.url)
    return (
        yield from _key_page(
            source_bucket, prefix, request.token, request.page_size, None, request.url
        )
    )


def _list_versions_of(request: ListVersions, settings: S3Settings) -> Steps[Any]:
    if not settings.versioning:
        raise ConfigurationError(
            "this provider keeps no object versions (a directory bucket, R2), so "
            "there is no history to read",
            object_name=request.key,
        )
    return (yield from _list_versions(request.key, settings.bucket))


def _version_page_of(request: ListVersionPage, settings: S3Settings) -> Steps[VersionPage]:
    bucket, prefix, marker, size = (
        settings.bucket,
        request.prefix,
        request.marker,
        request.page_size,
    )
    if not settings.versioning:
        return (yield from _current_page(bucket, prefix, marker, size))
    return (yield from _version_page(bucket, prefix, marker, size))


def _legal_hold(request: SetLegalHold, settings: S3Settings) -> Steps[None]:
    params: dict[str, Any] = {
        "Bucket": settings.bucket,
        "Key": request.key,
        "LegalHold": {"Status": "ON" if request.on else "OFF"},
    }
    if request.version_id is not None:
        params["VersionId"] = request.version_id
    try:
        yield from ask(AwsCall("put_object_legal_hold", params))
    except Exception as exc:
        raise _read_failed(exc, request.key) from exc
    return None


def _object_lock_of(request: GetObjectLock, settings: S3Settings) -> Steps[ObjectLock | None]:
    if not settings.versioning:
        return None  # Object Lock needs versions: a provider without has none
    return (yield from _object_lock(settings.bucket, settings.retention))


_CALLS: dict[type[Any], Callable[[Any, S3Settings], Steps[Any]]] = {
    GetObject: _read,
    HeadObject: _read,
    PutObject: _put,
    DeleteObject: _delete,
    ListKeys: _list_keys,
    ListVersions: _list_versions_of,
    ListVersionPage: _version_page_of,
    DeleteVersions: lambda r, s: _delete_versions(s.bucket, r.targets, s.versioning),
    DeleteKeys: lambda r, s: _delete_objects(s.bucket, [{"Key": key} for key in r.keys]),
    SetLegalHold: _legal_hold,
    RestoreObject: lambda r, s: _restore(r, s.bucket),
    ListSource: _list_source,
    ReadSource: lambda r, s: _read_source(r),
    GetLifecycle: lambda r, s: _lifecycle(s.bucket),
    GetObjectLock: _object_lock_of,
}
"""How each object request is carried out on S3 (`s3_calls`), by its type."""


def _read_source(request: ReadSource) -> Steps[ObjectInfo | None]:
    """Read part of a source object (a manifest), conditional on its ETag when given."""
    _, source_bucket, key = source_parts(request.url)
    params: dict[str, Any] = {"Bucket": source_bucket, "Key": key}
    if request.start or request.length is not None:
        end = "" if request.length is None else str(request.start + request.length - 1)
        params["Range"] = f"bytes={request.start}-{end}"
    if request.etag:
        params["IfMatch"] = request.etag
    try:
        response = yield from ask(AwsCall("get_object", params, True))
    except Exception as exc:
        if isinstance(exc, botocore.exceptions.ClientError):
            code, status = _error_code(exc)
            if status == 412 or code == "PreconditionFailed":
                raise SourceChanged(
                    "the object changed while it was read (its ETag is not the first part's)",
                    object_name=request.url,
                ) from None
            if status == 416 or code == "InvalidRange":
                return ObjectInfo(etag="", body=b"", size=0)  # an empty object
        if _is_absent(exc):
            return None
        raise _read_failed(exc, request.url) from exc
    total = str(response.get("ContentRange") or "").rpartition("/")[2]
    size = int(total) if total.isdigit() else response.get("ContentLength")
    return ObjectInfo(etag=response["ETag"], body=response.get("Body"), size=size)


def _restore(request: RestoreObject, bucket: str) -> Steps[RestoreState]:
    """Request a restore unless one is under way or done; return where the object stands."""
    params: dict[str, Any] = {"Bucket": bucket, "Key": request.key}
    if request.version_id is not None:
        params["VersionId"] = request.version_id
    try:
        head = yield from ask(AwsCall("head_object", params))
    except Exception as exc:
        raise _read_failed(exc, request.key) from exc
    ongoing = str(head.get("Restore") or "")
    if head.get("StorageClass") not in _ARCHIVE_CLASSES:
        return RestoreState.NOT_ARCHIVED
    if 'ongoing-request="false"' in ongoing:
        return RestoreState.RESTORED
    if 'ongoing-request="true"' in ongoing:
        return RestoreState.IN_PROGRESS
    restore = {"Days": request.days, "GlacierJobParameters": {"Tier": request.tier}}
    try:
        yield from ask(AwsCall("restore_object", {**params, "RestoreRequest": restore}))
    except Exception as exc:
        if isinstance(exc, botocore.exceptions.ClientError):
            code, _ = _error_code(exc)
            if code == "RestoreAlreadyInProgress":
                return RestoreState.IN_PROGRESS
        raise _read_failed(exc, request.key) from exc
    return RestoreState.STARTED


def _bucket_setting(method: str, bucket: str, missing: str) -> Steps[dict[str, Any] | None]:
    """Return a bucket configuration `method` reads, or None where S3 says it has none."""
    try:
        response: dict[str, Any] = yield from ask(AwsCall(method, {"Bucket": bucket}))
    except Exception as exc:
        if isinstance(exc, botocore.exceptions.ClientError) and _error_code(exc)[0] == missing:
            return None
        raise _read_failed(exc, bucket) from exc
    return response


def _lifecycle(bucket: str) -> Steps[list[LifecycleRule]]:
    response = yield from _bucket_setting(
        "get_bucket_lifecycle_configuration", bucket, "NoSuchLifecycleConfiguration"
    )
    if response is None:
        return []
    rules = []
    for rule in response.get("Rules", []):
        found = rule.get("Filter") or {}
        both = found.get("And") or {}
        prefix = found.get("Prefix", both.get("Prefix", rule.get("Prefix", "")))
        larger = found.get("ObjectSizeGreaterThan", both.get("ObjectSizeGreaterThan"))
        expire = (rule.get("NoncurrentVersionExpiration") or {}).get("NoncurrentDays")
        rules.append(
            LifecycleRule(
                rule_id=str(rule.get("ID", "")),
                prefix=str(prefix or ""),
                enabled=rule.get("Status") == "Enabled",
                transitions=tuple(
                    (int(t.get("Days", 0)), str(t.get("StorageClass")))
                    for t in rule.get("Transitions", [])
                ),
                noncurrent_transitions=tuple(
                    (int(t.get("NoncurrentDays", 0)), str(t.get("StorageClass")))
                    for t in rule.get("NoncurrentVersionTransitions", [])
                ),
                larger_than=None if larger is None else int(larger),
                noncurrent_expire_days=None if expire is None else int(expire),
                expires_delete_markers=bool(
                    (rule.get("Expiration") or {}).get("ExpiredObjectDeleteMarker")
                ),
            )
        )
    return rules


def _object_lock(bucket: str, retention: tuple[RetentionRule, ...]) -> Steps[ObjectLock]:
    response = yield from _bucket_setting(
        "get_object_lock_configuration", bucket, "ObjectLockConfigurationNotFoundError"
    )
    if response is None:
        return ObjectLock(enabled=False)
    config = response.get("ObjectLockConfiguration") or {}
    default = (config.get("Rule") or {}).get("DefaultRetention") or {}
    return ObjectLock(
        enabled=config.get("ObjectLockEnabled") == "Enabled",
        mode=default.get("Mode"),
        days=default.get("Days") or None,  # moto says 0 for the one not given
        years=default.get("Years") or None,
        rules=tuple(str(rule) for rule in retention),
    )


def _put_params(request: PutObject, settings: S3Settings) -> dict[str, Any]:
    params: dict[str, Any] = {
        "Bucket": settings.bucket,
        "Key": request.key,
        "Body": request.body,
        "ContentType": request.content_type,
        "Metadata": dict(request.metadata),
    }
    if request.content_encoding:
        params["ContentEncoding"] = request.content_encoding
    if isinstance(request.condition, Create):
        params["IfNoneMatch"] = "*"
    elif isinstance(request.condition, Match):
        params["IfMatch"] = request.condition.etag
    if settings.sse:
        params["ServerSideEncryption"] = settings.sse
    if settings.kms_key_id:
        params["SSEKMSKeyId"] = settings.kms_key_id
    if settings.storage_class:
        params["StorageClass"] = settings.storage_class
    rule = rule_for(settings.retention, request.key)
    if rule is not None:
        params["ObjectLockMode"] = rule.mode
        params["ObjectLockRetainUntilDate"] = datetime.now(UTC) + timedelta(days=rule.days)
    params.update(settings.extra_put)
    return params


def _list_versions(key: str, bucket: str) -> Steps[list[VersionRef]]:
    try:
        status = yield from ask(AwsCall("get_bucket_versioning", {"Bucket": bucket}))
    except Exception as exc:
        raise _read_failed(exc, key) from exc
    if status.get("Status") not in ("Enabled", "Suspended"):
        raise ConfigurationError(
            f"bucket {bucket!r} has versioning off, so it keeps no history; enable it "
            "(aws s3api put-bucket-versioning --versioning-configuration Status=Enabled)",
            object_name=key,
        )
    entries: list[tuple[str, VersionRef]] = []
    params: dict[str, Any] = {"Bucket": bucket, "Prefix": key}
    while True:
        try:
            page = yield from ask(AwsCall("list_object_versions", params))
        except Exception as exc:
            raise _read_failed(exc, key) from exc
        for item in page.get("Versions", []):
            if item["Key"] == key:
                ref = VersionRef(item["VersionId"], bool(item.get("IsLatest")))
                entries.append((str(item.get("LastModified", "")), ref))
        for item in page.get("DeleteMarkers", []):
            if item["Key"] == key:
                ref = VersionRef(item["VersionId"], bool(item.get("IsLatest")), True)
                entries.append((str(item.get("LastModified", "")), ref))
        if not page.get("IsTruncated"):
            break
        params = {
            **params,
            "KeyMarker": page.get("NextKeyMarker"),
            "VersionIdMarker": page.get("NextVersionIdMarker"),
        }
    # S3 lists each kind newest first; interleave markers by time, keeping that order.
    order = {id(ref): i for i, (_, ref) in enumerate(entries)}
    entries.sort(key=lambda e: (e[0], -order[id(e[1])]), reverse=True)
    return [ref for _, ref in entries]


def _version_page(
    bucket: str, prefix: str, marker: tuple[str, str] | None, page_size: int
) -> Steps[VersionPage]:
    params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": page_size}
    if marker is not None:
        params["KeyMarker"] = marker[0]
        if marker[1]:
            params["VersionIdMarker"] = marker[1]
    try:
        page = yield from ask(AwsCall("list_object_versions", params))
    except Exception as exc:
        raise _read_failed(exc, prefix) from exc
    listed = [
        StoredVersion(
            str(item["Key"]),
            str(item.get("VersionId") or "null"),
            bool(item.get("IsLatest")),
            False,
            int(item.get("Size", 0)),
            item.get("ETag"),
            item.get("LastModified"),
        )
        for item in page.get("Versions", [])
    ] + [
        StoredVersion(
            str(item["Key"]),
            str(item.get("VersionId") or "null"),
            bool(item.get("IsLatest")),
            True,
            0,
            None,
            item.get("LastModified"),
        )
        for item in page.get("DeleteMarkers", [])
    ]
    # Each kind comes newest first within a key: merge them by key, the latest first.
    listed.sort(key=lambda v: (v.key, not v.is_latest))
    if not page.get("IsTruncated") or not page.get("NextKeyMarker"):
        return VersionPage(listed, None)
    return VersionPage(
        listed, (str(page["NextKeyMarker"]), str(page.get("NextVersionIdMarker") or ""))
    )


def _current_page(
    bucket: str, prefix: str, marker: tuple[str, str] | None, page_size: int
) -> Steps[VersionPage]:
    """List current objects as versions (`null`), for a provider that keeps no versions.

    The marker's second half carries the listing's continuation token (no `StartAfter`:
    a directory bucket has none).
    """
    params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": page_size}
    if marker is not None:
        params["ContinuationToken"] = marker[1]
    try:
        page = yield from ask(AwsCall("list_objects_v2", params))
    except Exception as exc:
        raise _read_failed(exc, prefix) from exc
    listed = [
        StoredVersion(
            str(item["Key"]),
            "null",
            True,
            False,
            int(item.get("Size", 0)),
            item.get("ETag"),
            item.get("LastModified"),
        )
        for item in page.get("Contents", [])
    ]
    listed.sort(key=lambda v: v.key)
    token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
    return VersionPage(listed, None if not token else ("", str(token)))


def _delete_versions(
    bucket: str, targets: tuple[tuple[str, str], ...], versioning: bool = True
) -> Steps[list[DeleteFailure]]:
    objects = [
        {"Key": key} if not versioning and version_id == "null" else
        {"Key": key, "VersionId": version_id}
        for key, version_id in targets
    ]  # fmt: skip
    return (yield from _delete_objects(bucket, objects))


def _delete_objects(bucket: str, objects: list[dict[str, str]]) -> Steps[list[DeleteFailure]]:
    """One DeleteObjects request; return what it could not delete (gone already: deleted)."""
    params = {"Bucket": bucket, "Delete": {"Objects": objects, "Quiet": True}}
    try:
        response = yield from ask(AwsCall("delete_objects", params))
    except Exception as exc:
        raise _read_failed(exc, objects[0]["Key"] if objects else bucket) from exc
    return [
        DeleteFailure(str(e.get("Key")), str(e.get("VersionId") or ""), str(e.get("Code")))
        for e in response.get("Errors", [])
        if e.get("Code") not in ("NoSuchVersion", "NoSuchKey")
    ]


def conformance(settings: S3Settings, prefix: str, provider: Any) -> Any:
    """Run the conformance kit (`_backends.conformance`) on the stash's bucket."""
    from stashpoint._backends.aws import LazyClient
    from stashpoint._backends.conformance import run_kit

    client = LazyClient("s3", settings)
    try:
        return run_kit(client.get(), settings.bucket, prefix, provider)
    finally:
        client.close()


def s3_transport(settings: S3Settings) -> AwsTransport:
    """Return a blocking (boto3) transport for S3 object requests."""
    return AwsTransport(
        "s3", partial(s3_calls, settings=settings), settings
    )  # fmt: skip


def async_s3_transport(settings: S3Settings) -> AsyncAwsTransport:
    """Return an asyncio (aiobotocore) transport for S3 object requests."""
    return AsyncAwsTransport(
        "s3", partial(s3_calls, settings=settings), settings
    )  # fmt: skip


def engine_files(settings: S3Settings) -> tuple[str, dict[str, str]]:
    """Return the bucket's URI and the file-I/O properties other engines read it with.

    The properties are pyiceberg's and Arrow's `s3.*` names: the endpoint, the region and
    the credentials the stash's own client would use (its session's, else the AWS
    environment's). They hold credentials: never logged or reported.
    """
    import boto3

    session = settings.session
    if session is None:
        session = boto3.Session(profile_name=settings.profile_name)
    properties: dict[str, str] = {}
    endpoint = settings.endpoint_url
    region = settings.region_name or session.region_name
    if settings.client is not None:
        endpoint = endpoint or settings.client.meta.endpoint_url
        region = region or settings.client.meta.region_name
    if endpoint:
        properties["s3.endpoint"] = endpoint
    if region:
        properties["s3.region"] = region
    found = session.get_credentials()
    if found is not None:
        frozen = found.get_frozen_credentials()
        properties["s3.access-key-id"] = frozen.access_key
        properties["s3.secret-access-key"] = frozen.secret_key
        if frozen.token:
            properties["s3.session-token"] = frozen.token
    style = getattr(settings.client_config, "s3", None) or {}
    if endpoint and style.get("addressing_style") != "virtual":
        properties["s3.force-virtual-addressing"] = "false"
    return f"s3://{settings.bucket}", properties
