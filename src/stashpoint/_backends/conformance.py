"""The conformance kit: what an S3 endpoint really does with what stashpoint relies on.

`stashpoint doctor --conformance` runs these probes against a stash's bucket, under
`{prefix}/.doctor/conformance-{id}/`, and removes everything it wrote (every version):

    create-only          a second `If-None-Match: *` PUT is refused (412)
    create race          of 8 creates of one new key sent at once, exactly one lands
    if-match race        of 8 updates on one ETag sent at once, exactly one lands
    stale etag           `If-Match` with an old ETag is refused
    if-match on missing  `If-Match` on a key that does not exist is refused, not a create
    conditional delete   `DELETE` with a stale `If-Match` is refused, a current one deletes
    versioning           older versions are listed and read (`ListObjectVersions`)
    delete markers       a plain DELETE of a versioned key leaves a marker
    listing order        a listing (7 keys a page, 25 keys) is complete and in key order
    start-after          `StartAfter` starts a listing after a key
    read after write     a GET and a LIST right after a PUT see it; an overwrite is seen
    multipart create     a multipart upload completed with `If-None-Match: *` over a key
                         is refused
    etag is md5          a single-part object's ETag is its body's MD5

It compares what it found with the known profiles (`stores.providers`) and names the
closest; an endpoint without safe conditional writes is reported unusable. The probes are
plain boto3 calls (this is I/O, so it lives here), sent with the stash's client settings.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import botocore.exceptions

from stashpoint.ids import new_id
from stashpoint.stores.providers import PROVIDERS, Provider

PROBES = (
    "create-only", "create race", "if-match race", "stale etag", "if-match on missing",
    "conditional delete", "versioning", "delete markers", "listing order", "start-after",
    "any delimiter", "read after write", "multipart create", "etag is md5",
)  # fmt: skip
"""Every probe, in the order it runs."""

_CAPABILITY = {
    "create-only": "conditional_create",
    "stale etag": "conditional_update",
    "if-match on missing": "refuses_missing_match",
    "conditional delete": "conditional_delete",
    "versioning": "versioning",
    "listing order": "ordered_listing",
    "start-after": "start_after",
    "any delimiter": "any_delimiter",
    "etag is md5": "etag_is_md5",
}
"""The probes that measure a profile's capability."""


@dataclass
class Probe:
    """One probe's outcome."""

    name: str
    """What was probed."""
    passed: bool | None
    """Whether the endpoint behaved as the probe expects (None: could not be probed)."""
    detail: str
    """What was seen."""


@dataclass
class Conformance:
    """The kit's report for one endpoint."""

    endpoint: str
    """Where it ran (the bucket and prefix)."""
    probes: list[Probe] = field(default_factory=list)
    """Every probe, in order."""
    profile: str = ""
    """The first known profile whose capabilities match what was found ("" when none)."""
    matches: list[str] = field(default_factory=list)
    """Every known profile whose capabilities match what was found."""
    in_use: str = ""
    """The profile the stash uses (from its URL, or inferred)."""
    cleaned: bool = True
    """Whether everything the kit wrote was removed."""

    @property
    def safe(self) -> bool:
        """Whether compare-and-swap holds: both conditions and their refusals, and races."""
        needed = ("create-only", "create race", "if-match race", "stale etag",
                  "if-match on missing")  # fmt: skip
        return all(p.passed for p in self.probes if p.name in needed)

    def capabilities(self) -> dict[str, bool]:
        """Return the capabilities found, named as a profile names them."""
        return {_CAPABILITY[p.name]: bool(p.passed) for p in self.probes if p.name in _CAPABILITY}

    def differences(self, profile: Provider) -> list[str]:
        """Return the capabilities `profile` claims that the endpoint did not show."""
        found = self.capabilities()
        return [
            name for name, claimed in profile.capabilities().items()
            if claimed and name in found and not found[name]
        ]  # fmt: skip

    def row(self) -> str:
        """Return the report as one row of `docs/providers.md`'s matrix."""
        marks = {True: "yes", False: "**no**", None: "?"}
        cells = [marks[p.passed] for p in self.probes]
        return f"| {self.endpoint} | " + " | ".join(cells) + f" | {self.profile or 'custom'} |"


class _Kit:
    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.base = f"{prefix}/.doctor/conformance-{new_id()}/".lstrip("/")
        self.written: set[str] = set()

    def key(self, name: str) -> str:
        key = self.base + name
        self.written.add(key)
        return key

    def put(self, key: str, body: bytes, **conditions: str) -> tuple[int, str | None]:
        """PUT with conditions; return (HTTP status, ETag)."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": body}
        params.update(conditions)
        try:
            answer = self.client.put_object(**params)
        except botocore.exceptions.ClientError as exc:
            return _status(exc), None
        return 200, str(answer.get("ETag"))

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except botocore.exceptions.ClientError as exc:
            if _status(exc) == 404:
                return None
            raise

    def at_once(self, calls: list[Callable[[], tuple[int, str | None]]]) -> list[int]:
        """Run calls at the same moment (a barrier), return their statuses."""
        barrier = threading.Barrier(len(calls))
        statuses: list[int] = [0] * len(calls)

        def one(index: int) -> None:
            barrier.wait()
            statuses[index] = calls[index]()[0]

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return statuses


def _status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _refused(status: int) -> bool:
    return status in (409, 412)


def run_kit(client: Any, bucket: str, prefix: str, in_use: Provider) -> Conformance:
    """Run every probe against `bucket` under `prefix`; remove what it wrote."""
    kit = _Kit(client, bucket, prefix)
    report = Conformance(f"s3://{bucket}/{prefix}".rstrip("/"), in_use=in_use.name)
    for name, probe in _PROBES:
        try:
            passed, detail = probe(kit)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            passed, detail = None, f"could not be probed: {type(exc).__name__}"
        report.probes.append(Probe(name, passed, detail))
    report.cleaned = _clean(kit)
    found = report.capabilities()
    for profile in PROVIDERS.values():
        mine = {k: v for k, v in profile.capabilities().items() if k in found}
        if mine == found and profile.name not in ("local", "memory"):
            report.matches.append(profile.name)
    report.profile = report.matches[0] if report.matches else ""
    return report


def _create_only(kit: _Kit) -> tuple[bool, str]:
    key = kit.key("create-only")
    first, _ = kit.put(key, b"1", IfNoneMatch="*")
    second, _ = kit.put(key, b"2", IfNoneMatch="*")
    kept = kit.get(key) == b"1"
    return first == 200 and _refused(second) and kept, f"first {first}, second {second}"


def _create_race(kit: _Kit) -> tuple[bool, str]:
    key = kit.key("create-race")
    statuses = kit.at_once(
        [functools.partial(kit.put, key, str(n).encode(), IfNoneMatch="*") for n in range(8)]
    )
    landed = statuses.count(200)
    return landed == 1, f"{landed} of 8 landed ({sorted(set(statuses))})"


def _match_race(kit: _Kit) -> tuple[bool, str]:
    key = kit.key("match-race")
    _, etag = kit.put(key, b"base")
    statuses = kit.at_once(
        [functools.partial(kit.put, key, str(n).encode(), IfMatch=str(etag)) for n in range(8)]
    )
    landed = statuses.count(200)
    return landed == 1, f"{landed} of 8 landed ({sorted(set(statuses))})"


def _stale(kit: _Kit) -> tuple[bool, str]:
    key = kit.key("stale")
    _, old = kit.put(key, b"a")
    kit.put(key, b"b")
    status, _ = kit.put(key, b"c", IfMatch=str(old))
    return _refused(status) and kit.get(key) == b"b", f"stale If-Match answered {status}"


def _missing(kit: _Kit) -> tuple[bool, str]:
    key = kit.key("missing")
    status, _ = kit.put(key, b"x", IfMatch='"0123456789abcdef0123456789abcdef"')
    created = kit.get(key) is not None
    return status in (404, 409, 412) and not created, f"answered {status}, created: {created}"


def _conditional_delete(kit: _Kit) -> tuple[bool, str]:
    key = kit.key("delete")
    _, old = kit.put(key, b"a")
    _, current = kit.put(key, b"b")
    try:
        kit.client.delete_object(Bucket=kit.bucket, Key=key, IfMatch=str(old))
        stale = 204
    except botocore.exceptions.ClientError as exc:
        stale = _status(exc)
    survived = kit.get(key) == b"b"
    try:
        kit.client.delete_object(Bucket=kit.bucket, Key=key, IfMatch=str(current))
        gone = kit.get(key) is None
    except botocore.exceptions.ClientError:
        gone = False
    passed = _refused(stale) and survived and gone
    return passed, f"stale If-Match on DELETE answered {stale}, the current one deleted: {gone}"


def _versioning(kit: _Kit) -> tuple[bool, str]:
    key = kit.key("versions")
    kit.put(key, b"v1")
    kit.put(key, b"v2")
    try:
        status = kit.client.get_bucket_versioning(Bucket=kit.bucket).get("Status", "off")
        listed = kit.client.list_object_versions(Bucket=kit.bucket, Prefix=key)
    except botocore.exceptions.ClientError as exc:
        return False, f"not offered ({_status(exc)})"
    versions = [v for v in listed.get("Versions", []) if v["Key"] == key]
    return len(versions) >= 2, f"bucket versioning {status}, {len(versions)} versions listed"


def _delete_markers(kit: _Kit) -> tuple[bool | None, str]:
    key = kit.key("markers")
    kit.put(key, b"x")
    kit.client.delete_object(Bucket=kit.bucket, Key=key)
    try:
        listed = kit.client.list_object_versions(Bucket=kit.bucket, Prefix=key)
    except botocore.exceptions.ClientError:
        return None, "no versions to leave a marker among"
    markers = [m for m in listed.get("DeleteMarkers", []) if m["Key"] == key]
    return bool(markers), f"{len(markers)} delete marker(s)"


def _listing_order(kit: _Kit) -> tuple[bool, str]:
    names = [f"order/{n:03d}-{hashlib.sha256(str(n).encode()).hexdigest()[:6]}" for n in range(25)]
    for name in reversed(names):
        kit.put(kit.key(name), b".")
    listed: list[str] = []
    params: dict[str, Any] = {"Bucket": kit.bucket, "Prefix": kit.base + "order/", "MaxKeys": 7}
    while True:
        page = kit.client.list_objects_v2(**params)
        listed += [item["Key"] for item in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            break
        params["ContinuationToken"] = page["NextContinuationToken"]
    complete = sorted(listed) == sorted(kit.base + n for n in names)
    ordered = listed == sorted(listed)
    return complete and ordered, f"{len(listed)} of 25 listed, in order: {ordered}"


def _start_after(kit: _Kit) -> tuple[bool, str]:
    after = sorted(k for k in kit.written if k.startswith(kit.base + "order/"))[12]
    try:
        page = kit.client.list_objects_v2(
            Bucket=kit.bucket, Prefix=kit.base + "order/", StartAfter=after
        )
    except botocore.exceptions.ClientError as exc:
        return False, f"refused ({_status(exc)})"
    keys = [item["Key"] for item in page.get("Contents", [])]
    honoured = bool(keys) and all(k > after for k in keys) and len(keys) == 12
    return honoured, f"{len(keys)} keys after the 13th of 25"


def _any_delimiter(kit: _Kit) -> tuple[bool, str]:
    base = kit.base + "delimiter/"
    for name in ("a..x", "a..y", "a.b..z", "a.b.c"):
        kit.put(kit.key("delimiter/" + name), b"d")
    try:
        page = kit.client.list_objects_v2(Bucket=kit.bucket, Prefix=base, Delimiter="..")
    except botocore.exceptions.ClientError as exc:
        return False, f"refused ({_status(exc)})"
    rolled = sorted(str(p["Prefix"])[len(base) :] for p in page.get("CommonPrefixes", []))
    keys = [str(item["Key"])[len(base) :] for item in page.get("Contents", [])]
    honoured = rolled == ["a..", "a.b.."] and keys == ["a.b.c"] and not page.get("IsTruncated")
    return honoured, f"rolled up {rolled}, kept {keys}"


def _read_after_write(kit: _Kit) -> tuple[bool, str]:
    key = kit.key("raw")
    kit.put(key, b"first")
    seen = kit.get(key) == b"first"
    kit.put(key, b"second")
    overwritten = kit.get(key) == b"second"
    listed = kit.client.list_objects_v2(Bucket=kit.bucket, Prefix=key).get("Contents", [])
    return seen and overwritten and bool(
        listed
    ), f"GET {seen}, overwrite {overwritten}, LIST {bool(listed)}"


def _multipart(kit: _Kit) -> tuple[bool | None, str]:
    key = kit.key("multipart")
    kit.put(key, b"already here")
    try:
        upload = kit.client.create_multipart_upload(Bucket=kit.bucket, Key=key)
        part = kit.client.upload_part(
            Bucket=kit.bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"part"
        )
        kit.client.complete_multipart_upload(
            Bucket=kit.bucket, Key=key, UploadId=upload["UploadId"], IfNoneMatch="*",
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
        )  # fmt: skip
        status = 200
    except botocore.exceptions.ClientError as exc:
        status = _status(exc)
        if status in (0, 400, 501):
            return None, f"multipart not probed ({status})"
    kept = kit.get(key) == b"already here"
    return _refused(status) and kept, f"completed over a key: {status}"


def _etag_md5(kit: _Kit) -> tuple[bool, str]:
    key = kit.key("md5")
    _, etag = kit.put(key, b"stashpoint")
    md5 = hashlib.md5(b"stashpoint", usedforsecurity=False).hexdigest()
    return (etag or "").strip('"') == md5, "ETag is the MD5" if (etag or "").strip(
        '"'
    ) == md5 else "ETag is opaque"


_PROBES: tuple[tuple[str, Callable[[_Kit], tuple[bool | None, str]]], ...] = (
    ("create-only", _create_only),
    ("create race", _create_race),
    ("if-match race", _match_race),
    ("stale etag", _stale),
    ("if-match on missing", _missing),
    ("conditional delete", _conditional_delete),
    ("versioning", _versioning),
    ("delete markers", _delete_markers),
    ("listing order", _listing_order),
    ("start-after", _start_after),
    ("any delimiter", _any_delimiter),
    ("read after write", _read_after_write),
    ("multipart create", _multipart),
    ("etag is md5", _etag_md5),
)


def _clean(kit: _Kit) -> bool:
    """Remove every version (or object) the kit wrote; whether nothing is left."""
    for _ in range(3):
        left: list[dict[str, str]] = []
        try:
            listed = kit.client.list_object_versions(Bucket=kit.bucket, Prefix=kit.base)
            left = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in listed.get("Versions", []) + listed.get("DeleteMarkers", [])
            ]
        except botocore.exceptions.ClientError:
            pass  # no versions here: current objects only
        if not left:
            pages = kit.client.get_paginator("list_objects_v2").paginate(
                Bucket=kit.bucket, Prefix=kit.base
            )
            left = [{"Key": item["Key"]} for page in pages for item in page.get("Contents", [])]
        if not left:
            return True
        for start in range(0, len(left), 1000):
            kit.client.delete_objects(
                Bucket=kit.bucket, Delete={"Objects": left[start : start + 1000], "Quiet": True}
            )
        time.sleep(0.1)
    return False
