"""`stashpoint doctor`: probe a stash's storage and index, and say plainly what works.

Many S3-compatible stores accept `If-None-Match` / `If-Match` and silently ignore them;
on such a store no library can keep compare-and-swap, and stashpoint would lose updates.
The doctor writes a probe object, checks that a second create and a stale update are
refused with 412, checks versioning and the index, times one PUT and one GET, and removes
every version of its probe before it finishes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum

from stashpoint.encryption import Encryption
from stashpoint.errors import ConfigurationError, StashpointError
from stashpoint.index.requests import DescribeIndex
from stashpoint.index.schema import SECONDARY_INDEXES, TTL_ATTRIBUTE
from stashpoint.steps import NewId, Steps, ask
from stashpoint.stores.layout import Layout
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    GetLifecycle,
    GetObject,
    GetObjectLock,
    LifecycleRule,
    ListVersions,
    Match,
    PutObject,
    VersionRef,
    WriteOutcome,
    WriteResult,
)
from stashpoint.stores.providers import Provider

_NO_INDEX = (
    "no index configured: list_runs and status queries are unavailable "
    "(add ?index=dynamodb://TABLE)"
)
_IGNORES_IF_NONE_MATCH = (
    "the server accepted a create over an existing object: it ignores If-None-Match, so two "
    "writers creating one checkpoint would silently overwrite each other. Use a store that "
    "honours conditional writes (AWS S3, SeaweedFS, recent MinIO)"
)
_IGNORES_IF_MATCH = (
    "the server accepted an update carrying a stale ETag: it ignores If-Match, so a zombie "
    "worker would overwrite newer checkpoints and updates would be lost. stashpoint cannot "
    "provide compare-and-swap on this server"
)
_NO_VERSIONING = (
    "off: history, diff and restore of older revisions are unavailable; enable bucket versioning"
)
_NOT_OFFERED = (
    "not offered by {}: history, diff and older revisions of envelope checkpoints are "
    "unavailable (logs, runs and threads are their own history)"
)


class Status(StrEnum):
    """The verdict of one check."""

    PASS = "pass"
    """Works as stashpoint needs."""
    WARN = "warn"
    """Works, with a limitation the detail explains."""
    FAIL = "fail"
    """Broken: stashpoint's guarantees do not hold here."""


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    """What was checked."""
    status: Status
    """The verdict."""
    detail: str
    """What was seen, and what to do about a WARN or FAIL."""


def _put(key: str, body: bytes, condition: Create | Match) -> Steps[tuple[WriteResult, float]]:
    start = time.perf_counter()
    result = yield from ask(PutObject(key, body, condition, content_encoding=None))
    return result, (time.perf_counter() - start) * 1000


def diagnose(
    layout: Layout,
    has_index: bool,
    encryption: Encryption | None = None,
    provider: Provider | None = None,
    erasure_key: bool | None = None,
) -> Steps[list[Check]]:
    """Run every check; return the report (the probe object is always removed).

    With client-side encryption the probe is sealed like every object (its tenant's data
    key is made or read, and kept: data keys are infrastructure, not probes). `provider`:
    the object store's profile in use, reported first.
    """
    checks: list[Check] = []
    if provider is not None:
        checks.append(_provider(provider))
    key = layout.key(".doctor", f"probe-{(yield from ask(NewId()))}")
    try:
        checks += yield from _conditional_writes(key)
        if provider is not None and not provider.versioning:
            checks.append(Check("versioning", Status.WARN, _NOT_OFFERED.format(provider.name)))
        else:
            checks.append((yield from _versioning(key)))
    except StashpointError as exc:
        checks.append(Check("storage", Status.FAIL, f"unreachable or refusing: {exc}"))
    written = any(c.name.startswith("create") and c.status is Status.PASS for c in checks)
    checks.append((yield from _cleanup(key, written)))
    checks.append((yield from _lifecycle(layout)))
    checks.append((yield from _object_lock()))
    if has_index:
        checks += yield from _index()
    else:
        checks.append(Check("index", Status.WARN, _NO_INDEX))
    if encryption is not None:
        checks.append(_encryption(encryption, written))
    if erasure_key is not None:
        checks.append(_receipts(erasure_key))
    return checks


def _receipts(sealed: bool) -> Check:
    """Say whether purge receipts are sealed, so `gc` obeys only the operator's."""
    if sealed:
        return Check("receipts", Status.PASS, "purge receipts are sealed with an erasure key")
    return Check(
        "receipts",
        Status.WARN,
        "no erasure key: purge receipts are unsealed, so gc resumes none and sweeps beside "
        "none (a worker could plant one); set STASHPOINT_ERASURE_KEY for whoever purges "
        "(docs/purge.md, receipts)",
    )


def _provider(provider: Provider) -> Check:
    """Report the object store's profile and what stashpoint does without what it lacks."""
    lacks = [
        what
        for what, has in (
            ("ordered listings and StartAfter (logs list every page)", provider.seeks),
            ("versioning (no envelope history)", provider.versioning),
            ("conditional DELETE", provider.conditional_delete),
        )
        if not has
    ]
    said = f"{provider.name}: {provider.description}"
    if lacks:
        said += f"; without {', '.join(lacks)}"
    if provider.beyond_purge:
        said += f"; beyond a purge's reach: {provider.beyond_purge}"
    return Check("provider", Status.PASS, said + " (`doctor --conformance` checks it)")


def _encryption(encryption: Encryption, probed: bool) -> Check:
    """Report the tenants and their key services; the probe says whether keys work."""
    local = sum(1 for r in encryption.rules if r.local)
    kms = len(encryption.rules) - local
    said = (
        f"client-side AES-256-GCM, {len(encryption.rules)} tenant(s) "
        f"({', '.join(r.tenant for r in encryption.rules)}): {kms} KMS key(s), "
        f"{local} keyring key(s)"
    )
    if not probed:
        return Check("encryption", Status.WARN, f"{said}; not probed (storage failed)")
    return Check("encryption", Status.PASS, f"{said}; the probe was sealed and opened")


def _conditional_writes(key: str) -> Steps[list[Check]]:
    checks: list[Check] = []
    created, put_ms = yield from _put(key, b'{"probe": 1}', Create())
    if created.outcome is not WriteOutcome.STORED or created.etag is None:
        why = created.detail or created.outcome.value
        return [Check("create (If-None-Match: *)", Status.FAIL, f"probe not written: {why}")]
    checks.append(Check("create (If-None-Match: *)", Status.PASS, f"PUT in {put_ms:.1f} ms"))

    start = time.perf_counter()
    read = yield from ask(GetObject(key))
    get_ms = (time.perf_counter() - start) * 1000
    ok = read is not None and read.body == b'{"probe": 1}'
    checks.append(
        Check("read back (GET)", Status.PASS if ok else Status.FAIL, f"GET in {get_ms:.1f} ms")
    )

    again, _ = yield from _put(key, b'{"probe": 2}', Create())
    current_etag = created.etag
    if again.outcome is WriteOutcome.PRECONDITION_FAILED:
        checks.append(Check("second create refused (412)", Status.PASS, "If-None-Match honoured"))
    else:
        checks.append(Check("second create refused (412)", Status.FAIL, _IGNORES_IF_NONE_MATCH))
        current_etag = again.etag or current_etag  # it overwrote: go on from what is there

    updated, _ = yield from _put(key, b'{"probe": 3}', Match(current_etag))
    if updated.outcome is not WriteOutcome.STORED:
        why = updated.detail or updated.outcome.value
        checks.append(Check("update (If-Match: ETag)", Status.FAIL, f"refused: {why}"))
        return checks
    checks.append(Check("update (If-Match: ETag)", Status.PASS, "If-Match with the current ETag"))

    checks.append((yield from _stale_refused(key, current_etag)))
    return checks


def _stale_refused(key: str, stale_etag: str) -> Steps[Check]:
    """Check that an update naming an ETag the probe no longer has is refused."""
    stale, _ = yield from _put(key, b'{"probe": 4}', Match(stale_etag))
    if stale.outcome in (WriteOutcome.PRECONDITION_FAILED, WriteOutcome.NOT_FOUND):
        return Check("stale ETag refused (412)", Status.PASS, "If-Match honoured")
    return Check("stale ETag refused (412)", Status.FAIL, _IGNORES_IF_MATCH)


def _versioning(key: str) -> Steps[Check]:
    try:
        versions = yield from ask(ListVersions(key))
    except ConfigurationError:
        return Check("versioning", Status.WARN, _NO_VERSIONING)
    except StashpointError as exc:
        return Check("versioning", Status.WARN, f"could not be checked: {exc}")
    live = [v for v in versions if not v.is_delete_marker]
    if len(live) >= 2:
        return Check("versioning", Status.PASS, f"on ({len(live)} probe versions kept)")
    return Check("versioning", Status.WARN, "on, but older probe versions were not listed")


def _probe_versions(key: str) -> Steps[tuple[bool, list[VersionRef]]]:
    """Return whether the probe's versions could be listed, and its versions."""
    try:
        return True, (yield from ask(ListVersions(key)))
    except StashpointError:
        return False, []


def _cleanup(key: str, written: bool) -> Steps[Check]:
    """Remove the probe; `written`: whether its create was acknowledged.

    A create whose answer never came may still have landed, so the probe is looked for
    either way; only what was found is reported as removed.
    """
    versioned, versions = yield from _probe_versions(key)
    if not written and not versions and (yield from ask(GetObject(key))) is None:
        return Check("cleanup", Status.PASS, "no probe was written: nothing to remove")
    try:
        for version in versions:  # every version and delete marker, for good
            yield from ask(DeleteObject(key, version_id=version.version_id))
        if not versioned:
            yield from ask(DeleteObject(key))
    except StashpointError as exc:
        # An Object Lock retention (or a policy) may keep it: said, never raised.
        return Check("cleanup", Status.WARN, f"probe {key} could not be removed: {exc.message}")
    remaining: list[VersionRef] = []
    if versioned:
        remaining = yield from ask(ListVersions(key))
    left = yield from ask(GetObject(key))
    if remaining or left is not None:
        return Check("cleanup", Status.WARN, f"probe {key} could not be fully removed")
    return Check("cleanup", Status.PASS, "probe and all its versions removed")


def _object_lock() -> Steps[Check]:
    """Report the bucket's Object Lock: whether objects can be deleted before a date."""
    try:
        lock = yield from ask(GetObjectLock())
    except StashpointError as exc:
        return Check("object lock", Status.WARN, f"could not be read: {exc}")
    if lock is None:
        return Check("object lock", Status.PASS, "none here: a delete removes what it names")
    asked = (
        f"; this stash's writes ask for: {', '.join(lock.rules)}"
        if lock.rules
        else "; this stash's writes ask for none (the retention option)"
    )
    if not lock.enabled:
        if lock.rules:
            return Check(
                "object lock",
                Status.FAIL,
                f"off, but the retention option asks for it ({', '.join(lock.rules)}): S3 "
                "refuses such writes; create the bucket with Object Lock or drop the option",
            )
        return Check("object lock", Status.PASS, "off: nothing is retained past a delete")
    if lock.mode is None:
        return Check(
            "object lock",
            Status.PASS,
            f"on, no default retention: an object is locked only when its write asks{asked}",
        )
    span = f"{lock.years} years" if lock.years else f"{lock.days} days"
    return Check(
        "object lock",
        Status.WARN,
        f"on: every new object is retained {span} in {lock.mode} mode by default, so no "
        "version can be deleted before then (gc, repair, the doctor's probe and purges of "
        f"old versions are refused; a plain delete only adds a marker){asked}",
    )


_MUST_RESTORE = frozenset({"GLACIER", "DEEP_ARCHIVE"})
"""Storage classes whose objects cannot be read until restored."""
_HOT = (
    "checkpoints/",
    "runs/",
    "run-logs/",
    "agents/",
    "conversations/",
    "logs/",
    "langgraph/",
    "langgraph-values/",
    "blobs/",
)
"""Namespaces read on every resume: archiving them would break loads."""


def _lifecycle(layout: Layout) -> Steps[Check]:
    """Report the lifecycle rules that touch the stash; fail one that archives hot objects."""
    try:
        rules = yield from ask(GetLifecycle())
    except StashpointError as exc:
        return Check("lifecycle", Status.WARN, f"could not be read: {exc}")
    if rules is None:
        return Check("lifecycle", Status.PASS, "none here: every object stays where it is")
    base = f"{layout.prefix}/" if layout.prefix else ""
    hot = [base + namespace for namespace in _HOT]
    said: list[str] = []
    for rule in rules:
        if not rule.enabled or not _overlap(rule.prefix, base):
            continue
        failed = _archiving_hot(rule, hot, layout)
        if failed is not None:
            return failed
        said += _rule_said(rule)
    if not said:
        return Check(
            "lifecycle",
            Status.PASS,
            "no transitions: sealed log segments stay in the standard tier (see infra/ to "
            "archive them after N days)",
        )
    return Check("lifecycle", Status.PASS, "; ".join(said))


def _archiving_hot(rule: LifecycleRule, hot: list[str], layout: Layout) -> Check | None:
    """Fail a rule that moves objects every resume reads to a tier that needs a restore."""
    archiving = [c for _, c in rule.transitions if c in _MUST_RESTORE]
    if not (archiving and any(_overlap(rule.prefix, h) for h in hot)):
        return None
    return Check(
        "lifecycle",
        Status.FAIL,
        f"rule {rule.rule_id!r} moves current objects under {rule.prefix or 'the bucket'}"
        f" to {archiving[0]}: heads and recent log entries would need a restore before "
        f"every resume; limit it to {layout.namespace_prefix('sealed')}",
    )


def _overlap(prefix: str, other: str) -> bool:
    """Whether some key could start with both prefixes."""
    return prefix.startswith(other) or other.startswith(prefix)


def _rule_said(rule: LifecycleRule) -> list[str]:
    """Say what a lifecycle rule does, a phrase per action."""
    sized = "" if rule.larger_than is None else f" (objects over {rule.larger_than} B)"
    said = [
        f"{rule.prefix or 'everything'}{sized} -> {storage_class} after {days} d"
        for days, storage_class in rule.transitions
    ]
    said += [
        f"older revisions -> {storage_class} after {days} d"
        for days, storage_class in rule.noncurrent_transitions
    ]
    if rule.noncurrent_expire_days is not None:
        said.append(f"older revisions expire after {rule.noncurrent_expire_days} d")
    if rule.expires_delete_markers:
        said.append("bare delete markers removed")
    return said


def _index() -> Steps[list[Check]]:
    try:
        described = yield from ask(DescribeIndex())
    except StashpointError as exc:
        return [Check("index", Status.FAIL, f"unreachable: {exc}")]
    if not described.exists:
        return [Check("index", Status.FAIL, "the index table does not exist: deploy infra/")]
    if described.engine == "sqlite":
        # No GSIs or TTL to check: SQL indexes stand in for the GSIs (created with the
        # file) and expired items are filtered out when read.
        return [Check("index", Status.PASS, "SQLite file next to the stash (embedded default)")]
    checks = [Check("index", Status.PASS, "reachable")]
    wanted = {g.name for g in SECONDARY_INDEXES}
    missing = wanted - set(described.secondary_indexes)
    checks.append(
        Check(
            "index GSIs",
            Status.FAIL,
            f"missing: {', '.join(sorted(missing))} (deploy infra/, then `stashpoint reindex`)",
        )
        if missing
        else Check("index GSIs", Status.PASS, ", ".join(sorted(wanted)))
    )
    checks.append(
        Check("index TTL", Status.PASS, f"on {TTL_ATTRIBUTE}")
        if described.ttl_attribute == TTL_ATTRIBUTE
        else Check("index TTL", Status.WARN, f"TTL is not enabled on {TTL_ATTRIBUTE}")
    )
    return checks
